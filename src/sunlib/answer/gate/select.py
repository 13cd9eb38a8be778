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
  the index win over settings, and settings over the space's profile. Selection
  measures the signals (``GateSignals``); the decision is the gate's (``answer.gate.gate``),
  with one ``Refusal`` (code, parameters, message) per reason.
* Two checks that no score can replace, each with its own reason: every name the
  question mentions (``HNSW``, ``--as``, ``macOS``; see ``text.terms.names``) must
  appear in the selected evidence, and a question that asks for a duration, a size or
  a count must find one stated there (``answer.gate.expect``).
* The reader (``[answer] reader``, providers/readers) reads the question with every kept
  passage (its heading path on a first line): the probability that it answers and the
  answer's span, in offsets of the chunk text. The reader gate decides on the best of them
  (``[answer] gate = "reader"``); the extractive writer opens with the span's unit.
* Confidence (seed 002 phase 4): the mean coverage of the top three chunks, with
  ``low`` and ``caution`` levels that the LLM writer's prompt reacts to.
* Expansion (seed 002 phase 3): only seeds scoring at least ``expand_threshold`` get
  their neighbouring chunks, at most ``max_neighbors`` in all, each marked with the
  seed it came from.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from ...config import AnswerSettings
from ...contracts import Evidence, Ranked, Reading, ScoredUnit
from ...providers.registry import Embedder, Reader
from ...store import ChunkRow, DocumentStore
from ...text import TermWeights, language
from ...text.sentences import clean_sentence, sentence_spans
from ...text.terms import as_words, fold, has_content, names, token_set
from ...text.tokens import text_script
from .expect import Expectation, expected_answer
from .gate import Gate, GateDecision, GateSignals, ReaderSignal, RefusalGate, gate_key
from .scorer import AnswerScorer, Passage, answerable_features

__all__ = ["GATE_DEPTH", "Gate", "Selection", "best_sentence_cosine", "evidence_from", "expand", "gate_key", "select"]

GATE_DEPTH = 3  # chunks whose terms count towards coverage and confidence
T = TypeVar("T")


def best_sentence_cosine(question: str, texts: Sequence[str], model: Embedder) -> float | None:
    """The highest cosine between the question and any sentence or heading of ``texts``.

    Headings count: a note that asks the user's question as a heading is about it."""
    spans = ((text, s, e) for text in texts for s, e in sentence_spans(text))
    sentences = [x for x in dict.fromkeys(clean_sentence(text[s:e]) for text, s, e in spans) if x]
    if not sentences:
        return None
    return float(np.max(model.embed(sentences) @ model.embed_query(question)))


@dataclass(frozen=True)
class Selection:
    """The kept evidence, the signals measured on it, and the gate's decision."""

    kept: tuple[Ranked, ...]
    dropped_low: int
    dropped_dupes: int
    signals: GateSignals
    decision: GateDecision
    confidence: float
    level: str  # high | caution | low
    units: tuple[ScoredUnit, ...] = ()  # the answer units of the kept passages, best first
    translations: tuple[tuple[str, str], ...] = ()  # (dropped chunk, its kept translation)

    @property
    def passed(self) -> bool:
        return self.decision.passed

    @property
    def readings(self) -> dict[str, Reading]:
        """The reader's reading of each kept chunk, by chunk id (empty without a reader)."""
        r = self.signals.reading
        return {k.hit.chunk_id: x for k, x in zip(self.kept, r.readings, strict=True)} if r else {}

    @property
    def reason(self) -> str | None:
        return self.decision.reason

    @property
    def gate(self) -> Gate:
        return self.decision.gate

    @property
    def gate_score(self) -> float:
        return self.decision.score

    @property
    def threshold(self) -> float:
        return self.decision.threshold

    @property
    def top_cosine(self) -> float | None:
        return self.signals.top_cosine

    @property
    def coverage(self) -> float:
        return self.signals.coverage

    @property
    def sentence_cosine(self) -> float | None:
        return self.signals.sentence_cosine

    @property
    def missing_terms(self) -> tuple[str, ...]:
        return self.signals.missing_terms

    @property
    def missing_names(self) -> tuple[str, ...]:
        return self.signals.missing_names

    @property
    def expects(self) -> Expectation | None:
        return self.signals.expects

    @property
    def expectation_met(self) -> bool:
        return self.signals.expectation_met

    @property
    def checks_passed(self) -> bool:
        return self.signals.checks_passed


Vectors = Callable[[Sequence[str]], Mapping[str, np.ndarray]]  # chunk ids -> their e5 vectors (those that have one)


def _keep(
    ranked: Sequence[Ranked], settings: AnswerSettings, question: str = "", vectors: Vectors | None = None
) -> tuple[list[Ranked], int, int, list[tuple[str, str]]]:
    """Candidates at or above ``min_score``, without repeated texts or translations, at most ``top_k``.

    With ``vectors``: a candidate in the other script than a kept passage, with an e5 cosine of at
    least ``translation_cosine`` to it, is that passage's translation. Of the two, the one in the
    question's script is kept, in the place of the first; the other is dropped (listed as (dropped,
    kept)). A question whose answer is only in the other language has no twin there, so it keeps it."""
    usable = []
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
        usable.append(r)
    twins: list[tuple[str, str]] = []
    if vectors is None or settings.translation_cosine <= 0:
        return usable[: settings.top_k], low, dupes, twins
    pool = usable[: 2 * settings.top_k]  # enough to fill top_k after dropping translations
    scripts = [text_script(r.hit.text) for r in pool]
    if len(set(scripts)) < 2:  # one language: no translation to look for
        return usable[: settings.top_k], low, dupes, twins
    found = vectors([r.hit.chunk_id for r in pool])
    asked = text_script(question)
    kept: list[Ranked] = []
    for r, script in zip(pool, scripts, strict=True):
        v = found.get(r.hit.chunk_id)
        twin = None
        if v is not None:
            for i, k in enumerate(kept):
                w = found.get(k.hit.chunk_id)
                if w is not None and text_script(k.hit.text) != script and float(v @ w) >= settings.translation_cosine:
                    twin = i
                    break
        if twin is None:
            if len(kept) < settings.top_k:
                kept.append(r)
        elif script == asked:  # the translation in the question's language takes its twin's place
            twins.append((kept[twin].hit.chunk_id, r.hit.chunk_id))
            kept[twin] = r
        else:
            twins.append((r.hit.chunk_id, kept[twin].hit.chunk_id))
    return kept, low, dupes, twins


def reader_text(heading_path: Sequence[str], text: str) -> tuple[str, int]:
    """What the reader reads of a chunk: its heading path on a first line (names often live only
    there), then the text; and the length of that first line, to map a span back into ``text``."""
    head = " > ".join(h for h in heading_path if h)
    return (f"{head}\n{text}", len(head) + 1) if head else (text, 0)


def read_passages(reader: Reader, question: str, passages: Sequence[tuple[Sequence[str], str]]) -> ReaderSignal:
    """The reader's readings of (heading path, text) passages, spans as offsets into each text (a span
    the reader found in the heading line is no span of the text: it maps to the empty span at 0)."""
    framed = [reader_text(h, t) for h, t in passages]
    out: list[Reading] = []
    readings = reader.read(question, [f for f, _ in framed])
    for (_, text), (_, shift), reading in zip(passages, framed, readings, strict=True):
        start, end = max(0, reading.start - shift), max(0, reading.end - shift)
        if end <= start:
            start = end = 0
        out.append(replace(reading, start=start, end=end, text=text[start:end]))
    asked = language(question)
    return ReaderSignal(tuple(out), reader.name, tuple(language(text) != asked for _, text in passages))


def in_background(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    """``fn(*args)`` on a thread of its own; the callable returned waits for its value (or raises
    its exception). The reader's run (about 30 ms a passage, C++ that frees the GIL) overlaps the
    sentence model and the answer scorer: the same values, sooner on a second core."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="sunlib-reader-read", daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        if "error" in box:
            raise box["error"]
        value: T = box["value"]
        return value

    return result


def select(
    question: str,
    ranked: Sequence[Ranked],
    weights: TermWeights,
    gate: RefusalGate,
    settings: AnswerSettings,
    sentence_model: Callable[[], Embedder] | None = None,
    scorer: AnswerScorer | None = None,
    reader: Reader | None = None,
    vectors: Vectors | None = None,
) -> Selection:
    kept, low, dupes, twins = _keep(ranked, settings, question, vectors)
    head = kept[:GATE_DEPTH]
    coverage, missing = weights.coverage(token_set(r.hit.text for r in head))
    missing = as_words(question, missing)
    cosines = [r.hit.routes["dense"].score for r in kept if "dense" in r.hit.routes and r.hit.routes["dense"].rank]
    texts = [r.hit.text for r in kept]
    # a name the question uses may live only in the chunk's heading path or its note's title
    evidence_tokens = token_set(fold(" ".join((r.hit.title, *r.hit.heading_path, r.hit.text))) for r in kept)
    expects = expected_answer(question) if settings.check_answer_type else None
    content = bool(weights) and has_content(question)
    reading = None
    if reader is not None and kept and content:  # its ONNX run frees the GIL: the signals below are measured meanwhile
        reading = in_background(read_passages, reader, question, [(r.hit.heading_path, r.hit.text) for r in kept])
    signals = GateSignals(
        kept=len(kept),
        top_cosine=max(cosines) if cosines else None,
        coverage=coverage,
        sentence_cosine=best_sentence_cosine(question, texts, sentence_model()) if sentence_model and kept else None,
        missing_terms=tuple(missing),
        missing_names=(
            tuple(n.text for n in names(question) if not set(n.tokens) <= evidence_tokens)
            if settings.check_names
            else ()
        ),
        expects=expects,
        expectation_met=expects is None or expects.met_by(texts),
        content_terms=content,
    )
    units: list[ScoredUnit] = []
    if scorer is not None and kept and signals.content_terms:
        passages = [Passage.of(r, i) for i, r in enumerate(kept, 1)]
        units, rows = scorer.score_units(question, weights, passages)
        probabilities = np.asarray([u.probability for u in units])
        # the feature rows are in the featurizer's order; the probabilities sorted: only their set counts
        features = answerable_features(
            probabilities,
            rows,
            dense_cosine=signals.top_cosine,
            coverage=coverage,
            missing_names=bool(signals.missing_names),
            quantity_missing=not signals.expectation_met,
            cross_language=language(kept[0].hit.text) != language(question),
            kept=len(kept),
            terms=len(weights.weights),
        )
        signals = replace(signals, answerability=scorer.answerability(features))
    if reading is not None:
        signals = replace(signals, reading=reading())
    per_chunk = [weights.coverage(token_set([r.hit.text]))[0] for r in head] if signals.content_terms else [0.0]
    confidence = sum(per_chunk) / len(per_chunk) if per_chunk else 0.0
    level = (
        "low"
        if confidence < settings.confidence_warn
        else "caution"
        if confidence < settings.confidence_caution
        else "high"
    )
    return Selection(
        tuple(kept), low, dupes, signals, gate.decide(signals), confidence, level, tuple(units), tuple(twins)
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
