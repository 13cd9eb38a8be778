"""The one step recorder every stage runs through.

A stage runs inside ``with tracer.step(Step.BM25, input_summary) as step:`` and
reports with ``step.done(output_summary, **details)``. The tracer times it, catches
the status (an exception marks the step ``error`` and propagates), and keeps the
record. The CLI's ``--explain``, the HTTP SSE events and the UI's run chain are all
rendered from these records; listeners see each step as it ends.

Spans nest: a step opened while another is open is its child (``parent_id``), and
inherits its ``iteration`` unless given one. A multi-round run opens one
``Step.ROUND`` span per round (``iteration`` 1, 2, ...) and runs that round's steps
inside it. ``RunTrace.steps`` lists the steps in the order they started, so a parent
comes before its children; a single-shot ask has no nesting and iteration 0. A
step's ``details`` are read-only once it has ended.

Details are a typed record (``step.done(summary, record=RerankDetails(...))``) turned into
plain JSON here (``as_details``), and read back into the record by ``read_details``; a step
whose details no surface reads by key may pass them as keywords.
"""

from __future__ import annotations

import dataclasses
import time
import types
import typing
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from ..contracts import RunTrace, StepTrace, to_jsonable

Status = Literal["ok", "skipped", "error", "warning"]
Listener = Callable[[StepTrace], None]
R = TypeVar("R")

FLAT: Mapping[str, bool] = {"flat": True}  # field metadata: the mapping's keys join the record's own
OMIT: Mapping[str, bool] = {"omit_none": True}  # field metadata: no key when the value is None


def as_details(record: Any) -> dict[str, Any]:
    """A details record (a dataclass, nested ones included) as the JSON a step keeps."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.metadata.get("flat"):
            out.update(to_jsonable(value))
        elif value is not None or not f.metadata.get("omit_none"):
            out[f.name] = _encode(value)
    return out


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return as_details(value)
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return to_jsonable(value)


def read_details(details: Mapping[str, Any], record: type[R]) -> R:
    """``details`` (a step's JSON) as ``record``; a field whose key is missing reads as its default,
    else None (a run saved before the field existed)."""
    hints = typing.get_type_hints(record)
    known = {f.name for f in dataclasses.fields(record) if not f.metadata.get("flat")}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(record):  # type: ignore[arg-type]
        if f.metadata.get("flat"):
            kwargs[f.name] = {k: v for k, v in details.items() if k not in known}
        elif f.name in details:
            kwargs[f.name] = _decode(details[f.name], hints[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = None
    return record(**kwargs)


def _decode(value: Any, hint: Any) -> Any:
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _decode(value, next(a for a in args if a is not type(None)))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return read_details(value, hint)
    if origin is tuple and args:
        return tuple(_decode(v, args[0]) for v in value)
    return value


class StepRecorder:
    def __init__(self, name: str, input_summary: str, span_id: str, parent_id: str | None, iteration: int) -> None:
        self.name = name
        self.input_summary = input_summary
        self.span_id = span_id
        self.parent_id = parent_id
        self.iteration = iteration
        self.output_summary = ""
        self.status: Status = "ok"
        self.details: dict[str, Any] = {}
        self.ended = False

    def done(self, output_summary: str, status: Status = "ok", record: Any = None, **details: Any) -> None:
        """``record``: the step's typed details (a dataclass, ``as_details``); keywords add to them."""
        if self.ended:
            raise RuntimeError(f"step {self.name!r} has ended; its record is read-only")
        self.output_summary = output_summary
        self.status = status
        if record is not None:
            self.details.update(as_details(record))
        self.details.update(details)

    def skip(self, reason: str, **details: Any) -> None:
        self.done(reason, status="skipped", **details)


class Tracer:
    def __init__(self, kind: str, listener: Listener | None = None, run_id: str | None = None) -> None:
        self.kind = kind
        self.run_id = run_id or f"run_{uuid.uuid4().hex[:16]}"
        self.warnings: list[str] = []
        self._listener = listener
        self._open: list[StepRecorder] = []  # the spans open now, innermost last
        self._order: list[str] = []  # span ids in the order their steps started
        self._done: dict[str, StepTrace] = {}
        self.started = time.perf_counter()

    @property
    def steps(self) -> list[StepTrace]:
        """The steps that have ended, in the order they started."""
        return [self._done[s] for s in self._order if s in self._done]

    def mark(self) -> int:
        """A position in the run: ``since(mark)`` lists the steps started after it."""
        return len(self._order)

    def since(self, mark: int) -> list[StepTrace]:
        return [self._done[s] for s in self._order[mark:] if s in self._done]

    @contextmanager
    def step(self, name: str, input_summary: str = "", iteration: int | None = None) -> Iterator[StepRecorder]:
        parent = self._open[-1] if self._open else None
        span_id = f"s{len(self._order) + 1}"
        inherited = parent.iteration if parent is not None else 0
        rec = StepRecorder(
            name,
            input_summary,
            span_id,
            parent.span_id if parent is not None else None,
            inherited if iteration is None else iteration,
        )
        self._order.append(span_id)
        self._open.append(rec)
        t0 = time.perf_counter()
        try:
            yield rec
        except Exception as exc:
            rec.done(f"{type(exc).__name__}: {exc}", status="error")
            raise
        finally:
            self._open.remove(rec)
            rec.ended = True
            self._record(rec, (time.perf_counter() - t0) * 1000.0)

    def skipped(self, name: str, reason: str) -> None:
        """Record ``name`` as a step that did not run, and why."""
        with self.step(name) as rec:
            rec.skip(reason)

    def adopt(self, steps: Sequence[StepTrace], warnings: Sequence[str] = ()) -> None:
        """Record the ended steps of another run as if they had run here, inside the span open
        now (span ids renumbered, parents kept among them). A part that may have to run again
        before its result can be shown (``Library.search`` when a note changed on disk) runs on
        a private tracer and hands its final steps over only: the listener never hears of a
        discarded attempt."""
        parent = self._open[-1] if self._open else None
        renamed: dict[str, str] = {}
        for step in steps:
            span_id = renamed[step.span_id] = f"s{len(self._order) + 1}"
            parent_id = renamed.get(step.parent_id or "") or (parent.span_id if parent is not None else None)
            iteration = step.iteration or (parent.iteration if parent is not None else 0)
            moved = dataclasses.replace(step, span_id=span_id, parent_id=parent_id, iteration=iteration)
            self._order.append(span_id)
            self._done[span_id] = moved
            if self._listener is not None:
                self._listener(moved)
        for message in warnings:
            self.warn(message)

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
            span_id=rec.span_id,
            parent_id=rec.parent_id,
            iteration=rec.iteration,
        )
        self._done[rec.span_id] = step
        if self._listener is not None:
            self._listener(step)

    def finish(self) -> RunTrace:
        total = (time.perf_counter() - self.started) * 1000.0
        return RunTrace(self.run_id, self.kind, tuple(self.steps), round(total, 3), tuple(self.warnings))
