"""Stable ids and offset helpers.

``note_id`` depends only on the vault-relative path (and is carried over when a
note moves with unchanged content); ``chunk_id`` on the note, the heading path
and the text. Unchanged content keeps its ids across re-index and rebuilds.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Sequence


def sha256_hex(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for i, part in enumerate(parts):
        if i:
            h.update(b"\x1f")
        h.update(part.encode("utf-8") if isinstance(part, str) else part)
    return h.hexdigest()


def note_id_for(rel_path: str) -> str:
    return "note_" + sha256_hex(rel_path)[:16]


def chunk_id_for(note_id: str, heading_path: Sequence[str], text: str, occurrence: int = 0) -> str:
    """The id of a chunk; ``occurrence`` separates identical chunks under one heading."""
    parts: list[str] = [note_id, "\x1e".join(heading_path), text]
    if occurrence:
        parts.append(str(occurrence))
    return "chk_" + sha256_hex(*parts)[:16]


class Utf16Map:
    """Converts code-point offsets of one text into UTF-16 code-unit offsets."""

    def __init__(self, text: str) -> None:
        # Positions of characters outside the BMP: each adds one extra code unit.
        self._astral = [i for i, ch in enumerate(text) if ord(ch) > 0xFFFF]

    def __call__(self, offset: int) -> int:
        return offset + bisect_right(self._astral, offset - 1) if self._astral else offset


def utf16_slice(text: str, start: int, end: int) -> str:
    """text[start:end] where start/end count UTF-16 code units (the invariant the index keeps)."""
    return text.encode("utf-16-le")[2 * start : 2 * end].decode("utf-16-le")


def line_starts(text: str) -> list[int]:
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def line_of(starts: list[int], offset: int) -> int:
    """1-based line number of a code-point offset."""
    return bisect_right(starts, offset)
