"""HNSW parameter sweep on the store benchmark's synthetic vectors: usearch alone (no sunlib store),
recall@10 against exact search and the graph search's latency, for M / ef_construction / ef.

    python -m benchmarks.ann_sweep 100000     # the figures behind store/usearch.py's EXPANSION_SEARCH
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from usearch.index import Index

from benchmarks import store_bench  # the same synthetic vectors

BUILDS = [(16, 128), (24, 200), (32, 256)]  # (M, ef_construction)
SEARCHES = [128, 256, 512]  # ef
CANDIDATES = [100, 200]  # what the engine asks the graph for (the dense route's pool is 100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vectors", type=int, help="synthetic vectors in the graph")
    n = ap.parse_args().vectors
    corpus, queries = store_bench.synthetic_vectors(n, 0), store_bench.synthetic_vectors(100, 1)
    truth = [set(row.tolist()) for row in np.argsort(-(queries @ corpus.T), axis=1)[:, :10]]
    keys = np.arange(n, dtype=np.uint64)
    for m, ef_add in BUILDS:
        index = Index(ndim=store_bench.DIM, metric="cos", dtype="f32", connectivity=m, expansion_add=ef_add)
        t0 = time.perf_counter()
        for i in range(0, n, 10_000):
            index.add(keys[i : i + 10_000], corpus[i : i + 10_000], threads=1)
        build = time.perf_counter() - t0
        for ef in SEARCHES:
            index.expansion_search = ef  # type: ignore[misc]  # usearch has a setter; mypy sees the property read-only
            for asked in CANDIDATES:
                hits, lat = 0, []
                for q, gold in zip(queries, truth, strict=True):
                    t0 = time.perf_counter()
                    found = index.search(q, asked, threads=1)
                    lat.append((time.perf_counter() - t0) * 1000)
                    hits += len(gold & {int(k) for k in found.keys[:10]})
                print(
                    f"n={n} M={m} ef_construction={ef_add} build={build:.0f}s ef={ef} candidates={asked}"
                    f" recall@10={hits / (10 * len(truth)):.3f}"
                    f" p50={store_bench.pct(lat, 50):.2f}ms p95={store_bench.pct(lat, 95):.2f}ms",
                    flush=True,
                )


if __name__ == "__main__":
    main()
