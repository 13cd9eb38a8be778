"""The store contract: one suite, run against every implementation of the store protocols.

Each parameter of the ``backend`` fixture builds a ``Store`` (a DocumentStore with its
LexicalIndex and VectorIndex) on a real file in a tmp dir: the SQLite documents and FTS5 with the
sqlite-vec VectorIndex, the same with the numpy VectorIndex, with the usearch VectorIndex (an HNSW graph
beside the file; exact below its size threshold), with that VectorIndex forced through its graph, and
with its float16 graph (the int8 graph's scores are quantized, off by ~1e-3, so it is not here:
tests/unit/store/test_ann.py checks its ACL); the SQLite store with the postings LexicalIndex (BM25 from numpy
postings beside the file); and the Qdrant backend (the SQLite documents with BM25 and vectors
in Qdrant) on qdrant-client's local mode, on qdrant-edge in-process and, with QDRANT_URL set, on a
live server (skipped otherwise, saying so).
Adding a backend is a matter of adding one entry to ``BACKENDS`` (a function from a db path to
a Store): every test below then runs against it, and a backend that fails one is not done.

The vectors of these tests are chosen by hand (a small space of dimension 4), so every KNN
answer is known exactly; the text comes from a tiny vault through the real indexer.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from sunlib.config import load_settings
from sunlib.contracts import SearchFilters
from sunlib.errors import NotFound
from sunlib.providers import create_embedder
from sunlib.store import (
    LOCAL_OWNER,
    DocumentStore,
    RunRecord,
    Space,
    SqliteStore,
    Store,
    UsearchVectors,
    VectorIndex,
    VectorItem,
    Visibility,
)
from sunlib.sync.indexing import IndexReport, embed_pending, sync_text


def _qdrant_local(db: Path) -> Store:
    pytest.importorskip("qdrant_client", reason="the Qdrant backend needs qdrant-client (pip install -e '.[dev]')")
    from sunlib.store.qdrant import Location, QdrantStore

    return QdrantStore(db, Location(path=str(db.with_suffix(".qdrant"))))


def _qdrant_edge(db: Path) -> Store:
    pytest.importorskip("qdrant_edge", reason="the in-process engine needs qdrant-edge-py (pip install -e '.[dev]')")
    from sunlib.store.qdrant import Location, QdrantStore

    # Without payload indexes (60 ms each to create): they speed filters up and change no result;
    # tests/unit/store/test_qdrant_backend.py runs the engine with them.
    return QdrantStore(db, Location(path=str(db.with_suffix(".edge")), engine="qdrant-edge", payload_indexes=False))


def _qdrant_server(db: Path) -> Store:
    """A live server at QDRANT_URL; collections prefixed by the test's file, dropped with the test."""
    url = os.environ.get("QDRANT_URL", "")
    if not url:
        pytest.skip("QDRANT_URL is not set: the live-server cases of the store contract need a Qdrant server")
    from sunlib.store.qdrant import Location, QdrantStore

    return QdrantStore(db, Location(url=url), "t" + hashlib.sha256(str(db).encode()).hexdigest()[:16])


def _graph_only(db: Path) -> Store:
    """The usearch engine with its exact path turned off: every KNN runs through the HNSW graph
    (at the sizes here the engine would otherwise score the visible vectors exactly)."""
    store = SqliteStore(db, "usearch")
    store.vectors = UsearchVectors(store.db, store, exact_rows=0)
    return store


BACKENDS: dict[str, Callable[[Path], Store]] = {
    "sqlite-vec": lambda db: SqliteStore(db, "sqlite-vec"),
    "numpy": lambda db: SqliteStore(db, "numpy"),
    "qdrant-local": _qdrant_local,  # qdrant-client's local mode, on disk in the tmp dir
    "qdrant-edge": _qdrant_edge,  # Qdrant's engine in-process (qdrant-edge-py), on disk in the tmp dir
    "qdrant-server": _qdrant_server,  # skipped unless QDRANT_URL names a server
    "usearch": lambda db: SqliteStore(db, "usearch"),
    "usearch-graph": _graph_only,
    "usearch-f16": lambda db: SqliteStore(db, "usearch-f16"),
    "postings": lambda db: SqliteStore(db, "sqlite-vec", "postings"),  # BM25 from numpy postings (store/postings.py)
}

SPACE = Space("test", "hand-made", 4, "contract")
EVERYONE = Visibility(("public", "ops", "team"))
PUBLIC = Visibility(("public",))

# path -> (front matter, body, mtime, vector). The query vector is e0: cosine = first component.
NOTES: dict[str, tuple[str, str, float, tuple[float, ...]]] = {
    "sea/harbour.md": ("tags: [sea]\nlanguage: en", "The harbour keeper logs the tide.", 1000.0, (0.6, 0.8, 0, 0)),
    "sea/restricted.md": (
        "acl: [ops]\ntags: [sea]",
        "The harbour keeper hides the ops codeword.",
        2000.0,
        (1, 0, 0, 0),
    ),
    "guide/search.md": ("tags: [search]\nlanguage: zh", "The harbour guide explains search.", 3000.0, (0, 1, 0, 0)),
    "team/plan.md": ("acl: [team]", "The harbour plan of the team.", 4000.0, (0.8, 0.6, 0, 0)),
    "scratch.md": ("acl: []", "The harbour scratch nobody may read.", 5000.0, (0.99, 0.141, 0, 0)),
}


def _unit(v: tuple[float, ...]) -> np.ndarray:
    a = np.array(v, dtype=np.float32)
    return a / np.linalg.norm(a)


QUERY = _unit((1, 0, 0, 0))


def write_vault(root: Path) -> Path:
    for rel, (front, body, mtime, _) in NOTES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\n{front}\n---\n# {Path(rel).stem.title()}\n\n{body}\n", encoding="utf-8")
        os.utime(path, (mtime, mtime))
    return root


def sync(store: DocumentStore, vault: Path) -> IndexReport:
    return sync_text(store, vault, load_settings(vault).index)


def embed_by_hand(vectors: VectorIndex, store: DocumentStore, only: set[str] | None = None) -> int:
    """Give each pending chunk its note's hand-made vector (all of them, or those of ``only`` paths)."""
    vectors.ensure_space(SPACE)
    path_of = {c.chunk_id: c.path for nid, _, _ in store.iter_notes() for c in store.chunks_of_note(nid)}
    items = [
        VectorItem(p.chunk_id, p.stamp, p.embed_hash, _unit(NOTES[path_of[p.chunk_id]][3]))
        for p in vectors.pending(SPACE)
        if only is None or path_of[p.chunk_id] in only
    ]
    return vectors.upsert(SPACE, items)


def chunk_of(store: DocumentStore, path: str) -> str:
    states = store.note_states()
    return store.chunks_of_note(states[path].note_id)[0].chunk_id


@pytest.fixture(params=sorted(BACKENDS))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], Store]]:
    """Opens stores of the parametrised backend by name (one file per name), closing them after."""
    opened: list[Store] = []

    def open_store(name: str = "db") -> Store:
        store = BACKENDS[request.param](tmp_path / f"{name}.db")
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()  # type: ignore[attr-defined]


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    return write_vault(tmp_path / "vault")


@pytest.fixture
def store(make: Callable[[str], Store], vault: Path) -> Store:
    s = make("db")
    sync(s, vault)
    embed_by_hand(s.vectors, s)
    return s


def knn_paths(store: Store, visibility: Visibility, k: int = 10) -> list[str]:
    by_id = {c.chunk_id: c.path for c in store.chunks_by_ids([c for c, _ in _knn(store, visibility, k)])}
    return [by_id[c] for c, _ in _knn(store, visibility, k)]


def _knn(store: Store, visibility: Visibility, k: int) -> list[tuple[str, float]]:
    return store.vectors.knn(SPACE, QUERY, visibility, k)


def bm25_paths(store: Store, visibility: Visibility, match: str = '"harbour"', limit: int = 10) -> list[str]:
    ids = [c for c, _ in store.lexical.bm25(match, visibility, limit)]
    by_id = {c.chunk_id: c.path for c in store.chunks_by_ids(ids)}
    return [by_id[c] for c in ids]


# -- vectors: upsert, delete, re-embed ---------------------------------------------------------


def test_upsert_stores_every_vector_and_knn_returns_cosines(store: Store) -> None:
    assert store.vectors.fully_embedded(SPACE)
    assert store.vectors.count_pending(SPACE) == (0, len(NOTES))
    found = _knn(store, EVERYONE, 10)
    assert [p for p in knn_paths(store, EVERYONE)] == [
        "sea/restricted.md",
        "team/plan.md",
        "sea/harbour.md",
        "guide/search.md",
    ]
    assert [round(c, 4) for _, c in found] == [1.0, 0.8, 0.6, 0.0]
    assert {s.name: s.vectors for s in store.vectors.spaces()} == {SPACE.name: len(NOTES)}


def test_delete_makes_a_chunk_pending_and_leaves_knn(store: Store) -> None:
    target = chunk_of(store, "team/plan.md")
    store.vectors.delete(SPACE, [target])
    assert store.vectors.count_pending(SPACE) == (1, len(NOTES))
    assert [p.chunk_id for p in store.vectors.pending(SPACE)] == [target]
    assert "team/plan.md" not in knn_paths(store, EVERYONE)
    assert store.vectors.vectors_for(SPACE, [target]) == {}


def test_fully_embedded_follows_every_write(store: Store, vault: Path) -> None:
    """The answer may be kept between reads (it costs two counts), never past a write."""
    assert store.vectors.fully_embedded(SPACE) and store.vectors.fully_embedded(SPACE)
    target = chunk_of(store, "team/plan.md")
    store.vectors.delete(SPACE, [target])
    assert not store.vectors.fully_embedded(SPACE)
    embed_by_hand(store.vectors, store)
    assert store.vectors.fully_embedded(SPACE)
    (vault / "sea" / "new.md").write_text("# New\n\nA new harbour note.\n", encoding="utf-8")
    sync(store, vault)
    with store.snapshot():
        assert not store.vectors.fully_embedded(SPACE)


def test_without_vectors_names_the_given_chunks_that_have_none(make: Callable[[str], Store], vault: Path) -> None:
    store = make("db")
    sync(store, vault)
    ids = {path: chunk_of(store, path) for path in NOTES}
    assert store.vectors.without_vectors(SPACE, list(ids.values())) == set(ids.values())  # no space yet
    embed_by_hand(store.vectors, store, only={"sea/harbour.md", "sea/restricted.md"})
    asked = [ids["sea/harbour.md"], ids["guide/search.md"], ids["team/plan.md"], "chk_unknown"]
    assert store.vectors.without_vectors(SPACE, asked) == {ids["guide/search.md"], ids["team/plan.md"], "chk_unknown"}
    assert store.vectors.without_vectors(SPACE, []) == set()
    store.vectors.delete(SPACE, [ids["sea/harbour.md"]])
    assert store.vectors.without_vectors(SPACE, [ids["sea/harbour.md"], ids["sea/restricted.md"]]) == {
        ids["sea/harbour.md"]
    }
    embed_by_hand(store.vectors, store)
    assert store.vectors.without_vectors(SPACE, list(ids.values())) == set()


def test_still_pending_drops_chunks_deleted_rewritten_or_embedded_since_they_were_listed(
    make: Callable[[str], Store], vault: Path
) -> None:
    store = make("db")
    sync(store, vault)
    path_of = {c.chunk_id: c.path for nid, _, _ in store.iter_notes() for c in store.chunks_of_note(nid)}
    store.vectors.ensure_space(SPACE)
    listed = store.vectors.pending(SPACE)
    assert len(listed) == len(NOTES) and store.vectors.still_pending(SPACE, listed) == listed
    unknown = Space("other", "hand-made", 4, "contract")
    assert store.vectors.still_pending(unknown, listed) == listed  # a space that does not exist yet
    assert store.vectors.still_pending(SPACE, []) == []
    embed_by_hand(store.vectors, store, only={"sea/harbour.md"})
    (vault / "team" / "plan.md").unlink()
    (vault / "guide" / "search.md").write_text("# Search\n\nThe harbour guide, rewritten.\n", encoding="utf-8")
    sync(store, vault)
    kept = [p for p in listed if path_of[p.chunk_id] in ("sea/restricted.md", "scratch.md")]
    assert store.vectors.still_pending(SPACE, listed) == kept  # as listed, in the order given
    fresh = store.vectors.pending(SPACE)
    rewritten = chunk_of(store, "guide/search.md")
    assert rewritten in [p.chunk_id for p in store.vectors.still_pending(SPACE, fresh)]  # its new version


def test_re_embedding_replaces_the_vector(store: Store) -> None:
    target = chunk_of(store, "guide/search.md")
    (pending_stamp,) = {p.stamp for p in _pending_after_delete(store, target)}
    assert store.vectors.upsert(SPACE, [VectorItem(target, pending_stamp, "h", _unit((0.9, 0.436, 0, 0)))]) == 1
    assert knn_paths(store, EVERYONE, 1) == ["sea/restricted.md"]
    assert knn_paths(store, PUBLIC, 1) == ["guide/search.md"]  # now closer than the harbour note
    assert store.vectors.count_pending(SPACE) == (0, len(NOTES))
    vec = store.vectors.vectors_for(SPACE, [target])[target]
    assert float(vec @ QUERY) == pytest.approx(0.9, abs=1e-3)


def _pending_after_delete(store: Store, chunk_id: str) -> list:  # type: ignore[type-arg]
    store.vectors.delete(SPACE, [chunk_id])
    return [p for p in store.vectors.pending(SPACE) if p.chunk_id == chunk_id]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("explains search.", "explains search well."),  # new text: a new chunk id
        ("tags: [search]", "tags: [search, guide]"),  # new metadata only: the same chunk id, a new stamp
    ],
)
def test_a_vector_of_an_older_chunk_version_is_refused(store: Store, vault: Path, old: str, new: str) -> None:
    stale = _pending_after_delete(store, chunk_of(store, "guide/search.md"))
    path = vault / "guide/search.md"
    path.write_text(path.read_text(encoding="utf-8").replace(old, new), "utf-8")
    sync(store, vault)  # the note is rewritten while its old chunk was being embedded
    (fresh,) = [p for p in store.vectors.pending(SPACE)]
    assert fresh.stamp != stale[0].stamp
    items = [VectorItem(p.chunk_id, p.stamp, p.embed_hash, _unit((1, 0, 0, 0))) for p in stale]
    assert store.vectors.upsert(SPACE, items) == 0
    assert store.vectors.reconcile(SPACE).pending == 1
    assert knn_paths(store, PUBLIC) == ["sea/harbour.md"]
    assert store.vectors.upsert(SPACE, [VectorItem(fresh.chunk_id, fresh.stamp, fresh.embed_hash, QUERY)]) == 1
    assert knn_paths(store, PUBLIC) == ["guide/search.md", "sea/harbour.md"]


# -- visibility --------------------------------------------------------------------------------


def test_a_closer_restricted_vector_never_crowds_out_a_visible_one(store: Store) -> None:
    assert knn_paths(store, Visibility(("public", "ops")), 1) == ["sea/restricted.md"]
    assert knn_paths(store, PUBLIC, 1) == ["sea/harbour.md"]
    assert knn_paths(store, Visibility(("team",)), 1) == ["team/plan.md"]
    both = '"codeword" OR "keeper"'
    assert bm25_paths(store, Visibility(("public", "ops")), both, 1) == ["sea/restricted.md"]  # the better match
    assert bm25_paths(store, PUBLIC, both, 1) == ["sea/harbour.md"]
    assert bm25_paths(store, Visibility(("ops",)), '"codeword"', 1) == ["sea/restricted.md"]


def test_an_empty_acl_is_visible_to_nobody(store: Store) -> None:
    for principals in ((), ("public",), ("ops",), ("team",), ("public", "ops", "team")):
        visibility = Visibility(principals)
        assert "scratch.md" not in knn_paths(store, visibility)
        assert "scratch.md" not in bm25_paths(store, visibility)
        scratch = chunk_of(store, "scratch.md")
        assert scratch not in store.visible_chunk_ids(visibility)
    assert _knn(store, Visibility(()), 5) == [] and store.lexical.bm25('"harbour"', Visibility(()), 5) == []


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (SearchFilters(folders=("sea",)), {"sea/harbour.md", "sea/restricted.md"}),
        (SearchFilters(folders=("guide", "team")), {"guide/search.md", "team/plan.md"}),
        (SearchFilters(tags=("sea",)), {"sea/harbour.md", "sea/restricted.md"}),
        (SearchFilters(tags=("#Search",)), {"guide/search.md"}),
        (SearchFilters(since=2500.0), {"guide/search.md", "team/plan.md"}),
        (SearchFilters(until=2500.0), {"sea/harbour.md", "sea/restricted.md"}),
        (SearchFilters(since=1500.0, until=3500.0), {"sea/restricted.md", "guide/search.md"}),
        (SearchFilters(metadata=(("language", "ZH"),)), {"guide/search.md"}),
        (SearchFilters(folders=("sea",), tags=("sea",), until=1500.0), {"sea/harbour.md"}),
    ],
)
def test_every_filter_applies_before_ranking(store: Store, filters: SearchFilters, expected: set[str]) -> None:
    visibility = Visibility(EVERYONE.principals, filters)
    assert set(knn_paths(store, visibility)) == expected
    assert set(bm25_paths(store, visibility)) == expected
    best = max(expected, key=lambda p: float(_unit(NOTES[p][3]) @ QUERY))
    assert knn_paths(store, visibility, 1) == [best]  # k=1 counts only rows the filters let through


def test_the_note_id_filter(store: Store) -> None:
    note_id = store.note_states()["guide/search.md"].note_id
    visibility = Visibility(EVERYONE.principals, SearchFilters(note_ids=(note_id,)))
    assert knn_paths(store, visibility) == bm25_paths(store, visibility) == ["guide/search.md"]


def test_document_frequencies_count_visible_chunks_only(store: Store) -> None:
    assert store.lexical.doc_freqs(["harbour", "codeword"], PUBLIC) == (2, {"harbour": 2})
    assert store.lexical.doc_freqs(["harbour", "codeword"], EVERYONE) == (4, {"harbour": 4, "codeword": 1})


# -- paging ------------------------------------------------------------------------------------


def test_a_smaller_k_or_limit_is_a_prefix_of_a_larger_one(store: Store) -> None:
    full = _knn(store, EVERYONE, 10)
    for k in (1, 2, 3):
        assert _knn(store, EVERYONE, k) == full[:k]
    lex = store.lexical.bm25('"harbour"', EVERYONE, 10)
    for limit in (1, 2, 3):
        assert store.lexical.bm25('"harbour"', EVERYONE, limit) == lex[:limit]


def test_note_listing_pages_by_path(store: Store) -> None:
    notes, total = store.list_notes(EVERYONE.principals, limit=2, offset=0)
    rest, again = store.list_notes(EVERYONE.principals, limit=10, offset=2)
    assert total == again == 4  # scratch.md is nobody's
    assert [n.path for n in notes + rest] == sorted(p for p in NOTES if p != "scratch.md")


# -- runs --------------------------------------------------------------------------------------


def _run(run_id: str, principals: tuple[str, ...], created_at: float, owner: str = LOCAL_OWNER) -> RunRecord:
    frame = {"question": f"q {run_id}", "answer": "a", "refused": False}
    return RunRecord(run_id, "ask", created_at, principals, f"q {run_id}", False, 12.5, frame, {"steps": []}, owner)


def test_a_run_is_read_back_whole_by_those_who_hold_its_principals(store: Store) -> None:
    store.save_run(_run("run_a", ("public",), 1.0))
    store.save_run(_run("run_b", ("ops", "public"), 2.0))
    assert store.get_run("run_a", ("public",)) == _run("run_a", ("public",), 1.0)
    assert store.get_run("run_b", ("public",)) is None  # asked as ops: public may not read it
    assert store.get_run("run_b", ("public", "ops")) == _run("run_b", ("ops", "public"), 2.0)
    assert [r.run_id for r in store.list_runs(("public",))] == ["run_a"]
    listed = store.list_runs(("ops", "public"), limit=1)
    assert [r.run_id for r in listed] == ["run_b"] and not isinstance(listed[0], RunRecord)  # newest first
    assert [r.run_id for r in store.list_runs(("ops", "public"), limit=1, offset=1)] == ["run_a"]


# -- conversations -----------------------------------------------------------------------------


def test_a_conversation_keeps_its_turns_in_order_with_their_runs(make: Callable[[str], Store]) -> None:
    store = make("db")
    for run_id, at in (("run_1", 1.0), ("run_2", 2.0)):
        store.save_run(_run(run_id, ("public",), at))
    assert store.add_turn("conv_a", "run_1", "What is X?", None, 1.0) == 1
    assert store.add_turn("conv_a", "run_2", "and its default?", "and its default? (X)", 2.0) == 2
    conv = store.get_conversation("conv_a", ("public",))
    assert conv is not None and (conv.conversation_id, conv.created_at, conv.updated_at) == ("conv_a", 1.0, 2.0)
    assert [(t.position, t.said, t.standalone) for t in conv.turns] == [
        (1, "What is X?", None),
        (2, "and its default?", "and its default? (X)"),
    ]
    assert conv.turns[1].run == _run("run_2", ("public",), 2.0)  # the run whole: frame and trace
    assert store.get_conversation("conv_missing", ("public",)) is None


def test_a_conversation_is_readable_only_by_those_who_may_read_every_run(make: Callable[[str], Store]) -> None:
    store = make("db")
    store.save_run(_run("run_pub", ("public",), 1.0))
    store.save_run(_run("run_ops", ("ops", "public"), 2.0))
    store.save_run(_run("run_solo", ("public",), 3.0))
    store.add_turn("conv_mixed", "run_pub", "first", None, 1.0)
    store.add_turn("conv_mixed", "run_ops", "second, asked as ops", None, 2.0)
    store.add_turn("conv_public", "run_solo", "alone", None, 3.0)
    # one run public may not read hides the whole conversation (and its turn count) from public
    assert store.get_conversation("conv_mixed", ("public",)) is None
    assert [c.conversation_id for c in store.list_conversations(("public",))] == ["conv_public"]
    mixed = store.get_conversation("conv_mixed", ("ops", "public"))
    assert mixed is not None and [t.run.run_id for t in mixed.turns] == ["run_pub", "run_ops"]
    listed = store.list_conversations(("ops", "public"))
    assert [(c.conversation_id, c.turns, c.first_question, c.last_question) for c in listed] == [
        ("conv_public", 1, "alone", "alone"),  # the most recently continued first
        ("conv_mixed", 2, "first", "second, asked as ops"),
    ]
    assert [c.conversation_id for c in store.list_conversations(("ops", "public"), limit=1, offset=1)] == ["conv_mixed"]
    # a turn whose run is not in the index counts as unreadable
    store.add_turn("conv_public", "run_never_saved", "lost", None, 4.0)
    assert store.get_conversation("conv_public", ("ops", "public")) is None


OWNER_A, OWNER_B = "token:aaaaaaaaaaaaaaaa", "token:bbbbbbbbbbbbbbbb"


def test_runs_and_conversations_are_their_owners(make: Callable[[str], Store]) -> None:
    """Two owners with the same principals: neither reads, lists or continues the other's; None
    (an admin's read) reads every owner's under the principals rule; the local owner is one more."""
    store = make("db")
    public = ("public",)
    store.save_run(_run("run_a", public, 1.0, OWNER_A))
    store.save_run(_run("run_b", public, 2.0, OWNER_B))
    store.save_run(_run("run_local", public, 3.0))
    assert store.get_run("run_a", public, owner=OWNER_A) == _run("run_a", public, 1.0, OWNER_A)
    assert store.get_run("run_a", public, owner=OWNER_B) is None
    assert store.get_run("run_a", public) is None  # the default reader is the local owner
    assert [r.run_id for r in store.list_runs(public, owner=OWNER_B)] == ["run_b"]
    assert [r.run_id for r in store.list_runs(public)] == ["run_local"]
    assert [r.run_id for r in store.list_runs(public, owner=None)] == ["run_local", "run_b", "run_a"]
    assert store.get_run("run_a", ("team",), owner=None) is None  # every owner's, still by the principals rule

    assert store.add_turn("conv_a", "run_a", "What is X?", None, 1.0, owner=OWNER_A) == 1
    assert store.get_conversation("conv_a", public, owner=OWNER_B) is None
    assert store.get_conversation("conv_a", public) is None
    assert store.list_conversations(public, owner=OWNER_B) == []
    with pytest.raises(NotFound):  # B's turn is refused before anything is written
        store.add_turn("conv_a", "run_b", "hijack", None, 5.0, owner=OWNER_B)
    with pytest.raises(NotFound):
        store.add_turn("conv_a", "run_local", "hijack", None, 5.0)
    conv = store.get_conversation("conv_a", public, owner=OWNER_A)
    assert conv is not None and [t.run.run_id for t in conv.turns] == ["run_a"] and conv.updated_at == 1.0
    assert store.get_conversation("conv_a", public, owner=None) == conv
    assert [(c.conversation_id, c.turns) for c in store.list_conversations(public, owner=OWNER_A)] == [("conv_a", 1)]
    assert [(c.conversation_id, c.turns) for c in store.list_conversations(public, owner=None)] == [("conv_a", 1)]
    store.save_run(_run("run_a2", public, 4.0, OWNER_A))
    assert store.add_turn("conv_a", "run_a2", "and its default?", None, 4.0, owner=OWNER_A) == 2
    again = store.get_conversation("conv_a", public, owner=OWNER_A)
    assert again is not None and [t.run.run_id for t in again.turns] == ["run_a", "run_a2"]


# -- rebuild and crash -------------------------------------------------------------------------


def results(store: Store) -> list[object]:
    out: list[object] = []
    for visibility in (PUBLIC, EVERYONE, Visibility(("team",), SearchFilters(folders=("team",)))):
        out.append([(c, round(s, 6)) for c, s in _knn(store, visibility, 10)])
        out.append([(c, round(s, 6)) for c, s in store.lexical.bm25('"harbour" OR "keeper"', visibility, 10)])
    return out


def test_a_rebuild_from_the_vault_gives_identical_results(
    make: Callable[[str], Store], store: Store, vault: Path
) -> None:
    again = make("rebuilt")
    sync(again, vault)
    embed_by_hand(again.vectors, again)
    assert results(again) == results(store)


def test_a_crash_between_the_text_and_the_vector_phase_is_reconciled(
    make: Callable[[str], Store], store: Store, vault: Path, tmp_path: Path
) -> None:
    crashed = make("crashed")
    sync(crashed, vault)
    assert embed_by_hand(crashed.vectors, crashed, only={"sea/harbour.md", "team/plan.md"}) == 2
    crashed.close()  # type: ignore[attr-defined]  # the process dies here: the text is in, 3 vectors are not

    reopened = make("crashed")
    assert reopened.vectors.count_pending(SPACE) == (3, len(NOTES))
    assert reopened.vectors.count_pending(SPACE, PUBLIC) == (1, 2)  # among the chunks the caller may see
    assert knn_paths(reopened, EVERYONE) == ["team/plan.md", "sea/harbour.md"]  # never a vector of nothing
    assert reopened.vectors.reconcile(SPACE).pending == 3
    embed_by_hand(reopened.vectors, reopened)
    assert reopened.vectors.reconcile(SPACE).pending == 0
    assert results(reopened) == results(store)


def test_the_indexer_completes_an_interrupted_vector_phase(make: Callable[[str], Store], vault: Path) -> None:
    settings = load_settings(vault, embedding={"provider": "hash"})
    embedder = create_embedder(settings.embedding)
    space = Space(embedder.provider, embedder.model, embedder.dim, "contract")
    first = make("hash")
    sync(first, vault)
    first.vectors.ensure_space(space)
    half = first.vectors.pending(space)[:2]
    first.vectors.upsert(
        space, [VectorItem(p.chunk_id, p.stamp, p.embed_hash, embedder.embed([p.embed_text])[0]) for p in half]
    )
    report = embed_pending(first, embedder, space, 4, IndexReport(), active=False)
    assert report.vectors_embedded == len(NOTES) - 2 and report.vectors_pending == 0
    clean = make("hash-clean")
    sync(clean, vault)
    embed_pending(clean, embedder, space, 4, IndexReport(), active=False)
    q = embedder.embed_query("harbour keeper")
    assert first.vectors.knn(space, q, EVERYONE, 10) == clean.vectors.knn(space, q, EVERYONE, 10)
