"""The refusal gate: signals in, a decision with reason codes out.

``GateSignals`` is what selection measured on the kept evidence; a ``RefusalGate``
turns it into a ``GateDecision`` (passed, score, threshold, the ``Refusal`` records).

``LearnedGate`` (``[answer] gate = "learned"``) refuses below a threshold on
the answer scorer's calibrated probability that the evidence answers the question
(``answer.gate.scorer``), plus the two checks below. Its threshold: ``[answer]
answerable_threshold`` when set, else the vault's own from ``sunlib calibrate``
(``evaluate.selfcal``, stored per embedding space under ``selfcal:<space>``) when it was
made with the shipped scorer parameters, else the shipped one. Without shipped scorer
parameters it hands over to the score gate.

``ScoreGate`` is the gate of seed 001:

    score = (w * top cosine + (1 - w) * coverage + v * best sentence) / (1 + v)

against a threshold, with the dense gate when a dense cosine exists and the lexical
(coverage-only) gate otherwise, plus two checks that refuse whatever the score: a
name of the question missing from the evidence, and an asked-for quantity that no
selected sentence states.

Where a gate's numbers come from, highest priority first: a calibration stored in the
index for the embedding space (``sunlib eval calibrate``), explicit settings
(``[answer] gate_threshold``, ``gate_cosine_weight``, ``gate_languages``,
``gate_threshold_bm25``), then the embedding space's ``GateProfile``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ...config import AnswerSettings, GateSetting
from ...contracts import Reading, Refusal
from ...store import Store
from .expect import Expectation
from .refusals import joined, refusal
from .scorer import Answerability, Params, load_params


@dataclass(frozen=True)
class Gate:
    """A refusal threshold for one kind of evidence score, and where it came from.

    ``score = (w * cosine + (1 - w) * coverage + v * sentence) / (1 + v)`` with w the
    cosine weight and v the sentence weight. A gate with v > 0 was fitted with the
    sentence signal; when that signal is missing (``sentence_model = "none"``) its
    ``fallback``, fitted without it, decides instead."""

    threshold: float
    cosine_weight: float  # 0 for the lexical-only gate
    source: str  # "settings", "profile <name>" or "calibrated <date> on <n> questions"
    sentence_weight: float = 0.0
    fallback: Gate | None = None

    def score(self, cosine: float | None, coverage: float, sentence: float | None) -> float:
        w = self.cosine_weight if cosine is not None else 0.0
        v = self.sentence_weight if sentence is not None else 0.0
        return (w * (cosine or 0.0) + (1 - w) * coverage + v * (sentence or 0.0)) / (1 + v)

    def usable(self, sentence: float | None) -> Gate:
        """This gate, or the one to use instead when it needs a sentence signal that is missing."""
        if self.sentence_weight and sentence is None:
            return self.fallback or replace(self, sentence_weight=0.0)
        return self

    @classmethod
    def load(cls, store: Store, key: str, default: Gate, lang: str | None = None) -> Gate:
        """The calibrated gate stored under ``key`` (for ``lang`` when it has its own), else ``default``."""
        raw = store.get_meta(key)
        if not raw:
            return default
        data = json.loads(raw)
        when = data.get("calibrated_at", "?")
        overall = cls._from(data, f"calibrated {when} on {data.get('questions', '?')} questions")
        mine = (data.get("languages") or {}).get(lang) if lang else None
        if not mine:
            return overall
        source = f"calibrated {when} on {mine.get('questions', '?')} {lang} questions"
        return replace(cls._from(mine, source), fallback=overall)

    @classmethod
    def _from(cls, data: dict[str, Any], source: str) -> Gate:
        return cls(
            float(data["threshold"]), float(data["cosine_weight"]), source, float(data.get("sentence_weight", 0.0))
        )


def gate_key(space_name: str | None) -> str:
    """Where a calibrated gate is stored: per embedding space, or ``gate:bm25`` without vectors."""
    return f"gate:{space_name}" if space_name else "gate:bm25"


# -- profiles -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateProfile:
    """An embedding space's default gates, used when neither settings nor a calibration say otherwise.

    ``threshold``/``cosine_weight``: the gate for all languages (and for a language gate whose
    sentence signal is missing); ``languages``: a gate per question language; ``lexical_threshold``:
    the coverage-only gate, when no dense score exists."""

    name: str
    threshold: float
    cosine_weight: float
    languages: Mapping[str, GateSetting] = field(default_factory=dict)
    lexical_threshold: float = 0.0


# Calibrated for the default e5 space on the bundled calibration set
# (src/sunlib/qa/sample_vault_calibration.jsonl, `sunlib eval calibrate`): e5 scores Chinese
# question-passage pairs higher than English ones, and the sentence model separates Chinese
# questions better, so each language has its own gate. The lexical threshold was fitted on the
# same set in BM25 mode.
E5 = GateProfile(
    "e5",
    threshold=0.8509,
    cosine_weight=0.9,
    languages={
        "en": GateSetting(threshold=0.8489, cosine_weight=0.95),
        "zh": GateSetting(threshold=0.6436, cosine_weight=0.95, sentence_weight=1.0),
    },
    lexical_threshold=0.4741,
)
PROFILES: dict[str, GateProfile] = {"e5": E5}
# Only e5 has been calibrated: another provider starts from e5's gates until
# `sunlib eval calibrate` stores its own (the calibration wins over the profile).
DEFAULT_PROFILE = E5


def profile_for(provider: str) -> GateProfile:
    """The gate profile of an embedding provider (``[embedding] provider``)."""
    return PROFILES.get(provider, DEFAULT_PROFILE)


def dense_setting(settings: AnswerSettings, profile: GateProfile, lang: str | None) -> tuple[GateSetting, str]:
    """The configured dense gate for a question in ``lang`` (None: the one for all languages) and its source.

    One gate for every language when ``gate_threshold`` or ``gate_cosine_weight`` is set; else the
    language's own gate from ``gate_languages`` (or the profile's); else the overall gate."""
    explicit = settings.gate_threshold is not None or settings.gate_cosine_weight is not None
    languages = settings.gate_languages if settings.gate_languages is not None else profile.languages
    source = "settings" if settings.gate_languages is not None else f"profile {profile.name}"
    if not explicit and lang is not None and lang in languages:
        return languages[lang], f"{source} for {lang} questions"
    threshold = profile.threshold if settings.gate_threshold is None else settings.gate_threshold
    weight = profile.cosine_weight if settings.gate_cosine_weight is None else settings.gate_cosine_weight
    return GateSetting(threshold=threshold, cosine_weight=weight), "settings" if explicit else f"profile {profile.name}"


def lexical_setting(settings: AnswerSettings, profile: GateProfile) -> Gate:
    if settings.gate_threshold_bm25 is not None:
        return Gate(settings.gate_threshold_bm25, 0.0, "settings")
    return Gate(profile.lexical_threshold, 0.0, f"profile {profile.name}")


# -- the decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReaderSignal:
    """The reader's readings of the kept passages (in their order) and the best of them."""

    readings: tuple[Reading, ...]
    reader: str
    across: tuple[bool, ...] = ()  # per passage: written in another language than the question

    @property
    def best_across(self) -> bool:
        """Whether the passage the reader found likeliest to answer is in the other language."""
        return bool(self.readings) and bool(self.across) and self.across[self.best]

    @property
    def best(self) -> int:
        return max(range(len(self.readings)), key=lambda i: self.readings[i].probability)

    @property
    def probability(self) -> float:
        return self.readings[self.best].probability if self.readings else 0.0


@dataclass(frozen=True)
class GateSignals:
    """What selection measured on the kept evidence, for the gate to decide on."""

    kept: int  # passages selected
    top_cosine: float | None  # best dense cosine among them (None: no dense score)
    coverage: float  # IDF-weighted share of the question's terms in the top three
    sentence_cosine: float | None  # best question-sentence cosine (None: no sentence model)
    missing_terms: tuple[str, ...] = ()  # question terms absent from the top three, heaviest first
    missing_names: tuple[str, ...] = ()  # names of the question no kept passage mentions
    expects: Expectation | None = None  # the kind of answer the question asks for
    expectation_met: bool = True
    content_terms: bool = True  # False: the question has no word to look up ("???")
    answerability: Answerability | None = None  # the learned scorer's, when it ran
    reading: ReaderSignal | None = None  # the reader's, when one is configured

    @property
    def checks_passed(self) -> bool:
        """Whether the name and answer-type checks passed (they refuse whatever the gate score)."""
        return bool(self.kept) and not self.missing_names and self.expectation_met


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    score: float
    threshold: float
    gate: Gate  # the gate that decided (its weights and source)
    refusals: tuple[Refusal, ...] = ()
    overruled: tuple[Refusal, ...] = ()  # the gate's own refusals that the reader overruled (AcrossLanguages)

    @property
    def reason(self) -> str | None:
        return joined(self.refusals)


class RefusalGate(Protocol):
    def decide(self, signals: GateSignals) -> GateDecision: ...


@dataclass(frozen=True)
class ScoreGate:
    """The dense gate when a dense cosine exists, else the lexical gate; plus the two checks."""

    dense: Gate
    lexical: Gate

    def decide(self, signals: GateSignals) -> GateDecision:
        s = signals
        gate = (self.dense if s.top_cosine is not None else self.lexical).usable(s.sentence_cosine)
        score = gate.score(s.top_cosine, s.coverage, s.sentence_cosine)
        low = None
        if score < gate.threshold:
            low = refusal(
                "low_gate",
                gate_score=score,
                threshold=gate.threshold,
                top_cosine=s.top_cosine,
                coverage=s.coverage,
                sentence_cosine=s.sentence_cosine if gate.sentence_weight else None,
                missing_terms=list(s.missing_terms[:5]),
            )
        found = _refusals(s, low)
        return GateDecision(not found, score, gate.threshold, gate, tuple(found))


def _refusals(s: GateSignals, low: Refusal | None, checks: bool = True) -> list[Refusal]:
    """Every reason to refuse: no word to look up, no evidence, else the gate's own (``low``) and
    (with ``checks``) the name and answer-type checks, which refuse whatever the score."""
    if not s.content_terms:
        return [refusal("no_content_terms")]
    if not s.kept:
        return [refusal("no_evidence")]
    found = [low] if low is not None else []
    if not checks:
        return found
    if s.missing_names:
        found.append(refusal("missing_name", names=list(s.missing_names[:5])))
    if s.expects is not None and not s.expectation_met:
        found.append(
            refusal("missing_quantity", expects=s.expects.describe(), kind=s.expects.kind, unit=s.expects.unit)
        )
    return found


@dataclass(frozen=True)
class LearnedGate:
    """Refuses when the learned answerability probability is below the threshold; the checks too.

    Without a probability (no scorer parameters shipped) the ``fallback`` gate decides."""

    threshold: float
    source: str
    fallback: RefusalGate

    def decide(self, signals: GateSignals) -> GateDecision:
        s = signals
        if s.answerability is None:
            return self.fallback.decide(s)
        gate = Gate(self.threshold, 0.0, self.source)
        p = s.answerability.probability
        low = None
        if p < self.threshold:
            low = refusal(
                "low_answerability",
                probability=p,
                threshold=self.threshold,
                top_cosine=s.top_cosine,
                coverage=s.coverage,
                missing_terms=list(s.missing_terms[:5]),
            )
        found = _refusals(s, low)
        return GateDecision(not found, p, self.threshold, gate, tuple(found))


@dataclass(frozen=True)
class ReaderGate:
    """Refuses when no kept passage is likely to answer: the reader's best probability over them is
    below one threshold, the same for every vault and language. The name and answer-type checks
    run only with ``checks`` (the reader reads names and quantities itself). Without readings
    (no reader configured) the ``fallback`` gate decides."""

    threshold: float
    source: str
    fallback: RefusalGate
    checks: bool = False

    def decide(self, signals: GateSignals) -> GateDecision:
        s = signals
        if s.reading is None or not s.reading.readings:
            return self.fallback.decide(s)
        gate = Gate(self.threshold, 0.0, self.source)
        p = s.reading.probability
        low = None
        if p < self.threshold:
            low = refusal("reader_unanswerable", probability=p, threshold=self.threshold, reader=s.reading.reader)
        found = _refusals(s, low, self.checks)
        return GateDecision(not found, p, self.threshold, gate, tuple(found))


# the refusals that a low score alone gives; the others (no evidence, a missing name, a missing
# quantity) stand whatever the reader says
_SCORE_REFUSALS = frozenset({"low_gate", "low_answerability"})


@dataclass(frozen=True)
class AcrossLanguages:
    """A gate whose low score the reader may overrule when the question and its evidence are in
    two languages.

    The score and learned gates measure words: a question's terms in the passages, their cosine
    in one space. Asked in English of Chinese notes (or back), a passage that answers shares few
    of its words, so the gate refuses most such questions however good the evidence. The reader
    reads the question and the passage together in either language. When the passage it finds
    likeliest to answer is in the other language and its probability is at least ``threshold``,
    a refusal for a low score is overruled; the name and answer-type checks still refuse."""

    inner: RefusalGate
    threshold: float

    def decide(self, signals: GateSignals) -> GateDecision:
        d = self.inner.decide(signals)
        r = signals.reading
        if d.passed or r is None or not r.best_across or r.probability < self.threshold:
            return d
        if any(x.code not in _SCORE_REFUSALS for x in d.refusals):
            return d
        return replace(d, passed=True, refusals=(), overruled=d.refusals)


def build_gate(
    settings: AnswerSettings,
    profile: GateProfile,
    store: Store,
    space_name: str | None,
    lang: str,
    reader_threshold: float | None = None,
) -> RefusalGate:
    """The gate for one question: the profile's numbers, then settings, then a stored calibration.

    ``space_name`` is None when no dense route runs (BM25 mode): then no calibration of a dense
    space applies."""
    own, source = dense_setting(settings, profile, lang)
    overall, overall_source = dense_setting(settings, profile, None)
    default = Gate(
        own.threshold,
        own.cosine_weight,
        source,
        own.sentence_weight,
        Gate(overall.threshold, overall.cosine_weight, overall_source),
    )
    dense = Gate.load(store, gate_key(space_name), default, lang) if space_name else default
    lexical = Gate.load(store, gate_key(None), lexical_setting(settings, profile), lang)
    scored = ScoreGate(dense, lexical)
    if settings.gate == "reader" and reader_threshold is not None:
        explicit = settings.reader_threshold is not None
        threshold = settings.reader_threshold if settings.reader_threshold is not None else reader_threshold
        source = "reader, " + ("settings" if explicit else "the threshold shipped with the model")
        return ReaderGate(threshold, source, scored, settings.reader_checks)
    params = load_params() if settings.gate == "learned" else None
    gate: RefusalGate = scored
    if params is not None:
        threshold, source, _ = learned_threshold(settings, store, space_name, params)
        gate = LearnedGate(threshold, f"learned scorer, {source}", scored)
    if settings.reader_across is not None and settings.reader_across < 1.0:  # 1.0: off (TOML has no None)
        gate = AcrossLanguages(gate, settings.reader_across)
    return gate


# -- the learned gate's threshold for this vault ----------------------------------------------


def selfcal_key(space_name: str | None) -> str:
    """Where ``sunlib calibrate`` stores a vault's own threshold: per embedding space (``selfcal:bm25``
    without a dense route), because the answerability probability reads the dense cosine."""
    return f"selfcal:{space_name}" if space_name else "selfcal:bm25"


def stored_calibration(store: Store, space_name: str | None) -> dict[str, Any] | None:
    """The self-calibration stored for this space, as stored (None when there is none)."""
    raw = store.get_meta(selfcal_key(space_name))
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("threshold"), int | float) else None


def calibration_applies(data: dict[str, Any], settings: AnswerSettings, params: Params) -> bool:
    """Whether a stored self-calibration was made with these scorer parameters and the same model
    variant (with or without the sentence-cosine features): otherwise its threshold means nothing."""
    return data.get("scorer") == params.fingerprint and bool(data.get("cosine_features", True)) == (
        settings.sentence_model != "none"
    )


def learned_threshold(
    settings: AnswerSettings, store: Store, space_name: str | None, params: Params
) -> tuple[float, str, dict[str, Any] | None]:
    """The learned gate's threshold, its source, and the stored self-calibration (if any).

    Priority: ``[answer] answerable_threshold`` > this vault's self-calibration (``sunlib
    calibrate``), when it was made with the shipped scorer parameters > the shipped threshold."""
    stored = stored_calibration(store, space_name)
    if settings.answerable_threshold is not None:
        return settings.answerable_threshold, "settings", stored
    if stored is not None and calibration_applies(stored, settings, params):
        probes = stored.get("probes") or {}
        n = int(probes.get("answerable", 0)) + int(probes.get("unanswerable", 0))
        source = f"self-calibrated {stored.get('calibrated_at', '?')} on {n} probes"
        return float(stored["threshold"]), source, stored
    return params.threshold, params.source, stored
