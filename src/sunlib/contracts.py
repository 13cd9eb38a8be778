"""The typed objects that travel between pipeline stages.

Everything here is frozen: a stage returns new objects and never mutates its
input, so each step's output can be kept in the trace as it was.

Offsets: ``start``/``end`` are UTF-16 code units into the note's full file
text (what a browser editor counts), lines are 1-based and inclusive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

MODES: tuple[str, ...] = ("bm25", "dense", "hybrid")


@dataclass(frozen=True)
class Note:
    note_id: str
    path: str  # vault-relative, POSIX separators
    title: str
    text: str  # the full file text, frontmatter included: offsets index into it
    metadata: Mapping[str, Any]
    tags: tuple[str, ...]
    links: tuple[str, ...]
    acl: tuple[str, ...]
    content_hash: str
    mtime: float


@dataclass(frozen=True)
class Block:
    """A run of Markdown that belongs to one section: a paragraph, list, table, quote or code fence."""

    kind: str
    heading_path: tuple[str, ...]
    start: int  # code points into Note.text
    end: int
    start_line: int
    end_line: int


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    note_id: str
    ordinal: int
    heading_path: tuple[str, ...]
    text: str
    start: int  # UTF-16 code units into Note.text
    end: int
    start_line: int
    end_line: int
    token_count: int


@dataclass(frozen=True)
class Citation:
    citation_id: str
    chunk_id: str
    note_id: str
    path: str
    title: str
    heading_path: tuple[str, ...]
    start: int
    end: int
    start_line: int
    end_line: int
    quote: str


@dataclass(frozen=True)
class RouteScore:
    """One retrieval route's view of a hit: where it ranked it and what that added to the fused score."""

    rank: int  # 1-based
    score: float  # raw route score (BM25, or cosine similarity)
    contribution: float = 0.0


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    note_id: str
    path: str
    title: str
    heading_path: tuple[str, ...]
    text: str
    score: float
    routes: Mapping[str, RouteScore]
    citation: Citation
    snippet: str = ""
    highlights: tuple[tuple[int, int], ...] = ()
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepTrace:
    name: str
    status: Literal["ok", "skipped", "error", "warning"]
    latency_ms: float
    input_summary: str
    output_summary: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunTrace:
    run_id: str
    kind: str
    steps: tuple[StepTrace, ...]
    total_ms: float
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchResult:
    query: str
    mode: str
    hits: tuple[Hit, ...]
    total_candidates: int
    trace: RunTrace

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.trace.warnings


@dataclass(frozen=True)
class SearchFilters:
    """Restrictions applied inside the SQL of every route, before ranking.

    Folders: any of them (prefix match on the vault path). Tags: all of them.
    Note ids: any of them. Time range: note mtime (epoch seconds). Metadata:
    every key must have the value (case-insensitive; list values match any item).
    """

    folders: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    note_ids: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    metadata: tuple[tuple[str, str], ...] = ()

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ((), None)}
