"""Recall@10 of a kept benchmark index's saved HNSW graph at several query-time ef values, against
exact search over the same synthetic vectors (regenerated from their seed), 100 queries asking for
100 candidates as the dense route does; the graph is opened as a read-only view, not rebuilt.

    python -m benchmarks.ann_kept_recall /work/bench1m/1000000 256 384 512   # a store_bench --keep folder
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from usearch.index import Index

from benchmarks import store_bench  # the same vectors
from sunlib.store.usearch_files import AnnFiles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kept", type=Path, help="a folder that store_bench --keep wrote (one size)")
    ap.add_argument("ef", type=int, nargs="*", default=[256], help="query-time ef values (default: 256)")
    args = ap.parse_args()
    folder, efs = args.kept / "index" / "sunlib.ann", args.ef
    (stamp_file,) = folder.glob("*.json")
    loaded = AnnFiles(folder, stamp_file.stem).load()
    assert loaded is not None, f"no readable graph in {folder}"
    keys = loaded.keys  # sorted chunk rowids: the i-th inserted vector has the i-th rowid
    corpus, queries = store_bench.synthetic_vectors(len(keys), 0), store_bench.synthetic_vectors(100, 1)
    truth = [set(keys[np.argsort(-(corpus @ q))[:10]].tolist()) for q in queries]
    index = Index.restore(str(loaded.graph), view=True)
    assert index is not None, f"not a usearch graph: {loaded.graph}"
    for ef in efs:
        index.expansion_search = ef  # type: ignore[misc]  # usearch has a setter; mypy sees the property read-only
        hits, lat = 0, []
        for q, gold in zip(queries, truth, strict=True):
            t0 = time.perf_counter()
            found = index.search(q, 100, threads=1)
            lat.append((time.perf_counter() - t0) * 1000)
            hits += len(gold & {int(k) for k in found.keys[:10]})
        print(
            f"{len(keys):,} vectors, ef={ef}: recall@10 {hits / (10 * len(truth)):.3f},"
            f" graph search p50 {store_bench.pct(lat, 50):.2f} / p95 {store_bench.pct(lat, 95):.2f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
