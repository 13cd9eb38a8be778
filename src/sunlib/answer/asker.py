"""The ask pipeline: one question in; a cited answer or a refusal with its reasons out.

    [follow-up made standalone] -> single shot (answer.single.shot) | agentic loop (answer.agentic.loop)
    -> the answer frame -> Run Summary -> the saved run

``Asker`` builds the stages (``answer.single.stages``) once and, per question, runs either the
single shot (``SingleShot.run``: every stage once, in straight-line, type-checked code) or the
agentic loop over the same stage objects, all through one Tracer, so the CLI's ``--explain``, the
server's SSE events and the web UI's run chain all show the same records. It then composes the
answer frame from the stages' typed outputs (``Outcome``, ``AgenticOutcome``) and saves the run.
Retrieval applies the asking principals' ACL inside the store, so nothing in the frame or the
trace comes from a note they cannot see. ``Asker`` depends on settings, a retrieval callable, the
store and its providers; ``sunlib.library.build_asker`` wires them for a ``Library``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..config import Settings
from ..contracts import (
    AnswerFrame,
    Refusal,
    RunTrace,
    SearchFilters,
    Turn,
    to_jsonable,
)
from ..errors import UserError
from ..providers import (
    Embedder,
    Reader,
    Reranker,
    Writer,
)
from ..retrieve.engine import MAX_QUERY_CHARS
from ..store import LOCAL_OWNER, RunRecord, Store, Visibility
from ..text import language
from ..trace import Listener, Tracer
from ..trace.steps import Step
from .conversation import follow_up
from .details import SummaryDetails
from .gate.gate import profile_for
from .gate.refusals import joined, localized, refusal
from .gate.select import Selection, Vectors
from .result import AskResult
from .single.citations import source_cards
from .single.judge import AnswerabilityJudge, JudgeStage
from .single.router import Router, direct_reply
from .single.shot import Outcome, SingleShot
from .single.stages import (
    ContextStage,
    Question,
    RerankStage,
    Retrieve,
    RetrieveStage,
    RouteStage,
    SelectStage,
    VerifyStage,
    WriteStage,
    traced,
)

if TYPE_CHECKING:
    from .agentic.decompose import Analysis
    from .agentic.loop import AgenticLoop, AgenticOutcome

REFUSAL_TEXT = {
    "en": "I can't answer this from your notes: {reason}.",
    "zh": "无法根据你的笔记回答这个问题：{reason}。",
}


class Asker:
    """Runs the stages for one question at a time. Stages and providers are built once and reused."""

    def __init__(
        self,
        settings: Settings,
        retrieve: Retrieve,
        store: Store,
        writer: Writer,
        reranker: Reranker | None,
        router: Router,
        space_name: Callable[[], str],
        sentence_model: Callable[[], Embedder] | None = None,
        judge: AnswerabilityJudge | None = None,
        judge_off: str = "judge off",
        reader: Callable[[], Reader | None] = lambda: None,
        vectors: Vectors | None = None,
    ) -> None:
        self.reader = reader
        self.settings = settings
        self.store = store
        self.writer = writer
        self.reranker = reranker
        self.router = router
        self.judge = judge
        profile = profile_for(settings.embedding.provider)
        self.single = SingleShot(
            RouteStage(router),
            RetrieveStage(settings, retrieve, store),
            RerankStage(reranker),
            SelectStage(settings, store, profile, space_name, sentence_model, reader, vectors),
            ContextStage(settings, store),
            JudgeStage(judge, judge_off),
            WriteStage(settings, writer),
            VerifyStage(settings, writer, reader),
        )
        # the agentic loop reuses the same stage objects (answer/agentic/loop.py); it is built on first
        # use, with the modules it needs (its planner's too): a single-shot question never imports them
        self._loop: AgenticLoop | None = None
        self._loop_lock = threading.Lock()

    @property
    def loop(self) -> AgenticLoop:
        with self._loop_lock:
            if self._loop is None:
                from .agentic.loop import AgenticLoop
                from .agentic.plan_stage import create_planner_model

                one = self.single
                self._loop = AgenticLoop(
                    self.settings.answer,
                    one.retrieve,
                    one.rerank,
                    one.select,
                    one.context,
                    one.write,
                    one.verify,
                    create_planner_model(self.settings, self.writer),
                )
            return self._loop

    def ask(
        self,
        question: str,
        filters: SearchFilters | None = None,
        principals: Sequence[str] | None = None,
        listener: Listener | None = None,
        on_token: Callable[[str], None] | None = None,
        save: bool | None = None,
        history: Sequence[Turn] = (),
        agentic: bool | None = None,
        *,
        owner: str = LOCAL_OWNER,
    ) -> AskResult:
        """``history``: the conversation's earlier turns; an obvious follow-up is asked standalone
        (``answer.conversation``) and the Route step records it. No history, no change.
        ``agentic``: True runs the agentic loop, False the single shot, None what ``[answer] mode``
        says (``auto``: the loop for comparisons and multi-part questions). ``owner``: whose saved
        run it is (``RunRecord.owner``)."""
        question = question.strip()
        if not question:
            raise UserError("the question is empty")
        if len(question) > MAX_QUERY_CHARS:
            raise UserError(f"the question is {len(question)} characters; the limit is {MAX_QUERY_CHARS}")
        who = tuple(principals if principals is not None else self.settings.search.principals)
        rewrite = follow_up(question, history, self._known(who, filters)) if history else None
        text = rewrite.standalone[:MAX_QUERY_CHARS] if rewrite is not None else question
        q = Question(text, language(question), filters, who, on_token, rewrite)
        tracer = Tracer("ask", listener)
        started = time.time()
        mode = self.settings.answer.mode if agentic is None else ("agentic" if agentic else "single")
        if mode != "single":
            from .agentic.decompose import analyze
            from .agentic.loop import mode_reason, wants_loop

            analysis = analyze(q.text)
            if wants_loop(mode, analysis):
                why = mode_reason(mode, analysis)
                return self._ask_agentic(q, analysis, tracer, started, who, save, why, owner=owner)
            tracer.skipped(Step.AGENT, mode_reason(mode, analysis))  # auto: the trace says why not
        o = self.single.run(q, tracer)
        route, selection, written, judged = o.route, o.selection, o.written, o.judged
        frame = self._frame(q, o)
        draft = written.draft if written is not None else None
        verdict = judged.verdict
        tokens = (draft.tokens_in, draft.tokens_out) if draft is not None else (0, 0)
        if verdict is not None:
            tokens = (tokens[0] + verdict.tokens_in, tokens[1] + verdict.tokens_out)
        trace = self._finish(
            tracer,
            frame,
            who,
            started,
            save,
            retrieved=len(o.retrieved.hits) if o.retrieved is not None else 0,
            tokens=tokens,
            owner=owner,
        )
        return AskResult(frame, trace, route, selection, o.verification)

    def _ask_agentic(
        self,
        q: Question,
        analysis: Analysis,
        tracer: Tracer,
        started: float,
        who: tuple[str, ...],
        save: bool | None,
        why: str = "",
        *,
        owner: str,
    ) -> AskResult:
        route = traced(self.single.route, tracer, lambda: self.single.route.run(q, tracer))
        outcome: AgenticOutcome | None = None
        if route.route == "direct":
            frame = AnswerFrame(q.text, direct_reply(q.text), (), (), False, None, 1.0, "direct")
        else:
            outcome = self.loop.run(q, tracer, analysis, why)
            frame = self._agentic_frame(q, outcome)
        draft = outcome.written.draft if outcome is not None and outcome.written is not None else None
        tokens = (draft.tokens_in, draft.tokens_out) if draft is not None else (0, 0)
        hits = outcome.hits if outcome is not None else 0
        trace = self._finish(tracer, frame, who, started, save, retrieved=hits, tokens=tokens, owner=owner)
        first = outcome.parts[0].selection if outcome is not None and outcome.parts else None
        return AskResult(frame, trace, route, first, outcome.verification if outcome is not None else None)

    def _agentic_frame(self, q: Question, o: AgenticOutcome) -> AnswerFrame:
        """The covered parts answered; each uncovered part named with its reason; no part covered:
        a refusal with a reason per part."""
        sels = [p.selection for p in o.covered if p.selection is not None]
        confidence = round(min((s.confidence for s in sels), default=0.0), 4)
        level = min((s.level for s in sels), key=LEVELS.index, default="low")
        checked, written, context = o.verification, o.written, o.context
        if not sels or checked is None or written is None or written.draft is None or context is None:
            return _agentic_refusal(q, o, confidence, level)
        if checked.supported == 0:
            code = refusal("unsupported_draft", gate_score=min(s.gate_score for s in sels))
            return _agentic_refusal(q, o, confidence, level, (code,))
        notes = {c.note_id: self.store.note_by_id(c.note_id) for c in checked.citations}
        gaps = [NOT_COVERED[q.lang].format(part=p.part.text, reason=p.reason) for p in o.uncovered]
        return AnswerFrame(
            question=q.text,
            answer="\n\n".join([checked.text or written.draft.text, *gaps]),
            evidence=context.evidence,
            citations=checked.citations,
            refused=False,
            refusal_reason=None,
            confidence=confidence,
            route="rag",
            confidence_level=level,
            sources=source_cards(checked.citations, notes),
            sentences=checked.sentences,
            unsupported=checked.unsupported - checked.dropped,
            refusals=_part_refusals(o),
            dropped=checked.dropped,
        )

    def _known(self, who: tuple[str, ...], filters: SearchFilters | None) -> Callable[[Sequence[str]], bool]:
        """Does any of these terms occur in a chunk ``who`` may see (under ``filters``)?"""
        visibility = Visibility.of(who, filters)

        def known(names: Sequence[str]) -> bool:
            _, df = self.store.lexical.doc_freqs(list(names), visibility)
            return any(df.get(name, 0) > 0 for name in names)

        return known

    # -- the answer frame -------------------------------------------------------------------

    def _frame(self, q: Question, o: Outcome) -> AnswerFrame:
        sel, context, written, checked, judged = o.selection, o.context, o.written, o.verification, o.judged
        if o.route.route == "direct" or sel is None:
            return AnswerFrame(q.text, direct_reply(q.text), (), (), False, None, 1.0, "direct")
        if not sel.passed:
            return _refusal(q, sel.decision.refusals, sel)
        if judged.refused:
            return _refusal(q, (judged.refusal(),), sel)
        if written is None or written.draft is None or context is None or checked is None:
            failure = written.failure if written is not None else None
            return _refusal(q, (refusal("writer_failed", error=failure),), sel)
        if checked.supported == 0:
            return _refusal(q, (refusal("unsupported_draft", gate_score=sel.gate_score),), sel)
        notes = {c.note_id: self.store.note_by_id(c.note_id) for c in checked.citations}
        return AnswerFrame(
            question=q.text,
            answer=checked.text or written.draft.text,
            evidence=context.evidence,
            citations=checked.citations,
            refused=False,
            refusal_reason=None,
            confidence=round(sel.confidence, 4),
            route="rag",
            confidence_level=sel.level,
            sources=source_cards(checked.citations, notes),
            sentences=checked.sentences,
            unsupported=checked.unsupported - checked.dropped,
            dropped=checked.dropped,
        )

    def _finish(
        self,
        tracer: Tracer,
        frame: AnswerFrame,
        who: tuple[str, ...],
        started: float,
        save: bool | None,
        retrieved: int,
        tokens: tuple[int, int],
        owner: str,
    ) -> RunTrace:
        keep = self.settings.answer.save_runs if save is None else save
        with tracer.step(Step.SUMMARY, f"route {frame.route}") as step:
            step.done(
                ("refused: " + (frame.refusal_reason or ""))
                if frame.refused
                else f"answered with {len(frame.citations)} citations",
                record=SummaryDetails(
                    total_ms=round((time.perf_counter() - tracer.started) * 1000.0, 1),
                    tokens_in=tokens[0],
                    tokens_out=tokens[1],
                    retrieved=retrieved,
                    selected=len(frame.evidence),
                    citations=len(frame.citations),
                    unsupported=frame.unsupported,
                    refused=frame.refused,
                    confidence=frame.confidence,
                    trace_saved=tracer.run_id if keep else None,
                ),
            )
        trace = tracer.finish()
        if keep:
            self.store.save_run(
                RunRecord(
                    trace.run_id,
                    "ask",
                    started,
                    tuple(who),
                    frame.question,
                    frame.refused,
                    trace.total_ms,
                    frame=to_jsonable(frame),
                    trace=to_jsonable(trace),
                    owner=owner,
                )
            )
        return trace


LEVELS = ("low", "caution", "high")
NOT_COVERED = {
    "en": "The notes do not cover this part: {part} ({reason}).",
    "zh": "笔记没有涉及这一部分：{part}（{reason}）。",
}


def _part_refusals(o: AgenticOutcome) -> tuple[Refusal, ...]:
    """One refusal per reason of each uncovered part, its message prefixed by the part."""
    out: list[Refusal] = []
    for p in o.uncovered:
        found = p.selection.decision.refusals if p.selection is not None else ()
        if not found:
            found = (refusal("not_looked_up", cap=o.stopped_by or "a cap"),)
        for r in found:
            params = {**r.params, "part": p.part.index, "sub_question": p.part.text}
            out.append(Refusal(r.code, params, f"{p.part.text} {r.message}"))
    return tuple(out)


def _agentic_refusal(
    q: Question, o: AgenticOutcome, confidence: float, level: str, extra: Sequence[Refusal] = ()
) -> AnswerFrame:
    return _refused_frame(q, (*extra, *_part_refusals(o)), confidence, level)


def _refusal(q: Question, refusals: Sequence[Refusal], sel: Selection) -> AnswerFrame:
    return _refused_frame(q, refusals, round(sel.confidence, 4), sel.level)


def _refused_frame(q: Question, refusals: Sequence[Refusal], confidence: float, level: str) -> AnswerFrame:
    refusals = localized(refusals, q.lang)
    reason = joined(refusals, q.lang) or ("拒绝回答" if q.lang == "zh" else "refused")
    return AnswerFrame(
        question=q.text,
        answer=REFUSAL_TEXT[q.lang].format(reason=reason),
        evidence=(),
        citations=(),
        refused=True,
        refusal_reason=reason,
        confidence=confidence,
        route="rag",
        confidence_level=level,
        refusals=tuple(refusals),
    )
