"""Sentence spans for English and Chinese prose.

A sentence ends at ``.!?`` followed by whitespace, at the CJK marks ``。！？；``
(and the full-width ``！？``), optionally followed by closing quotes or brackets,
and at a line break that starts a list item, table row or quote. Spans index
into the given text, so callers can map them back to the note.
"""

from __future__ import annotations

import re

_CLOSERS = re.escape("\"'”’」』）)]】")
_END = re.compile(
    rf"(?:[.!?]+[{_CLOSERS}]*(?=\s)|[。！？；]+[{_CLOSERS}]*|\n(?=\s*(?:[-*+]\s|\d+[.)]\s|\||>))|\n\s*\n)"
)
_LIST_MARKER = re.compile(r"[ \t]*\d{1,9}\.")


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
