"""Offline ``ask`` latency of this tree against a baseline commit, measured in one run.

    python -m benchmarks.ask_latency [--baseline REF] [--rounds 3]

Both versions ask the bundled QA set's questions (src/sunlib/qa/sample_vault.jsonl) over one copy
of the sample vault (each version indexes it once) with the default settings (e5, extractive
writer), in child processes that alternate (baseline, current, baseline, ...) so that the
machine's noise falls on both. Models are loaded and every question asked once before timing.
The baseline runs from a git worktree of REF (default: 9e861dc, the tree
before the cross-language routes). Writes the table into docs/benchmarks.md between markers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, SAMPLE_VAULT, TEST_QA, write_block

CHILD = r"""
import json, sys, time
from sunlib.library import Library
vault, qa = sys.argv[1], sys.argv[2]
questions = [json.loads(line)["question"] for line in open(qa, encoding="utf-8") if line.strip()]
with Library.open(vault) as lib:
    lib.index()
    for q in questions:  # warm: models loaded, caches filled
        lib.ask(q, save=False)
    times = []
    for q in questions:
        t0 = time.perf_counter()
        lib.ask(q, save=False)
        times.append((time.perf_counter() - t0) * 1000.0)
print(json.dumps(times))
"""


def _run(src: Path, vault: Path, home: Path) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(src), "SUNLIB_HOME": str(home), "OMP_NUM_THREADS": "1"}
    qa = TEST_QA
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(vault), str(qa)], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="9e861dc")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sunlib-latency-"))
    base = work / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), args.baseline], check=True)
    try:
        vault = work / "vault"
        shutil.copytree(SAMPLE_VAULT, vault)
        runs: dict[str, list[float]] = {"baseline": [], "current": []}
        for _ in range(args.rounds):  # each version its own index (the schema may differ)
            runs["baseline"] += _run(base / "src", vault, work / "home-baseline")
            runs["current"] += _run(ROOT / "src", vault, work / "home-current")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    rows = {k: (statistics.median(v), _p(v, 95), len(v)) for k, v in runs.items()}
    ratio = rows["current"][1] / rows["baseline"][1]
    table = "\n".join(
        [
            f"Offline `ask` over the bundled QA set ({rows['current'][2] // args.rounds} questions x {args.rounds} "
            f"rounds, alternating), e5 + extractive writer, 1 thread; baseline = `{args.baseline}`:",
            "",
            "| version | p50 ms | p95 ms |",
            "|---|---|---|",
            *(f"| {k} | {v[0]:.0f} | {v[1]:.0f} |" for k, v in rows.items()),
            "",
            f"p95 current / baseline: **{ratio:.2f}x** (the target: at most 1.5x).",
        ]
    )
    print(table)
    write_block("ask_latency", table, "Offline ask latency", "Command: `python -m benchmarks.ask_latency`.")


if __name__ == "__main__":
    main()
