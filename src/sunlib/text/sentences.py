"""Sentence spans for English and Chinese prose.

A sentence ends at ``.!?`` followed by whitespace, at the CJK marks ``。！？；``
(and the full-width ``！？``), optionally followed by closing quotes or brackets,
and at a line break that starts a list item, table row or quote. Spans index
into the given text, so callers can map them back to the note.

``quotable_sentences`` gives the sentences of a passage as an answer would quote
them: rendered as the note's reader sees them (``render.render_markdown``: no
wikilink brackets, link targets, callout markers, emphasis marks or HTML tags), one
line each, without list, heading or quote markers, and only those long enough to say
something (the extractive writer and the refusal gate use the same).
"""

from __future__ import annotations

import re

from .refs import defuse_refs
from .render import render_markdown
from .tokens import is_cjk

_CLOSERS = re.escape("\"'”’」』）)]】")
_END = re.compile(
    rf"(?:[.!?]+[{_CLOSERS}]*(?=\s)|[。！？；]+[{_CLOSERS}]*|\n(?=\s*(?:[-*+]\s|\d+[.)]\s|\||>))|\n\s*\n)"
)
_LIST_MARKER = re.compile(r"[ \t]*\d{1,9}\.")
_MARKUP = re.compile(r"^(?:#{1,6}\s+|[-*+]\s+|\d{1,3}[.)]\s+|>\s*|\|)+")
MIN_SENTENCE_CHARS = 6


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) spans of sentences in text[start:end], whitespace trimmed, none empty."""
    end = len(text) if end is None else end
    spans: list[tuple[int, int]] = []
    pos = start
    for m in _END.finditer(text, start, end):
        if m.group().startswith(".") and _LIST_MARKER.fullmatch(text, text.rfind("\n", 0, m.start()) + 1, m.end()):
            continue  # "1. " opens an ordered list item; it does not end a sentence
        _append_trimmed(text, pos, m.end(), spans)
        pos = m.end()
    _append_trimmed(text, pos, end, spans)
    return spans


def trim_span(text: str, s: int, e: int) -> tuple[int, int]:
    """The span without leading and trailing whitespace (empty when s == e afterwards)."""
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _append_trimmed(text: str, s: int, e: int, out: list[tuple[int, int]]) -> None:
    s, e = trim_span(text, s, e)
    if e > s:
        out.append((s, e))


def clean_sentence(text: str) -> str:
    """A sentence as it reads in an answer: rendered, one line, no list/heading/quote markers.

    Rendering comes first (a callout header needs its ``>`` to be recognised), and refs are
    defused last, so nothing rendering uncovers (``\\[ref:x\\]``) can pose as a citation.
    """
    lines = (_MARKUP.sub("", line.strip()) for line in render_markdown(text).splitlines())
    return defuse_refs(" ".join(line for line in lines if line).strip(" |"))


def is_quotable(sentence: str) -> bool:
    """Prose worth quoting: long enough, not a question (a heading like "Which model?"), not a fence."""
    words = len(sentence.split()) + sum(1 for ch in sentence if is_cjk(ch)) // 2
    return (
        len(sentence) >= MIN_SENTENCE_CHARS
        and words >= 3
        and not sentence.rstrip().endswith(("?", "？"))
        and not sentence.startswith(("```", "~~~"))
    )


def quotable_sentences(text: str) -> list[tuple[int, str]]:
    """(offset in ``text``, cleaned sentence) for every sentence worth quoting."""
    out = []
    for s, e in sentence_spans(text):
        sentence = clean_sentence(text[s:e])
        if is_quotable(sentence):
            out.append((s, sentence))
    return out
