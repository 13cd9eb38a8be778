"""Store benchmark on synthetic corpora: indexing throughput and query latency.

Builds a vault of synthetic ~120-word notes (one chunk each) per size, indexes
it with sunlib's real indexer, stores random unit vectors (so that embedding
cost is excluded, then measured separately for a real model on a sample), and
times BM25, dense and hybrid queries (query embedding excluded) against a
numpy brute-force floor over the same vectors. Prints the figures and writes
them into docs/benchmarks.md between markers.

    python benchmarks/store_bench.py                # 10k and 100k chunks
    python benchmarks/store_bench.py --sizes 2000   # quick look
    python benchmarks/store_bench.py --bm25-only    # only the visible-statistics BM25 cost

It also measures what BM25 with the statistics of the visible chunks costs (docs/security.md,
"scores"): the same queries through FTS5's ``bm25()`` and through the exact visible-set scoring
(``sunlib_tf`` + store/bm25.py), in the same run, and the ratio.
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
from sunlib.store import Space, SqliteStore, VectorItem, Visibility
from sunlib.text import fts_query

DIM = 384
QUERIES = 200
ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- store_bench:begin -->", "<!-- store_bench:end -->"
BM25_BEGIN, BM25_END = "<!-- bm25_visible:begin -->", "<!-- bm25_visible:end -->"
POOL = 50  # the lexical route's pool at the default limit of 10 (candidates per route)


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
        lib.store.vectors.ensure_space(space)
        vectors = np.random.default_rng(0).standard_normal((chunks, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        pending = lib.store.vectors.pending(space)
        t0 = time.perf_counter()
        for i in range(0, len(pending), 1000):
            batch = pending[i : i + 1000]
            items = [VectorItem(p.chunk_id, p.stamp, p.embed_hash, vectors[j + i]) for j, p in enumerate(batch)]
            lib.store.vectors.upsert(space, items)
        vec_s = time.perf_counter() - t0

        queries = [" ".join(rng.choices(vocab[:3000], k=rng.randint(2, 6))) for _ in range(QUERIES)]
        qvecs = np.random.default_rng(1).standard_normal((QUERIES, DIM)).astype(np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        qmap = dict(zip(queries, qvecs, strict=True))
        engine = SearchEngine(lib.store, lib.settings.search, space, lambda q: qmap[q])
        mem_store = SqliteStore(lib.db_path, dense_engine="numpy")
        mem_engine = SearchEngine(mem_store, lib.settings.search, space, lambda q: qmap[q])
        t0 = time.perf_counter()
        mem_engine.search(SearchRequest(queries[0], mode="dense", limit=10))  # loads the matrix once
        load_s = time.perf_counter() - t0
        lat: dict[str, list[float]] = {m: [] for m in ("bm25", "dense", "hybrid", "dense_mem", "hybrid_mem", "numpy")}
        matrix = vectors.copy()
        for q in queries:
            for label, eng, mode in (
                ("bm25", engine, "bm25"),
                ("dense", engine, "dense"),
                ("hybrid", engine, "hybrid"),
                ("dense_mem", mem_engine, "dense"),
                ("hybrid_mem", mem_engine, "hybrid"),
            ):
                t0 = time.perf_counter()
                eng.search(SearchRequest(q, mode=mode, limit=10, filters=SearchFilters()))
                lat[label].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            scores = matrix @ qmap[q]
            top = np.argpartition(-scores, 100)[:100]
            top[np.argsort(-scores[top])]
            lat["numpy"].append((time.perf_counter() - t0) * 1000)
        bm25 = bm25_cost(lib, queries)
        lib.close()
        mem_store.close()
        per_chunk_store_ms = (text_s + vec_s) / chunks * 1000
        e5_ms = 1000.0 / e5_rate
        return {
            "chunks": chunks,
            "text_index_chunks_per_s": chunks / text_s,
            "vector_store_chunks_per_s": chunks / vec_s,
            "store_share_with_e5": per_chunk_store_ms / (per_chunk_store_ms + e5_ms),
            "matrix_load_s": load_s,
            **{f"{m}_p50": pct(v, 50) for m, v in lat.items()},
            **{f"{m}_p95": pct(v, 95) for m, v in lat.items()},
            **bm25,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bm25_cost(lib: Library, queries: list[str]) -> dict[str, float]:
    """FTS5's bm25() against the visible-statistics scoring on the same queries and chunks.

    Every synthetic chunk is public, so both rank the same rows with the same statistics: the
    difference is the cost of the exact path (a Python call per matching row), which a caller
    who does not see every chunk pays. ``stats_ms`` is the one-off sum of visible row lengths,
    kept until the next write."""
    lexical = lib.store.lexical
    visibility = Visibility.of(["public"])
    rows = lexical.visible_stats(visibility)[0]
    t0 = time.perf_counter()
    tokens = lexical.visible_tokens(visibility)
    stats_ms = (time.perf_counter() - t0) * 1000
    lat: dict[str, list[float]] = {"fts5": [], "visible": []}
    for q in queries:
        match = fts_query(q) or ""
        t0 = time.perf_counter()
        native = lexical.fts5_bm25(match, visibility, POOL)
        lat["fts5"].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        exact = lexical.visible_bm25(match, visibility, POOL, rows, tokens)
        lat["visible"].append((time.perf_counter() - t0) * 1000)
        assert [c for c, _ in exact] == [c for c, _ in native], q  # same statistics: same ranking
    out = {f"bm25_{m}_p{q}": pct(v, q) for m, v in lat.items() for q in (50, 95)}
    return {**out, "bm25_stats_ms": stats_ms, "bm25_ratio_p50": out["bm25_visible_p50"] / out["bm25_fts5_p50"]}


def bm25_only(n: int, rng: random.Random, vocab: list[str]) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix=f"sunlib-bench-bm25-{n}-"))
    try:
        make_vault(tmp / "vault", n, rng, vocab)
        lib = Library.open(tmp / "vault", index_dir=tmp / "index", embedding={"provider": "hash", "dimensions": DIM})
        report = sync_text(lib.store, tmp / "vault", lib.settings.index)
        queries = [" ".join(rng.choices(vocab[:3000], k=rng.randint(2, 6))) for _ in range(QUERIES)]
        result = {"chunks": float(report.chunks_written), **bm25_cost(lib, queries)}
        lib.close()
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def render_bm25(results: list[dict[str, float]]) -> str:
    lines = [
        BM25_BEGIN,
        f"BM25 with visible-set statistics against FTS5's bm25(), ms p50 / p95 over {QUERIES} queries"
        f" (pool {POOL}, 1 thread, same run, same chunks; the rankings are asserted equal):",
        "",
        "| chunks | FTS5 bm25() | visible statistics | ratio (p50) | visible lengths summed once (ms) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {int(r['chunks']):,} | {r['bm25_fts5_p50']:.1f} / {r['bm25_fts5_p95']:.1f} |"
            f" {r['bm25_visible_p50']:.1f} / {r['bm25_visible_p95']:.1f} | {r['bm25_ratio_p50']:.1f}x |"
            f" {r['bm25_stats_ms']:.0f} |"
        )
    lines.append(BM25_END)
    return "\n".join(lines)


def write_section(begin: str, end: str, table: str) -> None:
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Benchmarks\n\n"
    if begin not in text:
        text += "\n" + begin + "\n" + end + "\n"
    head, rest = text.split(begin, 1)
    DOC.write_text(head + table + rest.split(end, 1)[1], encoding="utf-8")


def e5_throughput() -> float:
    """Chunks per second for e5 (1 thread) on real prose: the sample vault's own chunks."""
    from sunlib.config import IndexSettings
    from sunlib.ingest import load_note, make_chunker, walk_vault

    vault = ROOT / "src" / "sunlib" / "sample_vault"
    chunker = make_chunker(IndexSettings())
    texts: list[str] = []
    for vf in walk_vault(vault)[0]:
        note, parsed = load_note(vf, ["public"])
        texts.extend(c.text for c in chunker.chunk(note, parsed))
    texts = texts[:40]
    model = create_embedder(EmbeddingSettings(provider="e5", threads=1))
    model.embed(texts[:2])
    t0 = time.perf_counter()
    model.embed(texts)
    return len(texts) / (time.perf_counter() - t0)


def render(results: list[dict[str, float]], e5_rate: float) -> str:
    lines = [
        BEGIN,
        f"e5 (1 thread) embeds {e5_rate:.1f} sample-vault chunks/s on this machine (the cost a real model adds).",
        "",
        "Index throughput (sunlib's real indexer; vectors inserted without a model, then the model's cost added):",
        "",
        "| chunks | text index chunks/s | vector insert chunks/s | store + FTS share of indexing time with e5 |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {int(r['chunks']):,} | {r['text_index_chunks_per_s']:.0f} | {r['vector_store_chunks_per_s']:.0f} |"
            f" {r['store_share_with_e5'] * 100:.1f}% |"
        )
    lines += [
        "",
        f"Query latency, ms p50 / p95 over {QUERIES} queries, 1 thread, query embedding excluded."
        " `sqlite-vec` = KNN inside SQLite with the visibility constraint; `numpy` = the in-memory dense engine"
        " (same visibility mask, applied before ranking); floor = bare numpy matrix product + top-k, no ACL:",
        "",
        "| chunks | BM25 | dense (sqlite-vec) | hybrid (sqlite-vec) | dense (numpy) | hybrid (numpy) | numpy floor |"
        " dense p95 / floor p95 (sqlite-vec, numpy) | matrix load s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cells = [
            f"{r[m + '_p50']:.1f} / {r[m + '_p95']:.1f}" for m in ("bm25", "dense", "hybrid", "dense_mem", "hybrid_mem")
        ]
        lines.append(
            f"| {int(r['chunks']):,} | " + " | ".join(cells) + f" | {r['numpy_p50']:.2f} / {r['numpy_p95']:.2f} |"
            f" {r['dense_p95'] / r['numpy_p95']:.1f}x, {r['dense_mem_p95'] / r['numpy_p95']:.1f}x |"
            f" {r['matrix_load_s']:.2f} |"
        )
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    ap.add_argument("--bm25-only", action="store_true", help="measure only BM25's visible-statistics cost")
    args = ap.parse_args()
    rng = random.Random(42)
    vocab = vocabulary(rng)
    if args.bm25_only:
        found = [bm25_only(n, rng, vocab) for n in args.sizes]
        print(render_bm25(found))
        if not args.no_write:
            write_section(BM25_BEGIN, BM25_END, render_bm25(found))
        return
    e5_rate = e5_throughput()
    results = []
    for n in args.sizes:
        r = bench_size(n, rng, vocab, e5_rate)
        print({k: round(v, 3) for k, v in r.items()}, flush=True)
        results.append(r)
    table = render(results, e5_rate)
    print(table + "\n" + render_bm25(results))
    if not args.no_write:
        write_section(BEGIN, END, table)
        write_section(BM25_BEGIN, BM25_END, render_bm25(results))


if __name__ == "__main__":
    main()
