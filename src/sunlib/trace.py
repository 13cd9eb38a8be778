"""The one step recorder every stage runs through.

A stage runs inside ``with tracer.step("BM25 Retrieval", input_summary) as step:``
and reports with ``step.done(output_summary, **details)``. The tracer times it,
catches the status (an exception marks the step ``error`` and propagates), and
keeps the record. The CLI's ``--explain``, the HTTP SSE events and the UI's run
chain are all rendered from these records; listeners see each step as it ends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from .contracts import RunTrace, StepTrace

Status = Literal["ok", "skipped", "error", "warning"]
Listener = Callable[[StepTrace], None]


class StepRecorder:
    def __init__(self, name: str, input_summary: str) -> None:
        self.name = name
        self.input_summary = input_summary
        self.output_summary = ""
        self.status: Status = "ok"
        self.details: dict[str, Any] = {}

    def done(self, output_summary: str, status: Status = "ok", **details: Any) -> None:
        self.output_summary = output_summary
        self.status = status
        self.details.update(details)

    def skip(self, reason: str, **details: Any) -> None:
        self.done(reason, status="skipped", **details)


class Tracer:
    def __init__(self, kind: str, listener: Listener | None = None, run_id: str | None = None) -> None:
        self.kind = kind
        self.run_id = run_id or f"run_{uuid.uuid4().hex[:16]}"
        self.steps: list[StepTrace] = []
        self.warnings: list[str] = []
        self._listener = listener
        self.started = time.perf_counter()

    @contextmanager
    def step(self, name: str, input_summary: str = "") -> Iterator[StepRecorder]:
        rec = StepRecorder(name, input_summary)
        t0 = time.perf_counter()
        try:
            yield rec
        except Exception as exc:
            rec.done(f"{type(exc).__name__}: {exc}", status="error")
            raise
        finally:
            self._record(rec, (time.perf_counter() - t0) * 1000.0)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _record(self, rec: StepRecorder, latency_ms: float) -> None:
        step = StepTrace(
            name=rec.name,
            status=rec.status,
            latency_ms=round(latency_ms, 3),
            input_summary=rec.input_summary,
            output_summary=rec.output_summary,
            details=dict(rec.details),
        )
        self.steps.append(step)
        if self._listener is not None:
            self._listener(step)

    def finish(self) -> RunTrace:
        total = (time.perf_counter() - self.started) * 1000.0
        return RunTrace(self.run_id, self.kind, tuple(self.steps), round(total, 3), tuple(self.warnings))
