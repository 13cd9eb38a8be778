"""The stages of the ask pipeline, each an object whose ``run`` takes typed arguments and returns a typed record.

    RouteStage     Question                                  -> RouteDecision
    RetrieveStage  Question                                  -> Retrieved      (BM25, Dense, Fusion steps)
    RerankStage    Question, Retrieved                       -> Reranked
    SelectStage    Question, Retrieved, Reranked             -> Selection      (signals + gate decision)
    ContextStage   Selection                                 -> BuiltContext   (expansion + budget)
    JudgeStage     Question, BuiltContext                    -> Judged         (judge.py: the LLM's verdict)
    WriteStage     Question, Retrieved, Selection, BuiltContext -> Written
    VerifyStage    BuiltContext, Written                     -> Verification

A stage is built once (from settings and its providers) and run once per question. The
single-shot path (``answer.single.shot``) and the agentic loop call ``run`` in straight-line code,
each call through a ``Chain``: a stage records the trace steps it names in ``steps``; a step it
leaves unrecorded is marked skipped with ``unrecorded(step)`` as the reason, and when
``halt(out)`` returns a reason, every later stage's steps are marked skipped with it. The
details each step records are typed records (``answer.details``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ...config import Settings
from ...contracts import (
    BuiltContext,
    Draft,
    Evidence,
    FollowUp,
    Hit,
    Ranked,
    RouteDecision,
    SearchFilters,
    SearchResult,
    to_jsonable,
)
from ...errors import ProviderError
from ...providers import Embedder, Reader, Reranker, Writer
from ...providers.base import WriteRequest
from ...store import Store
from ...text import TermWeights
from ...trace import Tracer
from ...trace.steps import RETRIEVAL_STEPS, Step
from ..details import (
    AnswerabilityDetails,
    ContextDetails,
    ContextSource,
    Expansion,
    PassageReading,
    ReaderDetails,
    RerankDetails,
    RerankedEntry,
    RouteDetails,
    ScoreStats,
    SelectionDetails,
    TranslationDrop,
    VerifyDetails,
    WriteDetails,
    WriteFailed,
)
from ..gate.gate import GateProfile, build_gate
from ..gate.relevance import term_weights
from ..gate.scorer import AnswerScorer, load_params
from ..gate.select import Selection, Vectors, evidence_from, expand, select
from .citations import Verification, verify
from .context import Budget, build_context
from .router import Router

Out = TypeVar("Out")

CONFIDENCE_NOTES = {
    ("low", "en"): "Important: the evidence is only weakly related to the question. State only what it says "
    "explicitly; if it does not answer the question, say that the notes do not cover it.",
    ("caution", "en"): "The evidence is only moderately related to the question. Prefer its own words and do "
    "not speculate.",
    ("low", "zh"): "重要提示：参考资料与问题的相关性较低。请只陈述资料中明确写出的内容；如果资料不能回答问题，"
    "请直接说明笔记中没有相关信息。",
    ("caution", "zh"): "参考资料的相关性一般，请优先引用资料原文，避免推测。",
}


class Retrieve(Protocol):
    """The one seam to retrieval (today ``Library.search``): ranked hits, each step traced."""

    def __call__(
        self,
        query: str,
        *,
        filters: SearchFilters | None,
        principals: Sequence[str] | None,
        limit: int,
        tracer: Tracer | None,
    ) -> SearchResult: ...


# -- records that travel between stages -----------------------------------------------------


@dataclass(frozen=True)
class Question:
    text: str
    lang: str  # "en" or "zh", as text.language() detects it
    filters: SearchFilters | None
    principals: tuple[str, ...]
    on_token: Callable[[str], None] | None = None
    follow_up: FollowUp | None = None  # set when ``text`` is a follow-up made standalone (conversation.py)


@dataclass(frozen=True)
class Retrieved:
    hits: tuple[Hit, ...]
    weights: TermWeights  # the question's terms, IDF-weighted over the chunks the asker may see


@dataclass(frozen=True)
class Reranked:
    ranked: tuple[Ranked, ...]


@dataclass(frozen=True)
class Written:
    """The writer's draft, or why there is none."""

    draft: Draft | None
    failure: str | None = None
    confidence_note: str = ""


# -- the stage interface --------------------------------------------------------------------


class Stage(Generic[Out]):
    """A stage's ``run`` takes its inputs as typed arguments (and the tracer) and returns ``Out``."""

    steps: ClassVar[tuple[Step, ...]]  # the trace steps this stage records

    def halt(self, out: Out) -> str | None:
        """A reason to stop the run after this stage (later stages are marked skipped with it)."""
        return None

    def unrecorded(self, step: Step) -> str:
        """Why one of ``steps`` was not recorded although the stage ran."""
        return "did not run"


class Chain:
    """The trace bookkeeping of stages run one after another in straight-line code.

    ``chain.run(stage, lambda: stage.run(...))`` runs one stage: the steps it names but did not
    record are marked skipped (``stage.unrecorded``); when ``stage.halt(out)`` gives a reason,
    ``halted`` holds it and the steps of every stage after it in ``order`` are marked skipped
    with it, so the caller only returns."""

    def __init__(self, tracer: Tracer, order: Sequence[Stage[Any]] = ()) -> None:
        self.tracer = tracer
        self.order = tuple(order)
        self.halted: str | None = None

    def run(self, stage: Stage[Out], call: Callable[[], Out]) -> Out:
        if self.halted is not None:
            raise RuntimeError(f"the run halted ({self.halted}); no stage runs after that")
        mark = self.tracer.mark()
        out = call()
        recorded = {s.name for s in self.tracer.since(mark)}
        for step in stage.steps:
            if step not in recorded:
                self.tracer.skipped(step, stage.unrecorded(step))
        reason = stage.halt(out)
        if reason is not None:
            self.halted = reason
            later = self.order[self.order.index(stage) + 1 :] if stage in self.order else ()
            for rest in later:
                for step in rest.steps:
                    self.tracer.skipped(step, reason)
        return out


def traced(stage: Stage[Out], tracer: Tracer, call: Callable[[], Out]) -> Out:
    """One stage run on its own (the agentic loop's states): its unrecorded steps marked skipped."""
    return Chain(tracer).run(stage, call)


# -- the stages -----------------------------------------------------------------------------


class RouteStage(Stage[RouteDecision]):
    steps = (Step.ROUTE,)

    def __init__(self, router: Router) -> None:
        self.router = router

    def run(self, q: Question, tracer: Tracer) -> RouteDecision:
        with tracer.step(Step.ROUTE, f"{q.text[:80]!r}") as step:
            decision = self.router.decide(q.text)
            fallback = decision.fallback
            step.done(
                f"{decision.route}: {decision.reason}",
                status="warning" if fallback else "ok",
                record=RouteDetails(
                    decision.route, decision.reason, decision.confidence, decision.router, fallback, q.follow_up
                ),
            )
            if fallback:
                tracer.warn(fallback)
        return decision

    def halt(self, out: RouteDecision) -> str | None:
        return "direct route: nothing to look up" if out.route == "direct" else None


class RetrieveStage(Stage[Retrieved]):
    steps = RETRIEVAL_STEPS

    def __init__(self, settings: Settings, retrieve: Retrieve, store: Store) -> None:
        self.settings = settings
        self.retrieve = retrieve
        self.store = store

    def run(self, q: Question, tracer: Tracer) -> Retrieved:
        limit = self.settings.answer.candidates
        result = self.retrieve(q.text, filters=q.filters, principals=q.principals, limit=limit, tracer=tracer)
        return Retrieved(result.hits, term_weights(self.store, q.text, q.principals))

    def unrecorded(self, step: Step) -> str:
        return "only one route ran" if step == Step.FUSION else "not used in this mode"


class RerankStage(Stage[Reranked]):
    steps = (Step.RERANK,)

    def __init__(self, reranker: Reranker | None) -> None:
        self.reranker = reranker

    def run(self, q: Question, retrieved: Retrieved, tracer: Tracer) -> Reranked:
        hits, weights = retrieved.hits, retrieved.weights
        name = self.reranker.name if self.reranker else "none"
        with tracer.step(Step.RERANK, f"{len(hits)} candidates, {name}") as step:
            if self.reranker is None:
                top = max((h.score for h in hits), default=1.0) or 1.0
                ranked = [Ranked(h, h.score / top, {}) for h in hits]
            else:
                ranked = self.reranker.rerank(q.text, hits, weights)
            before = {h.chunk_id: i for i, h in enumerate(hits, 1)}
            entries = tuple(
                RerankedEntry(r.hit.chunk_id, r.hit.path, before[r.hit.chunk_id], i, round(r.score, 4), r.details)
                for i, r in enumerate(ranked[:10], 1)
            )
            step.done(
                f"{len(ranked)} reranked" + (f", top {ranked[0].hit.path}" if ranked else ""),
                record=RerankDetails(name, {t: round(w, 3) for t, w in weights.names().items()}, entries),
            )
        return Reranked(tuple(ranked))


class SelectStage(Stage[Selection]):
    steps = (Step.SELECT,)

    def __init__(
        self,
        settings: Settings,
        store: Store,
        profile: GateProfile,
        space_name: Callable[[], str],
        sentence_model: Callable[[], Embedder] | None,
        reader: Callable[[], Reader | None] = lambda: None,
        vectors: Vectors | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.profile = profile
        self.space_name = space_name
        self.vectors = vectors  # e5 vectors of chunks, to tell translated pages apart (select._keep)
        self.sentence_model = sentence_model
        self.reader = reader  # a loader: the model loads on the first question, not with the library
        params = load_params()
        self.scorer = AnswerScorer(params, sentence_model) if params is not None else None

    def run(self, q: Question, retrieved: Retrieved, reranked: Reranked, tracer: Tracer) -> Selection:
        s = self.settings.answer
        # a dense gate is per embedding space; without a dense score the lexical gate decides
        space = self.space_name() if self.settings.search.mode != "bm25" else None
        reader = self.reader()
        gate = build_gate(s, self.profile, self.store, space, q.lang, reader.threshold if reader else None)
        ranked = reranked.ranked
        with tracer.step(Step.SELECT, f"{len(ranked)} candidates, min score {s.min_score}") as step:
            weights = retrieved.weights
            sel = select(q.text, ranked, weights, gate, s, self.sentence_model, self.scorer, reader, self.vectors)
            step.done(
                (f"{len(sel.kept)} selected" if sel.passed else f"refused: {sel.reason}") + _overruled(sel),
                status="ok" if sel.passed else "warning",
                record=selection_details(sel, space),
            )
        return sel

    def halt(self, out: Selection) -> str | None:
        return None if out.passed else "refused by the gate"


def _overruled(sel: Selection) -> str:
    """The summary's note when the reader overruled the gate across languages."""
    r = sel.signals.reading
    if not sel.decision.overruled or r is None:
        return ""
    codes = ", ".join(x.code for x in sel.decision.overruled)
    return f" (the reader overruled {codes}: p={r.probability:.2f} on a passage in the other language)"


def selection_details(sel: Selection, space: str | None) -> SelectionDetails:
    """``space``: the embedding space whose cosine the gate may read (None in BM25 mode)."""
    return SelectionDetails(
        selected=tuple(r.hit.chunk_id for r in sel.kept),
        dropped_below_min_score=sel.dropped_low,
        dropped_duplicates=sel.dropped_dupes,
        dropped_translations=tuple(TranslationDrop(a, b) for a, b in sel.translations),
        top_cosine=None if sel.top_cosine is None else round(sel.top_cosine, 4),
        coverage=round(sel.coverage, 4),
        sentence_cosine=None if sel.sentence_cosine is None else round(sel.sentence_cosine, 4),
        missing_terms=tuple(sel.missing_terms[:10]),
        gate_score=round(sel.gate_score, 4),
        threshold=round(sel.threshold, 4),
        cosine_weight=sel.gate.cosine_weight if sel.top_cosine is not None else 0.0,
        sentence_weight=sel.gate.sentence_weight,
        gate_source=sel.gate.source,
        passed=sel.passed,
        missing_names=tuple(sel.missing_names),
        expects=sel.expects.describe() if sel.expects else None,
        expectation_met=sel.expectation_met,
        checks_passed=sel.checks_passed,
        confidence=round(sel.confidence, 4),
        confidence_level=sel.level,
        reason=sel.reason,
        refusals=tuple(r.code for r in sel.decision.refusals),
        answerability=_answerability(sel),
        reader=_reading(sel),
        top_units=tuple(u.explain() for u in sel.units[:5]),
        # which tier answered: the gate reads the main space's cosine only; evidence that only
        # the fast tier scored (its main vector still pending) is named
        gate_space=space if sel.top_cosine is not None else None,
        fast_tier_only=tuple(
            r.hit.chunk_id for r in sel.kept if "dense-fast" in r.hit.routes and r.hit.routes["dense-fast"].rank
        ),
        overruled=tuple(r.code for r in sel.decision.overruled),
    )


def _reading(sel: Selection) -> ReaderDetails | None:
    r = sel.signals.reading
    if r is None:
        return None
    passages = tuple(
        PassageReading(k.hit.chunk_id, k.hit.path, round(x.probability, 4), x.text, x.start, x.end)
        for k, x in zip(sel.kept, r.readings, strict=True)
    )
    return ReaderDetails(r.reader, round(r.probability, 4), passages)


def _answerability(sel: Selection) -> AnswerabilityDetails | None:
    a = sel.signals.answerability
    if a is None:
        return None
    return AnswerabilityDetails(round(a.probability, 4), a.threshold, {k: round(v, 4) for k, v in a.features.items()})


class ContextStage(Stage[BuiltContext]):
    """Neighbour expansion of strong seeds, then the budgeted, fenced context (one step)."""

    steps = (Step.CONTEXT,)

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    def run(self, sel: Selection, tracer: Tracer) -> BuiltContext:
        s = self.settings.answer
        with tracer.step(Step.CONTEXT, f"{len(sel.kept)} selected chunks") as step:
            neighbours = expand(self.store, sel.kept, s)
            candidates: list[Evidence] = [evidence_from(r, r.score) for r in sel.kept]
            candidates += [evidence_from(row, seed.score * 0.9, seed.hit.chunk_id) for row, seed in neighbours]
            report = build_context(candidates, Budget(s.context_soft_tokens, s.context_max_tokens, s.expand_threshold))
            ctx = report.context
            scores = [e.score for e in ctx.evidence]
            stats = (
                ScoreStats(round(max(scores), 4), round(min(scores), 4), round(sum(scores) / len(scores), 4))
                if scores
                else ScoreStats(None, None, None)
            )
            step.done(
                f"{len(ctx.evidence)} sources, ~{ctx.token_estimate} tokens, {len(ctx.text)} characters",
                record=ContextDetails(
                    sources=tuple(
                        ContextSource(
                            e.source, e.chunk_id, e.path, " > ".join(e.heading_path), round(e.score, 4), e.expanded_from
                        )
                        for e in ctx.evidence
                    ),
                    expanded=tuple(
                        Expansion(row.chunk_id, seed.hit.chunk_id, round(seed.score, 4)) for row, seed in neighbours
                    ),
                    token_estimate=ctx.token_estimate,
                    chars=len(ctx.text),
                    soft_limit=s.context_soft_tokens,
                    hard_limit=s.context_max_tokens,
                    dropped_by_budget=tuple(report.dropped),
                    groups=report.groups,
                    score_stats=stats,
                ),
            )
        return ctx


class WriteStage(Stage[Written]):
    steps = (Step.WRITE,)

    def __init__(self, settings: Settings, writer: Writer) -> None:
        self.settings = settings
        self.writer = writer

    def run(self, q: Question, weights: TermWeights, sel: Selection, context: BuiltContext, tracer: Tracer) -> Written:
        """``weights``: the question's terms, IDF-weighted over the chunks the asker may see."""
        note = CONFIDENCE_NOTES.get((sel.level, q.lang), "")
        request = WriteRequest(
            q.text, context, weights, note, self.settings.answer.max_sentences, sel.units, sel.readings
        )
        with tracer.step(Step.WRITE, f"{self.writer.name} with {len(context.evidence)} sources") as step:
            try:
                draft = self.writer.write(request, q.on_token)
            except ProviderError as exc:
                step.done(f"failed: {exc}", status="error", record=WriteFailed(self.writer.name, self.writer.model))
                return Written(None, str(exc), note)
            step.done(
                f"{len(draft.text)} characters" + (f", {draft.tokens_out} tokens" if draft.tokens_out else ""),
                record=WriteDetails(
                    self.writer.name,
                    draft.model,
                    draft.tokens_in,
                    draft.tokens_out,
                    draft.streamed,
                    note or None,
                    draft.text,
                    draft.details,
                ),
            )
        return Written(draft, None, note)

    def halt(self, out: Written) -> str | None:
        # a clean refusal that names the failure; the Writer step says what happened
        return "the writer failed" if out.draft is None else None


class VerifyStage(Stage[Verification]):
    steps = (Step.VERIFY,)

    def __init__(self, settings: Settings, writer: Writer, reader: Callable[[], Reader | None] = lambda: None) -> None:
        self.drop = settings.answer.unsupported == "drop"
        # an LLM's sentences are checked by the reader too; the extractive writer quotes, and its
        # quotes are checked term by term
        self.reader = reader if writer.is_llm else (lambda: None)
        self.support_threshold = settings.answer.support_threshold
        self.enforce = settings.answer.reader_support

    def run(self, context: BuiltContext, draft: Draft, tracer: Tracer) -> Verification:
        with tracer.step(Step.VERIFY, f"{len(draft.text)} characters") as step:
            echo = any(f in draft.text for f in context.fence.split("\n") if f)  # the prompt's fence lines
            reader = self.reader()
            checked = verify(
                draft.text,
                context.evidence,
                attribute=not echo,
                drop=self.drop,
                support=reader.support if reader is not None else None,
                support_threshold=self.support_threshold,
                enforce_support=self.enforce,
            )
            step.done(
                f"{checked.supported} supported, {checked.unsupported} unsupported"
                + (f" ({checked.dropped} dropped)" if checked.dropped else "")
                + f", {len(checked.citations)} citations"
                + (f", {len(checked.rejected_refs)} refs rejected" if checked.rejected_refs else ""),
                status="warning" if checked.unsupported or checked.rejected_refs else "ok",
                record=VerifyDetails(
                    tuple(to_jsonable(s) for s in checked.sentences),
                    tuple(checked.rejected_refs),
                    checked.dropped,
                    reader.name if reader is not None else None,
                    tuple(checked.forged),
                ),
            )
        return checked
