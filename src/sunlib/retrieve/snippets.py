"""Snippets: the window of a chunk with the most query matches, and where they are.

Matching uses the same tokens as the index: a word matches when its stemmed
token is a query token; a CJK character matches when it belongs to a query
bigram (or is a one-character query).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..text.tokens import word_token

_WORD_OR_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+|[^\W_]+", re.UNICODE)


def match_spans(text: str, terms: Sequence[str]) -> list[tuple[int, int]]:
    wanted = set(terms)
    spans: list[tuple[int, int]] = []
    for m in _WORD_OR_CJK.finditer(text):
        word = m.group()
        if "\u3400" <= word[0] <= "\ufaff":
            for i in range(len(word)):
                pair_hit = (i + 1 < len(word) and word[i : i + 2] in wanted) or (i and word[i - 1 : i + 1] in wanted)
                single = len(word) == 1 and word in wanted
                if pair_hit or single:
                    spans.append((m.start() + i, m.start() + i + 1))
        else:
            if word_token(word) in wanted:
                spans.append((m.start(), m.end()))
    return _merge(spans)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return merged


def make_snippet(text: str, terms: Sequence[str], width: int = 240) -> tuple[str, tuple[tuple[int, int], ...]]:
    """(snippet, highlight spans relative to the snippet). Ellipses mark cut ends."""
    spans = match_spans(text, terms)
    if len(text) <= width:
        return text, tuple(spans)
    best_start, best_count = 0, -1
    for s, _ in spans:
        start = max(0, min(s - width // 4, len(text) - width))
        count = sum(1 for a, b in spans if a >= start and b <= start + width)
        if count > best_count:
            best_start, best_count = start, count
    # snap to a word boundary when one is close
    if best_start:
        space = text.rfind(" ", max(0, best_start - 20), best_start)
        best_start = space + 1 if space >= 0 else best_start
    end = min(len(text), best_start + width)
    prefix = "…" if best_start > 0 else ""
    suffix = "…" if end < len(text) else ""
    shift = len(prefix) - best_start
    inside = tuple((a + shift, b + shift) for a, b in spans if a >= best_start and b <= end)
    return prefix + text[best_start:end] + suffix, inside
