"""The offline writer: an answer made only of evidence units, each cited, the answer first.

With a reader (``[answer] reader``), the answer opens with the unit that holds the reader's span in
the passage it found most likely to answer, the span in bold; the units that follow are chosen as
below. Without one, or when the reader's span lies outside every unit (in the heading line) or in a
code line, the scorer's best unit opens.

The units (sentences, list items with their lead-in, whole numbered lists, table rows with
their header, definition lines, code lines; ``answer.gate.units``) come scored by the learned
answer scorer (``answer.gate.scorer``): the probability that each states the answer. The best
one opens the answer. At most ``max_sentences - 1`` more follow, best first, each only if
its probability is at least ``FOLLOW_SHARE`` of the best one's and it adds something: a
unit already contained in a quoted one (an item of a quoted list, a sentence repeated by a
heading unit) is skipped, and so is a unit that quotes the question itself. Each unit is
quoted as the reader sees it (Markdown rendered) and followed by ``[ref:chunk_id]``. Nothing
is paraphrased, so nothing can be stated that the evidence does not say.
"""

from __future__ import annotations

from collections.abc import Callable

from ...config import Settings
from ...contracts import Draft, Reading, ScoredUnit
from ...providers.base import Embedder, Writer, WriteRequest
from ...providers.registry import sentence_model
from ...text import estimate_tokens, is_cjk
from ...text.refs import forged_markers
from ...text.tokens import text_script
from ..gate.scorer import AnswerScorer, Passage, load_params

# A unit follows the first one only if its probability is at least this share of the best one's.
# Chosen on the training sets (the package-README set and the calibration set, with
# tools/scorer/train.py's records): with four units at most, 0.2 puts a labelled answer unit
# in the quote for 82% of their answerable questions at 3.6 units on average; 0.5 gives 75% at 2.5.
FOLLOW_SHARE = 0.2
PER_SOURCE = 3  # units one passage may give


class ExtractiveWriter(Writer):
    name = "extractive"
    model = "extractive"

    def __init__(self, sentence_model: Callable[[], Embedder] | None = None) -> None:
        self._sentence_model = sentence_model

    def write(self, request: WriteRequest, on_token: Callable[[str], None] | None = None) -> Draft:
        in_context = {ev.chunk_id for ev in request.context.evidence}
        units = [u for u in (request.units or self._score(request)) if u.chunk_id in in_context]
        readings = {k: v for k, v in request.readings.items() if k in in_context}
        # Of passages in the question's script and in the other one, the reader's span opens from the
        # former (a translation or an unrelated page in the other language never opens the answer);
        # a question over notes in the other language only keeps them all.
        script = text_script(request.question)
        same = {ev.chunk_id for ev in request.context.evidence if text_script(ev.text) == script}
        if same & readings.keys():
            readings = {k: v for k, v in readings.items() if k in same}
        first = opener(units, readings)
        if first is None:
            taken = pick(units, request.max_sentences, request.question)
            parts = [f"{quote(u)} [ref:{u.chunk_id}]" for u in taken]
        else:
            unit, span = first
            rest = [u for u in units if u is not unit and u.unit.text not in unit.unit.text]
            taken = [unit, *pick(rest, request.max_sentences - 1, request.question)]
            parts = [f"{highlight(quote(unit), span)} [ref:{unit.chunk_id}]"]
            parts += [f"{quote(u)} [ref:{u.chunk_id}]" for u in taken[1:]]
        text, _ = forged_markers(_join(parts))  # a quoted "[1]" would stream as a citation
        if on_token is not None and text:
            on_token(text)
        details = {
            "sentence_model": self._sentence_model is not None,
            "candidates": len(units),
            "quoted": [u.explain() for u in taken],
            "opened_with_reader_span": first is not None,
        }
        return Draft(text=text, model=self.model, tokens_out=estimate_tokens(text), details=details)

    def _score(self, request: WriteRequest) -> list[ScoredUnit]:
        """Units scored here, when the request brings none (the writer used on its own)."""
        params = load_params()
        if params is None:
            return []
        passages = [
            Passage(ev.chunk_id, ev.text, " > ".join(ev.heading_path) or ev.title, i, ev.score)
            for i, ev in enumerate(request.context.evidence, 1)
        ]  # (no dense cosine: evidence does not carry one)
        scored, _ = AnswerScorer(params, self._sentence_model).score_units(
            request.question, request.term_weights, passages
        )
        return scored


# The units a reader's span may open the answer with: a span in a whole list (its items are units of
# their own) or in a code line (an example, rarely the answer's sentence) leaves the order to the scorer.
_OPENERS = ("sentence", "definition", "heading", "item", "row")


def opener(units: list[ScoredUnit], readings: dict[str, Reading]) -> tuple[ScoredUnit, str] | None:
    """The unit that holds the reader's span in its most likely passage, with the span's text."""
    if not readings:
        return None
    chunk = max(readings, key=lambda c: readings[c].probability)
    reading = readings[chunk]
    if reading.end <= reading.start:
        return None
    own = sorted(
        (u for u in units if u.chunk_id == chunk and u.unit.kind not in ("list", "steps")), key=lambda u: u.unit.start
    )
    holding = [u for u in own if u.unit.start <= reading.start]
    if not holding or holding[-1].unit.kind not in _OPENERS:
        return None
    unit = holding[-1]
    return unit, unit_span(unit, reading)


def unit_span(unit: ScoredUnit, reading: Reading) -> str:
    """The span's text as the unit quotes it: the raw span, trimmed, when the unit's text holds it."""
    span = reading.text.strip()
    return span if span and span in unit.unit.text else ""


def highlight(text: str, span: str) -> str:
    """``text`` with the first occurrence of ``span`` in bold (unchanged when it holds no such span)."""
    if not span or span not in text or "**" in span:
        return text
    return text.replace(span, f"**{span}**", 1)


def pick(units: list[ScoredUnit], limit: int, question: str = "") -> list[ScoredUnit]:
    """The best unit, then up to ``limit - 1`` more that are nearly as likely and add something.

    A unit that quotes the question itself (a code line running it, a heading asking it) is no answer."""
    echo = _plain(question)
    ranked = sorted((u for u in units if not (echo and echo in _plain(u.unit.text))), key=lambda u: -u.probability)
    if not ranked:
        return []
    floor = ranked[0].probability * FOLLOW_SHARE
    taken: list[ScoredUnit] = []
    per_source: dict[str, int] = {}
    for u in ranked:
        if len(taken) >= limit or (taken and u.probability < floor):
            break
        if per_source.get(u.chunk_id, 0) >= PER_SOURCE:
            continue
        if any(u.unit.text in t.unit.text or t.unit.text in u.unit.text for t in taken):
            continue
        taken.append(u)
        per_source[u.chunk_id] = per_source.get(u.chunk_id, 0) + 1
    return taken


def _plain(text: str) -> str:
    return " ".join(text.casefold().strip().rstrip("?？.。!！").split())


def quote(u: ScoredUnit) -> str:
    """A unit as the answer shows it: a code line in backticks, an item after its lead-in."""
    if u.unit.kind == "code":
        return f"`{u.unit.text}`"
    if u.unit.kind == "item" and u.unit.lead:
        return f"{u.unit.lead} {u.unit.text}"
    return u.unit.text


def _join(parts: list[str]) -> str:
    if not parts:
        return ""
    if any("\n" in p for p in parts):  # a quoted list: every unit its own paragraph
        return "\n\n".join(parts)
    cjk = sum(1 for p in parts for ch in p[:20] if is_cjk(ch))
    return ("" if cjk > 5 * len(parts) else " ").join(parts)


def create_extractive(settings: Settings) -> Writer:
    return ExtractiveWriter(sentence_model(settings))
