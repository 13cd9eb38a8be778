"""``[store] backend = "qdrant"`` end to end: the CLI on the sample vault, ``sunlib migrate`` both
ways, and BM25 scores that depend only on what the caller may see (as tests/unit/store/test_bm25_visible.py
checks for SQLite). The backend runs on qdrant-edge (the default local engine) in the tmp dir; the store
contract suite (tests/contract/test_store_contract.py) covers it case by case, and a live server too
when QDRANT_URL is set.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.contracts import SearchFilters
from sunlib.store import Visibility
from sunlib.text import fts_query
from sunlib.trace.steps import Step
from tests.support.clients import sunlib
from tests.support.paths import index_of

pytest.importorskip("qdrant_client", reason="the Qdrant backend needs qdrant-client (pip install -e '.[dev]')")
QDRANT = {"SUNLIB_EMBEDDING__PROVIDER": "hash", "SUNLIB_STORE__BACKEND": "qdrant"}
SQLITE = {"SUNLIB_EMBEDDING__PROVIDER": "hash", "SUNLIB_STORE__BACKEND": "sqlite"}
QUERIES = ["empty ACL public", "index rebuild window", "how do I configure the embedding model", "引用 拒答"]
ANSWERED = "What is the SUNLIB_HOME environment variable used for?"
UNANSWERABLE = "What is the boiling point of tungsten on Mars?"


def results(vault: Path, backend: str, modes: tuple[str, ...] = ("bm25", "dense", "hybrid"), **store: str) -> Any:
    """(query, mode) -> [(chunk_id, score)] through the Library, the index opened once."""
    with Library.open(vault, embedding={"provider": "hash"}, store={"backend": backend, **store}) as lib:
        return {
            (q, m): [(h.chunk_id, round(h.score, 5)) for h in lib.search(q, mode=m, limit=8).hits]
            for q in QUERIES
            for m in modes
        }


def same(a: Any, b: Any) -> bool:
    """The same chunks with the same scores to float32 precision (sqlite-vec computes a cosine as
    1 - d^2/2, Qdrant as a dot product; Qdrant sums a sparse score in segment order), in the same
    order but for near-ties (scores within 1e-4) swapping places; the first 6 of the 8 fetched, so
    that a near-tie across the cut cannot swap a chunk in or out."""
    for k in a.keys() | b.keys():
        if len(a.get(k, [])) != len(b.get(k, [])):
            return False
        x, y = dict(a[k][:6]), dict(b[k][:6])
        if x.keys() != y.keys() or any(abs(x[c] - y[c]) > 1e-4 for c in x):
            return False
        if any(abs(sa - sb) > 1e-4 for (_, sa), (_, sb) in zip(a[k][:6], b[k][:6], strict=True)):
            return False
    return True


def migrate(vault: Path, to: str, **env: str) -> dict[str, Any]:
    r = sunlib("migrate", "--to", to, "--vault", str(vault), "--json", env={**QDRANT, **env})
    assert r.returncode == 0, r.stderr
    report: dict[str, Any] = json.loads(r.stdout)
    return report


def test_index_search_and_ask_with_the_qdrant_backend(vault: Path) -> None:
    r = sunlib("index", str(vault), "--provider", "hash", "--json", env=QDRANT)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert len(report["added"]) == 21 and report["vectors_pending"] == 0
    assert (index_of(vault) / "qdrant").is_dir()  # in-process: inside the index folder, one unit

    r = sunlib("search", "empty ACL public", "--vault", str(vault), "--mode", "bm25", "--json", "-n", "3", env=QDRANT)
    top = json.loads(r.stdout)["results"][0]
    assert top["path"] == "guide/search/filters-and-acl.md"
    text = (vault / top["citation"]["path"]).read_text(encoding="utf-8")
    span = text.encode("utf-16-le")[2 * top["citation"]["start"] : 2 * top["citation"]["end"]].decode("utf-16-le")
    assert top["snippet"].strip("…")[:40] in span

    r = sunlib("search", "empty ACL public", "--vault", str(vault), "--explain", "-n", "3", env=QDRANT)
    assert r.returncode == 0 and "BM25 Retrieval" in r.stdout and "Dense Retrieval" in r.stdout, r.stdout

    r = sunlib("ask", ANSWERED, "--vault", str(vault), "--mode", "bm25", "--json", "--no-save", env=QDRANT)
    frame = json.loads(r.stdout)
    assert frame["refused"] is False and [c["path"] for c in frame["citations"]] == ["reference/configuration.md"]
    r = sunlib("ask", UNANSWERABLE, "--vault", str(vault), "--json", "--no-save", env=QDRANT)
    frame = json.loads(r.stdout)
    assert frame["refused"] is True and "tungsten" in frame["refusal_reason"]

    # to SQLite: the vectors come over (nothing is embedded again), every route answers the same
    before = results(vault, "qdrant", ("dense",))
    first_bm25 = results(vault, "qdrant", ("bm25",))
    moved = migrate(vault, "sqlite")
    assert list(moved["vectors"].values()) == [report["vectors_embedded"]]
    assert same(results(vault, "sqlite", ("dense",)), before)
    status = json.loads(sunlib("status", "--vault", str(vault), "--json", env=SQLITE).stdout)
    assert status["vectors_pending"] == 0

    # a new (empty) Qdrant: `sunlib index` rebuilds both indexes from the SQLite file, no model run
    shutil.rmtree(index_of(vault) / "qdrant")
    again = json.loads(sunlib("index", str(vault), "--json", env=QDRANT).stdout)
    assert again["vectors_embedded"] == 0 and again["vectors_from_cache"] == report["vectors_embedded"]
    assert same(results(vault, "qdrant", ("bm25", "dense")), {**first_bm25, **before})


def test_migrate_to_qdrant_and_back_keeps_the_results(hash_vault: Path) -> None:
    sqlite = results(hash_vault, "sqlite")
    moved = migrate(hash_vault, "qdrant")
    assert moved["chunks"] > 0 and all(n > 0 for n in moved["vectors"].values())
    qdrant = results(hash_vault, "qdrant")
    dense = [k for k in sqlite if k[1] == "dense"]
    assert same({k: qdrant[k] for k in dense}, {k: sqlite[k] for k in dense})  # the same vectors, exact KNN
    for key in [k for k in sqlite if k[1] == "bm25"]:  # the IDF formulas differ (lexical.py): the best chunk stays near
        assert sqlite[key][0][0] in [c for c, _ in qdrant[key][:3]], key
    shutil.rmtree(index_of(hash_vault) / "qdrant")  # a new cluster: migrate again, the same results
    migrate(hash_vault, "qdrant")
    assert same(results(hash_vault, "qdrant"), qdrant)

    # qdrant-client's local mode (pure Python) gives the scores of Qdrant's engine (the default, qdrant-edge)
    local = {"local": "qdrant-client", "path": str(hash_vault.parent / "local-mode")}
    migrate(hash_vault, "qdrant", SUNLIB_STORE__LOCAL=local["local"], SUNLIB_STORE__PATH=local["path"])
    assert same(results(hash_vault, "qdrant", **local), qdrant)


@pytest.fixture
def qdrant_library(hash_vault: Path) -> Any:
    lib = Library.open(hash_vault, embedding={"provider": "hash"}, store={"backend": "qdrant"})
    lib.index()  # the SQLite text is there (a copy); the collections are filled from it
    yield lib
    lib.close()


def test_hidden_chunks_leave_every_public_score_unchanged(qdrant_library: Library) -> None:
    store = qdrant_library.store
    public = Visibility.of(["public"])
    before = {q: store.lexical.bm25(fts_query(q) or "", public, 30) for q in QUERIES}
    assert all(before.values())
    hidden = "---\nacl: [ops]\n---\n# Rebuild\n\nThe index rebuild window, embedding model, empty ACL, 引用 拒答.\n"
    for i in range(5):
        (qdrant_library.vault / f"hidden-{i}.md").write_text(hidden * (i + 1), encoding="utf-8")
    qdrant_library.index()
    assert {q: store.lexical.bm25(fts_query(q) or "", public, 30) for q in QUERIES} == before
    ops = store.lexical.bm25(fts_query(QUERIES[1]) or "", Visibility.of(["public", "ops"]), 30)
    hidden_ids = {
        c.chunk_id for n, p, _ in store.iter_notes() if p.startswith("hidden-") for c in store.chunks_of_note(n)
    }
    assert hidden_ids & {c for c, _ in ops}  # ops sees them, with its own statistics
    assert store.lexical.doc_freqs(["rebuild"], public) == store.lexical.doc_freqs(["rebuild"], public)
    assert store.lexical.doc_freqs(["拒答"], public)[1].get("拒答", 0) < store.lexical.doc_freqs(
        ["拒答"], Visibility.of(["public", "ops"])
    )[1].get("拒答", 0)


def test_a_filter_narrows_the_hits_but_never_moves_a_score(qdrant_library: Library) -> None:
    lexical = qdrant_library.store.lexical
    public = Visibility.of(["public"])
    guide = Visibility.of(["public"], SearchFilters(folders=("guide",)))
    for query in QUERIES:
        match = fts_query(query) or ""
        whole = dict(lexical.bm25(match, public, 500))
        narrowed = lexical.bm25(match, guide, 500)
        assert all(whole[c] == s for c, s in narrowed), query
    assert lexical.bm25(fts_query(QUERIES[1]) or "", guide, 500)


def test_a_caller_who_sees_everything_gets_the_collections_idf(qdrant_library: Library) -> None:
    (qdrant_library.vault / "internal" / "scratch.md").unlink()  # the `acl: []` note: nobody's
    qdrant_library.index()
    lexical: Any = qdrant_library.store.lexical
    assert lexical.sees_everything(Visibility.of(["public", "ops", "team"]))
    assert not lexical.sees_everything(Visibility.of(["public"]))


def test_the_server_answers_from_the_qdrant_backend(qdrant_library: Library) -> None:
    from sunlib.server import create_app
    from tests.support.clients import Api

    api = Api(create_app(qdrant_library))
    r = api.post("/api/search", json={"query": "empty ACL public", "mode": "hybrid", "limit": 3})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["path"] == "guide/search/filters-and-acl.md"
    (fusion,) = [s for s in r.json()["trace"]["steps"] if s["name"] == Step.FUSION]
    assert fusion["status"] == "ok"  # both routes ran in Qdrant; sunlib fused them
    r = api.post("/api/ask", json={"question": ANSWERED})  # hybrid: the hash vectors' cosines are below e5's gate
    assert r.status_code == 200 and [x["code"] for x in r.json()["refusals"]] == ["low_gate"], r.text[:300]
    (selection,) = [s for s in r.json()["trace"]["steps"] if s["name"] == Step.SELECT]
    assert selection["details"]["selected"][0] in {
        h.chunk_id for h in qdrant_library.search(ANSWERED, mode="bm25").hits
    }


def test_a_server_that_does_not_answer_is_one_line_and_exit_1(hash_vault: Path) -> None:
    env = {**QDRANT, "SUNLIB_STORE__URL": "http://127.0.0.1:9"}  # the discard port: nothing listens
    r = sunlib("search", "empty ACL public", "--vault", str(hash_vault), env=env)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("error: Qdrant at http://127.0.0.1:9 did not answer") and r.stderr.count("\n") == 1
