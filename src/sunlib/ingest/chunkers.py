"""Chunkers: structure-aware (default) and the fixed-window baseline.

Structure-aware (seed 001 module 3):
  * a chunk never crosses a section (heading) boundary and knows its heading path;
  * sections are packed with whole sentences up to ``max_tokens`` (estimate: one
    CJK character = one token);
  * consecutive chunks overlap by the longest run of whole trailing sentences that
    fits in ``overlap * max_tokens`` (never the whole previous chunk);
  * code fences and tables are single units and are never split at a ``#`` line;
  * documented exception: a single unit larger than ``max_tokens`` is cut into
    pieces of at most ``max_tokens``, at whitespace between words, or between
    characters for CJK text and for code/tables at line breaks first.

Fixed window (seed 000 baseline): ``fixed_size`` characters of the note body
with ``fixed_overlap`` characters of overlap, cut wherever the window ends.

Every chunk is an exact span of the note: ``note.text[start:end] == chunk.text``
(offsets in UTF-16 code units, see ids.utf16_slice).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..config import IndexSettings
from ..contracts import Block, Chunk, Note
from ..text import estimate_tokens, sentence_spans, token_weight
from ..text.sentences import trim_span
from ..text.tokens import CJK_CLASS
from .ids import Utf16Map, chunk_id_for, line_of, line_starts
from .markdown import ParsedMarkdown

_PIECE = re.compile(rf"\n|\s+|[{CJK_CLASS}]|[^\s{CJK_CLASS}]+")


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    weight: float  # token_weight: additive, int(sum) is the estimate of the joined span
    heading_path: tuple[str, ...]


class Chunker(Protocol):
    fingerprint: str

    def chunk(self, note: Note, parsed: ParsedMarkdown) -> list[Chunk]: ...


class StructureChunker:
    def __init__(self, max_tokens: int = 500, overlap: float = 0.15) -> None:
        self.max_tokens = max_tokens
        self.overlap = overlap
        self.fingerprint = f"structure-v1:{max_tokens}:{overlap:g}"

    def chunk(self, note: Note, parsed: ParsedMarkdown) -> list[Chunk]:
        spans: list[tuple[tuple[str, ...], list[_Unit]]] = []
        for section, units in _sections(note.text, parsed.blocks, self.max_tokens):
            spans.extend((section, packed) for packed in self._pack(note.text, units))
        return _make_chunks(note, [(hp, u[0].start, u[-1].end) for hp, u in spans] or _outline(note, parsed))

    def _pack(self, text: str, units: Sequence[_Unit]) -> list[list[_Unit]]:
        # Sizes are weights of the units plus the gaps between them, so int(size) is
        # exactly estimate_tokens of the packed span (a per-unit sum of rounded
        # estimates is not: symbols round down per unit).
        out: list[list[_Unit]] = []
        cur: list[_Unit] = []
        total = 0.0
        for unit in units:
            if cur and int(total + _gap(text, cur[-1], unit) + unit.weight) > self.max_tokens:
                out.append(cur)
                cur, total = self._carry(text, cur, unit)
            total += (_gap(text, cur[-1], unit) if cur else 0.0) + unit.weight
            cur.append(unit)
        if cur:
            out.append(cur)
        return out

    def _carry(self, text: str, prev_chunk: Sequence[_Unit], unit: _Unit) -> tuple[list[_Unit], float]:
        """Whole trailing sentences of the previous chunk that fit the overlap budget."""
        budget = self.overlap * self.max_tokens
        carry: list[_Unit] = []
        size = 0.0
        for prev in reversed(prev_chunk[1:]):  # never carry the whole previous chunk
            grown = prev.weight + (_gap(text, prev, carry[0]) + size if carry else 0.0)
            if int(grown) > budget:
                break
            carry.insert(0, prev)
            size = grown
        while carry and int(size + _gap(text, carry[-1], unit) + unit.weight) > self.max_tokens:
            first = carry.pop(0)
            size -= first.weight + (_gap(text, first, carry[0]) if carry else 0.0)
        return carry, size


def _gap(text: str, a: _Unit, b: _Unit) -> float:
    return token_weight(text[a.end : b.start])


class FixedChunker:
    def __init__(self, size: int = 800, overlap: int = 120) -> None:
        if overlap >= size:
            raise ValueError("fixed_overlap must be smaller than fixed_size")
        self.size = size
        self.overlap = overlap
        self.fingerprint = f"fixed-v1:{size}:{overlap}"

    def chunk(self, note: Note, parsed: ParsedMarkdown) -> list[Chunk]:
        text = note.text
        spans: list[tuple[tuple[str, ...], int, int]] = []
        pos = parsed.body_start
        while pos < len(text):
            end = min(pos + self.size, len(text))
            s, e = trim_span(text, pos, end)
            if e > s:
                spans.append((_heading_at(parsed.blocks, s), s, e))
            if end == len(text):
                break
            pos = end - self.overlap
        return _make_chunks(note, spans or _outline(note, parsed))


def _outline(note: Note, parsed: ParsedMarkdown) -> list[tuple[tuple[str, ...], int, int]]:
    """The one chunk of a note with no prose: its headings (or, with nothing after the frontmatter,
    the frontmatter itself), so that search finds it, by title and headings at least."""
    s, e = trim_span(note.text, parsed.body_start, len(note.text))
    if e <= s:
        s, e = trim_span(note.text, 0, parsed.body_start)
    return [((), s, e)] if e > s else []


def make_chunker(settings: IndexSettings) -> StructureChunker | FixedChunker:
    if settings.chunker == "fixed":
        return FixedChunker(settings.fixed_size, settings.fixed_overlap)
    return StructureChunker(settings.max_tokens, settings.overlap)


def _heading_at(blocks: Sequence[Block], offset: int) -> tuple[str, ...]:
    path: tuple[str, ...] = ()
    for b in blocks:
        if b.start > offset:
            break
        path = b.heading_path
    return path


def _sections(text: str, blocks: Sequence[Block], max_tokens: int) -> list[tuple[tuple[str, ...], list[_Unit]]]:
    """Sentence-level units grouped by consecutive blocks that share a heading path."""
    sections: list[tuple[tuple[str, ...], list[_Unit]]] = []
    for block in blocks:
        if block.kind in ("code", "table", "html"):
            pieces = [(block.start, block.end)]
        else:
            pieces = sentence_spans(text, block.start, block.end)
        units: list[_Unit] = []
        for s, e in pieces:
            for ps, pe in _split_oversize(text, s, e, max_tokens, by_line=block.kind != "paragraph"):
                units.append(_Unit(ps, pe, token_weight(text[ps:pe]), block.heading_path))
        if sections and sections[-1][0] == block.heading_path:
            sections[-1][1].extend(units)
        else:
            sections.append((block.heading_path, units))
    return [(hp, us) for hp, us in sections if us]


def _split_oversize(text: str, start: int, end: int, max_tokens: int, by_line: bool) -> list[tuple[int, int]]:
    """The documented exception: cut one oversize unit into pieces of at most max_tokens."""
    if estimate_tokens(text[start:end]) <= max_tokens:
        return [(start, end)]
    if by_line and "\n" in text[start:end]:
        lines: list[tuple[int, int]] = []
        pos = start
        for m in re.finditer(r"\n", text[start:end]):
            lines.append((pos, start + m.start()))
            pos = start + m.end()
        lines.append((pos, end))
        out: list[tuple[int, int]] = []
        cur_s, cur_e, cur_t = lines[0][0], lines[0][0], 0
        for ls, le in lines:
            t = estimate_tokens(text[ls:le]) + 1
            if cur_t and cur_t + t > max_tokens:
                out.extend(_split_oversize(text, cur_s, cur_e, max_tokens, by_line=False))
                cur_s, cur_t = ls, 0
            cur_e, cur_t = le, cur_t + t
        out.extend(_split_oversize(text, cur_s, cur_e, max_tokens, by_line=False))
        return _trimmed(text, out)  # blank lines inside a code block must not start or end a piece
    out = []
    piece_start, tokens = start, 0.0
    for m in _PIECE.finditer(text, start, end):
        w = token_weight(m.group())  # additive over pieces, unlike the rounded estimate
        if tokens and int(tokens + w) > max_tokens:
            out.append((piece_start, m.start()))
            piece_start, tokens = m.start(), 0.0
        tokens += w
    out.append((piece_start, end))
    return _trimmed(text, out)


def _trimmed(text: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    trimmed = [trim_span(text, s, e) for s, e in spans]
    return [(s, e) for s, e in trimmed if e > s]


def _make_chunks(note: Note, spans: Sequence[tuple[tuple[str, ...], int, int]]) -> list[Chunk]:
    to16 = Utf16Map(note.text)
    starts = line_starts(note.text)
    seen: dict[str, int] = {}
    chunks: list[Chunk] = []
    for ordinal, (heading_path, s, e) in enumerate(spans):
        text = note.text[s:e]
        key = "\x1e".join(heading_path) + "\x1f" + text
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        chunks.append(
            Chunk(
                chunk_id=chunk_id_for(note.note_id, heading_path, text, occurrence),
                note_id=note.note_id,
                ordinal=ordinal,
                heading_path=heading_path,
                text=text,
                start=to16(s),
                end=to16(e),
                start_line=line_of(starts, s),
                end_line=line_of(starts, max(s, e - 1)),
                token_count=estimate_tokens(text),
            )
        )
    return chunks
