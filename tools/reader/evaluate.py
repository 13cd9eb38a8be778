"""The reader alone on its held-out pairs: answerability, spans and support, as the shipped file reads them.

    python -m tools.reader.evaluate build/reader/pairs/test.jsonl [--model DIR] [--data ../shared/data]
        [--json OUT.json] [--limit N]

It runs the runtime's ``OnnxReader`` (the int8 file, the trimmed tokenizer, windows of 256 tokens),
never the training model, so the figures are those of what ships. Sets (``tools.reader.data``):

- squad2: the held-out articles. Answerability balanced accuracy at the model's own threshold
  (0.5: fixed before training, never tuned on these), ROC AUC, and span EM / F1 on the answerable
  questions over their own paragraph (SQuAD's normalisation);
- cmrc2018, drcd: held-out passages / articles; EM and F1 over characters (CMRC's normalisation:
  no punctuation or spaces);
- xquad: the 160 paragraphs outside squad2_dev_half, per direction (en-en, zh-zh, zh-en, en-zh);
- notes (when the pairs were built with ``--notes``): the held-out pages' heading questions, per
  direction: answerability only (they have no spans);
- support: scifact's test claims (``evidence_test.jsonl``) against each cited abstract, SUPPORT
  against CONTRADICT and NOT_ENOUGH_INFO: balanced accuracy at 0.5 and AUC.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sunlib.providers.readers.onnx import BUNDLED, OnnxReader

from . import data as pairs

_PUNCT = set(string.punctuation) | {c for c in "，。！？；：、“”‘’（）《》「」『』【】—…·．"}


def _norm_en(text: str) -> list[str]:
    text = "".join(c for c in text.lower() if c not in _PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return text.split()


def _norm_zh(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).lower()
    return [c for c in text if c not in _PUNCT and not c.isspace()]


def _f1(pred: list[str], gold: list[str]) -> float:
    common = sum((Counter(pred) & Counter(gold)).values())
    if not pred or not gold or not common:
        return float(pred == gold)
    p, r = common / len(pred), common / len(gold)
    return 2 * p * r / (p + r)


def span_scores(pred: str, golds: Sequence[str], zh: bool) -> tuple[float, float]:
    norm = _norm_zh if zh else _norm_en
    p = norm(pred)
    em = max(float(p == norm(g)) for g in golds)
    f1 = max(_f1(p, norm(g)) for g in golds)
    return em, f1


def auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    s, y = np.asarray(scores), np.asarray(labels)
    pos, neg = s[y == 1], s[y == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def balanced(scores: Sequence[float], labels: Sequence[int], threshold: float) -> float:
    s, y = np.asarray(scores), np.asarray(labels)
    tpr = float(np.mean(s[y == 1] >= threshold)) if (y == 1).any() else float("nan")
    tnr = float(np.mean(s[y == 0] < threshold)) if (y == 0).any() else float("nan")
    return (tpr + tnr) / 2


def evaluate(reader: OnnxReader, test: list[pairs.Example], data: Path | None, limit: int = 0) -> dict[str, Any]:
    groups: dict[str, list[pairs.Example]] = defaultdict(list)
    for e in test:
        if e.task == "qa":
            key = f"{e.source}:{e.lang}" if e.source in ("xquad", "notes") else e.source
            groups[key].append(e)
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    for key, examples in sorted(groups.items()):
        if limit:
            examples = examples[:limit]
        probs, labels, ems, f1s = [], [], [], []
        for e in examples:
            reading = reader.read(e.query, [e.passage])[0]
            probs.append(reading.probability)
            labels.append(int(e.label == 1))  # a notes pair answers with no span
            if e.spans and e.label == 1:
                golds = [e.passage[a:b] for a, b in e.spans]
                em, f1 = span_scores(reading.span(e.passage), golds, zh=e.lang.endswith("zh"))
                ems.append(em)
                f1s.append(f1)
        row: dict[str, Any] = {"pairs": len(examples), "answerable": int(sum(labels))}
        if ems:
            row["em"] = round(float(np.mean(ems)), 4)
            row["f1"] = round(100 * float(np.mean(f1s)), 2)
        if 0 < sum(labels) < len(labels):
            row["auc"] = round(auc(probs, labels), 4)
            row["balanced_accuracy"] = round(balanced(probs, labels, reader.threshold), 4)
        for name, want in (("refused_unanswerable", 0), ("refused_answerable", 1)):
            below = [p < reader.threshold for p, y in zip(probs, labels, strict=True) if y == want]
            if below:  # at the model's threshold; a set of answerable pairs only (xquad, notes across) too
                row[name] = round(float(np.mean(below)), 4)
        out[key] = row
    if data is not None:
        out["support:scifact"] = support(reader, data, limit)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["threshold"] = reader.threshold
    return out


def support(reader: OnnxReader, data: Path, limit: int = 0) -> dict[str, Any]:
    corpus = {d["_id"]: d for d in pairs.rows(data / "scifact/corpus.jsonl")}
    claims, labels = [], []
    for c in pairs.rows(data / "scifact/evidence_test.jsonl"):
        for doc in c.get("cited_doc_ids", []):
            d = corpus.get(str(doc))
            if d is None:
                continue
            sets = c.get("evidence", {}).get(str(doc), [])
            claims.append((c["claim"], d["text"]))
            labels.append(int(any(s["label"] == "SUPPORT" for s in sets)))
    if limit:
        claims, labels = claims[:limit], labels[:limit]
    scores = reader.support(claims)
    return {
        "pairs": len(claims),
        "supported": int(sum(labels)),
        "auc": round(auc(scores, labels), 4),
        "balanced_accuracy": round(balanced(scores, labels, 0.5), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("test", type=Path)
    ap.add_argument("--model", type=Path, default=BUNDLED)
    ap.add_argument("--data", type=Path, default=None, help="the shared data folder, for the support set")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    reader = OnnxReader(args.model, threads=args.threads, windows=4)
    report = evaluate(reader, list(pairs.read(args.test)), args.data, args.limit)
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
