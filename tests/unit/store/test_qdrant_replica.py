"""Read-only replicas (``[store] replica = true``): a ``sunlib serve`` that needs only the Qdrant cluster.

A primary (the indexing host: ``backend = "qdrant"``, its SQLite file, the one writer) indexes a copy
of the sample vault; replicas are opened on the same Qdrant location and collection prefix with an
empty index folder of their own (no SQLite file). They must answer as the primary does (the same
chunks in the same order with the same scores, the same ask frame), for every principal and filter,
follow the primary's writes without reopening, share their runs and conversations under the runs
rule, and refuse every note write clearly (the store, the CLI, HTTP). The engines run in-process
(qdrant-edge, qdrant-client's local mode) in the tmp dir; with QDRANT_URL set, a live server too.
The store-level contract of a replica is tests/contract/test_replica_contract.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.contracts import SearchFilters
from sunlib.errors import ConfigError, StoreReadOnly
from sunlib.server import create_app
from sunlib.store import RunRecord, Space, VectorItem, Visibility
from sunlib.sync.indexing import sync_paths
from tests.support.clients import Api, sunlib
from tests.support.paths import SAMPLE_VAULT
from tests.support.store_helpers import drop_qdrant_prefix

pytest.importorskip("qdrant_client", reason="the Qdrant backend needs qdrant-client (pip install -e '.[dev]')")

QUERIES = ["empty ACL public", "index rebuild window", "how do I configure the embedding model", "引用 拒答"]
ANSWERED = "What is the SUNLIB_HOME environment variable used for?"
UNANSWERABLE = "What is the boiling point of tungsten on Mars?"
# public, an ops reader, a reader of everything, a principal no note names, nobody at all
WHO: list[tuple[str, ...]] = [("public",), ("public", "ops"), ("public", "ops", "team"), ("stranger",), ()]
FILTERS = [
    SearchFilters(),
    SearchFilters(folders=("guide",)),
    SearchFilters(folders=("internal",)),
    SearchFilters(tags=("search",)),
    SearchFilters(since=1.0e9),
]


def _engine_settings(engine: str, root: Path) -> dict[str, str]:
    if engine == "qdrant-server":
        url = os.environ.get("QDRANT_URL", "")
        if not url:
            pytest.skip("QDRANT_URL is not set: the live-server replica cases need a Qdrant server")
        return {"url": url}
    if engine == "qdrant-edge":
        pytest.importorskip("qdrant_edge", reason="the in-process engine needs qdrant-edge-py")
    return {"path": str(root / "cluster"), "local": engine}


@dataclasses.dataclass
class Deployment:
    """One vault indexed by a primary onto one Qdrant location; replicas opened on demand."""

    root: Path
    vault: Path
    store: dict[str, Any]  # the [store] settings both sides share
    primary: Library
    replicas: list[Library] = dataclasses.field(default_factory=list)

    @property
    def empty_vault(self) -> Path:
        """What a replica host has of the vault: nothing (its notes are read from Qdrant)."""
        folder = self.root / "replica-vault"
        folder.mkdir(exist_ok=True)
        return folder

    def replica(self, name: str = "replica") -> Library:
        lib = Library.open(
            self.empty_vault,
            embedding={"provider": "hash"},
            store={**self.store, "replica": True},
            index_dir=str(self.root / name),
        )
        self.replicas.append(lib)
        return lib

    def env(self, name: str = "cli-replica") -> dict[str, str]:
        """The environment of a CLI run on a replica."""
        out = {
            "SUNLIB_EMBEDDING__PROVIDER": "hash",
            "SUNLIB_STORE__BACKEND": "qdrant",
            "SUNLIB_STORE__REPLICA": "true",
            "SUNLIB_STORE__COLLECTION": self.store["collection"],
            "SUNLIB_INDEX_DIR": str(self.root / name),
        }
        for key in ("url", "path", "local"):
            if key in self.store:
                out[f"SUNLIB_STORE__{key.upper()}"] = self.store[key]
        return out


@pytest.fixture(params=["qdrant-client", "qdrant-edge", "qdrant-server"])
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    prefix = "team" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:10]
    store = {"backend": "qdrant", "collection": prefix, **_engine_settings(request.param, tmp_path)}
    primary = Library.open(vault, embedding={"provider": "hash"}, store=store, index_dir=str(tmp_path / "primary"))
    primary.index()
    d = Deployment(tmp_path, vault, store, primary)
    yield d
    for lib in d.replicas:
        lib.close()
    primary.close()
    if "url" in store:
        drop_qdrant_prefix(store["url"], prefix)


def hits(lib: Library, mode: str, principals: tuple[str, ...], filters: SearchFilters) -> list[list[Any]]:
    return [
        [
            (h.chunk_id, h.score, h.path, h.citation)
            for h in lib.search(q, mode=mode, principals=principals, filters=filters).hits
        ]
        for q in QUERIES
    ]


def same_hits(a: list[list[Any]], b: list[list[Any]]) -> bool:
    """The same chunks in the same order, with the same citations, scores within 1e-6."""
    return all(
        len(x) == len(y)
        and all(
            cx == cy and px == py and ox == oy and abs(sx - sy) <= 1e-6
            for (cx, sx, px, ox), (cy, sy, py, oy) in zip(x, y, strict=True)
        )
        for x, y in zip(a, b, strict=True)
    )


def test_a_replica_without_the_sqlite_file_answers_as_the_indexing_host(deployment: Deployment) -> None:
    replica = deployment.replica()
    assert not (deployment.root / "replica" / "sunlib.db").exists()
    seen_any = seen_restricted = False
    for principals in WHO:
        for filters in FILTERS:
            for mode in ("bm25", "dense", "hybrid"):
                ours, theirs = (
                    hits(replica, mode, principals, filters),
                    hits(deployment.primary, mode, principals, filters),
                )
                assert same_hits(ours, theirs), (principals, filters, mode)
                found = [h for q in ours for h in q]
                if not principals or principals == ("stranger",):
                    assert found == []  # who sees nothing gets nothing (not a count, not a score)
                seen_any = seen_any or bool(found)
                seen_restricted = seen_restricted or any(p.startswith("internal/") for _, _, p, _ in found)
    assert seen_any and seen_restricted  # the comparisons were not all empty
    # the chunk rows a citation and a context window are made of (tags in the note's own order)
    everything = ("public", "ops", "team")
    ids = [h.chunk_id for q in QUERIES for h in deployment.primary.search(q, mode="bm25", principals=everything).hits]
    assert replica.store.chunks_by_ids(ids) == deployment.primary.store.chunks_by_ids(ids)
    assert any(len(row.tags) > 1 for row in replica.store.chunks_by_ids(ids))
    assert [replica.store.neighbours(c, 2) for c in ids] == [deployment.primary.store.neighbours(c, 2) for c in ids]
    assert not (deployment.root / "replica" / "sunlib.db").exists()  # the replica never made one


def _frame(lib: Library, question: str, principals: tuple[str, ...]) -> dict[str, Any]:
    bm25 = lib.with_settings(search={"mode": "bm25"})
    frame = dataclasses.asdict(bm25.ask(question, principals=principals, save=False).frame)
    return frame


def test_a_replica_asks_as_the_indexing_host(deployment: Deployment) -> None:
    replica = deployment.replica()
    for principals in (("public",), ("public", "ops"), ()):
        for question in (ANSWERED, UNANSWERABLE):
            assert _frame(replica, question, principals) == _frame(deployment.primary, question, principals)
    answered = _frame(replica, ANSWERED, ("public",))
    assert answered["refused"] is False and [c["path"] for c in answered["citations"]] == ["reference/configuration.md"]
    assert _frame(replica, ANSWERED, ())["refused"] is True


def _edit(vault: Path, rel: str, old: str, new: str) -> None:
    path = vault / rel
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_the_replica_follows_the_indexing_hosts_writes_without_reopening(deployment: Deployment) -> None:
    replica = deployment.replica()
    store = replica.store
    before = store.generation()
    deleted = "guide/search/search-modes.md"
    gone_id = store.note_states()[deleted].note_id
    assert store.note_by_id(gone_id) is not None
    _edit(deployment.vault, "reference/configuration.md", "SUNLIB_HOME", "SUNLIB_HOME (the zebracorn folder)")
    (deployment.vault / deleted).unlink()
    deployment.primary.index()

    assert replica.store is store  # the same open replica
    assert store.generation() > before and store.generation() == deployment.primary.store.generation()
    found = replica.search("zebracorn", mode="bm25", principals=("public",)).hits
    assert {h.path for h in found} == {"reference/configuration.md"}
    assert deleted not in store.note_states() and store.note_by_id(gone_id) is None
    assert all(h.path != deleted for h in replica.search("hybrid search", mode="hybrid", principals=("public",)).hits)
    assert store.counts() == deployment.primary.store.counts()
    for mode in ("bm25", "dense"):
        ours = hits(replica, mode, ("public", "ops"), SearchFilters())
        assert same_hits(ours, hits(deployment.primary, mode, ("public", "ops"), SearchFilters()))

    # the watcher's way (and the notes API's): one path synced, no reconcile after it
    primary, moved = deployment.primary, store.generation()
    quick = "getting-started/quick-tour.md"
    quick_id = store.note_states()[quick].note_id
    (deployment.vault / quick).unlink()
    _edit(deployment.vault, "index.md", "sunlib", "sunlib quasarwhale")
    with primary.write_lock:
        sync_paths(primary.store, deployment.vault, primary.settings.index, [quick, "index.md"])
    assert store.generation() > moved
    assert quick not in store.note_states() and store.note_by_id(quick_id) is None
    assert store.note_states() == primary.store.note_states()
    assert {h.path for h in replica.search("quasarwhale", mode="bm25", principals=("public",)).hits} == {"index.md"}


def test_runs_and_conversations_saved_through_one_replica_are_read_through_another(deployment: Deployment) -> None:
    a, b = deployment.replica("replica-a"), deployment.replica("replica-b").with_settings(search={"mode": "bm25"})
    asked = a.with_settings(search={"mode": "bm25"}).ask(ANSWERED, principals=("public", "ops"))
    assert asked.conversation_id is not None
    run = b.store.get_run(asked.run_id, ("ops", "public", "team"))
    assert isinstance(run, RunRecord) and run.question == ANSWERED and run.principals == ("ops", "public")
    assert run.frame["answer"] == asked.frame.answer
    assert b.store.get_run(asked.run_id, ("public",)) is None  # asked as ops too: public may not read it
    assert [r.run_id for r in b.store.list_runs(("public", "ops"))] == [asked.run_id]
    assert b.store.list_runs(("public",)) == []

    conv = b.store.get_conversation(asked.conversation_id, ("public", "ops"))
    assert conv is not None and [t.run.run_id for t in conv.turns] == [asked.run_id]
    assert b.store.get_conversation(asked.conversation_id, ("public",)) is None
    # replica B continues the conversation; replica A reads both turns
    follow = b.ask("and where is it set?", principals=("public", "ops"), conversation_id=asked.conversation_id)
    both = a.store.get_conversation(asked.conversation_id, ("public", "ops"))
    assert both is not None and [t.run.run_id for t in both.turns] == [asked.run_id, follow.run_id]
    assert [c.turns for c in a.store.list_conversations(("public", "ops"))] == [2]
    assert a.store.list_conversations(("public",)) == []
    assert deployment.primary.store.get_run(asked.run_id, ("public", "ops")) is None  # replicas keep theirs in Qdrant


def test_note_writes_on_a_replica_fail_with_a_clear_error(deployment: Deployment) -> None:
    replica = deployment.replica()
    store = replica.store
    states = store.note_states()
    with pytest.raises(StoreReadOnly, match="read-only replica"):
        store.delete_note("index.md")
    with pytest.raises(StoreReadOnly, match="read-only replica"):
        store.set_meta("x", "y")
    space = next(iter(store.vectors.spaces()))
    chunk = store.chunks_of_note(states["index.md"].note_id)[0]
    vec = store.vectors.vectors_for(Space(space.provider, space.model, space.dim, space.chunker), [chunk.chunk_id])
    item = VectorItem(chunk.chunk_id, 0, "h", vec[chunk.chunk_id])
    with pytest.raises(StoreReadOnly):
        store.vectors.upsert(Space(space.provider, space.model, space.dim, space.chunker), [item])
    with pytest.raises(StoreReadOnly, match="replicas do not index"):
        replica.index()
    assert store.note_states() == states  # nothing moved

    # the CLI: one line, a non-zero exit; search and doctor work
    env = deployment.env()
    r = sunlib("index", str(deployment.empty_vault), "--json", env=env)
    assert r.returncode != 0 and "replicas do not index" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
    r = sunlib("search", "empty ACL public", "--vault", str(deployment.empty_vault), "--json", "-n", "3", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["path"] == "guide/search/filters-and-acl.md"
    r = sunlib("status", "--vault", str(deployment.empty_vault), "--json", env=env)
    status = json.loads(r.stdout)
    assert r.returncode == 0 and "read-only replica" in status["index"] and status["counts"]["notes"] == len(states)
    r = sunlib("doctor", "--vault", str(deployment.empty_vault), "--json", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    doctor = json.loads(r.stdout)
    assert doctor["generation"] == deployment.primary.store.generation() and doctor["problems"] == []
    assert doctor["counts"] == {"notes": len(states), "chunks": deployment.primary.store.counts().chunks}
    assert all(n is not None for n in doctor["collections"].values())
    assert not (deployment.root / "cli-replica" / "sunlib.db").exists()

    # HTTP: a 4xx JSON error, and no file written into the vault
    api = Api(create_app(replica))
    created = api.post("/api/notes", json={"path": "new/from-replica.md", "content": "# New\n\nhello\n"})
    assert created.status_code == 409, created.text
    assert created.json()["error"] == "read_only" and "replica" in created.json()["message"]
    patched = api.request("PATCH", f"/api/notes/{states['index.md'].note_id}", json={"content": "# Gone\n"})
    assert patched.status_code == 409 and patched.json()["error"] == "read_only", patched.text
    assert list(deployment.empty_vault.iterdir()) == []  # nothing written where the replica runs
    note_id = states["index.md"].note_id
    read = api.get(f"/api/notes/{note_id}")  # a read: the record and its chunks; no file here, so no text
    assert read.status_code == 200 and read.json()["in_sync"] is False and read.json()["chunks"], read.text
    listed = [n["path"] for n in api.get("/api/notes", params={"folder": "guide"}).json()["notes"]]
    assert listed == [n.path for n in deployment.primary.store.list_notes(("public",), folder="guide")[0]] != []
    searched = api.post("/api/search", json={"query": "empty ACL public", "mode": "bm25"})
    assert searched.status_code == 200 and searched.json()["results"], searched.text


def test_a_replica_setting_needs_the_qdrant_backend_and_a_named_prefix(tmp_path: Path) -> None:
    vault = tmp_path / "v"
    vault.mkdir()
    with pytest.raises(ConfigError, match='needs backend = "qdrant"'):
        Library.open(vault, store={"replica": True, "collection": "team"})
    with pytest.raises(ConfigError, match=r"\[store\] collection"):
        Library.open(vault, store={"backend": "qdrant", "replica": True})
    r = sunlib("search", "x", "--vault", str(vault), env={"SUNLIB_STORE__REPLICA": "true"})
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "replica" in r.stderr, r
    # a prefix nothing was published under: one line, not a traceback
    env = {
        "SUNLIB_STORE__BACKEND": "qdrant",
        "SUNLIB_STORE__REPLICA": "true",
        "SUNLIB_STORE__COLLECTION": "nothing_here",
        "SUNLIB_STORE__LOCAL": "qdrant-client",
        "SUNLIB_STORE__PATH": str(tmp_path / "empty-cluster"),
        "SUNLIB_INDEX_DIR": str(tmp_path / "idx"),
    }
    r = sunlib("search", "x", "--vault", str(vault), env=env)
    assert r.returncode != 0 and "nothing is published" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r


def test_hidden_notes_never_reach_a_replica_caller(deployment: Deployment) -> None:
    """ACL before ranking on the replica's own reads too: the listing, the files, the counts."""
    store = deployment.replica().store
    for principals in WHO:
        listed = {n.path for n in store.list_notes(principals, limit=1000)[0]}
        visible = {c for c in store.visible_chunk_ids(Visibility(principals))}
        assert listed == {n.path for n in deployment.primary.store.list_notes(principals, limit=1000)[0]}
        assert all(store.chunks_by_ids([c])[0].path in listed for c in visible)
        if principals in ((), ("stranger",)):
            assert listed == set() and visible == set() and store.count_visible(Visibility(principals)) == 0
        if "ops" not in principals:
            assert "internal/ops-runbook.md" not in listed
