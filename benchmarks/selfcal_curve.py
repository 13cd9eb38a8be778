"""Where the probes put a vault's threshold, against where its labelled questions would.

    python -m benchmarks.selfcal_curve QA.jsonl --vault V [--probes 120] [--seed 0]

For a vault with a labelled QA set (never a held-out one: this reads every question's
probability), run the labelled questions the way `sunlib calibrate` runs its probes (the ask
pipeline at threshold 0: each question's answerability probability, and whether it is refused
whatever the threshold), then the probes, and print for a grid of thresholds the refusal and
false-refusal rates and balanced accuracy of both, with the shipped threshold, the probes'
best and the calibrated threshold (`selfcal.choose`) marked. Stores nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sunlib import Library
from sunlib.answer.gate.scorer import load_params
from sunlib.evaluate.qa import load_qa
from sunlib.library.calibration import best_threshold, choose, rates, run_probes
from sunlib.library.probes import Probe, make_probes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("qa", type=Path)
    ap.add_argument("--vault", type=Path, required=True)
    ap.add_argument("--probes", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    params = load_params()
    assert params is not None, "no shipped scorer parameters"
    shipped = params.threshold
    with Library.open(args.vault) as lib:
        lib.index()
        cases = load_qa(args.qa)
        labelled = [Probe(c.question, c.answerable, c.type, c.lang, ",".join(c.gold_files)) for c in cases]
        real = run_probes(lib, labelled)
        made = make_probes(lib.store, lib.settings.search.principals, args.probes, args.seed)
        probed = run_probes(lib, made.probes)
    optimum, at = best_threshold(probed, shipped)
    chosen = choose(shipped, optimum, at.balanced_accuracy - rates(probed, shipped).balanced_accuracy)
    real_best, real_at = best_threshold(real, shipped)
    print(f"shipped {shipped:.4f}  probes' best {optimum:.4f}  calibrated {chosen:.4f}  labelled best {real_best:.4f}")
    print(f"{'threshold':>9}  {'labelled rr/frr/ba':>22}  {'probes rr/frr/ba':>22}")
    grid = sorted({round(x / 20, 2) for x in range(1, 20)} | {shipped, optimum, chosen, real_best})
    for t in grid:
        r, p = rates(real, t), rates(probed, t)
        mark = " ".join(
            name
            for name, v in (("shipped", shipped), ("probes", optimum), ("calibrated", chosen), ("labelled", real_best))
            if v == t
        )
        print(
            f"{t:>9.4f}  {r.refusal_rate:6.3f} {r.false_refusal_rate:6.3f} {r.balanced_accuracy:6.3f}"
            f"    {p.refusal_rate:6.3f} {p.false_refusal_rate:6.3f} {p.balanced_accuracy:6.3f}  {mark}"
        )
    print(f"labelled at its best: {real_at.as_dict()}")


if __name__ == "__main__":
    main()
