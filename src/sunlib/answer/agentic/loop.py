"""The agentic answering loop: a state machine over the ask pipeline's own stages.

    analyze -> rewrite -> decompose -> plan -> retrieve -> select -+-> follow_up -> retrieve (a gap, rounds left)
                                                                   +-> retrieve              (the next sub-question)
                                                                   +-> synthesize -> verify -> done
                                                                                     +-> fallback (a part uncovered)
    any cap (rounds, retrievals, time) -> synthesize; no part covered -> fallback (refuse, a reason per part)

Each state is a small stage object with a typed input and output. ``TRANSITIONS`` is the
table: (state, event) -> next state. ``AgenticLoop.run`` walks it and records every
transition (which state ran, the event, why, the next state) in the ``Agentic Loop``
span; each retrieval round is a ``Round`` span nested under it (iteration 1, 2, ...)
holding that round's retrieval, rerank and selection steps, so ``--explain``, the SSE
stream and saved runs show the rounds under the question. Beside this module in
``answer.agentic``: ``rewrite`` gives the question's standalone, keyword and other-language
forms; ``decompose`` its sub-questions; ``plan`` (``plan_rules``, ``plan_stage``) each
sub-question's queries, routes, k and inferred filters, by rules or by a chat model's validated
JSON plan. A round that leaves a gap asks the gap's query (the missing names and terms), else the
plan's next form. Retrieval, reranking, selection (the gate's sufficiency judgement), the context
builder, the writer and the citation verifier are the single-shot pipeline's own stage objects.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import partial

from ...config import AnswerSettings
from ...contracts import BuiltContext, Evidence, Hit
from ...providers import ChatModel
from ...trace import StepRecorder, Tracer
from ...trace.steps import Step
from ..details import AgentDetails, PartDetails, RoundDetails, Transition
from ..gate.relevance import term_weights
from ..gate.select import Selection
from ..single.citations import Verification, without_repeats
from ..single.stages import (
    ContextStage,
    Question,
    RerankStage,
    Retrieved,
    RetrieveStage,
    SelectStage,
    VerifyStage,
    WriteStage,
    Written,
    traced,
)
from .decompose import Analysis, Decomposition, SubQuestion, analyze, decompose
from .plan_rules import PartPlan, Plan, narrowed
from .plan_stage import PlanStage
from .rewrite import Rewrites, RewriteStage

# (state, event) -> the next state
TRANSITIONS: dict[tuple[str, str], str] = {
    ("analyze", "analyzed"): "rewrite",
    ("rewrite", "rewritten"): "decompose",
    ("decompose", "split"): "plan",
    ("plan", "planned"): "retrieve",
    ("plan", "rules_fallback"): "retrieve",
    ("retrieve", "retrieved"): "select",
    ("retrieve", "cap"): "synthesize",
    ("select", "covered"): "next",
    ("select", "gap"): "follow_up",
    ("follow_up", "query"): "retrieve",
    ("follow_up", "exhausted"): "next",
    ("follow_up", "cap"): "synthesize",
    ("next", "part"): "retrieve",
    ("next", "all_judged"): "synthesize",
    ("synthesize", "written"): "verify",
    ("synthesize", "nothing_covered"): "fallback",
    ("verify", "verified"): "done",
    ("verify", "partial"): "fallback",
    ("fallback", "explained"): "done",
}


@dataclass(frozen=True)
class Caps:
    rounds: int  # retrieval rounds per sub-question, the first included
    parts: int  # sub-questions
    retrievals: int  # retrievals in the whole run
    seconds: float  # the loop's time budget

    @classmethod
    def of(cls, s: AnswerSettings) -> Caps:
        return cls(s.agentic_rounds, s.agentic_parts, s.agentic_retrievals, s.agentic_seconds)


@dataclass(frozen=True)
class PartResult:
    """One sub-question after the loop: its queries, its last selection and the verdict."""

    part: SubQuestion
    queries: tuple[str, ...]
    selection: Selection | None  # None: never retrieved (a cap stopped the run first)
    covered: bool
    reason: str


@dataclass(frozen=True)
class AgenticOutcome:
    analysis: Analysis
    decomposition: Decomposition
    parts: tuple[PartResult, ...]
    context: BuiltContext | None
    written: Written | None
    verification: Verification | None
    transitions: tuple[Transition, ...]
    stopped_by: str | None  # the cap that ended the loop early, if one did
    retrievals: int
    hits: int
    rewrites: Rewrites | None = None
    plan: Plan | None = None
    caps_hit: tuple[str, ...] = ()  # every cap that stopped something: parts, rounds, retrievals, time

    @property
    def covered(self) -> tuple[PartResult, ...]:
        return tuple(p for p in self.parts if p.covered)

    @property
    def uncovered(self) -> tuple[PartResult, ...]:
        return tuple(p for p in self.parts if not p.covered)


LOOP_KINDS = ("comparison", "multi_part")  # what ``auto`` sends through the loop


def wants_loop(mode: str, analysis: Analysis) -> bool:
    """``agentic``: always; ``auto``: comparisons and multi-part questions; ``single``: never."""
    return mode == "agentic" or (mode == "auto" and analysis.kind in LOOP_KINDS)


def mode_reason(mode: str, analysis: Analysis) -> str:
    """Why ``mode`` does (or does not) send a question with this analysis through the loop."""
    if mode != "auto":
        return f"mode {mode}"
    verdict = "takes the loop" if wants_loop(mode, analysis) else "takes the single shot"
    kinds = " and ".join(LOOP_KINDS)
    return f"auto: a {analysis.kind} question (rule {analysis.rule!r}) {verdict}; the loop takes {kinds}"


def next_query(plan: PartPlan, sel: Selection, asked: tuple[str, ...]) -> tuple[str | None, str]:
    """The next round's query and why: the gap's (``follow_up_query``), else the plan's next form
    not yet asked (keywords, the other language); None when neither is new."""
    gap = follow_up_query(plan.part, sel, asked)
    if gap is not None:
        return gap, "from the missing terms"
    planned = next((x for x in plan.queries if x not in asked), None)
    return (planned, "from the plan (the next form of the question)") if planned else (None, "")


def follow_up_query(part: SubQuestion, sel: Selection, asked: tuple[str, ...]) -> str | None:
    """A new query from the gap: the part's names, then the names and terms its evidence missed.
    None when the gap names nothing new to look for."""
    missing = [*sel.missing_names, *sel.missing_terms]
    if not missing:
        return None
    query = " ".join(dict.fromkeys([*part.focus, *missing]))
    return None if query in asked else query


class _Run:
    """The mutable state of one walk through the table (private to ``AgenticLoop.run``)."""

    def __init__(self, q: Question, caps: Caps, tracer: Tracer) -> None:
        self.q, self.caps, self.tracer = q, caps, tracer
        self.started = time.perf_counter()
        self.transitions: list[Transition] = []
        self.results: list[PartResult] = []
        self.retrievals = 0
        self.hits = 0
        self.iteration = 0
        self.stopped_by: str | None = None
        self.rounds_capped: list[int] = []  # the parts whose rounds ran out

    def move(self, state: str, event: str, reason: str) -> str:
        nxt = TRANSITIONS[(state, event)]
        self.transitions.append(Transition(state, event, nxt, reason))
        return nxt

    def cap_hit(self) -> str | None:
        if self.retrievals >= self.caps.retrievals:
            return f"retrievals cap ({self.caps.retrievals}) reached"
        if time.perf_counter() - self.started >= self.caps.seconds:
            return f"time budget ({self.caps.seconds:g} s) spent"
        return None


class AgenticLoop:
    """The loop over the pipeline's stage objects (built once by ``Asker``)."""

    def __init__(
        self,
        settings: AnswerSettings,
        retrieve: RetrieveStage,
        rerank: RerankStage,
        select: SelectStage,
        context: ContextStage,
        write: WriteStage,
        verify: VerifyStage,
        planner: ChatModel | None = None,
    ) -> None:
        self.settings = settings
        self.retrieve, self.rerank, self.select = retrieve, rerank, select
        self.context, self.write, self.verify = context, write, verify
        search = retrieve.settings.search
        self.rewrite = RewriteStage(retrieve.store, search.crosslang_min_share if search.crosslang else None)
        self.planner = PlanStage(retrieve.settings, retrieve.store, planner)
        self._retrievers: dict[int, RetrieveStage] = {retrieve.settings.answer.candidates: retrieve}

    def run(self, q: Question, tracer: Tracer, analysis: Analysis | None = None, why: str = "") -> AgenticOutcome:
        """``why``: the reason the question takes the loop (``mode_reason``), shown in the span."""
        caps = Caps.of(self.settings)
        analysis = analysis or analyze(q.text)
        with tracer.step(Step.AGENT, f"{q.text[:80]!r}") as span:
            run = _Run(q, caps, tracer)
            rewrites, plan = self._plan(q, analysis, caps, run)
            for part in plan.parts:
                if run.stopped_by is not None:
                    run.results.append(PartResult(part.part, (), None, False, f"not retrieved: {run.stopped_by}"))
                    continue
                run.results.append(self._part(part, run))
            outcome = self._finish(analysis, plan, rewrites, run)
            span.done(
                _summary(outcome),
                status="warning" if outcome.uncovered else "ok",
                record=_details(outcome, caps, why or None),
            )
        return outcome

    def _plan(self, q: Question, analysis: Analysis, caps: Caps, run: _Run) -> tuple[Rewrites, Plan]:
        """analyze -> rewrite -> decompose -> plan, each recorded as a step and a transition."""
        run.move("analyze", "analyzed", f"{analysis.kind} ({analysis.rule}), language {analysis.lang}")
        tracer = run.tracer
        rewrites = traced(self.rewrite, tracer, partial(self.rewrite.run, q, tracer))
        said = f"follow-up {rewrites.follow_up.said!r} made standalone; " if rewrites.follow_up else ""
        forms = len(rewrites.queries())
        run.move("rewrite", "rewritten", f"{said}{forms} form(s) of the question ({rewrites.variant_note})")
        with run.tracer.step(Step.PLAN, f"{q.text[:80]!r}") as step:
            split = decompose(rewrites.standalone, analysis, caps.parts)
            dropped = f"; {split.dropped} more left out by the sub-question cap ({caps.parts})" if split.dropped else ""
            run.move("decompose", "split", f"{len(split.parts)} sub-question(s) by rule {split.rule}{dropped}")
            step.done(
                f"{analysis.kind}: {len(split.parts)} sub-question(s)",
                language=analysis.lang,
                kind=analysis.kind,
                kind_rule=analysis.rule,
                terms=list(analysis.terms[:20]),
                rule=split.rule,
                sub_questions=[p.text for p in split.parts],
                dropped_by_cap=split.dropped,
            )
        plan = traced(self.planner, tracer, partial(self.planner.run, q, rewrites, split, tracer))
        if plan.fallback is not None:
            run.move("plan", "rules_fallback", f"the rules' plan: {plan.fallback}")
        else:
            inferred = f"; filters: {', '.join(plan.parts[0].scope.notes)}" if plan.parts[0].scope.notes else ""
            run.move("plan", "planned", f"{len(plan.parts)} part(s) planned by {plan.planner}{inferred}")
        return rewrites, plan

    def _part(self, plan: PartPlan, run: _Run) -> PartResult:
        """Retrieve, select and follow up one sub-question until it is covered or its rounds end."""
        part = plan.part
        asked: tuple[str, ...] = ()
        hits: tuple[Hit, ...] = ()
        sel: Selection | None = None
        query: str | None = plan.queries[0] if plan.queries else part.text
        for n in range(1, run.caps.rounds + 1):
            if query is None:
                break
            cap = run.cap_hit()
            if cap is not None:
                run.stopped_by = cap
                run.move("follow_up" if sel is not None else "retrieve", "cap", cap)
                break
            asked += (query,)
            hits, sel = self._round(plan, query, n, hits, run)
            if sel.passed:
                run.move("select", "covered", f"part {part.index}: the gate passed (round {n}{_read(sel)})")
                return PartResult(part, asked, sel, True, f"covered in round {n}")
            run.move("select", "gap", f"part {part.index}: {sel.reason or 'refused'}{_read(sel)}")
            query, why = next_query(plan, sel, asked) if n < run.caps.rounds else (None, "")
            if query is not None:
                run.move("follow_up", "query", f"part {part.index}: new query {query!r} {why}")
        if run.stopped_by is None:
            why = "rounds cap reached" if len(asked) >= run.caps.rounds else "the gap names nothing new to look for"
            run.move("follow_up", "exhausted", f"part {part.index}: {why}")
            if len(asked) >= run.caps.rounds:
                run.rounds_capped.append(part.index)
        else:
            why = run.stopped_by
        reason = (sel.reason or "refused") if sel is not None else f"not retrieved: {why}"
        return PartResult(part, asked, sel, False, reason)

    def _retriever(self, k: int) -> RetrieveStage:
        """The retrieve stage asking for ``k`` candidates (the pipeline's own for the default k)."""
        if k not in self._retrievers:
            base = self.retrieve.settings
            settings = base.model_copy(update={"answer": base.answer.model_copy(update={"candidates": k})})
            self._retrievers[k] = RetrieveStage(settings, self.retrieve.retrieve, self.retrieve.store)
        return self._retrievers[k]

    def _round(
        self, plan: PartPlan, query: str, n: int, earlier: tuple[Hit, ...], run: _Run
    ) -> tuple[tuple[Hit, ...], Selection]:
        """One retrieval round (a Round span): the query's hits, narrowed to the plan's scope and
        joined to the part's earlier ones, reranked and judged against the sub-question itself."""
        run.iteration += 1
        run.retrievals += 1
        q, part = run.q, plan.part
        part_q = Question(part.text, q.lang, plan.filters, q.principals)
        with run.tracer.step(
            Step.ROUND, f"part {part.index}, round {n}: {query[:80]!r}", iteration=run.iteration
        ) as span:
            tracer, retriever, asked = run.tracer, self._retriever(plan.k), dataclasses.replace(part_q, text=query)
            found = traced(retriever, tracer, partial(retriever.run, asked, tracer))
            kept, widened = narrowed(found.hits, plan.scope)
            seen = {h.chunk_id for h in earlier}
            hits = earlier + tuple(h for h in kept if h.chunk_id not in seen)
            run.hits += len(found.hits)
            joined = Retrieved(hits, term_weights(self.retrieve.store, part.text, q.principals))
            reranked = traced(self.rerank, tracer, partial(self.rerank.run, part_q, joined, tracer))
            sel = traced(self.select, tracer, partial(self.select.run, part_q, joined, reranked, tracer))
            scoped = f" ({len(kept)} in scope)" if plan.scope.narrows() and widened is None else ""
            run.move("retrieve", "retrieved", f"part {part.index}: {len(found.hits)} hits{scoped} for {query!r}")
            _round_done(span, part, query, n, run.iteration, len(found.hits), sel, widened)
        return hits, sel

    def _finish(self, analysis: Analysis, plan: Plan, rewrites: Rewrites, run: _Run) -> AgenticOutcome:
        results = tuple(run.results)
        covered = [r for r in results if r.covered and r.selection is not None]
        if run.stopped_by is None:
            run.move("next", "all_judged", f"{len(covered)} of {len(results)} part(s) covered")
        context = written = checked = None
        if not covered:
            run.move("synthesize", "nothing_covered", "no sub-question has enough evidence")
            run.move("fallback", "explained", "refused, with a reason per part")
        else:
            context, written = self._synthesize(covered, run)
            if written is not None and written.draft is not None:
                draft, tracer = written.draft, run.tracer
                checked = traced(self.verify, tracer, partial(self.verify.run, context, draft, tracer))
            if len(covered) < len(results):
                run.move("verify", "partial", f"{len(results) - len(covered)} part(s) not covered")
                run.move("fallback", "explained", "answered the covered parts; the others are named")
            else:
                run.move("verify", "verified", "every part covered")
        split = Decomposition(tuple(p.part for p in plan.parts), plan.rule, plan.dropped)
        return AgenticOutcome(
            analysis,
            split,
            results,
            context,
            written,
            checked,
            tuple(run.transitions),
            run.stopped_by,
            run.retrievals,
            run.hits,
            rewrites,
            plan,
            _caps_hit(plan, run),
        )

    def _synthesize(self, covered: list[PartResult], run: _Run) -> tuple[BuiltContext, Written | None]:
        """The writer per covered part over that part's context; the drafts joined part by part,
        and one context holding the union of the evidence for the verifier."""
        drafts: list[Written] = []
        evidence: dict[str, Evidence] = {}
        texts: list[str] = []
        fences: list[str] = []
        for result in covered:
            assert result.selection is not None
            part_q = Question(result.part.text, run.q.lang, run.q.filters, run.q.principals, run.q.on_token)
            sel, tracer = result.selection, run.tracer
            weights = term_weights(self.retrieve.store, result.part.text, run.q.principals)
            ctx = traced(self.context, tracer, partial(self.context.run, sel, tracer))
            for e in ctx.evidence:
                evidence.setdefault(e.chunk_id, e)
            drafts.append(traced(self.write, tracer, partial(self.write.run, part_q, weights, sel, ctx, tracer)))
            texts.append(ctx.text)
            fences.append(ctx.fence)
        union = tuple(dataclasses.replace(e, source=i) for i, e in enumerate(evidence.values(), 1))
        # the parts' fences, one per line: a draft holding any of them echoes a prompt (VerifyStage)
        fence = "\n".join(dict.fromkeys(f for f in fences if f))
        context = BuiltContext(union, "\n\n".join(texts), sum(e.end - e.start for e in union) // 4, fence)
        good = [w for w in drafts if w.draft is not None]
        run.move("synthesize", "written", f"{len(good)} of {len(drafts)} part draft(s) written")
        if not good:
            return context, drafts[0]
        first = good[0].draft
        assert first is not None
        # parts share evidence, so their drafts can say the same sentence: it is said once
        parts = without_repeats([w.draft.text for w in good if w.draft is not None])
        text = "\n\n".join(t for t in parts if t)
        tokens = (sum(w.draft.tokens_in for w in good if w.draft), sum(w.draft.tokens_out for w in good if w.draft))
        draft = dataclasses.replace(first, text=text, tokens_in=tokens[0], tokens_out=tokens[1])
        return context, Written(draft, None, good[0].confidence_note)


def _read(sel: Selection) -> str:
    """What the reader found of the evidence so far, for a transition's reason ("" without a reader)."""
    r = sel.signals.reading
    return f"; the reader's best answerability {r.probability:.2f}" if r is not None and r.readings else ""


def _caps_hit(plan: Plan, run: _Run) -> tuple[str, ...]:
    out = []
    if plan.dropped:
        out.append(f"sub-questions cap ({run.caps.parts}): {plan.dropped} left out")
    if run.rounds_capped:
        out.append(f"rounds cap ({run.caps.rounds}) for part(s) {', '.join(map(str, run.rounds_capped))}")
    if run.stopped_by:
        out.append(run.stopped_by)
    return tuple(out)


def _round_done(
    span: StepRecorder,
    part: SubQuestion,
    query: str,
    n: int,
    it: int,
    found: int,
    sel: Selection,
    widened: str | None = None,
) -> None:
    span.done(
        f"part {part.index} round {n}: " + ("covered" if sel.passed else f"gap: {sel.reason}"),
        status="ok" if sel.passed else "warning",
        record=RoundDetails(
            iteration=it,
            question=part.text,
            sub_question=part.index,
            part_round=n,
            query=query,
            hits=found,
            verdict="covered" if sel.passed else "gap",
            missing_terms=tuple(sel.missing_terms[:10]),
            missing_names=tuple(sel.missing_names),
            scope_note=widened,
        ),
    )


def _summary(o: AgenticOutcome) -> str:
    stop = f"; stopped: {o.stopped_by}" if o.stopped_by else ""
    return f"{len(o.covered)} of {len(o.parts)} part(s) covered in {o.retrievals} retrieval(s){stop}"


def _details(o: AgenticOutcome, caps: Caps, mode: str | None) -> AgentDetails:
    return AgentDetails(
        mode=mode,
        kind=o.analysis.kind,
        rule=o.decomposition.rule,
        sub_questions=tuple(PartDetails(p.part.index, p.part.text, p.queries, p.covered, p.reason) for p in o.parts),
        transitions=o.transitions,
        stopped_by=o.stopped_by,
        caps_hit=o.caps_hit,
        planner=o.plan.planner if o.plan is not None else "rules",
        caps=dataclasses.asdict(caps),
        retrievals=o.retrievals,
    )
