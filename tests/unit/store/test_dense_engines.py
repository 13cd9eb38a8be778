"""The two dense engines (sqlite-vec KNN, in-memory numpy) agree, and both filter before ranking."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sunlib import Library
from sunlib.contracts import SearchFilters
from tests.support.paths import SAMPLE_VAULT

QUERY = "harbour lighthouse keeper logs the tide and the storm every evening at nine"


def both(vault: Path, index_dir: Path, **search: object) -> tuple[Library, Library]:
    vec = Library.open(vault, embedding={"provider": "hash"}, index_dir=index_dir, search=dict(search))
    mem = Library.open(
        vault, embedding={"provider": "hash"}, index_dir=index_dir, search={**search, "dense_engine": "numpy"}
    )
    return vec, mem


def test_numpy_engine_never_lets_restricted_vectors_crowd_out(tmp_path: Path) -> None:
    root = tmp_path / "tiny"
    root.mkdir()
    (root / "public.md").write_text("# Harbour\n\nThe harbour lighthouse keeper logs the weather.\n", encoding="utf-8")
    (root / "restricted.md").write_text(f"---\nacl: [ops]\n---\n# Harbour\n\n{QUERY}.\n", encoding="utf-8")
    vec, mem = both(root, tmp_path / "idx", candidates=1)
    vec.index()
    for lib in (vec, mem):
        assert [h.path for h in lib.search(QUERY, mode="dense", principals=["public", "ops"], limit=1).hits] == [
            "restricted.md"
        ]
        assert [h.path for h in lib.search(QUERY, mode="dense", principals=["public"], limit=1).hits] == ["public.md"]
        assert lib.search(QUERY, mode="dense", principals=["team"]).hits == ()
    vec.close()
    mem.close()


@pytest.mark.parametrize(
    ("principals", "filters"),
    [
        (["public"], SearchFilters()),
        (["public", "ops", "team"], SearchFilters()),
        (["public"], SearchFilters(folders=("guide",))),
        (["public"], SearchFilters(metadata=(("language", "zh"),))),
        (["public"], SearchFilters(tags=("search",))),
    ],
)
def test_engines_return_the_same_ranking(
    vault: Path, tmp_path: Path, principals: list[str], filters: SearchFilters
) -> None:
    vec, mem = both(vault, tmp_path / "idx")
    vec.index()
    for query in ("how are Chinese words indexed", "ACL principals", "中文检索 分词", "embedding space fingerprint"):
        a = vec.search(query, mode="dense", principals=principals, filters=filters, limit=20)
        b = mem.search(query, mode="dense", principals=principals, filters=filters, limit=20)
        assert [h.score for h in a.hits] == pytest.approx([h.score for h in b.hits], abs=1e-4)
        # hash vectors tie a lot (many exact zeros): which tied chunks fill the pool may differ,
        # so compare identities above the lowest score only
        floor = min(h.score for h in a.hits) + 1e-4
        top_a = {h.chunk_id: h.score for h in a.hits if h.score > floor}
        top_b = {h.chunk_id: h.score for h in b.hits if h.score > floor}
        assert top_a.keys() == top_b.keys()  # near-equal scores may swap places between float paths
    vec.close()
    mem.close()


def test_numpy_engine_sees_writes(vault: Path, tmp_path: Path) -> None:
    vec, mem = both(vault, tmp_path / "idx")
    vec.index()
    assert not mem.search("zebra quartz xylophone", mode="dense", limit=1).hits[0].text.startswith("Zebra")
    (vault / "new.md").write_text("# New\n\nZebra quartz xylophone.\n", encoding="utf-8")
    vec.index()
    assert mem.search("zebra quartz xylophone", mode="dense", limit=1).hits[0].path == "new.md"
    (vault / "new.md").unlink()
    vec.index()
    assert all(h.path != "new.md" for h in mem.search("zebra quartz xylophone", mode="dense", limit=50).hits)
    vec.close()
    mem.close()


def test_numpy_matrices_are_shared_across_connections_and_threads(vault: Path, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from sunlib.store import MatrixCache, NumpyVectors, SqliteStore, SqliteVectors, Visibility

    vec, _ = both(vault, tmp_path / "idx")
    vec.index()
    space, qvec = vec.space, vec.embedder.embed_query(QUERY)
    alone = NumpyVectors(SqliteVectors(vec.store.db), vec.store, vec.store.db.identity(), MatrixCache())
    expected = alone.knn(space, qvec, Visibility(("public",)), 10)
    sqlite_vec = vec.store.vectors.knn(space, qvec, Visibility(("public",)), 10)
    assert [s for _, s in expected] == pytest.approx([s for _, s in sqlite_vec], abs=1e-4)
    cache = MatrixCache()

    def one_reader(_: int) -> list[tuple[str, float]]:
        store = SqliteStore(vec.db_path)  # a connection per reader thread, one cache for all
        try:
            engine = NumpyVectors(SqliteVectors(store.db), store, store.db.identity(), cache)
            return engine.knn(space, qvec, Visibility(("public",)), 10)
        finally:
            store.close()

    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(one_reader, range(8)))
    assert cache.loads <= 4  # at most one load per thread racing the first; never one per query
    assert all(got == expected for got in found)
    (vault / "new.md").write_text(f"# New\n\n{QUERY}.\n", encoding="utf-8")
    vec.index()  # a write: the next query loads the new generation
    assert one_reader(0)[0][0] in {
        c.chunk_id for c in vec.store.chunks_of_note(vec.store.note_states()["new.md"].note_id)
    }
    vec.close()


def test_a_newer_generation_replaces_the_matrix_instead_of_adding_one() -> None:
    """An embedding job bumps the generation at every batch: the cache must hold one matrix
    per space, not one per generation."""
    from sunlib.store import MatrixCache

    cache = MatrixCache()

    def load() -> tuple[list[str], np.ndarray]:
        return ["chk_a", "chk_b"], np.eye(2, dtype=np.float32)

    for generation in (1, 2, 3, 3):
        entry = cache.matrix(("index", "space"), generation, load)
        assert entry.chunk_ids == ("chk_a", "chk_b")
    assert len(cache) == 1 and cache.loads == 3  # generation 3 was asked twice, loaded once
    cache.matrix(("index", "other space"), 3, load)
    assert len(cache) == 2


def test_a_process_that_searched_the_hnsw_engine_can_still_load_a_model(tmp_path: Path) -> None:
    """usearch's compiled module, loaded before onnxruntime, made the first model load (the reader
    of an ask) crash the whole process; a server answering a search and then an ask died so."""
    script = (
        "import sys\n"
        "from sunlib import Library\n"
        "with Library.open(sys.argv[1], embedding={'provider': 'hash'}, index_dir=sys.argv[2],"
        " search={'dense_engine': 'usearch'}) as lib:\n"
        "    lib.index()\n"
        "    lib.search('how does sunlib search Chinese text', mode='dense')\n"
        "    print(lib.ask('how does sunlib search Chinese text').frame.question)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(SAMPLE_VAULT), str(tmp_path / "idx")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SUNLIB_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "how does sunlib search Chinese text"
