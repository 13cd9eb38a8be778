"""Store benchmark on synthetic corpora: indexing throughput and query latency.

Builds a vault of synthetic ~120-word notes (one chunk each) per size, indexes
it with sunlib's real indexer, stores random unit vectors (so that embedding
cost is excluded, then measured separately for a real model on a sample), and
times BM25, dense and hybrid queries (query embedding excluded) against a
numpy brute-force floor over the same vectors. Prints the figures and writes
them into docs/benchmarks.md between markers.

    python benchmarks/store_bench.py                # 10k and 100k chunks
    python benchmarks/store_bench.py --sizes 2000   # quick look
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from sunlib import Library
from sunlib.config import EmbeddingSettings
from sunlib.contracts import SearchFilters
from sunlib.indexing import sync_text
from sunlib.providers import create_embedder
from sunlib.retrieve import SearchEngine, SearchRequest
from sunlib.store import Space

DIM = 384
QUERIES = 200
ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- store_bench:begin -->", "<!-- store_bench:end -->"


def vocabulary(rng: random.Random, n: int = 20000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(n)]


def make_vault(root: Path, n: int, rng: random.Random, vocab: list[str]) -> None:
    weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf-like word frequencies
    for i in range(n):
        words = rng.choices(vocab, weights=weights, k=120)
        sentences = [" ".join(words[j : j + 12]).capitalize() + "." for j in range(0, 120, 12)]
        path = root / f"f{i // 1000:04d}" / f"n{i:07d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {i}\n\n" + " ".join(sentences) + "\n", encoding="utf-8")


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def bench_size(n: int, rng: random.Random, vocab: list[str], e5_rate: float) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix=f"sunlib-bench-{n}-"))
    try:
        vault = tmp / "vault"
        make_vault(vault, n, rng, vocab)
        lib = Library.open(vault, index_dir=tmp / "index", embedding={"provider": "hash", "dimensions": DIM})
        t0 = time.perf_counter()
        report = sync_text(lib.store, vault, lib.settings.index)
        text_s = time.perf_counter() - t0
        chunks = report.chunks_written
        space = Space("synthetic", "random-unit", DIM, "structure-v1:500:0.15")
        lib.store.ensure_space(space)
        vectors = np.random.default_rng(0).standard_normal((chunks, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        pending = lib.store.pending_chunks(space)
        t0 = time.perf_counter()
        for i in range(0, len(pending), 1000):
            batch = pending[i : i + 1000]
            lib.store.put_vectors(space, [(p.rowid, p.embed_hash, vectors[j + i]) for j, p in enumerate(batch)])
        vec_s = time.perf_counter() - t0

        queries = [" ".join(rng.choices(vocab[:3000], k=rng.randint(2, 6))) for _ in range(QUERIES)]
        qvecs = np.random.default_rng(1).standard_normal((QUERIES, DIM)).astype(np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        qmap = dict(zip(queries, qvecs, strict=True))
        engine = SearchEngine(lib.store, lib.settings.search, space, lambda q: qmap[q])
        lat: dict[str, list[float]] = {"bm25": [], "dense": [], "hybrid": [], "numpy": []}
        matrix = vectors.copy()
        for q in queries:
            for mode in ("bm25", "dense", "hybrid"):
                t0 = time.perf_counter()
                engine.search(SearchRequest(q, mode=mode, limit=10, filters=SearchFilters()))
                lat[mode].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            scores = matrix @ qmap[q]
            top = np.argpartition(-scores, 100)[:100]
            top[np.argsort(-scores[top])]
            lat["numpy"].append((time.perf_counter() - t0) * 1000)
        lib.close()
        per_chunk_store_ms = (text_s + vec_s) / chunks * 1000
        e5_ms = 1000.0 / e5_rate
        return {
            "chunks": chunks,
            "text_index_chunks_per_s": chunks / text_s,
            "vector_store_chunks_per_s": chunks / vec_s,
            "store_share_with_e5": per_chunk_store_ms / (per_chunk_store_ms + e5_ms),
            **{f"{m}_p50": pct(v, 50) for m, v in lat.items()},
            **{f"{m}_p95": pct(v, 95) for m, v in lat.items()},
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def e5_throughput(sample: int = 48) -> float:
    rng = random.Random(3)
    vocab = vocabulary(rng, 3000)
    texts = [" ".join(rng.choices(vocab, k=120)) for _ in range(sample)]
    model = create_embedder(EmbeddingSettings(provider="e5", threads=1))
    model.embed(texts[:4])
    t0 = time.perf_counter()
    model.embed(texts)
    return sample / (time.perf_counter() - t0)


def render(results: list[dict[str, float]], e5_rate: float) -> str:
    lines = [
        BEGIN,
        f"e5 (1 thread) embeds {e5_rate:.1f} synthetic 120-word chunks/s on this machine.",
        "",
        "| chunks | text index chunks/s | vector insert chunks/s | store share of indexing with e5 |"
        " BM25 p50/p95 ms | dense p50/p95 ms | hybrid p50/p95 ms | numpy floor p50/p95 ms | dense p95 / floor p95 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {int(r['chunks']):,} | {r['text_index_chunks_per_s']:.0f} | {r['vector_store_chunks_per_s']:.0f} |"
            f" {r['store_share_with_e5'] * 100:.1f}% | {r['bm25_p50']:.1f} / {r['bm25_p95']:.1f} |"
            f" {r['dense_p50']:.1f} / {r['dense_p95']:.1f} | {r['hybrid_p50']:.1f} / {r['hybrid_p95']:.1f} |"
            f" {r['numpy_p50']:.2f} / {r['numpy_p95']:.2f} | {r['dense_p95'] / r['numpy_p95']:.1f}x |"
        )
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    args = ap.parse_args()
    rng = random.Random(42)
    vocab = vocabulary(rng)
    e5_rate = e5_throughput()
    results = []
    for n in args.sizes:
        r = bench_size(n, rng, vocab, e5_rate)
        print({k: round(v, 3) for k, v in r.items()}, flush=True)
        results.append(r)
    table = render(results, e5_rate)
    print(table)
    if not args.no_write:
        text = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Benchmarks\n\n" + BEGIN + "\n" + END + "\n"
        if BEGIN not in text:
            text += "\n" + BEGIN + "\n" + END + "\n"
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        DOC.write_text(head + table + tail, encoding="utf-8")


if __name__ == "__main__":
    main()
