"""Refusal against false refusal for each reader threshold, from ``sunlib eval rag --json`` runs.

    SUNLIB_ANSWER__READER_THRESHOLD=0 sunlib eval rag SET --vault V --json --no-save > run.json
    python -m benchmarks.reader_sweep run.json [more.json ...]

Each run must use the reader gate with threshold 0 (the reader never refuses), so every
question's ``gate_score`` is the reader's best probability over its kept passages. For each
threshold the table counts a question refused when its probability is below it or another reason
refused it; the ``+checks`` columns add the name and answer-type checks (``reader_checks``).
This is a tuning tool: run it on tuning sets only, never on the sets docs/evaluation.md reports.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def cases(paths: list[Path]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in paths:
        run = json.loads(path.read_text(encoding="utf-8"))
        out += run["cases"]
    return out


def refused(case: dict[str, Any], threshold: float, checks: bool) -> bool:
    others = [
        c for c in case.get("refusals", []) if c not in ("reader_unanswerable", "missing_name", "missing_quantity")
    ]
    if others:
        return True
    score = case.get("gate_score")
    if score is not None and score < threshold:
        return True
    return checks and not case.get("checks_passed", True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    args = ap.parse_args()
    rows = cases(args.runs)
    ans = [c for c in rows if c["answerable"]]
    unans = [c for c in rows if not c["answerable"]]
    print(f"{len(ans)} answerable, {len(unans)} unanswerable")
    print("threshold  refusal  false_refusal  bal_acc | +checks: refusal  false_refusal  bal_acc")
    for t in [x / 100 for x in range(5, 100, 5)]:
        line = [f"{t:9.2f}"]
        for checks in (False, True):
            r = sum(refused(c, t, checks) for c in unans) / max(1, len(unans))
            f = sum(refused(c, t, checks) for c in ans) / max(1, len(ans))
            line.append(f"{r:8.3f} {f:14.3f} {(r + 1 - f) / 2:8.3f}")
        print("  ".join(line[:2]) + " | " + line[2])


if __name__ == "__main__":
    main()
