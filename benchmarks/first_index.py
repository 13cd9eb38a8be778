"""The first index of the sample vault, as ``make demo`` runs it, against a baseline commit.

    python -m benchmarks.first_index [--baseline 142ac8d] [--rounds 3] [--work DIR]

Each run is one whole ``python -m sunlib index src/sunlib/sample_vault`` process on a new
``SUNLIB_HOME`` and index, as on a new machine: the models' caches are built in the run. The
baseline is a git worktree of ``--baseline`` (default: the last commit before the fast tier and the
onnx e5 engine) at ``WORK/baseline``, run from the same virtualenv with its ``src`` first on
``PYTHONPATH``; both index this checkout's sample vault. The arms alternate, ``--rounds`` times
each. For this code the moment the fast tier is complete ("search ready" on stderr: dense and
hybrid search work) is noted too; the baseline has no such moment, its dense search waits for e5.
The medians and the peak RSS (``wait4``) go to docs/benchmarks.md, with the ratios of the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, SAMPLE_VAULT, write_block


def first_index(src: Path, vault: Path) -> tuple[float, float | None, float]:
    """(wall seconds to the end, seconds to "search ready" or None, peak RSS in MB) of one index run."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SUNLIB_")}
        env |= {"SUNLIB_HOME": f"{tmp}/home", "SUNLIB_INDEX_DIR": f"{tmp}/index", "PYTHONPATH": str(src)}
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "sunlib", "index", str(vault)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        ready = None
        for line in proc.stderr:
            if ready is None and line.startswith("search ready"):
                ready = time.perf_counter() - t0
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise SystemExit(f"sunlib index exited {code} ({src})")
        return wall, ready, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="142ac8d", help="the commit to compare with (default: before issue 30)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "first_index")
    args = ap.parse_args()
    baseline = args.work.resolve() / "baseline"
    if not baseline.is_dir():
        git = ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), args.baseline]
        subprocess.run(git, check=True)
    arms = {"before": baseline / "src", "now": ROOT / "src"}
    load = [os.getloadavg()[0]]
    walls: dict[str, list[float]] = {arm: [] for arm in arms}
    rss: dict[str, list[float]] = {arm: [] for arm in arms}
    ready: list[float] = []
    for r in range(args.rounds):
        for arm, src in arms.items():
            wall, at, mb = first_index(src, SAMPLE_VAULT)  # the same notes for both arms
            walls[arm].append(wall)
            rss[arm].append(mb)
            if arm == "now" and at is not None:
                ready.append(at)
            print(f"round {r + 1} {arm}: {wall:.1f} s" + (f", search ready {at:.1f} s" if at else ""), flush=True)
    load.append(os.getloadavg()[0])
    before, now = statistics.median(walls["before"]), statistics.median(walls["now"])
    rows = [
        f"| | before (`{args.baseline}`) | now | ratio |",
        "|---|---|---|---|",
        f"| `sunlib index`, whole process, to its end (e5 complete) | {before:.1f} s | **{now:.1f} s** "
        f"| {before / now:.1f}x |",
    ]
    if ready:
        at = statistics.median(ready)
        rows.append(
            f"| ... to dense and hybrid search (the fast tier complete) | {before:.1f} s (waits for e5) "
            f"| **{at:.1f} s** | {before / at:.1f}x |"
        )
    rows.append(f"| peak RSS | {max(rss['before']):.0f} MB | {max(rss['now']):.0f} MB | |")
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} with `python -m benchmarks.first_index --baseline {args.baseline}"
            f" --rounds {args.rounds}`: the bundled sample vault, a new `SUNLIB_HOME` for every run (the models'"
            f" caches are built in it, as on a new machine), default settings, median of {args.rounds} alternating"
            f" runs; 1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end.",
            "",
            *rows,
        ]
    )
    write_block(
        "first-index",
        body,
        "The first index of the sample vault (issue 30)",
        "What `make demo`'s first step costs on a new machine, against the code before the fast tier and e5 on"
        " onnxruntime.",
    )
    print(body)


if __name__ == "__main__":
    main()
