"""Cross-validate the refusal gate on every labelled question of the sample vault.

    python -m benchmarks.gate_cv                      # both bundled QA sets, 20 x 5-fold
    python -m benchmarks.gate_cv --seeds 50 --folds 10

The bundled QA set and calibration set together hold 166 questions (123 answerable, 43
unanswerable). One fixed split says little at that size: a threshold sits between two
neighbouring gate scores, and moving one question moves it. So this script runs every
question once through the real pipeline (the same rows `sunlib eval calibrate` fits on),
then repeats k-fold cross-validation with different shuffles: fit the gate on k-1 folds
with sunlib's own `fit_gate`, count refusals on the held-out fold. It compares one gate
for all questions with one gate per question language, without and with the sentence
signal (the last is what `eval calibrate` stores), and reports the held-out refusal
rate, false-refusal rate and balanced accuracy.
Questions the name and answer-type checks refuse count as refused in every variant.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from benchmarks.common import CALIBRATION_QA, SAMPLE_VAULT, TEST_QA
from sunlib import Library
from sunlib.evaluate.calibrate import SENTENCE_WEIGHTS, Fit, fit_gate
from sunlib.evaluate.qa import load_qa, run_case
from sunlib.text import language


def cross_validate(
    rows: list[dict[str, Any]], per_language: bool, seeds: int, folds: int, sentence_weights: tuple[float, ...] = (0.0,)
) -> dict[str, float]:
    refused = {True: 0, False: 0}
    total = {True: 0, False: 0}
    for seed in range(seeds):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        parts = [shuffled[i::folds] for i in range(folds)]
        for i, held_out in enumerate(parts):
            train = [r for j, part in enumerate(parts) if j != i for r in part]
            overall = fit_gate(train, dense=True)
            gates: dict[str, Fit] = {}
            if per_language:
                for lang in {r["asked_in"] for r in train}:
                    gates[lang] = fit_gate([r for r in train if r["asked_in"] == lang], True, sentence_weights)
            for r in held_out:
                gate = gates.get(r["asked_in"], overall)
                refused[r["answerable"]] += gate.refuses(r)
                total[r["answerable"]] += 1
    rr = refused[False] / total[False]
    frr = refused[True] / total[True]
    return {
        "refusal_rate": round(rr, 3),
        "false_refusal_rate": round(frr, 3),
        "balanced_accuracy": round((rr + 1 - frr) / 2, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    cases = [*load_qa(TEST_QA), *load_qa(CALIBRATION_QA)]
    with Library.open(SAMPLE_VAULT) as lib:
        lib.index()
        rows = [{**run_case(lib, c), "asked_in": language(c.question)} for c in cases]
    answerable = sum(r["answerable"] for r in rows)
    print(
        f"{len(rows)} questions ({answerable} answerable, {len(rows) - answerable} unanswerable); "
        f"{args.seeds} x {args.folds}-fold; held-out figures"
    )
    print("| gate | refusal rate | false-refusal rate | balanced accuracy |")
    print("|---|---|---|---|")
    variants = (
        ("one for all questions", False, (0.0,)),
        ("one per question language", True, (0.0,)),
        ("one per question language, with the sentence signal", True, SENTENCE_WEIGHTS),
    )
    for label, per_language, sentence_weights in variants:
        m = cross_validate(rows, per_language, args.seeds, args.folds, sentence_weights)
        print(f"| {label} | {m['refusal_rate']:.3f} | {m['false_refusal_rate']:.3f} | {m['balanced_accuracy']:.3f} |")


if __name__ == "__main__":
    main()
