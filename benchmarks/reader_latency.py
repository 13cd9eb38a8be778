"""What the reader adds to ``ask``: per question (warm) and to a cold ``sunlib ask`` process, in one run.

    python -m benchmarks.reader_latency [--rounds 3] [--cold 5]

Both arms use this tree and one index of the sample vault (e5, extractive writer, one thread):
``reader`` is the default (the shipped reader reads every kept passage; the score gate decides);
``none`` is ``[answer] reader = "none"`` (the path before the reader). Child processes alternate
arms so the machine's noise falls on both. Warm: the calibration set's questions load the models
and fill no cache the timed ones can hit; then every question of the bundled QA set is timed once,
and the added time is the per-question difference (reader - none), paired by question. Cold: the
whole ``sunlib ask`` process, start to exit. Writes docs/benchmarks.md's "The reader's cost".
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
import time
from pathlib import Path

from benchmarks.common import CALIBRATION_QA, SAMPLE_VAULT, TEST_QA, write_block

ARMS = {
    "reader": {},
    "none": {"SUNLIB_ANSWER__READER": "none", "SUNLIB_ANSWER__GATE": "score"},
}

CHILD = r"""
import json, sys, time
from sunlib.library import Library
vault, qa, warm = sys.argv[1], sys.argv[2], sys.argv[3]
def read(path):
    return [json.loads(line)["question"] for line in open(path, encoding="utf-8") if line.strip()]
questions = read(qa)
with Library.open(vault) as lib:
    for q in read(warm):
        lib.ask(q, save=False)
    times = []
    for q in questions:
        t0 = time.perf_counter()
        lib.ask(q, save=False)
        times.append((time.perf_counter() - t0) * 1000.0)
print(json.dumps(times))
"""


def _env(home: Path, arm: str) -> dict[str, str]:
    return {**os.environ, "SUNLIB_HOME": str(home), "OMP_NUM_THREADS": "1", **ARMS[arm]}


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sunlib-reader-latency-"))
    try:
        vault, home = work / "vault", work / "home"
        shutil.copytree(SAMPLE_VAULT, vault)
        subprocess.run([sys.executable, "-m", "sunlib", "index", str(vault), "-q"], env=_env(home, "none"), check=True)
        warm: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
        cold: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for _ in range(args.rounds):
            for arm in ARMS:
                out = subprocess.run(
                    # the bundled set is timed; the calibration set warms up (no cache the timed questions can hit)
                    [sys.executable, "-c", CHILD, str(vault), str(TEST_QA), str(CALIBRATION_QA)],
                    env=_env(home, arm),
                    check=True,
                    capture_output=True,
                    text=True,
                )
                warm[arm].append(json.loads(out.stdout.strip().splitlines()[-1]))
        question = "What is the SUNLIB_HOME environment variable used for?"
        for _ in range(args.cold):
            for arm in ARMS:
                t0 = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "sunlib", "ask", question, "--vault", str(vault)],
                    env=_env(home, arm),
                    capture_output=True,
                    check=False,
                )
                cold[arm].append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    flat = {arm: [t for run in runs for t in run] for arm, runs in warm.items()}
    c_reader, c_none = statistics.median(cold["reader"]), statistics.median(cold["none"])
    added = [a - b for ra, rb in zip(warm["reader"], warm["none"], strict=True) for a, b in zip(ra, rb, strict=True)]
    lines = [
        f"Sample vault, {len(flat['none']) // args.rounds} questions x {args.rounds} rounds, one thread, "
        f"`python -m benchmarks.reader_latency --rounds {args.rounds} --cold {args.cold}`:",
        "",
        f"| | ask p50 | ask p95 | cold `sunlib ask` (median of {args.cold}) |",
        "|---|---|---|---|",
    ]
    for arm in ARMS:
        lines.append(
            f"| {arm} | {statistics.median(flat[arm]):.0f} ms | {_p(flat[arm], 95):.0f} ms "
            f"| {statistics.median(cold[arm]):.2f} s |"
        )
    lines += [
        "",
        f"Added by the reader, per question (paired): p50 {statistics.median(added):.0f} ms, "
        f"p95 {_p(added, 95):.0f} ms; cold start {c_reader - c_none:+.2f} s (ratio {c_reader / c_none:.2f}).",
    ]
    text = "\n".join(lines)
    print(text)
    write_block("reader-latency", text, "The reader's cost")


if __name__ == "__main__":
    main()
