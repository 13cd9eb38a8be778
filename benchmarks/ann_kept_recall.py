"""Recall@10 of a kept benchmark index's saved HNSW graph at several query-time ef values, against
exact search over the same synthetic vectors (regenerated from their seed), 100 queries asking for
100 candidates as the dense route does; the graph is opened as a read-only view, not rebuilt.

    python benchmarks/ann_kept_recall.py /work/bench1m/1000000 256 384 512   # a store_bench --keep folder
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from usearch.index import Index

sys.path.insert(0, str(Path(__file__).resolve().parent))
import store_bench  # benchmarks/store_bench.py: the same vectors

from sunlib.store.ann_files import AnnFiles


def main() -> None:
    folder, efs = Path(sys.argv[1]) / "index" / "sunlib.ann", [int(a) for a in sys.argv[2:]] or [256]
    (stamp_file,) = folder.glob("*.json")
    loaded = AnnFiles(folder, stamp_file.stem).load()
    assert loaded is not None, f"no readable graph in {folder}"
    keys = loaded.keys  # sorted chunk rowids: the i-th inserted vector has the i-th rowid
    corpus, queries = store_bench.synthetic_vectors(len(keys), 0), store_bench.synthetic_vectors(100, 1)
    truth = [set(keys[np.argsort(-(corpus @ q))[:10]].tolist()) for q in queries]
    index = Index.restore(str(loaded.graph), view=True)
    for ef in efs:
        index.expansion_search = ef
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
