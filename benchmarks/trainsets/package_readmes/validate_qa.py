"""Validate qa.jsonl (beside this script) against the vault built by build_vault.py.

usage: python validate_qa.py [DOCS_DIR]   (default /work/trainvault/docs)"""
import collections, json, os, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = sys.argv[1] if len(sys.argv) > 1 else "/work/trainvault/docs"
QA = os.path.join(HERE, "qa.jsonl")
KEYS = {"id", "lang", "type", "question", "gold_files", "gold_phrases", "answer"}
TYPES = {"fact", "procedure", "comparison", "enumeration", "cross_doc", "code_identifier", "paraphrase", "unanswerable"}
CJK = re.compile(r"[\u4e00-\u9fff]")

errors = []
ids = set()
questions = set()
rows = []
with open(QA, encoding="utf-8") as fh:
    for n, line in enumerate(fh, 1):
        try:
            r = json.loads(line)
        except Exception as e:  # noqa: BLE001
            errors.append(f"line {n}: not JSON: {e}")
            continue
        rows.append(r)
        where = f"line {n} ({r.get('id')})"
        if set(r) != KEYS:
            errors.append(f"{where}: keys {sorted(r)} != {sorted(KEYS)}")
            continue
        if r["id"] in ids:
            errors.append(f"{where}: duplicate id")
        ids.add(r["id"])
        if r["question"] in questions:
            errors.append(f"{where}: duplicate question")
        questions.add(r["question"])
        if r["lang"] not in ("en", "zh"):
            errors.append(f"{where}: bad lang {r['lang']}")
        if r["type"] not in TYPES:
            errors.append(f"{where}: bad type {r['type']}")
        if (r["lang"] == "zh") != bool(CJK.search(r["question"])):
            errors.append(f"{where}: lang {r['lang']} does not match question script")
        if not isinstance(r["gold_files"], list) or not isinstance(r["gold_phrases"], list):
            errors.append(f"{where}: gold_files/gold_phrases must be lists")
            continue
        if not r["question"].strip() or not r["answer"].strip():
            errors.append(f"{where}: empty question or answer")
        if r["type"] == "unanswerable":
            if r["gold_files"] or r["gold_phrases"]:
                errors.append(f"{where}: unanswerable must have no gold files/phrases")
            continue
        if not r["gold_files"] or not r["gold_phrases"]:
            errors.append(f"{where}: answerable needs >=1 gold file and phrase")
            continue
        if not 1 <= len(r["gold_phrases"]) <= 3:
            errors.append(f"{where}: {len(r['gold_phrases'])} gold phrases (want 1-3)")
        if r["type"] == "cross_doc" and len(set(r["gold_files"])) < 2:
            errors.append(f"{where}: cross_doc needs two gold files")
        texts = {}
        for f in r["gold_files"]:
            p = os.path.join(DOCS, f)
            if not os.path.isfile(p):
                errors.append(f"{where}: gold file missing: {f}")
            else:
                texts[f] = open(p, encoding="utf-8").read()
        for ph in r["gold_phrases"]:
            if not any(ph in t for t in texts.values()):
                errors.append(f"{where}: phrase not found verbatim in gold files: {ph!r}")
        # every gold file should contribute at least one phrase (keeps multi-file golds honest)
        for f, t in texts.items():
            if not any(ph in t for ph in r["gold_phrases"]):
                errors.append(f"{where}: gold file {f} contains none of the gold phrases")

ndocs = sum(len([n for n in ns if n.endswith('.md')]) for _, _, ns in os.walk(DOCS))
by_type = collections.Counter(r.get("type") for r in rows)
by_lang = collections.Counter(r.get("lang") for r in rows)
by_tl = collections.Counter((r.get("type"), r.get("lang")) for r in rows)
print(f"documents in vault: {ndocs}")
print(f"questions: {len(rows)}  answerable: {len(rows) - by_type['unanswerable']}  unanswerable: {by_type['unanswerable']}")
print("by language:", dict(by_lang))
for t in sorted(by_type):
    print(f"  {t:16s} total={by_type[t]:3d}  en={by_tl[(t, 'en')]:3d}  zh={by_tl[(t, 'zh')]:3d}")
if errors:
    print(f"\nFAILED: {len(errors)} problem(s)")
    for e in errors:
        print("  -", e)
    sys.exit(1)
print("\nOK: all lines parse, ids unique, gold files exist, every gold phrase is a verbatim substring of a gold file, "
      "answerable items have >=1 file and phrase, unanswerable items have none.")
