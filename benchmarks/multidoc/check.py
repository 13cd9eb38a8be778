#!/usr/bin/env python3
"""Validate the multi-document question sets against the vaults they were written from.

Usage:
    python3 benchmarks/multidoc/check.py SAMPLE_VAULT_ROOT FASTAPI_DOCS_ROOT

Checks, for every line of sample_vault.jsonl and fastapi_docs.jsonl (next to this file):
the line is a JSON object with the required fields and allowed values; ids are unique
across both files; every gold file exists under the vault root; every gold phrase is an
exact substring of at least one gold file; every part names an existing file and a phrase
that is an exact substring of that file (or both null, for an uncovered part); follow-ups
point at an earlier id in the same file; per-type rules (unanswerable questions have at
least one uncovered and one covered part, every non-follow-up question cites two or more
files; a follow-up needs at least one), and the minimum size of each set (24 and
16). Prints the counts per vault, type and language and exits with 1 on any failure.
"""

import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
TYPES = {"comparison", "cross_doc", "multi_part", "follow_up", "unanswerable"}
LANGS = {"en", "zh"}
REQUIRED = ["id", "lang", "type", "question", "gold_files", "gold_phrases", "parts", "answer"]


def check_set(jsonl: Path, root: Path, seen_ids: set, errors: list) -> Counter:
    counts = Counter()
    order = []
    types, followed = {}, set()
    followers = set()
    cache = {}

    def text(rel):
        if rel not in cache:
            p = root / rel
            cache[rel] = p.read_text(encoding="utf-8") if p.is_file() else None
        return cache[rel]

    for n, line in enumerate(jsonl.read_text(encoding="utf-8").splitlines(), 1):
        where = f"{jsonl.name}:{n}"
        if not line.strip():
            errors.append(f"{where}: empty line")
            continue
        try:
            q = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append(f"{where}: not JSON ({e})")
            continue
        missing = [k for k in REQUIRED if k not in q]
        if missing:
            errors.append(f"{where}: missing fields {missing}")
            continue
        qid = q["id"]
        where = f"{jsonl.name}:{n} ({qid})"
        if qid in seen_ids:
            errors.append(f"{where}: duplicate id")
        seen_ids.add(qid)
        if q["lang"] not in LANGS:
            errors.append(f"{where}: bad lang {q['lang']!r}")
        if q["type"] not in TYPES:
            errors.append(f"{where}: bad type {q['type']!r}")
        if not q["question"].strip() or not q["answer"].strip():
            errors.append(f"{where}: empty question or answer")
        gold = q["gold_files"]
        for f in gold:
            if text(f) is None:
                errors.append(f"{where}: gold file not found: {f}")
        for ph in q["gold_phrases"]:
            if not any(text(f) and ph in text(f) for f in gold):
                errors.append(f"{where}: gold phrase not in any gold file: {ph!r}")
        covered = uncovered = 0
        for part in q["parts"]:
            gf, gp = part.get("gold_file"), part.get("gold_phrase")
            if not part.get("part"):
                errors.append(f"{where}: part without a name")
            if gf is None and gp is None:
                uncovered += 1
                continue
            covered += 1
            if gf not in gold:
                errors.append(f"{where}: part file {gf} is not among gold_files")
            t = text(gf) if gf else None
            if t is None:
                errors.append(f"{where}: part file not found: {gf}")
            elif not gp or gp not in t:
                errors.append(f"{where}: part phrase not in {gf}: {gp!r}")
        if q["type"] == "follow_up":
            if "follows" in q:
                followers.add(qid)
                if q["follows"] not in order:
                    errors.append(f"{where}: follows {q['follows']!r}, not an earlier id")
        elif "follows" in q:
            errors.append(f"{where}: 'follows' on a non-follow-up question")
        if q["type"] == "unanswerable":
            if uncovered < 1 or covered < 1:
                errors.append(f"{where}: unanswerable needs a covered and an uncovered part")
        elif uncovered:
            errors.append(f"{where}: uncovered part in an answerable question")
        if q["type"] != "follow_up" and len(set(gold)) < 2:
            errors.append(f"{where}: needs two or more gold files")
        if q["type"] == "follow_up" and not gold:
            errors.append(f"{where}: follow-up without a gold file")
        if q["type"] == "multi_part" and not 2 <= len(q["parts"]) <= 4:
            errors.append(f"{where}: multi_part needs 2-4 parts")
        if not q["parts"]:
            errors.append(f"{where}: no parts")
        order.append(qid)
        types[qid] = q["type"]
        if "follows" in q:
            followed.add(q["follows"])
        counts[(q["type"], q["lang"])] += 1
    for qid, t in types.items():
        if t == "follow_up" and qid not in followed and qid not in followers:
            errors.append(f"{jsonl.name} ({qid}): follow_up that neither follows nor is followed")
    return counts


def main(argv, here=HERE, minimums=(24, 16)):
    """Check ``here``'s two sets; ``minimums``: the least questions of each (benchmarks/multidoc_tune
    calls this with its own folder and sizes)."""
    if len(argv) != 3:
        print(__doc__)
        return 2
    sets = [
        (here / "sample_vault.jsonl", Path(argv[1]), minimums[0]),
        (here / "fastapi_docs.jsonl", Path(argv[2]), minimums[1]),
    ]
    errors, seen = [], set()
    for jsonl, root, minimum in sets:
        if not root.is_dir():
            errors.append(f"vault root not found: {root}")
            continue
        counts = check_set(jsonl, root, seen, errors)
        total = sum(counts.values())
        if total < minimum:
            errors.append(f"{jsonl.name}: {total} questions, fewer than {minimum}")
        print(f"{jsonl.name}: {total} questions")
        for t in sorted(TYPES):
            row = {lang: counts[(t, lang)] for lang in sorted(LANGS)}
            print(f"  {t:13s} " + "  ".join(f"{k}={v}" for k, v in row.items()))
        print(
            "  total        "
            + "  ".join(f"{lang}={sum(v for (_t, lg), v in counts.items() if lg == lang)}" for lang in sorted(LANGS))
        )
    for e in errors:
        print("FAIL", e)
    print("OK" if not errors else f"{len(errors)} failure(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
