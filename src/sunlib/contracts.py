"""The typed objects that travel between pipeline stages.

Everything here is frozen: a stage returns new objects and never mutates its
input, so each step's output can be kept in the trace as it was.

Offsets: ``start``/``end`` are UTF-16 code units into the note's full file
text (what a browser editor counts), lines are 1-based and inclusive. The text
is the file's with its BOM dropped and every line ending as LF (``ingest.vault.
normalize_newlines``): exact against the file for LF and lone-CR endings; for
CRLF they count into that text, which the API serves as the note's ``content``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from .errors import UserError

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
    ordinal: int = 0  # position of the chunk in its note


@dataclass(frozen=True)
class StepTrace:
    """One step (span) of a run. ``span_id`` is unique in its run; ``parent_id`` names the span it
    ran inside (None at the top); ``iteration`` is the round of a multi-round run (0: not in a round).
    ``details`` is a read-only mapping."""

    name: str
    status: Literal["ok", "skipped", "error", "warning"]
    latency_ms: float
    input_summary: str
    output_summary: str
    details: Mapping[str, Any] = field(default_factory=dict)
    span_id: str = ""
    parent_id: str | None = None
    iteration: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.details, MappingProxyType):
            object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], position: int = 1) -> StepTrace:
        """A step from its JSON form; a step saved before spans existed gets ``s<position>``."""
        return cls(
            name=str(data["name"]),
            status=data["status"],
            latency_ms=float(data.get("latency_ms") or 0.0),
            input_summary=str(data.get("input_summary") or ""),
            output_summary=str(data.get("output_summary") or ""),
            details=dict(data.get("details") or {}),
            span_id=str(data.get("span_id") or f"s{position}"),
            parent_id=data.get("parent_id"),
            iteration=int(data.get("iteration") or 0),
        )


@dataclass(frozen=True)
class RunTrace:
    run_id: str
    kind: str
    steps: tuple[StepTrace, ...]
    total_ms: float
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunTrace:
        """The trace ``to_jsonable`` wrote (a saved run's ``trace``): ``from_json(to_jsonable(t)) == t``."""
        return cls(
            run_id=str(data["run_id"]),
            kind=str(data.get("kind") or "ask"),
            steps=tuple(StepTrace.from_json(s, i) for i, s in enumerate(data.get("steps") or (), 1)),
            total_ms=float(data.get("total_ms") or 0.0),
            warnings=tuple(str(w) for w in data.get("warnings") or ()),
        )

    def children(self, span_id: str | None) -> tuple[StepTrace, ...]:
        """The steps that ran directly inside ``span_id`` (None: the top-level steps), in order."""
        known = {s.span_id for s in self.steps}
        if span_id is None:
            return tuple(s for s in self.steps if s.parent_id is None or s.parent_id not in known)
        return tuple(s for s in self.steps if s.parent_id == span_id)


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

    def as_json(self, with_trace: bool = False) -> dict[str, Any]:
        """What `sunlib search --json` prints and `POST /api/search` returns."""
        data: dict[str, Any] = {
            "query": self.query,
            "mode": self.mode,
            "total_candidates": self.total_candidates,
            "warnings": list(self.warnings),
            "results": [
                {
                    "chunk_id": h.chunk_id,
                    "note_id": h.note_id,
                    "path": h.path,
                    "title": h.title,
                    "heading_path": list(h.heading_path),
                    "score": round(h.score, 6),
                    "snippet": h.snippet,
                    "highlights": [list(x) for x in h.highlights],
                    "tags": list(h.tags),
                    "citation": to_jsonable(h.citation),
                    "routes": to_jsonable(h.routes),
                }
                for h in self.hits
            ],
            "run_id": self.trace.run_id,
        }
        if with_trace:
            data["trace"] = to_jsonable(self.trace)
        return data


# The most entries each filter may hold (the HTTP API's Filters model declares the same).
FILTER_CAPS: Mapping[str, int] = MappingProxyType({"folders": 50, "tags": 50, "note_ids": 200, "metadata": 50})


@dataclass(frozen=True)
class SearchFilters:
    """Restrictions applied inside the SQL of every route, before ranking.

    Folders: any of them (prefix match on the vault path). Tags: all of them.
    Note ids: any of them. Time range: note mtime (epoch seconds). Metadata:
    every key must have the value (case-insensitive; list values match any item).

    Each list is capped (``FILTER_CAPS``): every folder, tag and metadata pair is one more
    SQL term, and SQLite refuses a query past its expression depth (1000) with an error.
    """

    folders: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    note_ids: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    metadata: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name, cap in FILTER_CAPS.items():
            count = len(getattr(self, name))
            if count > cap:
                raise UserError(f"filters.{name}: {count} given; at most {cap} are allowed")

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ((), None)}


# -- ask ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One earlier message of a conversation, as a chat client sends it back with the next one."""

    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True)
class FollowUp:
    """A follow-up made standalone (``answer.conversation``): the user's own words, the question
    the pipeline ran on instead, why, and which earlier user turn (0-based) lent its terms."""

    said: str
    standalone: str
    reason: str
    turn: int


@dataclass(frozen=True)
class RouteDecision:
    route: Literal["direct", "rag"]
    reason: str
    confidence: float
    router: str = "rules"  # which router decided: "rules", "llm", or "rules (llm fallback)"
    fallback: str | None = None  # why the LLM router fell back to the rules, when it did


@dataclass(frozen=True)
class Reading:
    """The reader's verdict on one passage for one question: how likely the passage answers it,
    and where (``start``/``end``: character offsets into the passage text; equal when it found none)."""

    probability: float
    start: int
    end: int
    span_score: float = 0.0  # the span's start + end logit
    text: str = ""  # the span's text, once the offsets are those of the passage a caller holds

    def span(self, text: str) -> str:
        return text[self.start : self.end]


@dataclass(frozen=True)
class Evidence:
    """One chunk handed to the writer, numbered as ``[Source n]`` in the context."""

    source: int
    chunk_id: str
    note_id: str
    path: str
    title: str
    heading_path: tuple[str, ...]
    text: str
    score: float  # rerank score (what selection ranked by)
    start: int
    end: int
    start_line: int
    end_line: int
    ordinal: int
    expanded_from: str | None = None  # the seed chunk id, for a neighbour added by expansion


@dataclass(frozen=True)
class SourceCard:
    """One note the answer drew on."""

    note_id: str
    path: str
    title: str
    chapter: str | None
    version: str | None
    summary: str | None
    chunk_ids: tuple[str, ...]


@dataclass(frozen=True)
class AnswerSentence:
    """One answer sentence (or paragraph) and what the citation verifier found."""

    text: str
    refs: tuple[str, ...]  # chunk ids cited, at most two
    supported: bool
    overlap: float  # share of the sentence's terms found in the cited span(s)
    threshold: float
    rejected_refs: tuple[str, ...] = ()  # refs to chunks that were not in the context
    attributed: bool = False  # it cited nothing; the verifier found the passage it quotes (citations.py)
    dropped: bool = False  # unsupported, and taken out of the answer text ([answer] unsupported = "drop")
    support: float | None = None  # the reader's probability that its cited passage supports it (LLM drafts)
    why: str = ""  # for an unsupported sentence, which check failed


@dataclass(frozen=True)
class AnswerFrame:
    """AnswerFrameV1. Runtime data (latency, tokens, scores) lives in the RunTrace."""

    question: str
    answer: str
    evidence: tuple[Evidence, ...]
    citations: tuple[Citation, ...]
    refused: bool
    refusal_reason: str | None
    confidence: float
    route: str
    confidence_level: str = "high"  # high | caution | low (seed 002 phase 4)
    sources: tuple[SourceCard, ...] = ()
    sentences: tuple[AnswerSentence, ...] = ()  # every claim the verifier judged, dropped ones included
    unsupported: int = 0  # unsupported sentences left in ``answer`` (0 when they are dropped)
    version: int = 1
    refusals: tuple[Refusal, ...] = ()  # one per reason of a refusal; refusal_reason joins their messages
    dropped: int = 0  # unsupported sentences the verifier took out of ``answer``


@dataclass(frozen=True)
class Refusal:
    """One reason to refuse: a code from ``answer.gate.refusals.CODES``, its parameters, and the sentence
    users read (rendered from the two)."""

    code: str
    params: Mapping[str, Any]
    message: str


@dataclass(frozen=True)
class Ranked:
    """A hit after reranking: the score selection ranks by (best = 1.0) and why."""

    hit: Hit
    score: float
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BuiltContext:
    """What the writer reads: evidence in ``[Source n]`` blocks, each fenced as data."""

    evidence: tuple[Evidence, ...]
    text: str
    token_estimate: int
    fence: str  # the per-run marker around every evidence block


@dataclass(frozen=True)
class Unit:
    """A quotable piece of a passage (``answer.gate.units`` splits passages into them)."""

    kind: str  # one of KINDS
    text: str  # as quoted in an answer
    start: int  # offset of the unit in the passage
    position: int  # index among the passage's units, in reading order
    lead: str = ""  # what the unit needs to be read: a list's lead-in, a table's header

    @property
    def full(self) -> str:
        """The unit with its lead, for scoring."""
        return f"{self.lead} {self.text}" if self.lead and not self.text.startswith(self.lead) else self.text


@dataclass(frozen=True)
class ScoredUnit:
    """A unit with the answer scorer's probability that it states the answer."""

    unit: Unit
    chunk_id: str
    passage: int  # index of its passage in the scored list
    probability: float  # that the unit states the answer
    features: tuple[float, ...] = ()

    def explain(self) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk_id,
            "kind": self.unit.kind,
            "text": self.unit.text[:200],
            "probability": round(self.probability, 4),
        }


@dataclass(frozen=True)
class Draft:
    text: str
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    streamed: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)  # the writer's own account, for the trace


def to_jsonable(obj: Any) -> Any:
    """Contracts (and whatever they hold) as plain JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and obj != obj:  # NaN
        return None
    if hasattr(obj, "items"):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj
