"""The ask pipeline: one question in; a cited answer or a refusal with its reason out.

    Intent Router -> BM25 Retrieval || Dense Retrieval -> Hybrid Fusion -> Reranking
    -> Selection/Refusal -> Context Builder (with neighbour expansion) -> Writer
    -> Citation Verifier -> Run Summary

Every step runs through one Tracer, so the CLI's ``--explain``, the server's SSE
events and the web UI's run chain all show the same records. The run (answer frame
and trace) is saved in the index. Retrieval applies the asking principals' ACL
inside SQL, so nothing in the frame or the trace comes from a note they cannot see.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..contracts import (
    AnswerFrame,
    AskResult,
    BuiltContext,
    Draft,
    Evidence,
    Hit,
    Ranked,
    RouteDecision,
    SearchFilters,
    WriteRequest,
    to_jsonable,
)
from ..errors import ProviderError, UserError
from ..providers import Reranker, Writer, create_reranker, create_writer, sentence_model
from ..retrieve.engine import MAX_QUERY_CHARS
from ..text import TermWeights
from ..trace import Listener, Tracer
from .citations import source_cards, verify
from .context import Budget, build_context
from .relevance import term_weights
from .router import LLMRouter, RuleRouter, direct_reply, language
from .select import Gate, Selection, evidence_from, expand, gate_key, select

if TYPE_CHECKING:
    from ..library import Library

RETRIEVAL_STEPS = ("BM25 Retrieval", "Dense Retrieval", "Hybrid Fusion")
AFTER_GATE_STEPS = ("Context Builder", "Writer", "Citation Verifier")

CONFIDENCE_NOTES = {
    ("low", "en"): "Important: the evidence is only weakly related to the question. State only what it says "
    "explicitly; if it does not answer the question, say that the notes do not cover it.",
    ("caution", "en"): "The evidence is only moderately related to the question. Prefer its own words and do "
    "not speculate.",
    ("low", "zh"): "重要提示：参考资料与问题的相关性较低。请只陈述资料中明确写出的内容；如果资料不能回答问题，"
    "请直接说明笔记中没有相关信息。",
    ("caution", "zh"): "参考资料的相关性一般，请优先引用资料原文，避免推测。",
}
REFUSAL_TEXT = {
    "en": "I can't answer this from your notes: {reason}.",
    "zh": "无法根据你的笔记回答这个问题：{reason}。",
}


class Asker:
    """Runs the pipeline for one library. Providers are created once and reused across questions."""

    def __init__(self, library: Library, writer: Writer | None = None, reranker: Reranker | None = None) -> None:
        self.lib = library
        self.settings = library.settings.answer
        self.writer = writer or create_writer(library.settings)
        self.sentence_model = sentence_model(library.settings)  # a loader; the gate and the writer share it
        self.reranker = reranker if reranker is not None else create_reranker(self.settings)
        if self.reranker is not None:
            self.reranker.bind(library.stores, library.settings)  # each thread reads on its own connection
        use_llm = self.settings.router == "llm" or (self.settings.router == "auto" and self.writer.is_llm)
        client = getattr(self.writer, "client", None)
        self.router: RuleRouter | LLMRouter = LLMRouter(client) if use_llm and client is not None else RuleRouter()

    def ask(
        self,
        question: str,
        filters: SearchFilters | None = None,
        principals: Sequence[str] | None = None,
        listener: Listener | None = None,
        on_token: Callable[[str], None] | None = None,
        save: bool | None = None,
    ) -> AskResult:
        question = question.strip()
        if not question:
            raise UserError("the question is empty")
        if len(question) > MAX_QUERY_CHARS:
            raise UserError(f"the question is {len(question)} characters; the limit is {MAX_QUERY_CHARS}")
        who = tuple(principals if principals is not None else self.lib.settings.search.principals)
        tracer = Tracer("ask", listener)
        lang = language(question)
        started = time.time()

        decision = self._route(question, tracer)
        if decision.route == "direct":
            for name in (*RETRIEVAL_STEPS, "Reranking", "Selection/Refusal", *AFTER_GATE_STEPS):
                _skipped(tracer, name, "direct route: nothing to look up")
            frame = AnswerFrame(question, direct_reply(question), (), (), False, None, 1.0, "direct")
            return self._finish(tracer, frame, who, started, save, retrieved=0, tokens=(0, 0))

        result = self.lib.search(
            question, filters=filters, principals=who, limit=self.settings.candidates, tracer=tracer
        )
        names = {s.name for s in tracer.steps}
        for name in RETRIEVAL_STEPS:
            if name not in names:
                _skipped(tracer, name, "not used in this mode" if name != "Hybrid Fusion" else "only one route ran")
        weights = term_weights(self.lib.store, question, who)
        ranked = self._rerank(question, result.hits, weights, tracer)
        selection = self._select(question, lang, ranked, weights, tracer)
        if not selection.passed:
            for name in AFTER_GATE_STEPS:
                _skipped(tracer, name, "refused by the gate")
            frame = self._refusal(question, selection.reason or "refused", selection, lang)
            return self._finish(tracer, frame, who, started, save, retrieved=len(result.hits), tokens=(0, 0))

        context = self._context(selection, tracer)
        note = CONFIDENCE_NOTES.get((selection.level, lang), "")
        request = WriteRequest(question, context, weights, note, self.settings.max_sentences)
        draft: Draft | None = None
        failure: ProviderError | None = None
        with tracer.step("Writer", f"{self.writer.name} with {len(context.evidence)} sources") as step:
            try:
                draft = self.writer.write(request, on_token)
            except ProviderError as exc:
                failure = exc
                step.done(f"failed: {exc}", status="error", writer=self.writer.name, model=self.writer.model)
            else:
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
        if draft is None:  # a clean refusal that names the failure; the Writer step says what happened
            _skipped(tracer, "Citation Verifier", "the writer failed")
            frame = self._refusal(question, f"the writer failed ({failure})", selection, lang)
            return self._finish(tracer, frame, who, started, save, retrieved=len(result.hits), tokens=(0, 0))
        with tracer.step("Citation Verifier", f"{len(draft.text)} characters") as step:
            checked = verify(draft.text, context.evidence)
            step.done(
                f"{checked.supported} supported, {checked.unsupported} unsupported, "
                f"{len(checked.citations)} citations"
                + (f", {len(checked.rejected_refs)} refs rejected" if checked.rejected_refs else ""),
                status="warning" if checked.unsupported or checked.rejected_refs else "ok",
                sentences=[to_jsonable(s) for s in checked.sentences],
                rejected_refs=list(checked.rejected_refs),
            )
        if checked.supported == 0:
            reason = (
                f"no sentence of the draft is supported by the evidence "
                f"(gate score {selection.gate_score:.3f}; 0 verified spans)"
            )
            frame = self._refusal(question, reason, selection, lang)
        else:
            notes = {c.note_id: self.lib.store.note_by_id(c.note_id) or {} for c in checked.citations}
            frame = AnswerFrame(
                question=question,
                answer=draft.text,
                evidence=context.evidence,
                citations=checked.citations,
                refused=False,
                refusal_reason=None,
                confidence=round(selection.confidence, 4),
                route="rag",
                confidence_level=selection.level,
                sources=source_cards(checked.citations, notes),
                sentences=checked.sentences,
                unsupported=checked.unsupported,
            )
        return self._finish(
            tracer, frame, who, started, save, retrieved=len(result.hits), tokens=(draft.tokens_in, draft.tokens_out)
        )

    # -- steps -------------------------------------------------------------------------------

    def _route(self, question: str, tracer: Tracer) -> RouteDecision:
        with tracer.step("Intent Router", f"{question[:80]!r}") as step:
            decision = self.router.decide(question)
            fallback = getattr(self.router, "fallback_reason", None)
            step.done(
                f"{decision.route}: {decision.reason}",
                status="warning" if fallback else "ok",
                route=decision.route,
                reason=decision.reason,
                confidence=decision.confidence,
                router=decision.router,
                fallback=fallback,
            )
            if fallback:
                tracer.warn(fallback)
        return decision

    def _rerank(self, question: str, hits: Sequence[Hit], weights: TermWeights, tracer: Tracer) -> list[Ranked]:
        name = self.reranker.name if self.reranker else "none"
        with tracer.step("Reranking", f"{len(hits)} candidates, {name}") as step:
            if self.reranker is None:
                top = max((h.score for h in hits), default=1.0) or 1.0
                ranked = [Ranked(h, h.score / top, {}) for h in hits]
            else:
                ranked = self.reranker.rerank(question, hits, weights)
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
        return ranked

    def _select(
        self, question: str, lang: str, ranked: Sequence[Ranked], weights: TermWeights, tracer: Tracer
    ) -> Selection:
        s = self.settings
        store = self.lib.store
        # a dense gate is per embedding space; without a dense score the lexical gate decides
        own, source = s.dense_gate(lang)
        overall, _ = s.dense_gate(None)
        dense_default = Gate(
            own.threshold,
            own.cosine_weight,
            source,
            own.sentence_weight,
            Gate(overall.threshold, overall.cosine_weight, "settings"),
        )
        uses_dense = self.lib.settings.search.mode != "bm25"
        dense_gate = (
            Gate.load(store, gate_key(self.lib.space.name), dense_default, lang) if uses_dense else dense_default
        )
        lexical_gate = Gate.load(store, gate_key(None), Gate(s.gate_threshold_bm25, 0.0, "settings"), lang)
        with tracer.step("Selection/Refusal", f"{len(ranked)} candidates, min score {s.min_score}") as step:
            sel = select(question, ranked, weights, dense_gate, lexical_gate, s, self.sentence_model)
            step.done(
                (f"{len(sel.kept)} selected" if sel.passed else f"refused: {sel.reason}"),
                status="ok" if sel.passed else "warning",
                selected=[r.hit.chunk_id for r in sel.kept],
                dropped_below_min_score=sel.dropped_low,
                dropped_duplicates=sel.dropped_dupes,
                top_cosine=None if sel.top_cosine is None else round(sel.top_cosine, 4),
                coverage=round(sel.coverage, 4),
                sentence_cosine=None if sel.sentence_cosine is None else round(sel.sentence_cosine, 4),
                missing_terms=list(sel.missing_terms[:10]),
                gate_score=round(sel.gate_score, 4),
                threshold=round(sel.threshold, 4),
                cosine_weight=sel.gate.cosine_weight if sel.top_cosine is not None else 0.0,
                sentence_weight=sel.gate.sentence_weight,
                gate_source=sel.gate.source,
                passed=sel.passed,
                missing_names=list(sel.missing_names),
                expects=sel.expects.describe() if sel.expects else None,
                expectation_met=sel.expectation_met,
                checks_passed=sel.checks_passed,
                confidence=round(sel.confidence, 4),
                confidence_level=sel.level,
                reason=sel.reason,
            )
        return sel

    def _context(self, sel: Selection, tracer: Tracer) -> BuiltContext:
        s = self.settings
        with tracer.step("Context Builder", f"{len(sel.kept)} selected chunks") as step:
            neighbours = expand(self.lib.store, sel.kept, s)
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

    def _refusal(self, question: str, reason: str, sel: Selection, lang: str) -> AnswerFrame:
        return AnswerFrame(
            question=question,
            answer=REFUSAL_TEXT[lang].format(reason=reason),
            evidence=(),
            citations=(),
            refused=True,
            refusal_reason=reason,
            confidence=round(sel.confidence, 4),
            route="rag",
            confidence_level=sel.level,
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
    ) -> AskResult:
        keep = self.settings.save_runs if save is None else save
        with tracer.step("Run Summary", f"route {frame.route}") as step:
            step.done(
                ("refused: " + (frame.refusal_reason or ""))
                if frame.refused
                else f"answered with {len(frame.citations)} citations",
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
            )
        trace = tracer.finish()
        if keep:
            self.lib.store.save_run(
                {
                    "run_id": trace.run_id,
                    "kind": "ask",
                    "created_at": started,
                    "principals": list(who),
                    "question": frame.question,
                    "refused": frame.refused,
                    "total_ms": trace.total_ms,
                    "frame": to_jsonable(frame),
                    "trace": to_jsonable(trace),
                }
            )
        return AskResult(frame, trace)


def _skipped(tracer: Tracer, name: str, reason: str) -> None:
    with tracer.step(name) as step:
        step.skip(reason)
