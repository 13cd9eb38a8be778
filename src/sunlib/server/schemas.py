"""The HTTP API's types (pydantic): request bodies, then the response model of every route."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..contracts import FILTER_CAPS, SearchFilters
from ..retrieve.engine import MAX_QUERY_CHARS


class Filters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    folders: list[str] = Field(default_factory=list, max_length=FILTER_CAPS["folders"])
    tags: list[str] = Field(default_factory=list, max_length=FILTER_CAPS["tags"])
    note_ids: list[str] = Field(default_factory=list, max_length=FILTER_CAPS["note_ids"])
    since: float | None = None  # epoch seconds
    until: float | None = None
    metadata: dict[str, str] = Field(default_factory=dict, max_length=FILTER_CAPS["metadata"])

    @field_validator("folders", "tags", "note_ids", "metadata")
    @classmethod
    def _encodable(cls, value: list[str] | dict[str, str]) -> list[str] | dict[str, str]:
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        for item in items:
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("text is not valid Unicode (a lone surrogate)") from None
        return value

    def contract(self) -> SearchFilters:
        return SearchFilters(
            tuple(self.folders),
            tuple(self.tags),
            tuple(self.note_ids),
            self.since,
            self.until,
            tuple(self.metadata.items()),
        )


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    mode: Literal["bm25", "dense", "hybrid"] | None = None
    filters: Filters = Field(default_factory=Filters)
    limit: int = Field(10, ge=1, le=100)
    offset: int = Field(0, ge=0, le=10_000)


class AskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    filters: Filters = Field(default_factory=Filters)
    agentic: bool | None = Field(
        None,
        description="true: the agentic loop (sub-questions, follow-up rounds, part-by-part fallback); "
        "false: one shot; null: as [answer] mode says",
    )
    conversation_id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="continue this conversation (its turns are the history of a follow-up; 404 when it does "
        "not exist or you may not read it); null starts a new one",
    )


class RagRunBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    qa_set: str = Field(
        "sample_vault",
        description="a bundled QA set (sample_vault, sample_vault_calibration) or a .jsonl path in the vault",
    )
    limit: int | None = Field(None, ge=1, le=10_000)
    judge: bool = Field(
        False,
        description="also score each answer 1-5 (relevance, completeness, accuracy) with the server's [llm] chat "
        "model, as `sunlib eval rag --judge` does",
    )


# -- responses -------------------------------------------------------------------------------
#
# What each route sends, for /openapi.json and for clients. The routes still build their JSON
# from the contracts (`to_jsonable`, `SearchResult.as_json`, the store's rows); FastAPI checks
# it against these models on the way out. Every model allows extra keys: a field added to a
# contract reaches clients unchanged (the schema says so with additionalProperties), while the
# fields listed here are the ones clients may rely on.


class Out(BaseModel):
    """Base of the response models: fields as documented, extra keys passed through."""

    model_config = ConfigDict(extra="allow")


class CitationOut(Out):
    citation_id: str
    chunk_id: str
    note_id: str
    path: str
    title: str
    heading_path: list[str]
    start: int = Field(description="UTF-16 code units into the note's text")
    end: int
    start_line: int
    end_line: int
    quote: str


class RouteScoreOut(Out):
    rank: int = Field(description="1-based rank in this route's list")
    score: float = Field(description="the route's raw score (BM25, or cosine similarity)")
    contribution: float = Field(description="what this route added to the fused score")


class StepOut(Out):
    name: str
    status: str = Field(description="ok | skipped | error | warning")
    latency_ms: float | None = Field(description="how long the step took; null unless the caller is an admin")
    input_summary: str
    output_summary: str
    details: dict[str, Any]
    span_id: str = Field(description="this step's span, unique within the run")
    parent_id: str | None = Field(description="the span this step ran inside (a round), or null")
    iteration: int = Field(description="the round this step belongs to; 0 for a single-shot ask")


class TraceOut(Out):
    run_id: str
    kind: str
    steps: list[StepOut]
    total_ms: float
    warnings: list[str]


class SearchHitOut(Out):
    chunk_id: str
    note_id: str
    path: str
    title: str
    heading_path: list[str]
    score: float
    snippet: str
    highlights: list[list[int]] = Field(description="[start, end] spans of the snippet to highlight")
    tags: list[str]
    citation: CitationOut
    routes: dict[str, RouteScoreOut]


class SearchOut(Out):
    query: str
    mode: str
    total_candidates: int
    warnings: list[str]
    results: list[SearchHitOut]
    run_id: str
    trace: TraceOut


class EvidenceOut(Out):
    source: int
    chunk_id: str
    note_id: str
    path: str
    title: str
    heading_path: list[str]
    text: str
    score: float
    start: int
    end: int
    start_line: int
    end_line: int
    ordinal: int
    expanded_from: str | None


class SourceCardOut(Out):
    note_id: str
    path: str
    title: str
    chapter: str | None
    version: str | None
    summary: str | None
    chunk_ids: list[str]


class SentenceOut(Out):
    text: str
    refs: list[str]
    supported: bool
    overlap: float
    threshold: float
    rejected_refs: list[str]
    attributed: bool = Field(False, description="it cited nothing; the verifier found the passage it quotes")
    dropped: bool = Field(False, description="unsupported, and taken out of the answer text")


class RefusalOut(Out):
    code: str = Field(description="low_gate | missing_name | missing_quantity | no_evidence | writer_failed | ...")
    params: dict[str, Any]
    message: str = Field(description="the sentence users read")


class FrameOut(Out):
    """An AnswerFrame: a cited answer, or a refusal with its reasons."""

    question: str
    answer: str
    evidence: list[EvidenceOut]
    citations: list[CitationOut]
    refused: bool
    refusal_reason: str | None
    confidence: float
    route: str
    confidence_level: str
    sources: list[SourceCardOut]
    sentences: list[SentenceOut]
    unsupported: int = Field(description="unsupported sentences left in the answer (0 when they are dropped)")
    dropped: int = Field(0, description="unsupported sentences the citation verifier took out of the answer")
    version: int
    refusals: list[RefusalOut] = Field(description="one record per reason to refuse; empty for an answer")


class AskOut(FrameOut):
    run_id: str
    conversation_id: str | None = Field(
        description="the conversation this turn was saved into (send it with the next question); "
        "null when the server does not save runs"
    )
    trace: TraceOut


class TurnOut(Out):
    """One turn of a conversation: what was typed, the standalone question it was asked as, and
    its saved run's answer (the whole run: GET /api/runs/{run_id})."""

    position: int
    question: str = Field(description="the message as the user typed it")
    standalone: str | None = Field(description="the follow-up rewrite the pipeline ran on; null: none")
    run_id: str
    created_at: float
    answer: str
    refused: bool
    refusal_reason: str | None
    citations: list[CitationOut]
    sources: list[SourceCardOut]


class ConversationOut(Out):
    conversation_id: str
    created_at: float
    updated_at: float
    turns: list[TurnOut]


class ConversationSummaryOut(Out):
    conversation_id: str
    created_at: float
    updated_at: float = Field(description="when its newest turn was asked")
    turns: int
    first_question: str
    last_question: str


class ConversationsOut(Out):
    conversations: list[ConversationSummaryOut]
    limit: int
    offset: int


class RunSummaryOut(Out):
    run_id: str
    kind: str
    created_at: float
    principals: list[str]
    question: str | None
    refused: bool
    total_ms: float


class RunsOut(Out):
    runs: list[RunSummaryOut]
    limit: int
    offset: int


class RunOut(RunSummaryOut):
    frame: dict[str, Any] = Field(description="the AnswerFrame as it was saved")
    trace: dict[str, Any] = Field(description="the run chain as it was saved")
    owner: str = Field(description='who saved it: "local", or "token:" and 16 hex digits of the token\'s sha256')


class ProgressOut(Out):
    phase: str
    done: int | None = Field(description="null for an index job read by a non-admin (it counts hidden notes)")
    total: int | None


class JobOut(Out):
    job_id: str
    kind: str
    status: str = Field(description="queued | running | done | failed")
    progress: ProgressOut
    created_at: float
    finished_at: float | None
    error: str | None


class JobStartedOut(JobOut):
    url: str = Field(description="where to poll the job")


class JobResultOut(JobOut):
    result: dict[str, Any] | None = Field(description="the job's report once it is done")


class SpaceOut(Out):
    name: str
    provider: str
    model: str
    dim: int
    chunker: str
    vectors: int


class IndexStatusOut(Out):
    vault: str | None = Field(description="the vault's absolute path: for admins only (null otherwise)")
    index: str | None = Field(description="the index file's absolute path: for admins only (null otherwise)")
    counts: dict[str, int] = Field(description="notes and chunks you may see (admins: every count)")
    chunker: str | None
    active_space: str
    vectors_pending: int
    vectors_total: int
    spaces: list[SpaceOut]
    text_indexed_at: str | None
    calibration: dict[str, Any] | None = Field(
        None, description="the learned gate's threshold here: state, threshold, source, the stored self-calibration"
    )
    jobs: list[JobOut] = Field(description="recent rebuilds you may read (admins: everyone's)")


class RagRunStartedOut(JobOut):
    run_id: str
    events: str = Field(description="the run's server-sent events")


class RagRunOut(JobOut):
    run_id: str
    report: dict[str, Any] | None = Field(
        description="once done: total_cases, successful_cases, failed_cases, failure_rate, metrics, cases"
    )


class NoteSummaryOut(Out):
    note_id: str
    path: str
    title: str
    tags: list[Any]
    metadata: dict[str, Any]
    mtime: float


class NotesOut(Out):
    notes: list[NoteSummaryOut]
    total: int
    limit: int
    offset: int


class NoteChunkOut(Out):
    chunk_id: str
    ordinal: int
    heading_path: list[str]
    start: int = Field(description="UTF-16 code units into content")
    end: int
    start_line: int = Field(description="1-based, inclusive")
    end_line: int


class NoteOut(NoteSummaryOut):
    links: list[str]
    content_hash: str
    in_sync: bool = Field(description="false when the file changed on disk and cannot be indexed")
    content: str | None
    chunks: list[NoteChunkOut]


class NoteWrittenOut(NoteOut):
    vectors_job: str | None = Field(description="the background job embedding the note, if one was started")


class StepInfoOut(Out):
    name: str
    key: str
    description: str
    lead_keys: list[str] = Field(description="the detail keys the UI shows first")


class StepsOut(Out):
    """The step registry as ``GET /api/steps`` serves it (see ``sunlib.trace.steps.describe``)."""

    steps: list[StepInfoOut]
    ask: list[str] = Field(description="the steps of a single-shot ask, in order")
    summary: str = Field(description="the step that holds the run's summary")
    round: str = Field(description="the step that groups one round of a multi-round run")
