#!/usr/bin/env python3
"""Validate en_vault.jsonl / zh_vault.jsonl against vault_en/ and vault_zh/.

Checks: exact key set, lang/type values, unique ids, gold files exist,
every gold phrase occurs verbatim in at least one of its gold files,
unanswerable items have empty gold_files/gold_phrases. Prints counts.
"""
import json, os, sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = {"id", "lang", "type", "question", "gold_files", "gold_phrases", "answer"}
TYPES = {"fact", "procedure", "comparison", "enumeration", "paraphrase", "cross_doc", "unanswerable"}
SETS = [("en_vault.jsonl", "vault_en"), ("zh_vault.jsonl", "vault_zh")]

errors = []
ids = set()
for jf, vault in SETS:
    vdir = os.path.join(HERE, vault)
    by_type, by_lang, ans_lang = Counter(), Counter(), Counter()
    with open(os.path.join(HERE, jf), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            where = f"{jf}:{n}"
            if not line.strip():
                errors.append(f"{where}: blank line"); continue
            o = json.loads(line)
            if set(o) != KEYS:
                errors.append(f"{where}: keys {sorted(o)}")
            if o["id"] in ids:
                errors.append(f"{where}: duplicate id {o['id']}")
            ids.add(o["id"])
            if o["lang"] not in ("en", "zh"):
                errors.append(f"{where}: bad lang {o['lang']}")
            if o["type"] not in TYPES:
                errors.append(f"{where}: bad type {o['type']}")
            for k in ("question", "answer"):
                if not isinstance(o[k], str) or not o[k].strip():
                    errors.append(f"{where}: empty {k}")
            by_type[o["type"]] += 1
            by_lang[o["lang"]] += 1
            if o["type"] == "unanswerable":
                if o["gold_files"] or o["gold_phrases"]:
                    errors.append(f"{where}: unanswerable with gold data")
                continue
            ans_lang[o["lang"]] += 1
            if not o["gold_files"]:
                errors.append(f"{where}: no gold_files")
            if not 1 <= len(o["gold_phrases"]) <= 3:
                errors.append(f"{where}: {len(o['gold_phrases'])} gold phrases")
            texts = []
            for g in o["gold_files"]:
                p = os.path.join(vdir, g)
                if not os.path.isfile(p):
                    errors.append(f"{where}: missing gold file {g}")
                else:
                    texts.append(open(p, encoding="utf-8").read())
            for ph in o["gold_phrases"]:
                if not any(ph in t for t in texts):
                    errors.append(f"{where}: phrase not found: {ph!r}")
    total = sum(by_type.values())
    print(f"{jf}: {total} questions; by type {dict(sorted(by_type.items()))}; "
          f"by question lang {dict(sorted(by_lang.items()))}; answerable by lang {dict(sorted(ans_lang.items()))}")

if errors:
    print("\n".join(errors)); print(f"FAILED: {len(errors)} problem(s)"); sys.exit(1)
print("OK: all gold files exist and all gold phrases occur verbatim")
