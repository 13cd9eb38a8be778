"""/api/search, /api/ask, its SSE stream /api/ask/stream, and /api/steps (the step registry)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from sse_starlette.sse import EventSourceResponse

from ..answer import AskResult
from ..answer.details import ContextDetails, read
from ..contracts import StepTrace, to_jsonable
from ..errors import SunlibError
from ..trace import Listener, as_details
from ..trace.steps import Step, describe
from .auth import is_admin, owner_for, principals_for
from .errors import ERROR_RESPONSES, SSE_RESPONSE, body
from .schemas import AskBody, AskOut, SearchBody, SearchOut, StepsOut
from .views import step_view, trace_view

router = APIRouter(prefix="/api", tags=["search and ask"], responses=ERROR_RESPONSES)


class RunCancelled(Exception):
    """The client went away: stop the run at the next step or token."""


@router.post("/search", response_model=SearchOut)
def search(req: SearchBody, request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> dict[str, Any]:
    """Hybrid, BM25 or dense search with filters; every result has a snippet and a citation."""
    state = request.app.state.sunlib
    result = state.library.search(
        req.query,
        mode=req.mode,
        filters=req.filters.contract(),
        principals=principals,
        limit=req.limit,
        offset=req.offset,
    )
    data = result.as_json(with_trace=True)
    return {**data, "trace": trace_view(data["trace"], is_admin(request, principals))}


def frame_json(result: AskResult) -> dict[str, Any]:
    return {**to_jsonable(result.frame), "run_id": result.run_id}


@router.post("/ask", response_model=AskOut)
def ask(
    req: AskBody,
    request: Request,
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str = Depends(owner_for),
) -> dict[str, Any]:
    """The AnswerFrame (cited answer or refusal with its reason), its run_id, its conversation_id
    (send it with a follow-up: yours only) and the run chain."""
    state = request.app.state.sunlib
    with state.asks.track():
        result = state.library.ask(
            req.question,
            filters=req.filters.contract(),
            principals=principals,
            agentic=req.agentic,
            conversation_id=req.conversation_id,
            owner=owner,
        )
    trace = trace_view(result.trace, is_admin(request, principals))
    return {**frame_json(result), "conversation_id": result.conversation_id, "trace": trace}


@router.get("/steps", response_model=StepsOut)
def steps() -> dict[str, Any]:
    """The trace steps, in the order of a single-shot ask: each step's name, key, description and
    the detail keys shown first; which step holds the run's summary, and which one is a round."""
    return describe()


def step_event(step: StepTrace, admin: bool) -> dict[str, Any]:
    """A ``step`` event: the step's record, with ``span_id``, ``parent_id`` and ``iteration``
    (its timings only for an admin: ``views.step_view``)."""
    return step_view(step, admin)


# runs one ask with a step listener and a token callback
AskRun = Callable[[Listener, Callable[[str], None]], AskResult]


async def streamed_ask(state: Any, run: AskRun) -> AsyncGenerator[tuple[str, Any], None]:
    """Run an ask on a worker thread and yield what it reports as it happens: ``("step",
    StepTrace)``, ``("token", str)``, then ``("result", AskResult)`` or ``("error", {error,
    message})``. Closing the iterator (the client went away) stops the run at its next step or
    token. /api/ask/stream and /v1/chat/completions both stream through this."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any] | None] = asyncio.Queue()
    cancelled = threading.Event()

    def emit(item: tuple[str, Any] | None) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def listener(step: StepTrace) -> None:
        if cancelled.is_set():
            raise RunCancelled
        emit(("step", step))

    def on_token(delta: str) -> None:
        if cancelled.is_set():
            raise RunCancelled
        emit(("token", delta))

    def work() -> None:
        try:
            with state.asks.track():
                result = run(listener, on_token)
            emit(("result", result))
        except RunCancelled:
            pass
        except SunlibError as exc:
            emit(("error", body(exc.code, str(exc))))
        except Exception as exc:  # never a traceback to the client
            emit(("error", body("internal_error", f"internal error ({type(exc).__name__})")))
        finally:
            emit(None)

    loop.run_in_executor(None, work)
    try:
        while (item := await queue.get()) is not None:
            yield item
    finally:
        cancelled.set()


def api_events(kind: str, data: Any, admin: bool) -> list[tuple[str, Any]]:
    """The /api/ask/stream events for one item of ``streamed_ask``."""
    if kind == "step":
        out: list[tuple[str, Any]] = [("step", step_event(data, admin))]
        if data.name == Step.CONTEXT and data.status == "ok":
            c = read(data, ContextDetails)
            out.append(
                (
                    "context_built",
                    {
                        "chunks": [s.chunk_id for s in c.sources],
                        "sources": [as_details(s) for s in c.sources],
                        "chars": c.chars,
                        "token_estimate": c.token_estimate,
                        "score_stats": as_details(c.score_stats),
                    },
                )
            )
        return out
    if kind == "token":
        return [("token", {"delta": data})]
    if kind == "error":
        return [("error", data)]
    result: AskResult = data
    frame = result.frame
    citations = {
        "citations": to_jsonable(frame.citations),
        "sources": to_jsonable(frame.sources),
        "sentences": to_jsonable(frame.sentences),
        "evidence": to_jsonable(frame.evidence),
    }
    finish = {
        "answer": frame.answer,
        "route": frame.route,
        "confidence": frame.confidence,
        "confidence_level": frame.confidence_level,
        "refused": frame.refused,
        "refusal_reason": frame.refusal_reason,
        "refusals": to_jsonable(frame.refusals),
        "unsupported": frame.unsupported,
        "dropped": frame.dropped,
        "run_id": result.run_id,
        "conversation_id": result.conversation_id,
        "total_ms": result.trace.total_ms,
    }
    return [("citations", citations), ("finish", finish)]


@router.post("/ask/stream", response_class=EventSourceResponse, responses=SSE_RESPONSE)
async def ask_stream(
    req: AskBody,
    request: Request,
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str = Depends(owner_for),
) -> EventSourceResponse:
    """Server-sent events, in order: ``step`` per pipeline step as it completes (with its span_id,
    parent_id and iteration), ``context_built`` after the context, ``token`` deltas while the writer
    writes, ``citations``, then ``finish`` (confidence, refused, refusal_reason, refusals, run_id,
    conversation_id). On failure: ``error``; an unknown ``conversation_id`` is a 404 before the
    stream starts. A client that disconnects stops the run."""
    state = request.app.state.sunlib
    if req.conversation_id is not None:  # NotFound: a 404 answer, not an event in a 200 stream
        await run_in_threadpool(partial(state.library.conversation, owner=owner), req.conversation_id, principals)

    def run(listener: Listener, on_token: Callable[[str], None]) -> AskResult:
        return state.library.ask(
            req.question,
            filters=req.filters.contract(),
            principals=principals,
            listener=listener,
            on_token=on_token,
            agentic=req.agentic,
            conversation_id=req.conversation_id,
            owner=owner,
        )

    admin = is_admin(request, principals)

    async def events() -> AsyncIterator[dict[str, str]]:
        async with aclosing(streamed_ask(state, run)) as items:
            async for kind, data in items:
                for event, payload in api_events(kind, data, admin):
                    yield {"event": event, "data": json.dumps(payload, ensure_ascii=False)}

    return EventSourceResponse(events())
