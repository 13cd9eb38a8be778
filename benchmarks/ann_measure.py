"""The ANN engines' share of the store benchmark (benchmarks/store_bench.py): build time, memory,
query latency through sunlib's search, recall@10 against exact search with ACL, and the cost of
an incremental update. Imported by store_bench.py; not a script of its own."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sunlib.config import SearchSettings
from sunlib.retrieve import SearchEngine, SearchRequest
from sunlib.store import PendingChunk, Space, SqliteStore, UsearchVectors, VectorItem, Visibility

UPDATE = 1000  # vectors replaced for the incremental-update figure
RECALL_QUERIES = 100
FEW = Visibility(("few",))  # the principal who sees 1% of the synthetic notes
EVERYONE = Visibility(("public",))


@dataclass(frozen=True)
class Corpus:
    """What the benchmark stored: chunk ids aligned with the rows of ``vectors``."""

    db: Path
    space: Space
    pending: list[PendingChunk]
    vectors: np.ndarray
    queries: list[str]
    qvecs: np.ndarray


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def exact_top(matrix: np.ndarray, rows: np.ndarray, q: np.ndarray, k: int) -> set[int]:
    scores = matrix[rows] @ q
    return {int(rows[i]) for i in np.argsort(-scores)[:k]}


def recall(engine: UsearchVectors, corpus: Corpus, vis: Visibility, rows: np.ndarray) -> float:
    position = {p.chunk_id: i for i, p in enumerate(corpus.pending)}
    hits = 0
    for q in corpus.qvecs[:RECALL_QUERIES]:
        got = {position[c] for c, _ in engine.knn(corpus.space, q, vis, 10)}
        hits += len(got & exact_top(corpus.vectors, rows, q, 10))
    return hits / (10 * min(RECALL_QUERIES, len(corpus.qvecs)))


def latencies(store: SqliteStore, corpus: Corpus, settings: SearchSettings) -> dict[str, float]:
    qmap = dict(zip(corpus.queries, corpus.qvecs, strict=True))
    engine = SearchEngine(store, settings, corpus.space, lambda q: qmap[q])
    engine.search(SearchRequest(corpus.queries[0], mode="dense", limit=10))
    lat: dict[str, list[float]] = {"dense": [], "hybrid": []}
    for q in corpus.queries:
        for mode in lat:
            t0 = time.perf_counter()
            engine.search(SearchRequest(q, mode=mode, limit=10))
            lat[mode].append((time.perf_counter() - t0) * 1000)
    return {f"{m}_p{p}": pct(v, p) for m, v in lat.items() for p in (50, 95)}


def update_cost(store: SqliteStore, engine: UsearchVectors, corpus: Corpus) -> dict[str, float]:
    """Replace UPDATE vectors (the kind of change a re-embedded folder makes), then time the
    graph's catch-up and its save; asserts nothing was rebuilt."""
    rng = np.random.default_rng(5)
    picked = rng.choice(len(corpus.pending), size=min(UPDATE, len(corpus.pending)), replace=False)
    fresh = rng.standard_normal((len(picked), corpus.space.dim)).astype(np.float32)
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True)
    items = [
        VectorItem(corpus.pending[i].chunk_id, corpus.pending[i].stamp, corpus.pending[i].embed_hash, v)
        for i, v in zip(picked, fresh, strict=True)
    ]
    before = engine.graph(corpus.space).added
    store.vectors.upsert(corpus.space, items)
    corpus.vectors[picked] = fresh  # the exact answers of later engines follow the store
    t0 = time.perf_counter()
    graph = engine.graph(corpus.space)
    catch_up_s = time.perf_counter() - t0
    assert graph.added - before == len(items), "an update must not rebuild the graph"
    t0 = time.perf_counter()
    engine.refresh(corpus.space)
    save_s = time.perf_counter() - t0
    return {"update_vectors": float(len(items)), "update_catch_up_s": catch_up_s, "update_save_s": save_s}


def measure(name: str, corpus: Corpus, settings: SearchSettings, say: Callable[[str], None]) -> dict[str, float]:
    """Every figure of one ANN engine (``usearch`` or ``usearch-i8``) on the benchmark's corpus."""
    store = SqliteStore(corpus.db, name)
    engine = store.vectors
    assert isinstance(engine, UsearchVectors)
    t0 = time.perf_counter()
    engine.refresh(corpus.space)
    build_s = time.perf_counter() - t0
    graph = engine.graph(corpus.space)
    n = len(graph.keys)
    files = engine.files(corpus.space)
    stamp = files.read_stamp() if files is not None else None
    out: dict[str, float] = {
        "build_s": build_s,
        "memory_mb": graph.index.memory_usage / 1e6,
        "file_mb": (stamp.graph_bytes if stamp else 0) / 1e6,
        "memory_mb_per_1m": graph.index.memory_usage / max(n, 1) * 1e6 / 1e6,
    }
    say(f"{name}: built {n:,} vectors in {build_s:.1f}s, {out['memory_mb']:.0f} MB in memory")
    out["recall_all"] = recall(engine, corpus, EVERYONE, np.arange(len(corpus.pending)))
    few_ids = set(store.visible_chunk_ids(FEW))
    few_rows = np.array([i for i, p in enumerate(corpus.pending) if p.chunk_id in few_ids])
    out["recall_few"] = recall(engine, corpus, FEW, few_rows)
    say(f"{name}: recall@10 {out['recall_all']:.3f} (all visible), {out['recall_few']:.3f} (1% principal)")
    out.update(latencies(store, corpus, settings))
    say(f"{name}: dense p95 {out['dense_p95']:.2f} ms, hybrid p95 {out['hybrid_p95']:.2f} ms")
    out.update(update_cost(store, engine, corpus))
    say(
        f"{name}: {UPDATE} vectors replaced, caught up in {out['update_catch_up_s']:.2f}s, saved in"
        f" {out['update_save_s']:.2f}s"
    )
    store.close()
    return out
