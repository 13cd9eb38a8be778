"""What a run of the ask pipeline returns: the answer frame, the trace and the stages' typed outputs."""

from __future__ import annotations

from dataclasses import dataclass

from ..contracts import AnswerFrame, RouteDecision, RunTrace
from .gate.gate import GateDecision, GateSignals
from .gate.select import Selection
from .single.citations import Verification


@dataclass(frozen=True)
class AskResult:
    """The answer frame and the run trace, with the typed outputs of the stages that ran
    (None for a stage that did not run, e.g. everything after the router on a direct reply)."""

    frame: AnswerFrame
    trace: RunTrace
    route: RouteDecision | None = None
    selection: Selection | None = None
    verification: Verification | None = None
    conversation_id: str | None = None  # the conversation this turn was saved into; None: not saved

    @property
    def gate(self) -> GateDecision | None:
        """The refusal gate's decision (its score, threshold and reasons)."""
        return self.selection.decision if self.selection is not None else None

    @property
    def signals(self) -> GateSignals | None:
        """What the gate decided on: top cosine, coverage, sentence cosine, missing terms and names."""
        return self.selection.signals if self.selection is not None else None

    @property
    def run_id(self) -> str:
        return self.trace.run_id
