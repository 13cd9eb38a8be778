"""Store benchmark on synthetic corpora: indexing throughput and query latency.

Builds a vault of synthetic ~120-word notes (one chunk each) per size, indexes
it with sunlib's real indexer, stores synthetic unit vectors (so that embedding
cost is excluded, then measured separately for a real model on a sample; of
intrinsic dimension 32, see ``synthetic_vectors``), and
times BM25, dense and hybrid queries (query embedding excluded) against a
numpy brute-force floor over the same vectors. Prints the figures and writes
them into docs/benchmarks.md between markers.

    python -m benchmarks.store_bench                # 10k and 100k chunks
    python -m benchmarks.store_bench --sizes 2000   # quick look
    python -m benchmarks.store_bench --bm25-only    # only the visible-statistics BM25 cost
    python -m benchmarks.store_bench --sizes 100000 1000000 --ann usearch-i8   # make bench-1m

The HNSW engines (``--ann``, default usearch and usearch-i8) are measured first at each size
(benchmarks/ann_measure.py): build, memory, latency, recall@10 against exact search for every
principal and for one who sees 1% of the notes, an incremental update. Progress lines are
printed with the time as each figure is measured.

It also measures what BM25 with the statistics of the visible chunks costs (docs/security.md,
"scores"): the same queries through FTS5's ``bm25()`` and through the exact visible-set scoring
(``sunlib_tf`` + store/bm25.py), in the same run, and the ratio.

And the postings engine (store/postings.py) beside FTS5 on the same index in the same run: its
build (tokenise every chunk, save), open, arrays and files, BM25 for a caller who sees every
chunk and for one who sees 1% (rankings and scores asserted equal to FTS5's), and the BM25 and
hybrid routes through sunlib's search with either engine (numpy dense engine for both; with
``--reuse``, ``--dense`` names it).

    python -m benchmarks.store_bench --sizes 100000 --keep /tmp/kept   # keep the vault and index
    python -m benchmarks.store_bench --sizes 100000 --reuse /tmp/kept  # the postings figures on it again
    python -m benchmarks.store_bench --sizes 1000000 --reuse /tmp/kept --dense usearch-f16  # with the kept graph
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import cast

import numpy as np

from benchmarks import ann_measure
from benchmarks.common import DOC, ROOT
from sunlib import Library
from sunlib.config import EmbeddingSettings
from sunlib.contracts import SearchFilters
from sunlib.providers import create_embedder
from sunlib.retrieve import SearchEngine, SearchRequest
from sunlib.store import PostingsLexical, Space, SqliteStore, VectorItem, Visibility
from sunlib.store.fts5 import SqliteLexical
from sunlib.store.postings import POSTINGS, postings_folder
from sunlib.store.usearch import CONNECTIVITY, EXPANSION_ADD, EXPANSION_SEARCH
from sunlib.sync.indexing import sync_text
from sunlib.text import fts_query

DIM = 384
QUERIES = 200
RANK, NOISE = 32, 0.3  # synthetic vectors: intrinsic dimension and noise (see synthetic_vectors)
SLOW_QUERIES = 50  # queries through sqlite-vec's brute-force KNN at 500k chunks and more
BEGIN, END = "<!-- store_bench:begin -->", "<!-- store_bench:end -->"
BM25_BEGIN, BM25_END = "<!-- bm25_visible:begin -->", "<!-- bm25_visible:end -->"
ANN_BEGIN, ANN_END = "<!-- ann_bench:begin -->", "<!-- ann_bench:end -->"
POSTINGS_BEGIN, POSTINGS_END = "<!-- postings_bench:begin -->", "<!-- postings_bench:end -->"
SPACE = Space("synthetic", "random-unit", DIM, "structure-v1:500:0.15")
EVERYONE, FEW = Visibility.of(["public"]), Visibility.of(["few"])  # every chunk; 1% of them (make_vault)
ANN_ENGINES = ["usearch", "usearch-i8"]
WARM_UP = 5  # queries run before each timed block of routes
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
        front = "---\nacl: [public, few]\n---\n" if i % 100 == 0 else ""  # "few" sees 1% of the notes
        path.write_text(f"{front}# Note {i}\n\n" + " ".join(sentences) + "\n", encoding="utf-8")


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def synthetic_vectors(n: int, seed: int) -> np.ndarray:
    """Unit vectors of intrinsic dimension ``RANK`` plus isotropic noise: text embeddings live near
    a low-dimensional subspace, which is what makes graph search work; isotropic random 384-d
    vectors (no structure, every neighbour almost as far as any point) are the worst case of
    every ANN index and unlike any embedding model. One fixed basis for corpus and queries."""
    basis = np.random.default_rng(42).standard_normal((RANK, DIM)).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, DIM), dtype=np.float32)
    for i in range(0, n, 100_000):
        m = min(100_000, n - i)
        block = rng.standard_normal((m, RANK)).astype(np.float32) @ basis
        block += NOISE * np.sqrt(RANK) * rng.standard_normal((m, DIM)).astype(np.float32)
        out[i : i + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def say(line: str) -> None:
    """Progress of a long run, as it goes (a 1M run that cannot finish still reports what it got)."""
    print(time.strftime("%H:%M:%S"), line, flush=True)


def workdir(n: int, keep: Path | None) -> Path:
    """The folder of one size's vault and index: a temp folder, or ``keep/<n>`` (kept after the run,
    so that a later measurement can reopen the index instead of building it again)."""
    if keep is None:
        return Path(tempfile.mkdtemp(prefix=f"sunlib-bench-{n}-"))
    folder = keep / str(n)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def bench_size(
    n: int, rng: random.Random, vocab: list[str], e5_rate: float, ann: list[str], keep: Path | None = None
) -> dict[str, float]:
    tmp = workdir(n, keep)
    try:
        vault = tmp / "vault"
        make_vault(vault, n, rng, vocab)
        lib = Library.open(vault, index_dir=tmp / "index", embedding={"provider": "hash", "dimensions": DIM})
        t0 = time.perf_counter()
        report = sync_text(lib.store, vault, lib.settings.index)
        text_s = time.perf_counter() - t0
        chunks = report.chunks_written
        say(f"{n:,}: text indexed in {text_s:.0f}s ({chunks / text_s:.0f} chunks/s)")
        space = SPACE
        lib.store.vectors.ensure_space(space)
        vectors = synthetic_vectors(chunks, seed=0)
        pending = lib.store.vectors.pending(space)
        t0 = time.perf_counter()
        for i in range(0, len(pending), 1000):
            batch = pending[i : i + 1000]
            items = [VectorItem(p.chunk_id, p.stamp, p.embed_hash, vectors[j + i]) for j, p in enumerate(batch)]
            lib.store.vectors.upsert(space, items)
        vec_s = time.perf_counter() - t0
        say(f"{n:,}: vectors inserted in {vec_s:.0f}s ({chunks / vec_s:.0f} chunks/s)")

        queries = [" ".join(rng.choices(vocab[:3000], k=rng.randint(2, 6))) for _ in range(QUERIES)]
        qvecs = synthetic_vectors(QUERIES, seed=1)
        corpus = ann_measure.Corpus(lib.db_path, space, pending, vectors, queries, qvecs)
        result: dict[str, float] = {
            "chunks": chunks,
            "text_index_chunks_per_s": chunks / text_s,
            "vector_store_chunks_per_s": chunks / vec_s,
        }
        result.update(brute_force(lib, corpus))
        result.update(bm25_cost(lib, queries))
        result.update(postings_cost(lib, queries, qvecs))
        for name in ann:  # after BM25 and the exact engines: a 1M build takes long with one thread
            found = ann_measure.measure(name, corpus, lib.settings.search, say)
            result.update({f"{name}:{k}": v for k, v in found.items()})
            result[f"{name}:share_with_e5"] = share(text_s, vec_s + found["build_s"], chunks, e5_rate)
        lib.close()
        result["store_share_with_e5"] = share(text_s, vec_s, chunks, e5_rate)
        return result
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def share(text_s: float, vec_s: float, chunks: int, e5_rate: float) -> float:
    """The store's share of indexing time next to e5: store time per chunk over that plus e5's."""
    per_chunk_store_ms = (text_s + vec_s) / chunks * 1000
    return per_chunk_store_ms / (per_chunk_store_ms + 1000.0 / e5_rate)


def brute_force(lib: Library, corpus: ann_measure.Corpus) -> dict[str, float]:
    """BM25, and the two exact dense engines (sqlite-vec, numpy) against the bare numpy floor."""
    qmap = dict(zip(corpus.queries, corpus.qvecs, strict=True))
    engine = SearchEngine(lib.store, lib.settings.search, corpus.space, lambda q: qmap[q])
    mem_store = SqliteStore(lib.db_path, dense_engine="numpy")
    mem_engine = SearchEngine(mem_store, lib.settings.search, corpus.space, lambda q: qmap[q])
    t0 = time.perf_counter()
    mem_engine.search(SearchRequest(corpus.queries[0], mode="dense", limit=10))  # loads the matrix once
    load_s = time.perf_counter() - t0
    lat: dict[str, list[float]] = {m: [] for m in ("bm25", "dense", "hybrid", "dense_mem", "hybrid_mem", "numpy")}
    slow = SLOW_QUERIES if len(corpus.pending) >= 500_000 else len(corpus.queries)  # sqlite-vec: ~0.4 s each at 1M
    for n, q in enumerate(corpus.queries):
        routes = [("bm25", engine, "bm25"), ("dense_mem", mem_engine, "dense"), ("hybrid_mem", mem_engine, "hybrid")]
        if n < slow:
            routes += [("dense", engine, "dense"), ("hybrid", engine, "hybrid")]
        for label, eng, mode in routes:
            t0 = time.perf_counter()
            eng.search(SearchRequest(q, mode=mode, limit=10, filters=SearchFilters()))
            lat[label].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        scores = corpus.vectors @ qmap[q]
        top = np.argpartition(-scores, 100)[:100]
        top[np.argsort(-scores[top])]
        lat["numpy"].append((time.perf_counter() - t0) * 1000)
    mem_store.close()
    say(f"{len(corpus.pending):,}: BM25 p95 {pct(lat['bm25'], 95):.1f} ms; brute-force engines measured")
    return {
        "matrix_load_s": load_s,
        **{f"{m}_p50": pct(v, 50) for m, v in lat.items()},
        **{f"{m}_p95": pct(v, 95) for m, v in lat.items()},
    }


def bm25_cost(lib: Library, queries: list[str]) -> dict[str, float]:
    """FTS5's bm25() against the visible-statistics scoring on the same queries and chunks.

    Every synthetic chunk is public, so both rank the same rows with the same statistics: the
    difference is the cost of the exact path (a Python call per matching row), which a caller
    who does not see every chunk pays. ``stats_ms`` is the one-off sum of visible row lengths,
    kept until the next write."""
    lexical = cast(SqliteLexical, lib.store.lexical)  # FTS5's engine: its two scorers side by side
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


def postings_cost(lib: Library, queries: list[str], qvecs: np.ndarray, dense: str = "numpy") -> dict[str, float]:
    """The postings engine beside FTS5 on one opened index: build (from scratch: tokenise every
    chunk, build, save), open from its files, size, and BM25 latency for a caller who sees every
    chunk and for one who sees 1% (rankings asserted equal, scores to 1e-9), then the BM25 and
    hybrid routes through sunlib's search with each engine (the ``dense`` engine for both)."""
    shutil.rmtree(postings_folder(lib.db_path) or "", ignore_errors=True)
    stores = {name: SqliteStore(lib.db_path, dense, name) for name in ("fts5", "postings")}
    engine = stores["postings"].lexical
    assert isinstance(engine, PostingsLexical)
    POSTINGS.forget(stores["postings"].db.identity())
    t0 = time.perf_counter()
    engine.refresh()
    out = {"postings_build_s": time.perf_counter() - t0}
    say(f"postings: built in {out['postings_build_s']:.1f}s")
    base, view = engine.postings().view.base, engine.postings().view
    out["postings_arrays_mb"] = sum(a.nbytes for a in (*vars(base).values(), view.rowids, view.lengths)) / 1e6
    out["postings_files_mb"] = sum(p.stat().st_size for p in (postings_folder(lib.db_path) or Path()).iterdir()) / 1e6
    POSTINGS.forget(stores["postings"].db.identity())
    t0 = time.perf_counter()
    engine.postings()
    out["postings_open_s"] = time.perf_counter() - t0
    lat: dict[str, list[float]] = {m: [] for m in ("fts5", "postings", "fts5_few", "postings_few")}
    for q in queries:
        match = fts_query(q) or ""
        for suffix, visibility in (("", EVERYONE), ("_few", FEW)):
            got = {}
            for name, store in stores.items():
                t0 = time.perf_counter()
                got[name] = store.lexical.bm25(match, visibility, POOL)
                lat[name + suffix].append((time.perf_counter() - t0) * 1000)
            assert [c for c, _ in got["fts5"]] == [c for c, _ in got["postings"]], q
            assert all(abs(a - b) < 1e-9 for (_, a), (_, b) in zip(got["fts5"], got["postings"], strict=True)), q
    out.update({f"bm25_{m}_p{p}": pct(v, p) for m, v in lat.items() for p in (50, 95)})
    qmap = dict(zip(queries, qvecs, strict=True))
    routes: dict[str, list[float]] = {f"{mode}_{name}": [] for mode in ("bm25", "hybrid") for name in stores}
    hits: dict[tuple[str, str], list[list[str]]] = {}
    # Each engine's queries run as one block (after a few warm-up queries), as a server runs one
    # engine: interleaved per query, FTS5's page reads disturb the other engine's caches.
    for mode in ("bm25", "hybrid"):
        for name, store in stores.items():
            search = SearchEngine(store, lib.settings.search, SPACE, lambda text: qmap[text])
            for q in queries[:WARM_UP]:
                search.search(SearchRequest(q, mode=mode, limit=10))
            found = hits[mode, name] = []
            for q in queries:
                t0 = time.perf_counter()
                found.append([h.chunk_id for h in search.search(SearchRequest(q, mode=mode, limit=10)).hits])
                routes[f"{mode}_{name}"].append((time.perf_counter() - t0) * 1000)
        assert hits[mode, "fts5"] == hits[mode, "postings"], mode
    out.update({f"route_{m}_p{p}": pct(v, p) for m, v in routes.items() for p in (50, 95)})
    for store in stores.values():
        store.close()
    say(f"postings: BM25 p95 {out['bm25_postings_p95']:.1f} ms (FTS5 {out['bm25_fts5_p95']:.1f} ms)")
    return out


def reuse(folder: Path, sizes: list[int], vocab: list[str], dense: str = "numpy") -> list[dict[str, float]]:
    """The postings figures on the indexes a run kept with ``--keep`` (``folder/<size>``); the hybrid
    route with the ``dense`` engine (an HNSW engine reads the graph the kept run saved)."""
    found = []
    for n in sizes:
        kept = folder / str(n)
        lib = Library.open(kept / "vault", index_dir=kept / "index", embedding={"provider": "hash", "dimensions": DIM})
        rng = random.Random(n)
        queries = [" ".join(rng.choices(vocab[:3000], k=rng.randint(2, 6))) for _ in range(QUERIES)]
        result = {"chunks": float(lib.store.counts().chunks)}
        result.update(postings_cost(lib, queries, synthetic_vectors(QUERIES, seed=1), dense))
        lib.close()
        found.append(result)
    return found


def render_postings(results: list[dict[str, float]], dense: str = "numpy") -> str:
    lines = [
        POSTINGS_BEGIN,
        f"The postings engine beside FTS5 on the same index and queries ({QUERIES}, pool {POOL}, 1 thread, same run;"
        " chunk ids and order asserted equal, scores to 1e-9). BM25 in ms p50 / p95; *all* = a caller who sees every"
        " chunk (FTS5's own bm25()), *1%* = one who sees 1% of the notes (visible statistics); routes through"
        f" sunlib's search (the {dense} dense engine for both):",
        "",
        "| chunks | build s | open s | arrays MB | files MB | BM25 all: FTS5 | postings | BM25 1%: FTS5 |"
        " postings | bm25 route: FTS5 | postings | hybrid route: FTS5 | postings |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    cells = ["bm25_fts5", "bm25_postings", "bm25_fts5_few", "bm25_postings_few"]
    cells += ["route_bm25_fts5", "route_bm25_postings", "route_hybrid_fts5", "route_hybrid_postings"]
    for r in results:
        lines.append(
            f"| {int(r['chunks']):,} | {r['postings_build_s']:.1f} | {r['postings_open_s']:.2f} |"
            f" {r['postings_arrays_mb']:.0f} | {r['postings_files_mb']:.0f} | "
            + " | ".join(f"{r[c + '_p50']:.1f} / {r[c + '_p95']:.1f}" for c in cells)
            + " |"
        )
    lines.append(POSTINGS_END)
    return "\n".join(lines)


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


def render_ann(results: list[dict[str, float]], engines: list[str]) -> str:
    lines = [
        ANN_BEGIN,
        f"HNSW engines (usearch {usearch_version()}, M={CONNECTIVITY}, ef_construction={EXPANSION_ADD},"
        f" ef={EXPANSION_SEARCH} raised to the candidates asked; 1 thread). Latency in ms p50 / p95 over"
        f" {QUERIES} queries through sunlib's search (query embedding excluded); recall@10 against exact search"
        f" over the same visible vectors ({ann_measure.RECALL_QUERIES} queries); update = {ann_measure.UPDATE}"
        " vectors replaced, then caught up (no rebuild) and saved:",
        "",
        "| chunks | engine | build s | memory MB (per 1M) | dense | hybrid | recall@10 all visible | recall@10 1%"
        " principal | update: catch-up s / save s | store share with e5 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for e in engines:
            if f"{e}:build_s" not in r:
                continue
            lines.append(
                f"| {int(r['chunks']):,} | {e} | {r[e + ':build_s']:.0f} |"
                f" {r[e + ':memory_mb']:.0f} ({r[e + ':memory_mb_per_1m']:.0f}) |"
                f" {r[e + ':dense_p50']:.1f} / {r[e + ':dense_p95']:.1f} |"
                f" {r[e + ':hybrid_p50']:.1f} / {r[e + ':hybrid_p95']:.1f} |"
                f" {r[e + ':recall_all']:.3f} | {r[e + ':recall_few']:.3f} |"
                f" {r[e + ':update_catch_up_s']:.2f} / {r[e + ':update_save_s']:.1f} |"
                f" {r[e + ':share_with_e5'] * 100:.1f}% |"
            )
    lines.append(ANN_END)
    return "\n".join(lines)


def usearch_version() -> str:
    import usearch

    return str(usearch.__version__)


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
    ap.add_argument("--ann", nargs="*", default=ANN_ENGINES, help="HNSW engines to measure (none: skip)")
    ap.add_argument("--keep", type=Path, help="keep each size's vault and index in KEEP/<size> (not a temp folder)")
    ap.add_argument("--reuse", type=Path, help="measure the postings engine on the indexes a --keep run left in DIR")
    ap.add_argument("--dense", default="numpy", help="with --reuse: the dense engine of the routes (e.g. usearch-f16)")
    args = ap.parse_args()
    rng = random.Random(42)
    vocab = vocabulary(rng)
    if args.reuse:
        print(render_postings(reuse(args.reuse, args.sizes, vocab, args.dense), args.dense))
        return
    if args.bm25_only:
        found = [bm25_only(n, rng, vocab) for n in args.sizes]
        print(render_bm25(found))
        if not args.no_write:
            write_section(BM25_BEGIN, BM25_END, render_bm25(found))
        return
    e5_rate = e5_throughput()
    results = []
    for n in args.sizes:
        r = bench_size(n, rng, vocab, e5_rate, args.ann, args.keep)
        print({k: round(v, 3) for k, v in r.items()}, flush=True)
        results.append(r)
    table = render(results, e5_rate)
    print(table + "\n" + render_bm25(results) + "\n" + render_postings(results) + "\n" + render_ann(results, args.ann))
    if not args.no_write:
        write_section(BEGIN, END, table)
        write_section(BM25_BEGIN, BM25_END, render_bm25(results))
        write_section(POSTINGS_BEGIN, POSTINGS_END, render_postings(results))
        if args.ann:
            write_section(ANN_BEGIN, ANN_END, render_ann(results, args.ann))


if __name__ == "__main__":
    main()
