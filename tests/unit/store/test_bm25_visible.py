"""BM25 scores depend only on text the caller may see (no statistics oracle).

FTS5's ``bm25()`` takes N, the mean length and each word's document frequency from the whole
table, so a public caller could learn whether a hidden note holds a word from its own score.
The lexical index scores with the statistics of the chunks the caller may see; when those are
every chunk it is FTS5's own ``bm25()``, and the formula in store/bm25.py reproduces it exactly.
"""

from __future__ import annotations

from typing import Any

import pytest

from sunlib import Library
from sunlib.contracts import SearchFilters
from sunlib.server import create_app
from sunlib.store import Visibility
from sunlib.text import fts_query
from tests.support.clients import Api

WORD = "quixotrance"
TOKENS = {"tok-public": [], "tok-ops": ["ops"]}
QUERIES = [
    "index rebuild window",
    "search modes bm25 dense",
    "SUNLIB_HOME environment variable",
    "how do I configure the embedding model",
    "引用 拒答",
    "向量 检索 模型",
]


def bm25_hits(api: Api, query: str) -> list[tuple[str, float]]:
    r = api.post("/api/search", json={"query": query, "mode": "bm25", "limit": 20})
    assert r.status_code == 200, r.text
    return [(h["path"], h["score"]) for h in r.json()["results"]]


def bm25_trace_top(api: Api, query: str) -> Any:
    r = api.post("/api/search", json={"query": query, "mode": "bm25"})
    (step,) = [s for s in r.json()["trace"]["steps"] if s["name"] == "BM25 Retrieval"]
    return step["details"]["top"]


def test_a_public_score_does_not_tell_whether_a_hidden_note_has_the_word(hash_library: Library) -> None:
    lib = Library.open(hash_library.vault, embedding={"provider": "hash"}, server={"tokens": TOKENS})
    try:
        api = Api(create_app(lib))
        public, ops = api.bearer("tok-public"), api.bearer("tok-ops")
        r = public.post("/api/notes", json={"path": "probe.md", "content": f"# Probe\n\n{WORD} here.\n"})
        assert r.status_code == 201, r.text
        before, top_before = bm25_hits(public, WORD), bm25_trace_top(public, WORD)
        assert [p for p, _ in before] == ["probe.md"]
        others = {q: bm25_hits(public, q) for q in QUERIES[:3]}

        # a hidden ops note and an `acl: []` note (visible to nobody) now hold the word too
        r = ops.post("/api/notes", json={"path": "ops-w.md", "content": f"---\nacl: [ops]\n---\n# W\n\n{WORD}.\n"})
        assert r.status_code == 201, r.text
        (lib.vault / "nobody-w.md").write_text(f"---\nacl: []\n---\n# N\n\n{WORD} {WORD}.\n", encoding="utf-8")
        lib.index()
        assert [p for p, _ in bm25_hits(ops, WORD)] != ["probe.md"]  # ops sees its note: the word is there

        after = bm25_hits(public, WORD)
        assert after == before  # the same score, to the last bit
        assert bm25_trace_top(public, WORD) == top_before
        assert {q: bm25_hits(public, q) for q in QUERIES[:3]} == others  # nor any other public score
    finally:
        lib.close()


def test_hidden_chunks_leave_every_public_score_unchanged(hash_library: Library) -> None:
    store = hash_library.store
    public = Visibility.of(["public"])
    before = {q: store.lexical.bm25(fts_query(q) or "", public, 30) for q in QUERIES}
    hidden = "---\nacl: [ops]\n---\n# Rebuild\n\nThe index rebuild window, search modes, embedding model, 引用 向量.\n"
    for i in range(5):
        (hash_library.vault / f"hidden-{i}.md").write_text(hidden * (i + 1), encoding="utf-8")
    hash_library.index()
    after = {q: store.lexical.bm25(fts_query(q) or "", public, 30) for q in QUERIES}
    assert after == before


@pytest.fixture
def everyone(hash_library: Library) -> tuple[Library, Visibility]:
    """The sample vault without its `acl: []` note, so that ops + team see every chunk."""
    (hash_library.vault / "internal" / "scratch.md").unlink()
    hash_library.index(embed=False)
    return hash_library, Visibility.of(["public", "ops", "team"])


def test_a_caller_who_sees_every_chunk_gets_fts5s_own_scores(everyone: tuple[Library, Visibility]) -> None:
    from sunlib.store import bm25 as formula

    lib, visibility = everyone
    lexical: Any = lib.store.lexical
    rows, _, all_chunks = lexical.visible_stats(visibility)
    assert all_chunks and rows == lib.store.counts().chunks
    db = lexical.db
    tokens = sum(formula.varint(bytes(r[0])) for r in db.conn.execute("SELECT sz FROM chunks_fts_docsize"))
    for query in QUERIES:
        match = fts_query(query)
        assert match is not None
        native = lexical.fts5_bm25(match, visibility, 100)
        assert lexical.bm25(match, visibility, 100) == native  # the same call as before the fix
        # the formula, given the whole table's statistics, reproduces FTS5's bm25() exactly
        exact = lexical.visible_bm25(match, visibility, 100, rows, tokens)
        assert [c for c, _ in exact] == [c for c, _ in native], query
        assert max(abs(a - b) for (_, a), (_, b) in zip(exact, native, strict=True)) < 1e-9, query


def test_a_filter_narrows_the_hits_but_never_moves_a_score(hash_library: Library) -> None:
    lexical = hash_library.store.lexical
    public = Visibility.of(["public"])
    guide = Visibility.of(["public"], SearchFilters(folders=("guide",)))
    for query in QUERIES:
        match = fts_query(query) or ""
        whole = dict(lexical.bm25(match, public, 500))
        narrowed = lexical.bm25(match, guide, 500)
        assert narrowed and all(whole[c] == s for c, s in narrowed), query


def test_the_formula_pieces() -> None:
    from sunlib.store import bm25 as formula

    assert formula.idf(100, 60) == formula.MIN_IDF  # a word in over half the rows
    assert formula.idf(100, 1) == pytest.approx(4.1947, abs=1e-4)
    assert formula.score([0, 0], 10, [1.0, 2.0], 10.0) == 0.0
    assert formula.score([1], 10, [2.0], 10.0) == pytest.approx(2.0)  # at the mean length: IDF * 1
    assert [formula.varint(b) for b in (b"\x05", b"\x81\x00", b"\xff\x7f")] == [5, 128, 16383]
