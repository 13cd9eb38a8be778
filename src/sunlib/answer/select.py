"""Select evidence, decide whether to answer at all, and widen strong evidence.

* Minimum score (seed 002 phase 1): candidates whose rerank score (best = 1.0) is
  below ``min_score`` are dropped; repeated texts are dropped; ``top_k`` remain.
* Refusal gate (seed 001): ``gate = (w * top cosine + (1 - w) * coverage + v * best
  sentence) / (1 + v)``, where the top cosine is the best dense similarity among the
  selected chunks, coverage is the IDF-weighted share of the question's terms that
  the top three chunks contain, and best sentence is the highest cosine between the
  question and one sentence or heading of the selected chunks under the sentence model
  (``[answer] sentence_model``). The sentence weight v is 0 unless a calibration
  found it helps for the question's language (for Chinese it does).
  Below the threshold, the question is refused with the numbers in the reason.
  Without a dense route the gate is coverage alone, against its own threshold.
  Thresholds are per embedding space, and within it per question language when the
  calibration set had enough questions in that language: calibrated ones stored in
  the index win over the configured defaults.
* Two checks that no score can replace, each with its own reason: every name the
  question mentions (``HNSW``, ``--as``, ``macOS``; see ``text.terms.names``) must
  appear in the selected evidence, and a question that asks for a duration, a size or
  a count must find one stated there (``answer.expect``).
* Confidence (seed 002 phase 4): the mean coverage of the top three chunks, with
  ``low`` and ``caution`` levels that the LLM writer's prompt reacts to.
* Expansion (seed 002 phase 3): only seeds scoring at least ``expand_threshold`` get
  their neighbouring chunks, at most ``max_neighbors`` in all, each marked with the
  seed it came from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..config import AnswerSettings
from ..contracts import Evidence, Ranked
from ..providers.registry import Embedder
from ..store import ChunkRow, DocumentStore
from ..text import TermWeights
from ..text.sentences import clean_sentence, sentence_spans
from ..text.terms import fold, names, token_set
from .expect import Expectation, expected_answer

GATE_DEPTH = 3  # chunks whose terms count towards coverage and confidence


@dataclass(frozen=True)
class Gate:
    """A refusal threshold for one kind of evidence score, and where it came from.

    ``score = (w * cosine + (1 - w) * coverage + v * sentence) / (1 + v)`` with w the
    cosine weight and v the sentence weight. A gate with v > 0 was fitted with the
    sentence signal; when that signal is missing (``sentence_model = "none"``) its
    ``fallback``, fitted without it, decides instead."""

    threshold: float
    cosine_weight: float  # 0 for the lexical-only gate
    source: str  # "settings" or "calibrated <date> on <n> questions"
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
    def load(cls, store: DocumentStore, key: str, default: Gate, lang: str | None = None) -> Gate:
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


def best_sentence_cosine(question: str, texts: Sequence[str], model: Embedder) -> float | None:
    """The highest cosine between the question and any sentence or heading of ``texts``.

    Headings count: a note that asks the user's question as a heading is about it."""
    spans = ((text, s, e) for text in texts for s, e in sentence_spans(text))
    sentences = [x for x in dict.fromkeys(clean_sentence(text[s:e]) for text, s, e in spans) if x]
    if not sentences:
        return None
    return float(np.max(model.embed(sentences) @ model.embed_query(question)))


def gate_key(space_name: str | None) -> str:
    """Where a calibrated gate is stored: per embedding space, or ``gate:bm25`` without vectors."""
    return f"gate:{space_name}" if space_name else "gate:bm25"


@dataclass(frozen=True)
class Selection:
    kept: tuple[Ranked, ...]
    dropped_low: int
    dropped_dupes: int
    top_cosine: float | None
    coverage: float
    sentence_cosine: float | None
    missing_terms: tuple[str, ...]
    gate_score: float
    threshold: float
    passed: bool
    gate: Gate
    confidence: float
    level: str
    reason: str | None
    missing_names: tuple[str, ...] = ()
    expects: Expectation | None = None
    expectation_met: bool = True

    @property
    def checks_passed(self) -> bool:
        """Whether the name and answer-type checks passed (they refuse whatever the gate score)."""
        return bool(self.kept) and not self.missing_names and self.expectation_met


def select(
    question: str,
    ranked: Sequence[Ranked],
    weights: TermWeights,
    dense_gate: Gate,
    lexical_gate: Gate,
    settings: AnswerSettings,
    sentence_model: Callable[[], Embedder] | None = None,
) -> Selection:
    kept: list[Ranked] = []
    seen: set[str] = set()
    low = dupes = 0
    for r in ranked:
        if r.score < settings.min_score:
            low += 1
            continue
        key = " ".join(r.hit.text.split())
        if key in seen:
            dupes += 1
            continue
        seen.add(key)
        if len(kept) < settings.top_k:
            kept.append(r)
    head = kept[:GATE_DEPTH]
    coverage, missing = weights.coverage(token_set(r.hit.text for r in head))
    cosines = [r.hit.routes["dense"].score for r in kept if "dense" in r.hit.routes and r.hit.routes["dense"].rank]
    top_cosine = max(cosines) if cosines else None
    texts = [r.hit.text for r in kept]
    sentence_cosine = best_sentence_cosine(question, texts, sentence_model()) if sentence_model and kept else None
    gate = (dense_gate if top_cosine is not None else lexical_gate).usable(sentence_cosine)
    gate_score = gate.score(top_cosine, coverage, sentence_cosine)
    threshold = gate.threshold
    parts = (
        f"top cosine {top_cosine:.3f}, coverage {coverage:.2f}"
        if top_cosine is not None
        else f"coverage {coverage:.2f}, no dense score"
    )
    if gate.sentence_weight and sentence_cosine is not None:
        parts += f", best sentence {sentence_cosine:.3f}"
    per_chunk = [weights.coverage(token_set([r.hit.text]))[0] for r in head]
    confidence = sum(per_chunk) / len(per_chunk) if per_chunk else 0.0
    level = (
        "low"
        if confidence < settings.confidence_warn
        else "caution"
        if confidence < settings.confidence_caution
        else "high"
    )
    evidence_tokens = token_set(fold(r.hit.text) for r in kept)
    missing_names = (
        tuple(n.text for n in names(question) if not set(n.tokens) <= evidence_tokens) if settings.check_names else ()
    )
    expects = expected_answer(question) if settings.check_answer_type else None
    expectation_met = expects is None or expects.met_by(r.hit.text for r in kept)
    reasons: list[str] = []
    if not kept:
        reasons.append("no passage of the notes visible to you matches the question")
    else:
        if gate_score < threshold:
            absent = f"; not in the evidence: {', '.join(missing[:5])}" if missing else ""
            reasons.append(f"gate score {gate_score:.3f} < {threshold:.3f} ({parts}){absent}")
        if missing_names:
            reasons.append(f"no selected passage mentions {', '.join(missing_names[:5])}")
        if expects is not None and not expectation_met:
            reasons.append(f"the question asks for {expects.describe()}, and no selected passage states one")
    passed = not reasons
    reason = "; ".join(reasons) or None
    return Selection(
        tuple(kept),
        low,
        dupes,
        top_cosine,
        coverage,
        sentence_cosine,
        tuple(missing),
        gate_score,
        threshold,
        passed,
        gate,
        confidence,
        level,
        reason,
        missing_names,
        expects,
        expectation_met,
    )


def expand(store: DocumentStore, kept: Sequence[Ranked], settings: AnswerSettings) -> list[tuple[ChunkRow, Ranked]]:
    """Neighbours of strong seeds: (neighbour row, the seed it extends), best seeds first."""
    if settings.max_neighbors == 0 or settings.expand_radius == 0:
        return []
    taken = {r.hit.chunk_id for r in kept}
    out: list[tuple[ChunkRow, Ranked]] = []
    for seed in kept:
        if seed.score < settings.expand_threshold:
            continue
        for row in store.neighbours(seed.hit.chunk_id, settings.expand_radius):
            if row.chunk_id in taken:
                continue
            taken.add(row.chunk_id)
            out.append((row, seed))
            if len(out) >= settings.max_neighbors:
                return out
    return out


def evidence_from(hit_or_row: Ranked | ChunkRow, score: float, expanded_from: str | None = None) -> Evidence:
    if isinstance(hit_or_row, Ranked):
        h = hit_or_row.hit
        c = h.citation
        return Evidence(
            0,
            h.chunk_id,
            h.note_id,
            h.path,
            h.title,
            h.heading_path,
            h.text,
            score,
            c.start,
            c.end,
            c.start_line,
            c.end_line,
            h.ordinal,
            expanded_from,
        )
    row = hit_or_row
    return Evidence(
        0,
        row.chunk_id,
        row.note_id,
        row.path,
        row.title,
        row.heading_path,
        row.text,
        score,
        row.start16,
        row.end16,
        row.start_line,
        row.end_line,
        row.ordinal,
        expanded_from,
    )
