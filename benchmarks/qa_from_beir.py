"""Turn a labelled answer dataset into a sunlib vault + QA sets for `sunlib eval rag`.

    python -m benchmarks.qa_from_beir ../shared/data/squad2_dev_half --calibration 200 --test 300
    python -m benchmarks.qa_from_beir ../shared/data/cmrc2018 --test 500

The corpus is written as a Markdown vault with the same cache as `sunlib eval retrieval`
($SUNLIB_HOME/eval/...), so an index built there is reused. A `sunlib.toml` in the vault
points at that index. Questions become QA cases: gold_files = the note of the source
paragraph, gold_phrases = the human answer spans, type fact (or unanswerable for SQuAD
2.0's questions without an answer, which have no gold file). Calibration and test
questions are disjoint, chosen deterministically (sorted by id, alternating).
Prints the vault path and the two QA files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sunlib.config import load_settings
from sunlib.evaluate import load_beir
from sunlib.evaluate.beir import BeirDataset
from sunlib.evaluate.retrieval import eval_cache_dir, materialize


def beir_vault(data: BeirDataset) -> tuple[Path, dict[str, str]]:
    """The eval cache folder of a BEIR dataset with its corpus written as a vault (reused when present),
    and each document id's path in that vault; the vault's sunlib.toml points at the cache's index."""
    root = eval_cache_dir(data, load_settings())
    mapping = materialize(data, root)
    (root / "vault" / "sunlib.toml").write_text(f'index_dir = "{root / "index"}"\n', encoding="utf-8")
    return root, {doc: path for path, doc in mapping.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--calibration", type=int, default=0, help="questions per class for the calibration set")
    ap.add_argument("--test", type=int, default=300, help="questions per class for the test set")
    args = ap.parse_args()
    data = load_beir(args.dataset)
    root, path_of = beir_vault(data)
    lang = "zh" if "cmrc" in args.dataset.name else "en"

    answerable: list[dict[str, object]] = []
    unanswerable: list[dict[str, object]] = []
    rag_qa = args.dataset / "rag_qa.jsonl"
    if rag_qa.is_file():  # SQuAD 2.0: answerable and unanswerable questions with their spans
        for line in rag_qa.open(encoding="utf-8"):
            row = json.loads(line)
            case = {"id": row["_id"], "lang": lang, "question": row["question"], "answer": ""}
            if row["answerable"]:
                spans = sorted(set(row["answers"]), key=len)
                answerable.append(
                    {**case, "type": "fact", "gold_files": [path_of[row["doc_id"]]], "gold_phrases": spans}
                )
            else:
                unanswerable.append({**case, "type": "unanswerable", "gold_files": [], "gold_phrases": []})
    else:  # CMRC2018: answer spans per judged test query
        answers = {
            r["_id"]: r for r in (json.loads(line) for line in (args.dataset / "answers.jsonl").open(encoding="utf-8"))
        }
        for qid in sorted(data.qrels):
            if qid in answers and data.queries.get(qid, "").strip():
                a = answers[qid]
                answerable.append(
                    {
                        "id": qid,
                        "lang": lang,
                        "type": "fact",
                        "question": data.queries[qid],
                        "gold_files": [path_of[a["doc_id"]]],
                        "gold_phrases": sorted(set(a["answers"]), key=len),
                        "answer": a["answers"][0],
                    }
                )
    out = root / "qa"
    out.mkdir(exist_ok=True)
    for name, size, parity in (("calibration", args.calibration, 0), ("test", args.test, 1)):
        if not size:
            continue
        picked = []
        for group in (answerable, unanswerable):
            ordered = sorted(group, key=lambda c: str(c["id"]))
            half = ordered[parity::2] if args.calibration else ordered
            picked += half[:: max(1, len(half) // size)][:size]
        path = out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in picked), encoding="utf-8")
        print(f"{name}: {path} ({len(picked)} questions)")
    print(f"vault: {root / 'vault'}")


if __name__ == "__main__":
    main()
