"""The details each step of an ask records, as typed records.

A stage builds one of these and hands it to ``step.done(summary, record=...)``; the trace
keeps it as plain JSON (``trace.as_details``), which is what ``--explain``, the SSE stream,
the web UI and saved runs show. Python readers (the evaluation, the OpenAI-compatible
routes) read a step back with ``read(step, SelectionDetails)`` and so on, never by string key,
so a renamed field fails the type check instead of reading ``None``. ``RECORDS`` names the
record of each step, and ``steps.INFO``'s lead keys must be fields of it (tests/unit/kernel/test_trace.py).

Field metadata: ``FLAT`` spreads a mapping's keys into the record's own (a reranker's or a
writer's own details); ``OMIT`` leaves the key out when the value is None (a single question's
Route step has no ``follow_up``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..contracts import FollowUp, StepTrace
from ..trace import FLAT, OMIT, read_details
from ..trace.steps import Step

D = TypeVar("D")


def read(step: StepTrace, record: type[D]) -> D:
    """``step``'s details as ``record`` (a key missing from an older saved run reads as None)."""
    return read_details(step.details, record)


@dataclass(frozen=True)
class RouteDetails:
    route: str
    reason: str
    confidence: float
    router: str
    fallback: str | None
    follow_up: FollowUp | None = field(default=None, metadata=OMIT)


@dataclass(frozen=True)
class RerankedEntry:
    chunk_id: str
    path: str
    fused_rank: int
    rank: int
    score: float
    scores: Mapping[str, Any] = field(default_factory=dict, metadata=FLAT)  # the reranker's own


@dataclass(frozen=True)
class RerankDetails:
    reranker: str
    query_terms: Mapping[str, float]
    top: tuple[RerankedEntry, ...]


@dataclass(frozen=True)
class TranslationDrop:
    dropped: str
    kept: str


@dataclass(frozen=True)
class AnswerabilityDetails:
    probability: float
    threshold: float
    features: Mapping[str, float]


@dataclass(frozen=True)
class PassageReading:
    chunk_id: str
    path: str
    probability: float
    span: str
    start: int
    end: int


@dataclass(frozen=True)
class ReaderDetails:
    """The reader's probability and span for each kept passage, as the trace and the UI show them."""

    reader: str
    probability: float
    passages: tuple[PassageReading, ...]


@dataclass(frozen=True)
class SelectionDetails:
    selected: tuple[str, ...]
    dropped_below_min_score: int
    dropped_duplicates: int
    dropped_translations: tuple[TranslationDrop, ...]
    top_cosine: float | None
    coverage: float
    sentence_cosine: float | None
    missing_terms: tuple[str, ...]
    gate_score: float
    threshold: float
    cosine_weight: float
    sentence_weight: float
    gate_source: str
    passed: bool
    missing_names: tuple[str, ...]
    expects: str | None
    expectation_met: bool | None
    checks_passed: bool
    confidence: float
    confidence_level: str
    reason: str | None
    refusals: tuple[str, ...]
    answerability: AnswerabilityDetails | None
    reader: ReaderDetails | None
    top_units: tuple[Any, ...]
    gate_space: str | None  # the space whose cosine the gate read (None: no dense score)
    fast_tier_only: tuple[str, ...]  # kept chunks that only the fast tier scored (main vector pending)
    overruled: tuple[str, ...] = ()  # the gate's refusals the reader overruled across languages


@dataclass(frozen=True)
class ContextSource:
    source: int
    chunk_id: str
    path: str
    section: str
    score: float
    expanded_from: str | None


@dataclass(frozen=True)
class Expansion:
    chunk_id: str
    expanded_from: str
    expanded_from_score: float


@dataclass(frozen=True)
class ScoreStats:
    max: float | None
    min: float | None
    mean: float | None


@dataclass(frozen=True)
class ContextDetails:
    sources: tuple[ContextSource, ...]
    expanded: tuple[Expansion, ...]
    token_estimate: int
    chars: int
    soft_limit: int
    hard_limit: int
    dropped_by_budget: tuple[Any, ...]
    groups: int
    score_stats: ScoreStats


@dataclass(frozen=True)
class JudgeDetails:
    answerable: bool | None
    reason: str
    model: str
    latency_ms: float
    failure: str | None
    raw: str
    tokens_in: int
    tokens_out: int
    lang: str
    sources: tuple[int, ...]


@dataclass(frozen=True)
class WriteFailed:
    writer: str
    model: str


@dataclass(frozen=True)
class WriteDetails:
    writer: str
    model: str
    tokens_in: int
    tokens_out: int
    streamed: bool
    confidence_note: str | None
    draft: str
    extra: Mapping[str, Any] = field(default_factory=dict, metadata=FLAT)  # the writer's own (Draft.details)


@dataclass(frozen=True)
class VerifyDetails:
    sentences: tuple[Any, ...]  # AnswerSentence records as JSON
    rejected_refs: tuple[str, ...]
    dropped: int
    reader: str | None
    forged_markers: tuple[str, ...]


@dataclass(frozen=True)
class SummaryDetails:
    total_ms: float
    tokens_in: int
    tokens_out: int
    retrieved: int
    selected: int
    citations: int
    unsupported: int
    refused: bool
    confidence: float
    trace_saved: str | None


@dataclass(frozen=True)
class PartDetails:
    index: int
    text: str
    queries: tuple[str, ...]
    covered: bool
    reason: str


@dataclass(frozen=True)
class Transition:
    """One move of the agentic loop: the state that ran, the event, the next state and why."""

    state: str
    event: str
    next: str
    reason: str


@dataclass(frozen=True)
class AgentDetails:
    mode: str | None  # why the question takes the loop
    kind: str
    rule: str
    sub_questions: tuple[PartDetails, ...]
    transitions: tuple[Transition, ...]
    stopped_by: str | None
    caps_hit: tuple[str, ...]
    planner: str
    caps: Mapping[str, float]
    retrievals: int


@dataclass(frozen=True)
class RoundDetails:
    iteration: int
    question: str
    sub_question: int
    part_round: int
    query: str
    hits: int
    verdict: str
    missing_terms: tuple[str, ...]
    missing_names: tuple[str, ...]
    scope_note: str | None


RECORDS: dict[Step, type[Any]] = {
    Step.ROUTE: RouteDetails,
    Step.RERANK: RerankDetails,
    Step.SELECT: SelectionDetails,
    Step.CONTEXT: ContextDetails,
    Step.JUDGE: JudgeDetails,
    Step.WRITE: WriteDetails,
    Step.VERIFY: VerifyDetails,
    Step.SUMMARY: SummaryDetails,
    Step.AGENT: AgentDetails,
    Step.ROUND: RoundDetails,
}
