"""The stages of the ask pipeline, each an object with a typed input and a typed output.

    RouteStage     Question                                  -> RouteDecision
    RetrieveStage  Question                                  -> Retrieved      (BM25, Dense, Fusion steps)
    RerankStage    Question, Retrieved                       -> Reranked
    SelectStage    Question, Retrieved, Reranked             -> Selection      (signals + gate decision)
    ContextStage   Selection                                 -> BuiltContext   (expansion + budget)
    JudgeStage     Question, BuiltContext                    -> Judged         (answer/judge.py: the LLM's verdict)
    WriteStage     Question, Retrieved, Selection, BuiltContext -> Written
    VerifyStage    BuiltContext, Written                     -> Verification

A stage is built once (from settings and its providers) and run once per question.
Its input is a frozen dataclass whose field names are the ``output`` names of earlier
stages; ``Asker`` fills it from what those stages returned (``run_stages``). A stage
records the trace steps it names in ``steps``; a step it leaves unrecorded is marked
skipped by the runner with ``unrecorded(step)`` as the reason, and when ``halt(out)``
returns a reason, the runner marks every later stage's steps skipped with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ..config import Settings
from ..contracts import (
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
from ..errors import ProviderError
from ..providers import Embedder, Reader, Reranker, Writer
from ..providers.base import WriteRequest
from ..store import Store
from ..text import TermWeights
from ..trace import Tracer
from ..trace.steps import RETRIEVAL_STEPS, Step
from .citations import Verification, verify
from .context import Budget, build_context
from .gate import GateProfile, build_gate
from .relevance import term_weights
from .router import Router
from .scorer import AnswerScorer, load_params
from .select import Selection, Vectors, evidence_from, expand, select

In = TypeVar("In")
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
    lang: str  # "en" or "zh", as the router's language() detects it
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


class Stage(Generic[In, Out]):
    inputs: ClassVar[type[Any]]  # a frozen dataclass: its field names are earlier outputs
    output: ClassVar[str]  # the name later stages read this stage's output by
    steps: ClassVar[tuple[Step, ...]]  # the trace steps this stage records

    def run(self, inp: In, tracer: Tracer) -> Out:
        raise NotImplementedError

    def halt(self, out: Out) -> str | None:
        """A reason to stop the run after this stage (later stages are marked skipped with it)."""
        return None

    def unrecorded(self, step: Step) -> str:
        """Why one of ``steps`` was not recorded although the stage ran."""
        return "did not run"


@dataclass(frozen=True)
class Round:
    """One round of a multi-round run: its stages run inside one ``Step.ROUND`` span (iteration n),
    so their steps nest under it. A single-shot ask has no rounds."""

    iteration: int
    stages: tuple[Stage[Any, Any] | Round, ...]

    @property
    def steps(self) -> tuple[Step, ...]:
        return (Step.ROUND, *(step for stage in self.stages for step in stage.steps))


def run_stages(stages: Sequence[Stage[Any, Any] | Round], board: dict[str, Any], tracer: Tracer) -> str | None:
    """Run ``stages`` in order; ``board`` holds the run's input under ``question`` and gets each
    output under the stage's ``output`` name. Returns the reason the run halted, if it did."""
    halted: str | None = None
    for stage in stages:
        if halted is not None:
            for step in stage.steps:
                tracer.skipped(step, halted)
        elif isinstance(stage, Round):
            halted = _run_round(stage, board, tracer)
        else:
            inp = stage.inputs(**{f.name: board[f.name] for f in fields(stage.inputs)})
            mark = tracer.mark()
            out = stage.run(inp, tracer)
            board[stage.output] = out
            recorded = {s.name for s in tracer.since(mark)}
            for step in stage.steps:
                if step not in recorded:
                    tracer.skipped(step, stage.unrecorded(step))
            halted = stage.halt(out)
    return halted


def _run_round(round_: Round, board: dict[str, Any], tracer: Tracer) -> str | None:
    question: Question = board["question"]
    with tracer.step(Step.ROUND, f"{question.text[:80]!r}", iteration=round_.iteration) as span:
        halted = run_stages(round_.stages, board, tracer)
        span.done(
            f"round {round_.iteration}" + (f" stopped: {halted}" if halted else ""),
            iteration=round_.iteration,
            question=question.text,
        )
    return halted


# -- the stages -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AskIn:
    question: Question


class RouteStage(Stage[AskIn, RouteDecision]):
    inputs = AskIn
    output = "route"
    steps = (Step.ROUTE,)

    def __init__(self, router: Router) -> None:
        self.router = router

    def run(self, inp: AskIn, tracer: Tracer) -> RouteDecision:
        question = inp.question.text
        with tracer.step(Step.ROUTE, f"{question[:80]!r}") as step:
            decision = self.router.decide(question)
            fallback = decision.fallback
            rewrite = inp.question.follow_up
            step.done(
                f"{decision.route}: {decision.reason}",
                status="warning" if fallback else "ok",
                route=decision.route,
                reason=decision.reason,
                confidence=decision.confidence,
                router=decision.router,
                fallback=fallback,
                # only a follow-up adds this key: a single question's trace is unchanged
                **({"follow_up": to_jsonable(rewrite)} if rewrite is not None else {}),
            )
            if fallback:
                tracer.warn(fallback)
        return decision

    def halt(self, out: RouteDecision) -> str | None:
        return "direct route: nothing to look up" if out.route == "direct" else None


class RetrieveStage(Stage[AskIn, Retrieved]):
    inputs = AskIn
    output = "retrieved"
    steps = RETRIEVAL_STEPS

    def __init__(self, settings: Settings, retrieve: Retrieve, store: Store) -> None:
        self.settings = settings
        self.retrieve = retrieve
        self.store = store

    def run(self, inp: AskIn, tracer: Tracer) -> Retrieved:
        q = inp.question
        limit = self.settings.answer.candidates
        result = self.retrieve(q.text, filters=q.filters, principals=q.principals, limit=limit, tracer=tracer)
        return Retrieved(result.hits, term_weights(self.store, q.text, q.principals))

    def unrecorded(self, step: Step) -> str:
        return "only one route ran" if step == Step.FUSION else "not used in this mode"


@dataclass(frozen=True)
class RerankIn:
    question: Question
    retrieved: Retrieved


class RerankStage(Stage[RerankIn, Reranked]):
    inputs = RerankIn
    output = "reranked"
    steps = (Step.RERANK,)

    def __init__(self, reranker: Reranker | None) -> None:
        self.reranker = reranker

    def run(self, inp: RerankIn, tracer: Tracer) -> Reranked:
        hits, weights = inp.retrieved.hits, inp.retrieved.weights
        name = self.reranker.name if self.reranker else "none"
        with tracer.step(Step.RERANK, f"{len(hits)} candidates, {name}") as step:
            if self.reranker is None:
                top = max((h.score for h in hits), default=1.0) or 1.0
                ranked = [Ranked(h, h.score / top, {}) for h in hits]
            else:
                ranked = self.reranker.rerank(inp.question.text, hits, weights)
            before = {h.chunk_id: i for i, h in enumerate(hits, 1)}
            step.done(
                f"{len(ranked)} reranked" + (f", top {ranked[0].hit.path}" if ranked else ""),
                reranker=name,
                query_terms={t: round(w, 3) for t, w in weights.names().items()},
                top=[
                    {
                        "chunk_id": r.hit.chunk_id,
                        "path": r.hit.path,
                        "fused_rank": before[r.hit.chunk_id],
                        "rank": i,
                        "score": round(r.score, 4),
                        **r.details,
                    }
                    for i, r in enumerate(ranked[:10], 1)
                ],
            )
        return Reranked(tuple(ranked))


@dataclass(frozen=True)
class SelectIn:
    question: Question
    retrieved: Retrieved
    reranked: Reranked


class SelectStage(Stage[SelectIn, Selection]):
    inputs = SelectIn
    output = "selection"
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

    def run(self, inp: SelectIn, tracer: Tracer) -> Selection:
        s = self.settings.answer
        q = inp.question
        # a dense gate is per embedding space; without a dense score the lexical gate decides
        space = self.space_name() if self.settings.search.mode != "bm25" else None
        reader = self.reader()
        gate = build_gate(s, self.profile, self.store, space, q.lang, reader.threshold if reader else None)
        ranked = inp.reranked.ranked
        with tracer.step(Step.SELECT, f"{len(ranked)} candidates, min score {s.min_score}") as step:
            sel = select(
                q.text, ranked, inp.retrieved.weights, gate, s, self.sentence_model, self.scorer, reader, self.vectors
            )
            step.done(
                (f"{len(sel.kept)} selected" if sel.passed else f"refused: {sel.reason}"),
                status="ok" if sel.passed else "warning",
                **_selection_details(sel),
                # which tier answered: the gate reads the main space's cosine only; evidence that only
                # the fast tier scored (its main vector still pending) is named
                gate_space=space if sel.top_cosine is not None else None,
                fast_tier_only=[
                    r.hit.chunk_id for r in sel.kept if "dense-fast" in r.hit.routes and r.hit.routes["dense-fast"].rank
                ],
            )
        return sel

    def halt(self, out: Selection) -> str | None:
        return None if out.passed else "refused by the gate"


def _selection_details(sel: Selection) -> dict[str, Any]:
    return {
        "selected": [r.hit.chunk_id for r in sel.kept],
        "dropped_below_min_score": sel.dropped_low,
        "dropped_duplicates": sel.dropped_dupes,
        "dropped_translations": [{"dropped": a, "kept": b} for a, b in sel.translations],
        "top_cosine": None if sel.top_cosine is None else round(sel.top_cosine, 4),
        "coverage": round(sel.coverage, 4),
        "sentence_cosine": None if sel.sentence_cosine is None else round(sel.sentence_cosine, 4),
        "missing_terms": list(sel.missing_terms[:10]),
        "gate_score": round(sel.gate_score, 4),
        "threshold": round(sel.threshold, 4),
        "cosine_weight": sel.gate.cosine_weight if sel.top_cosine is not None else 0.0,
        "sentence_weight": sel.gate.sentence_weight,
        "gate_source": sel.gate.source,
        "passed": sel.passed,
        "missing_names": list(sel.missing_names),
        "expects": sel.expects.describe() if sel.expects else None,
        "expectation_met": sel.expectation_met,
        "checks_passed": sel.checks_passed,
        "confidence": round(sel.confidence, 4),
        "confidence_level": sel.level,
        "reason": sel.reason,
        "refusals": [r.code for r in sel.decision.refusals],
        "answerability": _answerability(sel),
        "reader": _reading(sel),
        "top_units": [u.explain() for u in sel.units[:5]],
    }


def _reading(sel: Selection) -> dict[str, Any] | None:
    """The reader's probability and span for each kept passage, as the trace and the UI show them."""
    r = sel.signals.reading
    if r is None:
        return None
    return {
        "reader": r.reader,
        "probability": round(r.probability, 4),
        "passages": [
            {
                "chunk_id": k.hit.chunk_id,
                "path": k.hit.path,
                "probability": round(x.probability, 4),
                "span": x.text,
                "start": x.start,
                "end": x.end,
            }
            for k, x in zip(sel.kept, r.readings, strict=True)
        ],
    }


def _answerability(sel: Selection) -> dict[str, Any] | None:
    a = sel.signals.answerability
    if a is None:
        return None
    return {
        "probability": round(a.probability, 4),
        "threshold": a.threshold,
        "features": {k: round(v, 4) for k, v in a.features.items()},
    }


@dataclass(frozen=True)
class ContextIn:
    selection: Selection


class ContextStage(Stage[ContextIn, BuiltContext]):
    """Neighbour expansion of strong seeds, then the budgeted, fenced context (one step)."""

    inputs = ContextIn
    output = "context"
    steps = (Step.CONTEXT,)

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    def run(self, inp: ContextIn, tracer: Tracer) -> BuiltContext:
        s = self.settings.answer
        sel = inp.selection
        with tracer.step(Step.CONTEXT, f"{len(sel.kept)} selected chunks") as step:
            neighbours = expand(self.store, sel.kept, s)
            candidates: list[Evidence] = [evidence_from(r, r.score) for r in sel.kept]
            candidates += [evidence_from(row, seed.score * 0.9, seed.hit.chunk_id) for row, seed in neighbours]
            report = build_context(candidates, Budget(s.context_soft_tokens, s.context_max_tokens, s.expand_threshold))
            ctx = report.context
            scores = [e.score for e in ctx.evidence]
            step.done(
                f"{len(ctx.evidence)} sources, ~{ctx.token_estimate} tokens, {len(ctx.text)} characters",
                sources=[
                    {
                        "source": e.source,
                        "chunk_id": e.chunk_id,
                        "path": e.path,
                        "section": " > ".join(e.heading_path),
                        "score": round(e.score, 4),
                        "expanded_from": e.expanded_from,
                    }
                    for e in ctx.evidence
                ],
                expanded=[
                    {
                        "chunk_id": row.chunk_id,
                        "expanded_from": seed.hit.chunk_id,
                        "expanded_from_score": round(seed.score, 4),
                    }
                    for row, seed in neighbours
                ],
                token_estimate=ctx.token_estimate,
                chars=len(ctx.text),
                soft_limit=s.context_soft_tokens,
                hard_limit=s.context_max_tokens,
                dropped_by_budget=list(report.dropped),
                groups=report.groups,
                score_stats={
                    "max": round(max(scores), 4) if scores else None,
                    "min": round(min(scores), 4) if scores else None,
                    "mean": round(sum(scores) / len(scores), 4) if scores else None,
                },
            )
        return ctx


@dataclass(frozen=True)
class WriteIn:
    question: Question
    retrieved: Retrieved
    selection: Selection
    context: BuiltContext


class WriteStage(Stage[WriteIn, Written]):
    inputs = WriteIn
    output = "written"
    steps = (Step.WRITE,)

    def __init__(self, settings: Settings, writer: Writer) -> None:
        self.settings = settings
        self.writer = writer

    def run(self, inp: WriteIn, tracer: Tracer) -> Written:
        q, context = inp.question, inp.context
        note = CONFIDENCE_NOTES.get((inp.selection.level, q.lang), "")
        request = WriteRequest(
            q.text,
            context,
            inp.retrieved.weights,
            note,
            self.settings.answer.max_sentences,
            inp.selection.units,
            inp.selection.readings,
        )
        with tracer.step(Step.WRITE, f"{self.writer.name} with {len(context.evidence)} sources") as step:
            try:
                draft = self.writer.write(request, q.on_token)
            except ProviderError as exc:
                step.done(f"failed: {exc}", status="error", writer=self.writer.name, model=self.writer.model)
                return Written(None, str(exc), note)
            step.done(
                f"{len(draft.text)} characters" + (f", {draft.tokens_out} tokens" if draft.tokens_out else ""),
                writer=self.writer.name,
                model=draft.model,
                tokens_in=draft.tokens_in,
                tokens_out=draft.tokens_out,
                streamed=draft.streamed,
                confidence_note=note or None,
                draft=draft.text,
                **draft.details,
            )
        return Written(draft, None, note)

    def halt(self, out: Written) -> str | None:
        # a clean refusal that names the failure; the Writer step says what happened
        return "the writer failed" if out.draft is None else None


@dataclass(frozen=True)
class VerifyIn:
    context: BuiltContext
    written: Written


class VerifyStage(Stage[VerifyIn, Verification]):
    inputs = VerifyIn
    output = "verification"
    steps = (Step.VERIFY,)

    def __init__(self, settings: Settings, writer: Writer, reader: Callable[[], Reader | None] = lambda: None) -> None:
        self.drop = settings.answer.unsupported == "drop"
        # an LLM's sentences are checked by the reader too; the extractive writer quotes, and its
        # quotes are checked term by term as before
        self.reader = reader if writer.is_llm else (lambda: None)
        self.support_threshold = settings.answer.support_threshold
        self.enforce = settings.answer.reader_support

    def run(self, inp: VerifyIn, tracer: Tracer) -> Verification:
        draft = inp.written.draft
        assert draft is not None  # a failed write halts the run before this stage
        with tracer.step(Step.VERIFY, f"{len(draft.text)} characters") as step:
            echo = any(f in draft.text for f in inp.context.fence.split("\n") if f)  # the prompt's fence lines
            reader = self.reader()
            checked = verify(
                draft.text,
                inp.context.evidence,
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
                sentences=[to_jsonable(s) for s in checked.sentences],
                rejected_refs=list(checked.rejected_refs),
                dropped=checked.dropped,
                reader=reader.name if reader is not None else None,
                forged_markers=list(checked.forged),
            )
        return checked
