"""Render `sunlib eval retrieval` runs (JSON lines from retrieval_evals.sh) as a Markdown table.

    python -m benchmarks.eval_table RUNS.jsonl [RUNS2.jsonl ...] > table.md

Each row keeps the exact command that produced it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

KEYS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "latency_ms_p50", "latency_ms_p95")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", help="JSON-lines files of retrieval_evals.sh")
    paths = ap.parse_args().runs
    print("| command | nDCG@10 | R@10 | R@100 | MRR@10 | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|")
    seen: dict[str, dict[str, float]] = {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                run = json.loads(line)
                seen[run["command"]] = run  # the latest run of a command wins
    for command, run in seen.items():
        cells = " | ".join(
            f"{run[k]:.3f}" if k.startswith(("ndcg", "recall", "mrr")) else f"{run[k]:.0f}" for k in KEYS
        )
        print(f"| `{command}` | {cells} |")


if __name__ == "__main__":
    main()
