"""A Chinese retrieval tuning split from DRCD (BEIR format, deterministic): the questions of DRCD's dev
set, each with its own paragraph as the gold, over the 2,000 dev and test paragraphs.

    python -m benchmarks.drcd_retrieval ../shared/data/drcd OUT [--questions 800]
    SUNLIB_SEARCH__FAST_WEIGHT=0.1 sunlib eval retrieval OUT --split dev --mode hybrid --fast-only --json

No report set uses DRCD for retrieval, so it can tune what RGB (Chinese) reports, such as
``[search] fast_weight`` (docs/benchmarks.md, "Two-pass indexing: what the fast tier ranks"). The
fast tier itself was fitted on these questions and paragraphs (``tools/static/learn.py``), which can
only flatter it here. The questions are a fixed sample (seed 0).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from tools.reader import data as pairs


def write(drcd: Path, out: Path, questions: int = 800) -> None:
    rows = [d for name in ("corpus_dev", "corpus_test") for d in pairs.rows(drcd / f"{name}.jsonl")]
    qs = pairs.rows(drcd / "rc_dev.jsonl")
    random.Random(0).shuffle(qs)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for d in rows:
            f.write(
                json.dumps({"_id": d["_id"], "title": d.get("title", ""), "text": d["text"]}, ensure_ascii=False) + "\n"
            )
    with (
        (out / "queries.jsonl").open("w", encoding="utf-8") as f,
        (out / "qrels/dev.tsv").open("w", encoding="utf-8") as q,
    ):
        q.write("query-id\tcorpus-id\tscore\n")
        for x in qs[:questions]:
            f.write(json.dumps({"_id": x["_id"], "text": x["question"]}, ensure_ascii=False) + "\n")
            q.write(f"{x['_id']}\t{x['doc_id']}\t1\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drcd", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--questions", type=int, default=800)
    args = ap.parse_args()
    write(args.drcd, args.out, args.questions)


if __name__ == "__main__":
    main()
