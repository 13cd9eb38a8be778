#!/usr/bin/env python3
"""Validate the held-out question sets en_vault.jsonl and zh_vault.jsonl (stdlib only).

Checks: exact keys, valid lang/type, unique ids across both files, gold files exist,
gold files are not in used_*.txt, every gold phrase is a verbatim substring of one of
its gold files, answerable items have 1-3 phrases and >=1 gold file (exactly 2 for
cross_doc), unanswerable items have empty lists, per-file counts and type coverage.
Exit code 0 = pass, 1 = fail.
"""
import json
import os
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = "/work/shared/data/fastapi_docs"

KEYS = {"id", "lang", "type", "question", "gold_files", "gold_phrases", "answer"}
LANGS = {"en", "zh"}
ANSWERABLE_TYPES = {"fact", "procedure", "comparison", "enumeration", "paraphrase", "cross_doc"}
TYPES = ANSWERABLE_TYPES | {"unanswerable"}

# file -> (docs folder, used list, total, answerable, unanswerable, native lang, cross-lingual answerable)
SPECS = {
    "en_vault.jsonl": ("en", "used_en.txt", 45, 32, 13, "en", 10),
    "zh_vault.jsonl": ("zh", "used_zh.txt", 35, 25, 10, "zh", 8),
}

errors = []


def err(msg):
    errors.append(msg)


def load_used(name):
    path = os.path.join(HERE, name)
    with open(path, encoding="utf-8") as f:
        return {line.strip() for line in f if line.strip()}


def read_doc(folder, rel, cache):
    key = (folder, rel)
    if key not in cache:
        path = os.path.join(DATA, folder, rel)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                cache[key] = f.read()
        else:
            cache[key] = None
    return cache[key]


def check_file(fname, spec, seen_ids, cache):
    folder, used_name, n_total, n_ans, n_unans, native, n_cross = spec
    used = load_used(used_name)
    path = os.path.join(HERE, fname)
    if not os.path.isfile(path):
        err(f"{fname}: missing")
        return
    items = []
    with open(path, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                err(f"{fname}:{ln}: blank line")
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                err(f"{fname}:{ln}: invalid JSON ({e})")
                continue
            if not isinstance(obj, dict):
                err(f"{fname}:{ln}: not a JSON object")
                continue
            items.append((ln, obj))

    type_counts = Counter()
    n_a = n_u = n_x = 0
    for ln, o in items:
        where = f"{fname}:{ln}"
        keys = set(o.keys())
        if keys != KEYS:
            err(f"{where}: keys {sorted(keys)} != {sorted(KEYS)}")
            continue
        qid = o["id"]
        where = f"{fname}:{ln} ({qid})"
        if not isinstance(qid, str) or not qid:
            err(f"{where}: bad id")
        elif qid in seen_ids:
            err(f"{where}: duplicate id (also in {seen_ids[qid]})")
        else:
            seen_ids[qid] = fname
        if o["lang"] not in LANGS:
            err(f"{where}: bad lang {o['lang']!r}")
        if o["type"] not in TYPES:
            err(f"{where}: bad type {o['type']!r}")
        for k in ("question", "answer"):
            if not isinstance(o[k], str) or not o[k].strip():
                err(f"{where}: empty {k}")
        gf, gp = o["gold_files"], o["gold_phrases"]
        if not isinstance(gf, list) or not all(isinstance(x, str) for x in gf):
            err(f"{where}: gold_files must be a list of str")
            continue
        if not isinstance(gp, list) or not all(isinstance(x, str) for x in gp):
            err(f"{where}: gold_phrases must be a list of str")
            continue
        type_counts[o["type"]] += 1

        if o["type"] == "unanswerable":
            n_u += 1
            if gf or gp:
                err(f"{where}: unanswerable must have empty gold_files and gold_phrases")
            continue

        n_a += 1
        if o["lang"] != native:
            n_x += 1
        if len(gf) < 1:
            err(f"{where}: answerable needs >=1 gold file")
        if o["type"] == "cross_doc" and len(set(gf)) != 2:
            err(f"{where}: cross_doc needs exactly 2 distinct gold files")
        if not 1 <= len(gp) <= 3:
            err(f"{where}: answerable needs 1-3 gold phrases, has {len(gp)}")
        texts = []
        for g in gf:
            if g.startswith("/") or g.startswith(folder + "/"):
                err(f"{where}: gold path {g!r} must be relative to {folder}/")
            if g in used:
                err(f"{where}: gold file {g!r} is in {used_name}")
            t = read_doc(folder, g, cache)
            if t is None:
                err(f"{where}: gold file {folder}/{g} does not exist")
            else:
                texts.append(t)
        for p in gp:
            if not p.strip():
                err(f"{where}: empty gold phrase")
            elif texts and not any(p in t for t in texts):
                err(f"{where}: phrase {p!r} not found verbatim in {gf}")

    total = len(items)
    if total != n_total:
        err(f"{fname}: {total} items, expected {n_total}")
    if n_a != n_ans:
        err(f"{fname}: {n_a} answerable, expected {n_ans}")
    if n_u != n_unans:
        err(f"{fname}: {n_u} unanswerable, expected {n_unans}")
    if n_x != n_cross:
        err(f"{fname}: {n_x} cross-lingual answerable (lang != {native}), expected {n_cross}")
    for t in sorted(ANSWERABLE_TYPES):
        if type_counts[t] < 3:
            err(f"{fname}: type {t} used {type_counts[t]} times, need >=3")
    langs = Counter(o.get("lang") for _, o in items)
    print(f"{fname}: total={total} answerable={n_a} unanswerable={n_u} "
          f"cross-lingual={n_x} langs={dict(langs)} types={dict(sorted(type_counts.items()))}")


def main():
    seen_ids, cache = {}, {}
    for fname, spec in SPECS.items():
        check_file(fname, spec, seen_ids, cache)
    if errors:
        print(f"FAIL: {len(errors)} problem(s)")
        for e in errors:
            print("  - " + e)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
