"""Calibrate the refusal gate on a labelled QA set and store it with the index (seed 001).

Each question runs through the pipeline once to read its two gate signals (the top
dense cosine of the selected evidence and the weighted term coverage). Then, for
every cosine weight w in 0, 0.05, ..., 1, every threshold between two observed gate
scores is tried, and the pair with the best balanced accuracy (mean of the refusal
rate on unanswerable questions and the answer rate on answerable ones) wins; ties go
to the widest margin, then to the lower false-refusal rate. The result is stored under
the active embedding space (``gate:<space>``), or ``gate:bm25`` in BM25 mode, so a
different model or chunker never reuses it. Use a calibration set that is not the set
you report on.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..answer.select import gate_key
from ..errors import DatasetError
from ..library import Library
from .qa import QACase, run_case

WEIGHTS = tuple(round(i * 0.05, 2) for i in range(21))


def calibrate_gate(
    lib: Library, cases: Sequence[QACase], on_case: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    rows = []
    for i, case in enumerate(cases, 1):
        rows.append(run_case(lib, case))
        if on_case is not None:
            on_case(i, len(cases))
    ans = [r for r in rows if r["answerable"]]
    unans = [r for r in rows if not r["answerable"]]
    if not ans or not unans:
        raise DatasetError("calibration needs both answerable and unanswerable questions")
    dense = any(r["top_cosine"] is not None for r in rows)
    best: tuple[float, float, float, float, float] | None = None  # (bal acc, margin, -frr, w, threshold)
    for w in WEIGHTS if dense else (0.0,):
        a = sorted(_score(r, w) for r in ans)
        u = sorted(_score(r, w) for r in unans)
        values = sorted(set(a + u))
        cuts = [(x + y) / 2 for x, y in itertools.pairwise(values)] or values
        for t in cuts:
            rr = sum(s < t for s in u) / len(u)
            frr = sum(s < t for s in a) / len(a)
            margin = min((abs(s - t) for s in a + u), default=0.0)
            key = ((rr + 1 - frr) / 2, margin, -frr, w, t)
            if best is None or key[:3] > best[:3]:
                best = key
    assert best is not None
    bal, _, neg_frr, w, t = best
    space = lib.space.name if dense else None
    result = {
        "key": gate_key(space),
        "threshold": round(t, 4),
        "cosine_weight": w,
        "balanced_accuracy": round(bal, 4),
        "refusal_rate": round(sum(_score(r, w) < t for r in unans) / len(unans), 4),
        "false_refusal_rate": round(-neg_frr, 4),
        "questions": len(rows),
        "answerable": len(ans),
        "unanswerable": len(unans),
        "calibrated_at": datetime.now(UTC).date().isoformat(),
        "distributions": {
            "answerable": sorted(round(_score(r, w), 4) for r in ans),
            "unanswerable": sorted(round(_score(r, w), 4) for r in unans),
        },
        "signals": [
            {"id": r["id"], "answerable": r["answerable"], "top_cosine": r["top_cosine"], "coverage": r["coverage"]}
            for r in rows
        ],
    }
    stored = {k: result[k] for k in ("threshold", "cosine_weight", "calibrated_at", "questions", "balanced_accuracy")}
    lib.store.set_meta(str(result["key"]), json.dumps(stored))
    return result


def _score(row: dict[str, Any], w: float) -> float:
    cos = row["top_cosine"] if row["top_cosine"] is not None else 0.0
    cov = row["coverage"] if row["coverage"] is not None else 0.0
    return float(w * cos + (1 - w) * cov)
