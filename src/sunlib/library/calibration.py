"""Self-calibration: the learned gate's threshold for one vault, from probe questions, no labels.

``sunlib calibrate`` (``Library.calibrate``) writes probe questions from the vault
(``evaluate.probes``: answerable ones from its headings and sentences, unanswerable ones
with the key term swapped for one the vault never mentions), runs each through the real
ask pipeline (extractive writer, nothing saved) with the threshold at 0, and reads the
answerability probability of the selection (``signals.answerability``) and whether the
question was refused anyway: by the name or answer-type checks, for want of evidence, or
after the gate (no supported sentence), all of which refuse whatever the threshold.

A probe is then refused at threshold t when it was refused anyway or its probability is
below t. The fit:

1. The balanced accuracy on the probes (mean of the refusal rate on unanswerable probes and
   the answer rate on answerable ones) of the shipped threshold, and the threshold with the
   best balanced accuracy (``optimum``; ties go to the one nearest the shipped threshold).
2. When the optimum beats the shipped threshold by less than ``MIN_GAIN``, the shipped
   threshold stays. Otherwise the threshold moves ``SHRINK`` of the way towards the optimum,
   at most ``MAX_SHIFT`` away from the shipped one: probes are not real questions (a heading
   turned into a question finds its section more easily than a user's question does), so
   they say which way this vault differs more reliably than by how much.

The result (threshold, the shipped one, the optimum, the probe counts, refusal and false
refusal rates on the probes before and after, the date, the scorer parameters it was made
with) is stored in the index meta under ``selfcal:<space>`` (``answer.gate.gate.selfcal_key``).
``build_gate`` uses it when no ``[answer] answerable_threshold`` is set and the scorer
parameters are the ones it was made with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..answer import AskResult
from ..answer.gate.gate import selfcal_key
from ..answer.gate.scorer import load_params
from ..config import Settings
from ..errors import UserError
from ..store import DocumentStore, Space
from .probes import Probe, make_probes


class Calibrated(Protocol):
    """What calibration reads of a library (a ``Library`` is one)."""

    @property
    def vault(self) -> Path: ...
    @property
    def db_path(self) -> Path: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> DocumentStore: ...
    @property
    def space(self) -> Space: ...
    def with_settings(self, settings: Settings | None = None, **sections: dict[str, Any]) -> Calibrated: ...
    def ask(self, question: str, *, save: bool | None = None) -> AskResult: ...


DEFAULT_PROBES = 120
MIN_PROBES, MAX_PROBES = 20, 2000  # accepted --probes
MIN_PER_CLASS = 8  # answerable and unanswerable probes a calibration needs
MIN_GAIN = 0.02  # balanced accuracy the optimum must gain over the shipped threshold to move it
SHRINK = 0.5  # how far towards the optimum the threshold moves
MAX_SHIFT = 0.15  # at most this far from the shipped threshold
BAND = (0.02, 0.98)


@dataclass(frozen=True)
class ProbeResult:
    probe: Probe
    probability: float | None  # None: no answerability (no evidence, no content word)
    refused_anyway: bool  # refused whatever the threshold
    refusals: tuple[str, ...]

    def refused(self, threshold: float) -> bool:
        if self.probability is None:  # the score gate decided, whatever the threshold
            return self.refused_anyway
        return self.refused_anyway or self.probability < threshold


@dataclass(frozen=True)
class Rates:
    refusal_rate: float  # unanswerable probes refused
    false_refusal_rate: float  # answerable probes refused
    balanced_accuracy: float

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


def rates(results: Sequence[ProbeResult], threshold: float) -> Rates:
    ans = [r for r in results if r.probe.answerable]
    unans = [r for r in results if not r.probe.answerable]
    rr = sum(r.refused(threshold) for r in unans) / len(unans) if unans else 0.0
    frr = sum(r.refused(threshold) for r in ans) / len(ans) if ans else 0.0
    return Rates(rr, frr, (rr + 1 - frr) / 2)


def best_threshold(results: Sequence[ProbeResult], shipped: float) -> tuple[float, Rates]:
    """The threshold with the best balanced accuracy on the probes; ties: the nearest to ``shipped``."""
    values = sorted({r.probability for r in results if r.probability is not None and not r.refused_anyway})
    lo, hi = BAND
    candidates = [shipped] + [(a + b) / 2 for a, b in zip([lo, *values], [*values, hi], strict=True)]
    candidates = [min(hi, max(lo, t)) for t in candidates]
    best = max(candidates, key=lambda t: (round(rates(results, t).balanced_accuracy, 9), -abs(t - shipped)))
    return best, rates(results, best)


def choose(shipped: float, optimum: float, gain: float) -> float:
    """The vault's threshold: the shipped one unless the probes gain ``MIN_GAIN``, else moved part-way."""
    if gain < MIN_GAIN:
        return shipped
    moved = shipped + SHRINK * (optimum - shipped)
    moved = min(shipped + MAX_SHIFT, max(shipped - MAX_SHIFT, moved))
    return round(min(BAND[1], max(BAND[0], moved)), 4)


def run_probes(
    lib: Calibrated, probes: Sequence[Probe], on_probe: Callable[[int, int], None] | None = None
) -> list[ProbeResult]:
    """Each probe through the ask pipeline with the threshold at 0: its probability, and whether it
    was refused whatever the threshold."""
    probing = lib.with_settings(answer={"writer": "extractive", "save_runs": False, "answerable_threshold": 0.0})
    out = []
    for i, probe in enumerate(probes, 1):
        result = probing.ask(probe.question, save=False)
        sel = result.selection
        if sel is not None:  # (None: the router replied directly; such a probe says nothing)
            a = sel.signals.answerability
            out.append(
                ProbeResult(
                    probe,
                    None if a is None else a.probability,
                    result.frame.refused,
                    tuple(r.code for r in result.frame.refusals),
                )
            )
        if on_probe is not None:
            on_probe(i, len(probes))
    return out


def self_calibrate(
    lib: Calibrated,
    probes: int = DEFAULT_PROBES,
    seed: int = 0,
    store: bool = True,
    on_probe: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Probe the vault, fit its threshold, and (with ``store``) keep it in the index; returns the report."""
    if not MIN_PROBES <= probes <= MAX_PROBES:
        raise UserError(f"--probes must be between {MIN_PROBES} and {MAX_PROBES}, got {probes}")
    settings = lib.settings
    params = load_params()
    if settings.answer.gate != "learned" or params is None:
        raise UserError('self-calibration is for the learned gate: set [answer] gate = "learned"')
    if not lib.db_path.is_file():
        raise UserError(f"{lib.vault} has no index yet: run `sunlib index {lib.vault}`")
    made = make_probes(lib.store, settings.search.principals, probes, seed)
    n_ans, n_unans = len(made.answerable), len(made.unanswerable)
    if min(n_ans, n_unans) < MIN_PER_CLASS:
        raise UserError(
            f"too few probe questions: the vault gave {n_ans} answerable and {n_unans} unanswerable ones;"
            f" calibration needs {MIN_PER_CLASS} of each (a vault with more notes, headings or sentences)"
        )
    results = run_probes(lib, made.probes, on_probe)
    if min(sum(r.probe.answerable for r in results), sum(not r.probe.answerable for r in results)) < MIN_PER_CLASS:
        raise UserError("too few probe questions reached the gate to calibrate it")
    shipped = params.threshold
    before = rates(results, shipped)
    optimum, at_optimum = best_threshold(results, shipped)
    gain = at_optimum.balanced_accuracy - before.balanced_accuracy
    threshold = choose(shipped, optimum, gain)
    after = rates(results, threshold)
    space = lib.space.name if settings.search.mode != "bm25" else None
    key = selfcal_key(space)
    stored = {
        "threshold": threshold,
        "shipped_threshold": shipped,
        "optimum": round(optimum, 4),
        "moved": threshold != shipped,
        "probes": {
            "answerable": sum(r.probe.answerable for r in results),
            "unanswerable": sum(not r.probe.answerable for r in results),
            "notes": made.notes,
            "seed": seed,
        },
        "before": before.as_dict(),
        "after": after.as_dict(),
        "at_optimum": at_optimum.as_dict(),
        "calibrated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "scorer": params.fingerprint,
        "cosine_features": settings.answer.sentence_model != "none",
    }
    if store:
        lib.store.set_meta(key, json.dumps(stored))
    return {
        "key": key,
        "stored": store,
        **stored,
        "rule": f"the shipped threshold unless the probes' best gains {MIN_GAIN} balanced accuracy; then"
        f" {SHRINK} of the way to it, at most {MAX_SHIFT} away",
        "probe_questions": [
            {
                "question": r.probe.question,
                "answerable": r.probe.answerable,
                "kind": r.probe.kind,
                "lang": r.probe.lang,
                "source": r.probe.source,
                "replaced": r.probe.replaced,
                "swapped": r.probe.swapped,
                "probability": None if r.probability is None else round(r.probability, 4),
                "refused_anyway": r.refused_anyway,
                "refusals": list(r.refusals),
            }
            for r in results
        ],
    }


def reset_calibration(lib: Calibrated) -> str:
    """Forget the stored self-calibration of the active space; returns its key."""
    space = lib.space.name if lib.settings.search.mode != "bm25" else None
    key = selfcal_key(space)
    lib.store.set_meta(key, "")
    return key
