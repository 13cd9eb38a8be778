"""Calibrate the refusal gate on a labelled QA set and store it with the index (seed 001).

Each question runs through the pipeline once to read its two gate signals (the top
dense cosine of the selected evidence and the weighted term coverage), and whether
the name and answer-type checks refused it (those refuse whatever the threshold, so
the fit counts them as refused). Then, for every cosine weight w in 0, 0.05, ..., 1,
every threshold between two observed gate scores is tried, and the pair with the best
balanced accuracy of the whole decision (mean of the refusal rate on unanswerable
questions and the answer rate on answerable ones) wins; ties go to the widest margin,
then to the lower false-refusal rate.

The fit is made once for all questions and once per question language (as the
pipeline detects it) that has at least ``MIN_PER_CLASS`` answerable and unanswerable
questions: e5 gives Chinese question-passage pairs higher cosines than English ones
(docs/evaluation.md), so one threshold for both is too strict for one language or too
lax for the other. At ask time the question's language picks its gate, and a language
without one uses the overall gate.

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

from ..answer.router import language
from ..answer.select import gate_key
from ..errors import DatasetError
from ..library import Library
from .qa import QACase, run_case

WEIGHTS = tuple(round(i * 0.05, 2) for i in range(21))
MIN_PER_CLASS = 3  # answerable and unanswerable questions a language needs for a gate of its own


@dataclass(frozen=True)
class Fit:
    threshold: float
    cosine_weight: float
    balanced_accuracy: float
    refusal_rate: float
    false_refusal_rate: float
    questions: int

    def summary(self) -> dict[str, Any]:
        return {
            "threshold": round(self.threshold, 4),
            "cosine_weight": self.cosine_weight,
            "balanced_accuracy": round(self.balanced_accuracy, 4),
            "refusal_rate": round(self.refusal_rate, 4),
            "false_refusal_rate": round(self.false_refusal_rate, 4),
            "questions": self.questions,
        }

    def refuses(self, row: dict[str, Any]) -> bool:
        """Whether this gate (with the checks recorded in the row) refuses a ``run_case`` row."""
        return _refused(row, self.cosine_weight, self.threshold)


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
    overall = fit_gate(rows, dense)
    by_language: dict[str, Fit] = {}
    for lang in sorted({r["asked_in"] for r in rows}):
        mine = [r for r in rows if r["asked_in"] == lang]
        if min(sum(r["answerable"] for r in mine), sum(not r["answerable"] for r in mine)) >= MIN_PER_CLASS:
            by_language[lang] = fit_gate(mine, dense)
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
            "answerable": sorted(round(_score(r, w), 4) for r in ans if r["checks_passed"]),
            "unanswerable": sorted(round(_score(r, w), 4) for r in unans if r["checks_passed"]),
        },
        "signals": [
            {
                "id": r["id"],
                "language": r["asked_in"],
                "answerable": r["answerable"],
                "top_cosine": r["top_cosine"],
                "coverage": r["coverage"],
                "checks_passed": r["checks_passed"],
            }
            for r in rows
        ],
    }
    stored = {
        **{k: result[k] for k in ("threshold", "cosine_weight", "calibrated_at", "questions", "balanced_accuracy")},
        "languages": {
            lang: {k: fit[k] for k in ("threshold", "cosine_weight", "questions")}
            for lang, fit in result["languages"].items()
        },
    }
    lib.store.set_meta(str(result["key"]), json.dumps(stored))
    return result


def fit_gate(rows: Sequence[dict[str, Any]], dense: bool) -> Fit:
    """The (cosine weight, threshold) with the best balanced accuracy on these rows."""
    ans = [r for r in rows if r["answerable"]]
    unans = [r for r in rows if not r["answerable"]]
    best: tuple[float, float, float, float, float, float] | None = None  # (bal, margin, -frr, w, t, rr)
    for w in WEIGHTS if dense else (0.0,):
        scores = [_score(r, w) for r in rows]
        values = sorted(set(scores))
        cuts = [(x + y) / 2 for x, y in itertools.pairwise(values)] or values
        for t in cuts:
            rr = sum(_refused(r, w, t) for r in unans) / len(unans) if unans else 0.0
            frr = sum(_refused(r, w, t) for r in ans) / len(ans) if ans else 0.0
            margin = min((abs(s - t) for s in scores), default=0.0)
            key = ((rr + 1 - frr) / 2, margin, -frr, w, t, rr)
            if best is None or key[:3] > best[:3]:
                best = key
    assert best is not None
    bal, _, neg_frr, w, t, rr = best
    return Fit(t, w, bal, rr, -neg_frr, len(rows))


def _refused(row: dict[str, Any], w: float, threshold: float) -> bool:
    return not row["checks_passed"] or _score(row, w) < threshold


def _score(row: dict[str, Any], w: float) -> float:
    cos = row["top_cosine"] if row["top_cosine"] is not None else 0.0
    cov = row["coverage"] if row["coverage"] is not None else 0.0
    return float(w * cos + (1 - w) * cov)
