"""Calibrate the refusal gate on a labelled QA set and store it with the index (seed 001).

Each question runs through the pipeline once to read its gate signals (the top
dense cosine of the selected evidence, the weighted term coverage, and the best
sentence cosine under the sentence model), and whether the name and answer-type
checks refused it (those refuse whatever the threshold, so the fit counts them as
refused). Then, for every cosine weight w in 0, 0.05, ..., 1 (and, for a language's
own gate, the sentence weight v = 0 or 1), every threshold between
two observed gate scores is tried, and the combination with the best balanced
accuracy of the whole decision (mean of the refusal rate on unanswerable questions
and the answer rate on answerable ones) wins; ties go to the widest margin, then to
the lower false-refusal rate, then to the smaller v.

The fit is made once for all questions, without the sentence signal, and once per
question language (as the pipeline detects it) that has at least ``MIN_PER_CLASS``
answerable and unanswerable questions: e5 gives Chinese question-passage pairs
higher cosines than English ones, and the sentence model separates Chinese questions
better than English ones (docs/evaluation.md), so one gate for both is too strict for
one language or too lax for the other. At ask time the question's language picks its
gate; a language without one, or a gate whose sentence signal is missing because
``sentence_model = "none"``, uses the overall gate.

The result is stored under the active embedding space (``gate:<space>``), or
``gate:bm25`` in BM25 mode, so a different model or chunker never reuses it. Use a
calibration set that is not the set you report on.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..answer.gate.gate import Gate, gate_key
from ..errors import DatasetError
from ..library import Library
from ..text import language
from .qa import QACase, run_case

WEIGHTS = tuple(round(i * 0.05, 2) for i in range(21))
# With or without the sentence signal: a finer grid of weights overfits (cross-validated over the
# bundled 166 questions, balanced accuracy 0.801 with 0, 0.1, 0.25, 0.5, 1, 2 against 0.817 with these).
SENTENCE_WEIGHTS = (0.0, 1.0)
MIN_PER_CLASS = 3  # answerable and unanswerable questions a language needs for a gate of its own


@dataclass(frozen=True)
class Fit:
    threshold: float
    cosine_weight: float
    sentence_weight: float
    balanced_accuracy: float
    refusal_rate: float
    false_refusal_rate: float
    questions: int

    def summary(self) -> dict[str, Any]:
        return {
            "threshold": round(self.threshold, 4),
            "cosine_weight": self.cosine_weight,
            "sentence_weight": self.sentence_weight,
            "balanced_accuracy": round(self.balanced_accuracy, 4),
            "refusal_rate": round(self.refusal_rate, 4),
            "false_refusal_rate": round(self.false_refusal_rate, 4),
            "questions": self.questions,
        }

    def refuses(self, row: dict[str, Any]) -> bool:
        """Whether this gate (with the checks recorded in the row) refuses a ``run_case`` row."""
        return _refused(row, self.cosine_weight, self.sentence_weight, self.threshold)


def calibrate_gate(
    lib: Library, cases: Sequence[QACase], on_case: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    rows = []
    for i, case in enumerate(cases, 1):
        rows.append({**run_case(lib, case), "asked_in": language(case.question)})
        if on_case is not None:
            on_case(i, len(cases))
    ans = [r for r in rows if r["answerable"]]
    unans = [r for r in rows if not r["answerable"]]
    if not ans or not unans:
        raise DatasetError("calibration needs both answerable and unanswerable questions")
    dense = any(r["top_cosine"] is not None for r in rows)
    sentences = any(r["sentence_cosine"] is not None for r in rows)  # off with sentence_model = "none"
    overall = fit_gate(rows, dense)
    by_language: dict[str, Fit] = {}
    for lang in sorted({r["asked_in"] for r in rows}):
        mine = [r for r in rows if r["asked_in"] == lang]
        if min(sum(r["answerable"] for r in mine), sum(not r["answerable"] for r in mine)) >= MIN_PER_CLASS:
            by_language[lang] = fit_gate(mine, dense, SENTENCE_WEIGHTS if sentences else (0.0,))
    w = overall.cosine_weight
    stamp = datetime.now(UTC).date().isoformat()
    result = {
        "key": gate_key(lib.space.name if dense else None),
        **overall.summary(),
        "answerable": len(ans),
        "unanswerable": len(unans),
        "calibrated_at": stamp,
        "languages": {lang: f.summary() for lang, f in by_language.items()},
        "refused_by_checks": {
            "answerable": sum(not r["checks_passed"] for r in ans),
            "unanswerable": sum(not r["checks_passed"] for r in unans),
        },
        "distributions": {  # overall gate scores of the questions the checks let through
            "answerable": sorted(round(_score(r, w, 0.0), 4) for r in ans if r["checks_passed"]),
            "unanswerable": sorted(round(_score(r, w, 0.0), 4) for r in unans if r["checks_passed"]),
        },
        "signals": [
            {
                "id": r["id"],
                "language": r["asked_in"],
                "answerable": r["answerable"],
                "top_cosine": r["top_cosine"],
                "coverage": r["coverage"],
                "sentence_cosine": r["sentence_cosine"],
                "checks_passed": r["checks_passed"],
            }
            for r in rows
        ],
    }
    stored = {
        **{k: result[k] for k in ("threshold", "cosine_weight", "calibrated_at", "questions", "balanced_accuracy")},
        "languages": {
            lang: {k: fit[k] for k in ("threshold", "cosine_weight", "sentence_weight", "questions")}
            for lang, fit in result["languages"].items()
        },
    }
    lib.store.set_meta(str(result["key"]), json.dumps(stored))
    return result


def fit_gate(rows: Sequence[dict[str, Any]], dense: bool, sentence_weights: Sequence[float] = (0.0,)) -> Fit:
    """The (cosine weight, sentence weight, threshold) with the best balanced accuracy on these rows."""
    answerable = [bool(r["answerable"]) for r in rows]
    passed = [bool(r["checks_passed"]) for r in rows]
    n_ans = sum(answerable)
    n_unans = len(rows) - n_ans
    best: tuple[float, float, float] | None = None  # (balanced accuracy, margin, -frr)
    chosen = (0.0, 0.0, 0.0, 0.0)  # w, v, threshold, refusal rate
    for v in sentence_weights:
        for w in WEIGHTS if dense else (0.0,):
            scores = [_score(r, w, v) for r in rows]
            values = sorted(set(scores))
            for t in [(x + y) / 2 for x, y in itertools.pairwise(values)] or values:
                refused = [not p or sc < t for p, sc in zip(passed, scores, strict=True)]
                rr = sum(x and not a for x, a in zip(refused, answerable, strict=True)) / n_unans if n_unans else 0.0
                frr = sum(x and a for x, a in zip(refused, answerable, strict=True)) / n_ans if n_ans else 0.0
                key = ((rr + 1 - frr) / 2, min(abs(sc - t) for sc in scores), -frr)
                if best is None or key > best:
                    best, chosen = key, (w, v, t, rr)
    assert best is not None
    w, v, t, rr = chosen
    return Fit(t, w, v, best[0], rr, -best[2], len(rows))


def _refused(row: dict[str, Any], w: float, v: float, threshold: float) -> bool:
    return not row["checks_passed"] or _score(row, w, v) < threshold


def _score(row: dict[str, Any], w: float, v: float) -> float:
    """The gate score the pipeline computes (``Gate.score``) from a ``run_case`` row."""
    cosine = row["top_cosine"] if w else None
    return Gate(0.0, w, "fit", v).score(cosine, row["coverage"] or 0.0, row["sentence_cosine"])
