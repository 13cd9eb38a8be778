"""Query latency of one Qdrant shard, in-process (qdrant-edge), on a synthetic corpus shaped like sunlib's.

One shard as the Qdrant backend lays it out (docs/scale-out.md): a 384-d cosine vector and a BM25 sparse
vector with the IDF modifier per point, an `acl` keyword payload with its index. 99% of the points are
public, 1% belong to `ops`; queries run unfiltered (public + ops), as `public`, and as `ops` alone (a
principal who may see 1% of the chunks). Dense recall@10 is printed against exact search under the same
filter; on random unit vectors (the neighbours of a point are near-ties in 384-d) it says little about HNSW
on real embeddings. The sparse vectors are 80 distinct Zipf-distributed tokens per point (a ~120-word chunk).

    python -m benchmarks.qdrant_bench --chunks 50000 --queries 200

Prints a Markdown table; timings exclude the query embedding and sunlib's own work above the store.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid

import numpy as np
import qdrant_edge as qe

DIM = 384
VOCAB = 50_000
TOKENS = 80  # distinct tokens per chunk


def build(root: str, n: int, rng: np.random.Generator) -> tuple[qe.EdgeShard, np.ndarray, np.ndarray]:
    config = qe.EdgeConfig(
        vectors={"dense": qe.EdgeVectorParams(DIM, qe.Distance.Cosine)},
        sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        max_search_threads=1,
    )
    shard = qe.EdgeShard.create(root, config)
    shard.update(qe.UpdateOperation.create_field_index("acl", qe.PayloadSchemaType.Keyword))
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ops = rng.random(n) < 0.01
    zipf = 1.0 / np.arange(1, VOCAB + 1)
    zipf /= zipf.sum()
    draws = rng.choice(VOCAB, size=(n, TOKENS), p=zipf)  # one draw for all: choice with p is O(VOCAB) a call
    for start in range(0, n, 1000):
        points = []
        for i in range(start, min(n, start + 1000)):
            terms = np.unique(draws[i])
            weights = rng.uniform(0.5, 1.5, size=len(terms))
            vector = {"dense": vectors[i].tolist(), "bm25": qe.SparseVector(terms.tolist(), weights.tolist())}
            points.append(qe.Point(str(uuid.UUID(int=i)), vector, {"acl": ["ops"] if ops[i] else ["public"]}))
        shard.update(qe.UpdateOperation.upsert_points(points))
    shard.optimize()  # build HNSW and the sparse index as a server's optimizer would
    return shard, vectors, ops


def acl(names: list[str]) -> qe.Filter:
    return qe.Filter(must=[qe.FieldCondition("acl", match=qe.MatchAny(names))])


def timed(shard: qe.EdgeShard, request: qe.QueryRequest) -> tuple[float, list[int]]:
    t0 = time.perf_counter()
    found = shard.query(request)
    return (time.perf_counter() - t0) * 1000.0, [uuid.UUID(str(p.id)).int for p in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        shard, vectors, ops = build(root + "/shard", args.chunks, rng)
        built = time.perf_counter() - t0
        rows: list[tuple[str, list[float], float | None]] = []
        for label, names, mask in (
            ("dense, everyone", ["public", "ops"], np.ones(len(ops), bool)),
            ("dense, public (99%)", ["public"], ~ops),
            ("dense, ops (1%)", ["ops"], ops),
        ):
            times, recalls = [], []
            for _ in range(args.queries):
                q = vectors[rng.integers(len(vectors))] + rng.standard_normal(DIM).astype(np.float32) / np.sqrt(
                    DIM
                )  # a near copy
                q /= np.linalg.norm(q)
                ms, ids = timed(
                    shard,
                    qe.QueryRequest(limit=10, query=qe.Query.Nearest(q.tolist(), using="dense"), filter=acl(names)),
                )
                scores = np.where(mask, vectors @ q, -np.inf)
                exact = set(np.argsort(-scores)[:10].tolist())
                times.append(ms)
                recalls.append(len(exact & set(ids)) / 10)
            rows.append((label, times, statistics.mean(recalls)))
        for label, names, idf in (
            ("BM25, everyone (collection IDF)", ["public", "ops"], None),
            (
                "BM25, public (IDF over its corpus)",
                ["public"],
                qe.SearchParams(idf=qe.IdfParams(corpus=acl(["public"]))),
            ),
        ):
            times = []
            for _ in range(args.queries):
                terms = np.unique(rng.integers(0, 2000, size=6))
                q = qe.SparseVector(terms.tolist(), [1.0] * len(terms))
                ms, _ = timed(
                    shard,
                    qe.QueryRequest(limit=100, query=qe.Query.Nearest(q, using="bm25"), filter=acl(names), params=idf),
                )
                times.append(ms)
            rows.append((label, times, None))
        shard.close()
    print(
        f"qdrant-edge 0.9.0, one shard, {args.chunks:,} chunks, {args.queries} queries, 1 search thread; "
        f"build incl. HNSW {built:.0f} s\n"
    )
    print("| query | p50 ms | p95 ms | recall@10 |\n|---|---|---|---|")
    for label, times, recall in rows:
        q = statistics.quantiles(times, n=20)
        print(
            f"| {label} | {statistics.median(times):.2f} | {q[18]:.2f} | {'' if recall is None else f'{recall:.3f}'} |"
        )


if __name__ == "__main__":
    main()
