"""The usearch dense engine: ACL inside the search, exact where the visible set is small, and a
graph file that is derived data (caught up by difference, rebuilt when missing or damaged).

One module-wide index of 1,000 one-chunk notes with random 32-d vectors: 10 notes (1%) are
readable by the principal "few", the rest by "many". Every answer is compared with an exact
search (numpy) over the vectors the principal may see.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sunlib.config import ServerSettings, load_settings
from sunlib.server.policy import server_dense_engine
from sunlib.store import Space, SqliteStore, UsearchVectors, VectorItem, Visibility
from sunlib.store.usearch import GRAPHS
from sunlib.sync.indexing import sync_text
from tests.support.clients import sunlib

NOTES, FEW = 1000, 10
DIM = 32
SPACE = Space("test", "random", DIM, "ann")
FEW_ONLY, MANY_ONLY, BOTH = Visibility(("few",)), Visibility(("many",)), Visibility(("few", "many"))


def write_vault(root: Path, notes: int, few: int) -> Path:
    for i in range(notes):
        acl = "few" if i < few else "many"
        path = root / f"n{i:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nacl: [{acl}]\n---\n# Note {i}\n\nWord{i} text of note {i}.\n", encoding="utf-8")
    return root


def fill(store: SqliteStore, seed: int = 0) -> dict[str, np.ndarray]:
    """Give every pending chunk a random unit vector; returns them by chunk id."""
    store.vectors.ensure_space(SPACE)
    pending = store.vectors.pending(SPACE)
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((len(pending), DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    items = [VectorItem(p.chunk_id, p.stamp, p.embed_hash, v) for p, v in zip(pending, vectors, strict=True)]
    store.vectors.upsert(SPACE, items)
    return {p.chunk_id: v for p, v in zip(pending, vectors, strict=True)}


def build(tmp: Path, notes: int = NOTES, few: int = FEW) -> tuple[Path, dict[str, np.ndarray]]:
    vault = write_vault(tmp / "vault", notes, few)
    db = tmp / "index" / "sunlib.db"
    db.parent.mkdir(parents=True)
    with SqliteStore(db, "usearch") as store:
        sync_text(store, vault, load_settings(vault).index)
        vectors = fill(store)
    return db, vectors


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    return build(tmp_path_factory.mktemp("ann"))


@pytest.fixture
def small(tmp_path: Path) -> Iterator[tuple[SqliteStore, dict[str, np.ndarray]]]:
    db, vectors = build(tmp_path, notes=200, few=2)
    store = SqliteStore(db, "usearch")
    yield store, vectors
    GRAPHS.forget(store.db.identity())
    store.close()


def exact(store: SqliteStore, vectors: dict[str, np.ndarray], vis: Visibility, q: np.ndarray, k: int) -> list[str]:
    ids = sorted(store.visible_chunk_ids(vis))
    scores = np.array([vectors[c] @ q for c in ids])
    return [ids[i] for i in np.argsort(-scores, kind="stable")[:k]]


def engines(store: SqliteStore) -> dict[str, UsearchVectors]:
    return {
        "exact path": UsearchVectors(store.db, store),
        "graph path": UsearchVectors(store.db, store, exact_rows=0),
        "float16 graph": UsearchVectors(store.db, store, dtype="f16", exact_rows=0),
    }


def queries(n: int, seed: int = 7) -> np.ndarray:
    q = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_a_principal_who_sees_one_percent_gets_the_exact_top_ten(corpus: tuple[Path, dict[str, np.ndarray]]) -> None:
    db, vectors = corpus
    with SqliteStore(db, "usearch") as store:
        assert store.count_visible(FEW_ONLY) == FEW
        for name, engine in engines(store).items():
            for q in queries(20):
                got = [c for c, _ in engine.knn(SPACE, q, FEW_ONLY, 10)]
                assert got == exact(store, vectors, FEW_ONLY, q, 10), name


def test_k1_never_returns_a_restricted_nearest_chunk(corpus: tuple[Path, dict[str, np.ndarray]]) -> None:
    db, vectors = corpus
    with SqliteStore(db, "usearch") as store:
        few_ids = store.visible_chunk_ids(FEW_ONLY)
        int8 = UsearchVectors(store.db, store, dtype="i8", exact_rows=0)
        for name, engine in {**engines(store), "int8 graph": int8}.items():
            for chunk_id in few_ids[:5]:
                q = vectors[chunk_id]  # the nearest chunk of all is this restricted one (similarity 1)
                assert [c for c, _ in engine.knn(SPACE, q, BOTH, 1)] == [chunk_id], name
                (found,) = engine.knn(SPACE, q, MANY_ONLY, 1)
                assert found[0] in set(store.visible_chunk_ids(MANY_ONLY)), name
                if engine is not int8:  # int8 scores are approximate: its top 1 may be a near tie
                    assert [found[0]] == exact(store, vectors, MANY_ONLY, q, 1), name


def test_the_graph_recalls_the_exact_top_ten(corpus: tuple[Path, dict[str, np.ndarray]]) -> None:
    db, vectors = corpus
    with SqliteStore(db, "usearch") as store:
        graph = UsearchVectors(store.db, store, exact_rows=0)
        for vis in (BOTH, MANY_ONLY):
            found = [
                len({c for c, _ in graph.knn(SPACE, q, vis, 10)} & set(exact(store, vectors, vis, q, 10)))
                for q in queries(50)
            ]
            assert sum(found) / (10 * len(found)) >= 0.97, vis


def test_an_update_is_caught_up_without_a_rebuild_and_survives_a_new_process(
    small: tuple[SqliteStore, dict[str, np.ndarray]],
) -> None:
    store, vectors = small
    engine = store.vectors
    assert isinstance(engine, UsearchVectors)
    engine.refresh(SPACE)
    assert engine.state(SPACE).state == "fresh"
    identity = store.db.identity()
    GRAPHS.forget(identity)
    engine.knn(SPACE, queries(1)[0], BOTH, 5)
    assert engine.graph(SPACE).added == 0  # opened from the file, nothing rebuilt

    gone, changed = sorted(vectors)[:2]
    engine.delete(SPACE, [gone, changed])
    pending = {p.chunk_id: p for p in engine.pending(SPACE)}
    q = queries(1, seed=3)[0]
    engine.upsert(SPACE, [VectorItem(changed, pending[changed].stamp, pending[changed].embed_hash, q)])
    assert engine.knn(SPACE, q, BOTH, 1) == [(changed, pytest.approx(1.0, abs=1e-5))]
    assert gone not in {c for c, _ in engine.knn(SPACE, vectors[gone], BOTH, 10)}
    assert engine.graph(SPACE).added == 1  # the one new vector, not the 199 others
    assert engine.state(SPACE).state == "behind"  # a small change is not saved by a query

    GRAPHS.forget(identity)  # another process: the saved graph plus the difference
    assert engine.knn(SPACE, q, BOTH, 1)[0][0] == changed
    assert engine.graph(SPACE).added == 1
    engine.refresh(SPACE)
    assert engine.state(SPACE).state == "fresh" and engine.verify(SPACE) == []


def test_a_damaged_or_missing_graph_file_is_rebuilt_from_sqlite(
    small: tuple[SqliteStore, dict[str, np.ndarray]],
) -> None:
    store, vectors = small
    engine = store.vectors
    assert isinstance(engine, UsearchVectors)
    engine.refresh(SPACE)
    files = engine.files(SPACE)
    assert files is not None
    stamp = files.read_stamp()
    assert stamp is not None
    q = queries(1)[0]
    want = exact(store, vectors, BOTH, q, 5)

    files.graph_path(stamp.token).write_bytes(b"not a graph")
    GRAPHS.forget(store.db.identity())
    assert engine.state(SPACE).state == "damaged"
    assert [c for c, _ in engine.knn(SPACE, q, BOTH, 5)] == want
    assert engine.state(SPACE).state == "fresh"  # a rebuild is saved at once

    files.stamp_path.write_text(json.dumps({**json.loads(files.stamp_path.read_text()), "index_uuid": "x"}))
    GRAPHS.forget(store.db.identity())
    assert engine.state(SPACE).state == "foreign"
    assert [c for c, _ in engine.knn(SPACE, q, BOTH, 5)] == want

    shutil.rmtree(files.folder)
    GRAPHS.forget(store.db.identity())
    assert engine.state(SPACE).state == "missing"
    assert [c for c, _ in engine.knn(SPACE, q, BOTH, 5)] == want
    assert engine.verify(SPACE) == []


def test_a_save_removes_what_an_interrupted_save_left(small: tuple[SqliteStore, dict[str, np.ndarray]]) -> None:
    store, _ = small
    engine = store.vectors
    assert isinstance(engine, UsearchVectors)
    engine.refresh(SPACE)
    files = engine.files(SPACE)
    assert files is not None
    leftovers = [
        files.graph_path("dead00"),
        files.keys_path("dead00"),
        files.folder / f".{files.table}.dead00.json.tmp",
    ]
    for path in leftovers:
        path.write_bytes(b"half written")
    assert engine.state(SPACE).state == "fresh"  # the stamp names its own files, not these
    engine.delete(SPACE, [store.visible_chunk_ids(BOTH)[0]])
    engine.refresh(SPACE)
    assert not any(path.exists() for path in leftovers)
    assert sorted(p.name for p in files.folder.iterdir()) == sorted(
        [
            files.stamp_path.name,
            files.graph_path(files.read_stamp().token).name,
            files.keys_path(files.read_stamp().token).name,
        ]  # type: ignore[union-attr]
    )


def test_doctor_reports_a_damaged_graph_and_repair_rebuilds_it(tmp_path: Path) -> None:
    vault = write_vault(tmp_path / "vault", 30, 3)
    index_dir = tmp_path / "index"
    env = {
        "SUNLIB_INDEX_DIR": str(index_dir),
        "SUNLIB_HOME": str(tmp_path / "home"),
        "SUNLIB_EMBEDDING__PROVIDER": "hash",
        "SUNLIB_SEARCH__DENSE_ENGINE": "usearch",
    }

    def doctor(*args: str) -> tuple[int, list[str]]:
        r = sunlib("doctor", "--json", "-V", str(vault), *args, env=env)
        return r.returncode, [a["state"] for a in json.loads(r.stdout)["ann"]]

    assert sunlib("index", str(vault), "-q", env=env).returncode == 0
    assert doctor() == (0, ["fresh"])  # `sunlib index` saved the graph after the vector phase
    for graph in (index_dir / "sunlib.ann").glob("*.usearch"):
        graph.write_bytes(b"\0" * 64)
    assert doctor() == (1, ["damaged"])
    assert doctor("--repair") == (0, ["fresh"])
    shutil.rmtree(index_dir / "sunlib.ann")
    assert doctor() == (0, ["missing"])  # rebuilt on the next search: not a problem


def test_the_server_switches_to_the_graph_from_a_chunk_count() -> None:
    counted: list[int] = []

    def chunks() -> int:
        counted.append(1)
        return 150_000

    assert server_dense_engine(ServerSettings(), chunks) == "numpy" and counted == []  # default: never counts
    assert server_dense_engine(ServerSettings(ann_above_chunks=100_000), chunks) == "usearch"
    assert server_dense_engine(ServerSettings(ann_above_chunks=200_000), chunks) == "numpy"
    assert server_dense_engine(ServerSettings(ann_above_chunks=200_000, dense_engine_numpy=False), chunks) is None
