"""Turn RGB information integration (zh) into a sunlib vault + QA sets with parts, for `sunlib eval rag`.

    python -m benchmarks.rgb_qa ../shared/data/rgb_zh_int

The corpus is written as a Markdown vault in the same cache as `sunlib eval retrieval`
($SUNLIB_HOME/eval/...), so an index built there (`sunlib eval retrieval ../shared/data/rgb_zh_int
--mode dense`) is reused; a `sunlib.toml` in the vault points at it. Each question becomes one QA case
(type cross_doc) whose `parts` are its answer items: a part is covered when the evidence holds a
passage of the item's positive group or the item's text (any accepted synonym), as the dataset's
SOURCE.md defines it; `gold_groups` are the positive groups (for all_gold_recall@10). In 12 rows
the answer has more items than there are groups, so items and groups cannot be paired: those parts
are covered by the item's text only.

Writes qa/test.jsonl (all 100 questions) and two halves by sorted id, alternating: qa/tune.jsonl
(ids 0, 2, 4, ...: for tuning rules, if one tunes) and qa/report.jsonl (the other half: report on it).
Prints the vault path and the files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.qa_from_beir import beir_vault
from sunlib.evaluate import load_beir


def items(answer: list[Any]) -> list[list[str]]:
    """Each answer item as its accepted strings (an item is a string or a list of synonyms)."""
    return [[str(a)] if not isinstance(a, list) else [str(x) for x in a] for a in answer]


def case(row: dict[str, Any], path_of: dict[str, str]) -> dict[str, Any]:
    accepted = items(row["answer"])
    groups = [[path_of[d] for d in group if d in path_of] for group in row["positive_groups"]]
    if len(groups) != len(accepted):  # 12 rows: more items than groups, so the groups cannot be matched
        groups_of: list[list[str]] = [[] for _ in accepted]  # to items; those parts count by their text only
    else:
        groups_of = groups
    parts = [
        {"part": " / ".join(words), "gold_files": files, "gold_phrases": words}
        for words, files in zip(accepted, groups_of, strict=True)
    ]
    return {
        "id": row["_id"],
        "lang": "zh",
        "type": "cross_doc",
        "question": row["question"],
        "gold_files": sorted({f for g in groups for f in g}),
        "gold_phrases": [w for words in accepted for w in words],
        "gold_groups": groups,
        "parts": parts,
        "answer": "；".join(words[0] for words in accepted),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path)
    args = ap.parse_args()
    root, path_of = beir_vault(load_beir(args.dataset))
    rows = [json.loads(line) for line in (args.dataset / "rag_cases.jsonl").open(encoding="utf-8") if line.strip()]
    cases = sorted((case(r, path_of) for r in rows), key=lambda c: str(c["id"]))
    out = root / "qa"
    out.mkdir(exist_ok=True)
    for name, picked in (("test", cases), ("tune", cases[0::2]), ("report", cases[1::2])):
        with (out / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
            for c in picked:
                fh.write(json.dumps(c, ensure_ascii=False) + "\n")
        print(out / f"{name}.jsonl", len(picked))
    print("vault:", root / "vault")


if __name__ == "__main__":
    main()
