"""Hybrid while vectors are missing: a chunk the dense route cannot score yet keeps its BM25 standing.

The tiny vault below is indexed with the deterministic hash embedder; deleting a chunk's
vector through the VectorIndex protocol makes it pending, exactly as a chunk whose vector
the background embedding has not reached yet. Fusion is unit-tested on hand-made lists.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sunlib import Library
from sunlib.contracts import SearchResult
from sunlib.retrieve import fuse
from sunlib.retrieve.fusion import RouteScore
from sunlib.trace.steps import Step
from tests.support.store_helpers import chunk_of

QUERY = "lighthouse keeper tide log"
NOTES = {
    # BM25's clear first for the query: every query word, twice
    "tide-log.md": "# Tide log\n\nThe lighthouse keeper writes the tide log: lighthouse, keeper, tide, log.\n",
    "keeper.md": "# Keeper\n\nThe keeper of the lighthouse notes the weather and the tide each day.\n",
    "harbour.md": "# Harbour\n\nThe harbour master keeps a log of the ships and of the tide.\n",
    "lighthouse.md": "# Lighthouse\n\nA lighthouse guides ships at night past the rocks.\n",
    "garden.md": "# Garden\n\nThe gardener waters the roses and keeps a log of the rain.\n",
    "ops.md": "---\nacl: [ops]\n---\n# Ops log\n\nThe lighthouse keeper keeps the ops tide log for the ops team.\n",
    # notes without the query's words: BM25 counts among the chunks the caller may see, and with
    # five of them a word in three would weigh nothing (FTS5's idf floor)
    "bakery.md": "# Bakery\n\nThe baker bakes bread and buns before dawn.\n",
    "orchard.md": "# Orchard\n\nApples and pears ripen in the orchard in autumn.\n",
    "station.md": "# Station\n\nTrains leave the station every hour on weekdays.\n",
    "library.md": "# Library\n\nBooks are lent for three weeks and can be renewed twice.\n",
}


def _open(root: Path, **search: object) -> Library:
    return Library.open(root / "vault", embedding={"provider": "hash"}, index_dir=root / "index", search=search)


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Library]:
    vault = tmp_path / "vault"
    vault.mkdir()
    for name, text in NOTES.items():
        (vault / name).write_text(text, encoding="utf-8")
    with _open(tmp_path) as lib:
        lib.index()
        yield lib


def paths(result: SearchResult) -> list[str]:
    return [h.path for h in result.hits]


def ranking(result: SearchResult) -> list[tuple[object, ...]]:
    """Everything a hit says about its place: chunk, fused score, every route's rank, score, contribution."""
    return [(h.chunk_id, h.score, tuple(sorted(h.routes.items()))) for h in result.hits]


def fusion_details(result: SearchResult) -> dict[str, object]:
    return next(st for st in result.trace.steps if st.name == Step.FUSION).details


def test_a_bm25_first_chunk_without_its_vector_stays_first(tiny: Library) -> None:
    full = tiny.search(QUERY, mode="hybrid")
    top = chunk_of(tiny.store, "tide-log.md")
    assert paths(tiny.search(QUERY, mode="bm25"))[0] == "tide-log.md"
    assert full.hits[0].chunk_id == top and fusion_details(full)["filled_in"] == 0

    tiny.store.vectors.delete(tiny.space, [top])  # its vector is not computed yet
    assert tiny.store.vectors.count_pending(tiny.space)[0] == 1
    bm25 = tiny.search(QUERY, mode="bm25")
    assert paths(bm25)[0] == "tide-log.md"  # BM25 does not need vectors
    assert "tide-log.md" not in paths(tiny.search(QUERY, mode="dense"))

    hybrid = tiny.search(QUERY, mode="hybrid")
    assert paths(hybrid).index("tide-log.md") <= paths(bm25).index("tide-log.md") == 0
    first = hybrid.hits[0]
    dense, lexical = first.routes["dense"], first.routes["bm25"]
    assert dense.rank == 0 and dense.score == 0.0  # not returned, no score of its own
    # the fill-in: what the dense route would add if it agreed with BM25 (equal weights here)
    assert dense.contribution == pytest.approx(lexical.contribution, abs=1e-12)
    assert first.score == pytest.approx(dense.contribution + lexical.contribution, abs=1e-12)
    details = fusion_details(hybrid)
    assert details["filled_in"] == 1
    listed = {t["chunk_id"]: t["routes"] for t in details["top"]}  # type: ignore[attr-defined]
    assert listed[top]["dense"]["filled"] is True
    assert all("filled" not in r["dense"] for c, r in listed.items() if c != top)

    # before the fill-in (and with it turned off) the missing vector cost the chunk its place
    with _open(tiny.vault.parent, fill_missing=False) as floor:
        charged = floor.search(QUERY, mode="hybrid")
        assert paths(charged).index("tide-log.md") > 0
        assert fusion_details(charged)["filled_in"] == 0
        assert set(paths(charged)) == set(paths(hybrid))  # same candidates, another order

    # once the vector is there, the ranking is the fully embedded one, to the last bit
    report = tiny.index()
    assert report.vectors_embedded + report.vectors_from_cache == 1
    assert tiny.store.vectors.count_pending(tiny.space)[0] == 0
    again = tiny.search(QUERY, mode="hybrid")
    assert ranking(again) == ranking(full) and fusion_details(again)["filled_in"] == 0


def test_all_vectors_present_nothing_changes(tiny: Library) -> None:
    with _open(tiny.vault.parent, fill_missing=False) as floor:
        for query in (QUERY, "ships at night", "log of the rain", "keeper"):
            for principals in (["public"], ["public", "ops"]):
                filled = tiny.search(query, mode="hybrid", principals=principals)
                plain = floor.search(query, mode="hybrid", principals=principals)
                assert filled.hits and ranking(filled) == ranking(plain), (query, principals)
                assert fusion_details(filled)["filled_in"] == 0


@pytest.mark.parametrize("engine", ["sqlite-vec", "numpy"])
def test_sample_vault_fully_embedded_is_unchanged(hash_library: Library, engine: str) -> None:
    on = hash_library.with_settings(search={"dense_engine": engine})
    off = hash_library.with_settings(search={"dense_engine": engine, "fill_missing": False})
    assert on.store.vectors.count_pending(on.space)[0] == 0
    for method in ("zscore", "rrf", "minmax"):
        for query in ("how large is a chunk", "reciprocal rank fusion", "中文分词", "install sunlib with pip"):
            a = on.with_settings(search={"fusion": method}).search(query, mode="hybrid", limit=30)
            b = off.with_settings(search={"fusion": method}).search(query, mode="hybrid", limit=30)
            assert ranking(a) == ranking(b), (engine, method, query)
            assert fusion_details(a)["filled_in"] == 0


def test_fill_in_sees_only_visible_chunks(tiny: Library) -> None:
    store, space = tiny.store, tiny.space
    ops, top = chunk_of(store, "ops.md"), chunk_of(store, "tide-log.md")
    store.vectors.delete(space, [top])
    before = tiny.search(QUERY, mode="hybrid")
    store.vectors.delete(space, [ops])  # a chunk the public may not see loses its vector too
    public = tiny.search(QUERY, mode="hybrid")
    assert "ops.md" not in paths(public)
    assert fusion_details(public)["filled_in"] == 1  # the hidden pending chunk is neither filled nor counted
    assert ops not in [t["chunk_id"] for t in fusion_details(public)["top"]]  # type: ignore[attr-defined]
    assert ranking(public) == ranking(before)  # nothing about the hidden chunk reaches the public ranking

    with_ops = tiny.search(QUERY, mode="hybrid", principals=["public", "ops"])
    assert fusion_details(with_ops)["filled_in"] == 2
    bm25 = tiny.search(QUERY, mode="bm25", principals=["public", "ops"])
    assert paths(bm25)[:2] == ["tide-log.md", "ops.md"] and paths(with_ops)[0] == "tide-log.md"
    assert paths(with_ops).index("ops.md") < paths(with_ops).index("harbour.md")  # ahead of weaker matches


# -- fuse() with unscored keys ----------------------------------------------------------------

BM25 = [("a", 9.0), ("b", 6.0), ("c", 4.0), ("d", 1.0)]
DENSE = [("b", 0.9), ("d", 0.7), ("e", 0.5)]  # "a" and "c" have no vector; "e" is dense-only


@pytest.mark.parametrize("method", ["rrf", "zscore", "minmax"])
def test_a_filled_in_route_agrees_with_the_routes_that_can_score(method: str) -> None:
    weights = {"bm25": 0.7, "dense": 0.3}
    fused = fuse({"bm25": BM25, "dense": DENSE}, method, weights, 60, {"dense": {"a", "c"}})
    by_key = {f.key: f for f in fused}
    for key in ("a", "c"):
        f = by_key[key]
        assert f.filled == ("dense",)
        lexical, dense = f.routes["bm25"], f.routes["dense"]
        assert dense.rank == 0 and dense.score == 0.0
        assert dense.contribution == pytest.approx(lexical.contribution / 0.7 * 0.3)
        assert f.score == pytest.approx(lexical.contribution / 0.7)  # BM25's value at the full weight
    for f in fused:
        assert sum(r.contribution for r in f.routes.values()) == pytest.approx(f.score, abs=1e-12)
    assert [f.key for f in fused if f.key in ("a", "c")] == ["a", "c"]  # the unscored keep BM25's order
    assert by_key["b"].filled == by_key["d"].filled == by_key["e"].filled == ()


def test_unscored_changes_nothing_for_keys_a_route_returned_or_could_score() -> None:
    lists = {"bm25": BM25, "dense": DENSE}
    plain = fuse(lists, "zscore", {"bm25": 0.5, "dense": 0.5})
    assert fuse(lists, "zscore", {"bm25": 0.5, "dense": 0.5}, 60, {}) == plain
    assert fuse(lists, "zscore", {"bm25": 0.5, "dense": 0.5}, 60, {"dense": set()}) == plain
    # "b" was returned by the dense route, "zz" is not a candidate: neither is filled in
    assert fuse(lists, "zscore", {"bm25": 0.5, "dense": 0.5}, 60, {"dense": {"b", "zz"}}) == plain
    # "c" has a vector but ranked below the dense pool: it keeps the dense floor
    floor = {f.key: f for f in plain}["c"].routes["dense"]
    assert floor.rank == 0 and floor.contribution == min(r.routes["dense"].contribution for r in plain)


def test_filled_in_from_a_floor_and_with_zero_weights() -> None:
    # "e" is dense-only and BM25 cannot score it (never, in practice): it gets BM25's view filled in,
    # which for z-score is the dense z; a zero-weighted seeing route still places the item.
    fused = fuse({"bm25": BM25, "dense": DENSE}, "zscore", {"bm25": 0.5, "dense": 0.5}, 60, {"bm25": {"e"}})
    e = {f.key: f for f in fused}["e"]
    assert e.filled == ("bm25",) and e.routes["bm25"].contribution == pytest.approx(e.routes["dense"].contribution)
    zero = fuse({"bm25": BM25, "dense": DENSE}, "minmax", {"bm25": 0.0, "dense": 1.0}, 60, {"dense": {"a"}})
    a = {f.key: f for f in zero}["a"]
    assert a.filled == ("dense",) and a.routes["dense"].contribution == pytest.approx(1.0)  # BM25's best = 1


def test_a_neutral_route_is_neither_filled_in_nor_averaged_over() -> None:
    # A cross-language route searched only "x" and "y" (the other script). For "a" (question's own
    # script, no dense vector yet) it is neutral: the dense fill-in must come from BM25 alone, and the
    # neutral route must not be filled in even though it cannot score "a" either.
    cross = [("x", 0.8), ("y", 0.6)]
    lists = {"bm25": BM25, "dense": DENSE, "crosslang": cross}
    weights = {"bm25": 0.5, "dense": 0.5, "crosslang": 0.25}
    scopes = {"crosslang": {"x", "y"}}
    fused = fuse(lists, "zscore", weights, 60, {"dense": {"a"}, "crosslang": {"a"}}, scopes)
    a = {f.key: f for f in fused}["a"]
    assert a.filled == ("dense",)
    assert a.routes["crosslang"] == RouteScore(0, 0.0, 0.0)
    assert a.routes["dense"].contribution == pytest.approx(a.routes["bm25"].contribution)
