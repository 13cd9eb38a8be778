"""The single-shot path: every stage once, in order, in straight-line code.

    Intent Router -> BM25 Retrieval || Dense Retrieval -> Hybrid Fusion -> Reranking
    -> Selection/Refusal -> Context Builder (with neighbour expansion)
    -> Answerability Judge (an LLM, when on) -> Writer -> Citation Verifier

``SingleShot.run(q, tracer) -> Outcome`` calls each stage's typed ``run`` (``answer.single.stages``)
through one ``Chain``: a step a stage names but did not record is marked skipped, and after a stage
halts (the direct route, a refusal, a judge's "no", a failed writer) every later stage's steps are
marked skipped with its reason and the outcome holds what ran. ``Asker`` (``answer.asker``) builds the
stages once, and turns the outcome into the answer frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ...contracts import BuiltContext, RouteDecision
from ...trace import Tracer
from ..gate.select import Selection
from .citations import Verification
from .judge import Judged, JudgeStage
from .stages import (
    Chain,
    ContextStage,
    Question,
    RerankStage,
    Retrieved,
    RetrieveStage,
    RouteStage,
    SelectStage,
    Stage,
    VerifyStage,
    WriteStage,
    Written,
)


@dataclass(frozen=True)
class Outcome:
    """What the single-shot stages returned; a stage after a halt did not run (None)."""

    route: RouteDecision
    retrieved: Retrieved | None = None
    selection: Selection | None = None
    context: BuiltContext | None = None
    judged: Judged = field(default_factory=Judged)
    written: Written | None = None
    verification: Verification | None = None


@dataclass(frozen=True)
class SingleShot:
    """The single-shot path: route, retrieve, rerank, select, context, judge, write, verify."""

    route: RouteStage
    retrieve: RetrieveStage
    rerank: RerankStage
    select: SelectStage
    context: ContextStage
    judge: JudgeStage
    write: WriteStage
    verify: VerifyStage

    def run(self, q: Question, tracer: Tracer) -> Outcome:
        chain = Chain(tracer, self.in_order())
        route = chain.run(self.route, lambda: self.route.run(q, tracer))
        if chain.halted:
            return Outcome(route)
        retrieved = chain.run(self.retrieve, lambda: self.retrieve.run(q, tracer))
        reranked = chain.run(self.rerank, lambda: self.rerank.run(q, retrieved, tracer))
        sel = chain.run(self.select, lambda: self.select.run(q, retrieved, reranked, tracer))
        if chain.halted:
            return Outcome(route, retrieved, sel)
        context = chain.run(self.context, lambda: self.context.run(sel, tracer))
        judged = chain.run(self.judge, lambda: self.judge.run(q, context, tracer))
        if chain.halted:
            return Outcome(route, retrieved, sel, context, judged)
        written = chain.run(self.write, lambda: self.write.run(q, retrieved.weights, sel, context, tracer))
        if chain.halted or written.draft is None:
            return Outcome(route, retrieved, sel, context, judged, written)
        draft = written.draft
        checked = chain.run(self.verify, lambda: self.verify.run(context, draft, tracer))
        return Outcome(route, retrieved, sel, context, judged, written, checked)

    def in_order(self) -> tuple[Stage[Any], ...]:
        """The stages in the order they run (the fields' order)."""
        return tuple(getattr(self, f.name) for f in fields(self))
