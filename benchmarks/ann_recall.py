"""Recall@10 and knn latency of the HNSW engines through their graph (exact path off), on the
store benchmark's synthetic corpus: a quick look at a size where the full store benchmark is too long.

    python -m benchmarks.ann_recall 20000 usearch usearch-f16
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import store_bench  # the same vault and vectors
from sunlib import Library
from sunlib.store import Space, SqliteStore, UsearchVectors, VectorItem, Visibility
from sunlib.sync.indexing import sync_text

DTYPES = {"usearch": "f32", "usearch-f16": "f16", "usearch-i8": "i8"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chunks", type=int, help="synthetic chunks (one per note)")
    ap.add_argument("engines", nargs="*", default=["usearch"], help="usearch, usearch-f16, usearch-i8")
    args = ap.parse_args()
    n, engines = args.chunks, args.engines
    rng = random.Random(42)
    vocab = store_bench.vocabulary(rng)
    tmp = Path(tempfile.mkdtemp(prefix="sunlib-ann-recall-"))
    store_bench.make_vault(tmp / "vault", n, rng, vocab)
    lib = Library.open(tmp / "vault", index_dir=tmp / "index", embedding={"provider": "hash", "dimensions": 384})
    sync_text(lib.store, tmp / "vault", lib.settings.index)
    space = Space("synthetic", "random-unit", store_bench.DIM, "recall")
    lib.store.vectors.ensure_space(space)
    pending = lib.store.vectors.pending(space)
    vectors, queries = store_bench.synthetic_vectors(len(pending), 0), store_bench.synthetic_vectors(100, 1)
    for i in range(0, len(pending), 1000):
        batch = pending[i : i + 1000]
        lib.store.vectors.upsert(
            space, [VectorItem(p.chunk_id, p.stamp, p.embed_hash, vectors[i + j]) for j, p in enumerate(batch)]
        )
    position = {p.chunk_id: i for i, p in enumerate(pending)}
    true = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    everyone = Visibility(("public",))
    for name in engines:
        store = SqliteStore(lib.db_path)
        engine = UsearchVectors(store.db, store, dtype=DTYPES[name], exact_rows=0)
        t0 = time.perf_counter()
        engine.refresh(space)
        build_s = time.perf_counter() - t0
        lat, hits = [], 0
        for j, q in enumerate(queries):
            t0 = time.perf_counter()
            found = engine.knn(space, q, everyone, 10)
            lat.append((time.perf_counter() - t0) * 1000)
            hits += len({position[c] for c, _ in found} & set(true[j].tolist()))
        print(
            f"| {name} | {build_s:.0f} | {hits / (10 * len(queries)):.3f} |"
            f" {np.percentile(lat, 50):.2f} / {np.percentile(lat, 95):.2f} |",
            flush=True,
        )
        store.close()
    lib.close()


if __name__ == "__main__":
    main()
