"""The agentic loop with a real local LLM: plan, write, verify; the unsupported-claim rate after verification.

    python -m benchmarks.agentic_llm --gguf /work/llm-bench/model/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        --server-python /work/llm-bench/venv/bin/python --limit 10 --report /tmp/agentic_llm.json

Starts `python -m llama_cpp.server` on the GGUF (one thread, 127.0.0.1 only: `serve` of
benchmarks/llm_judge.py), waits for it, then asks a QA set (default: benchmarks/multidoc/sample_vault.jsonl
over the bundled sample vault) through `sunlib`'s real pipeline with the `openai` writer pointed at it:
`[answer] planner = "llm"` (the model's JSON plan, validated; a bad one falls back to the rules) and the
answerability judge off by default (one call fewer per part on a slow CPU). Prints the model, how many
plans the model made and how many fell back, and the metrics of `sunlib eval rag` for the chosen mode;
the target is an unsupported-claim rate after verification (claims left in the delivered answers that
the citation verifier did not support, over all their claims) of at most 0.02. `dropped_claim_rate` is
the share of the model's claims the verifier took out (`[answer] unsupported = "drop"`); `--unsupported
mark` keeps them in the text, so the two rates add up to what the model wrote unsupported.
Not part of the default tests: a 1.5B model on one core writes a few tokens a second.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, SAMPLE_VAULT, free_port
from benchmarks.llm_judge import serve
from sunlib import Library
from sunlib.evaluate import evaluate_rag, load_qa
from sunlib.trace.steps import Step


def plans(rows: list[dict[str, Any]], lib: Library) -> dict[str, int]:
    counts = {"llm": 0, "fallback": 0, "single_shot": 0}
    for row in rows:
        run = lib.store.get_run(row["run_id"], ("public",)) if row.get("run_saved") else None
        steps = run.trace["steps"] if run is not None else []
        plan = next((s for s in steps if s["name"] == Step.RETRIEVAL_PLAN), None)
        if plan is None:
            counts["single_shot"] += 1
        elif plan["details"].get("fallback"):
            counts["fallback"] += 1
        else:
            counts["llm"] += 1
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--server-python", default="python", help="a Python with llama-cpp-python[server]")
    ap.add_argument("--qa", type=Path, default=ROOT / "benchmarks/multidoc/sample_vault.jsonl")
    ap.add_argument("--vault", type=Path, default=SAMPLE_VAULT)
    ap.add_argument("--mode", choices=("single", "agentic"), default="agentic")
    ap.add_argument("--limit", type=int, default=0, help="ask only the first N questions (0: all)")
    ap.add_argument("--judge", choices=("off", "auto"), default="off")
    ap.add_argument("--provider", default="e5", help="embedding provider")
    ap.add_argument("--report", type=Path)
    ap.add_argument("--unsupported", choices=("drop", "mark"), default="drop", help="[answer] unsupported")
    ap.add_argument(
        "--writer", choices=("openai", "extractive"), default="openai", help="extractive: the model only plans"
    )
    ap.add_argument(
        "--seconds", type=float, default=600.0, help="the loop's time budget (agentic_seconds; sunlib: 30 s)"
    )
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"agentic_llm_server_{port}.log"
    model = args.gguf.stem
    proc = serve(Path(args.server_python), args.gguf, port, log, alias=model)
    try:
        cases = load_qa(args.qa)
        cases = cases[: args.limit] if args.limit else cases
        llm = {"base_url": url, "model": model, "timeout_s": 900, "max_retries": 0, "n_threads": 1}
        # A model that reads ~20 prompt tokens a second spends sunlib's default 30 s on its plan alone.
        answer = {
            "writer": args.writer,
            "planner": "llm",
            "judge": args.judge,
            "agentic_seconds": args.seconds,
            "unsupported": args.unsupported,
        }
        with Library.open(args.vault, embedding={"provider": args.provider}, answer=answer, llm=llm) as lib:
            lib.index()
            t0 = time.perf_counter()
            report = evaluate_rag(lib, cases, agentic=args.mode == "agentic", save_runs=True)
            seconds = time.perf_counter() - t0
            planned = plans(report.cases, lib)
        out = {
            "model": model,
            "gguf": args.gguf.name,
            "mode": args.mode,
            "writer": args.writer,
            "questions": len(cases),
            "seconds": round(seconds, 1),
            "plans": planned,
            "metrics": report.metrics,
        }
        print(json.dumps({k: v for k, v in out.items() if k != "metrics"}, ensure_ascii=False))
        keys = ("unsupported_claim_rate", "dropped_claim_rate", "false_refusal_rate", "keyword_coverage")
        for key in (*keys, "all_gold_recall@10", "part_coverage", "rounds"):
            print(f"  {key:<24} {report.metrics.get(key)}")
        if args.report is not None:
            args.report.write_text(json.dumps({**out, "cases": report.cases}, ensure_ascii=False, indent=1), "utf-8")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
