"""/v1: an OpenAI-compatible chat API over the ask pipeline, so chat front ends (Open WebUI,
AnythingLLM, the ``openai`` client) get sunlib's cited answers and honest refusals.

    GET  /v1/models             the model list: ``sunlib``
    POST /v1/chat/completions   answers the last user message from the notes; the earlier
                                messages are the conversation (``answer.conversation``)

The answer text carries ``[n]`` markers: each ``[ref:chunk_id]`` of sunlib's answer becomes the
number of that chunk in order of first use, and ``citations`` lists the cited passages under
those numbers (path, heading, lines, UTF-16 offsets, quote). A refusal is an ordinary assistant
message (its reason sentence) with ``finish_reason: "stop"``; the ``sunlib`` object says it was
refused and why. Streaming goes through the same streamed ask as /api/ask/stream; the final
chunk carries ``citations``, ``sunlib`` and ``usage``.

The sub-application is mounted at /v1 by ``create_app``: it shares the server's state, so the
bearer tokens, the loopback and Host rules and the cross-site check are those of /api
(``auth.principals_for``); its errors have OpenAI's shape ``{"error": {message, type, code}}``.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..answer import AskResult
from ..answer.details import RouteDetails, SummaryDetails, read
from ..contracts import Turn
from ..errors import SunlibError, UserError
from ..retrieve.engine import MAX_QUERY_CHARS
from ..text.refs import REF
from ..text.tokens import estimate_tokens
from ..trace import Listener, as_details
from ..trace.steps import Step
from .auth import owner_for, principals_for
from .errors import ApiError, log, status_of
from .openai_schemas import (
    ChatCompletion,
    ChatCompletionBody,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    CitationOut,
    Delta,
    FollowUpOut,
    MessageOut,
    ModelList,
    ModelOut,
    OpenAIErrorBody,
    RefusalOut,
    SunlibOut,
    Usage,
    error_body,
)
from .routes_query import streamed_ask

MODELS = ("sunlib",)  # "sunlib-agentic" joins once the agentic ask exists
PIECE_CHARS = 24  # a writer's delta longer than this (the extractive writer's whole answer) streams in pieces
_MARKER_START = re.compile(r"\[(?:r(?:e(?:f(?::\s*[A-Za-z0-9_\-]{0,64}\s*)?)?)?)?$")

router = APIRouter(
    tags=["OpenAI-compatible"],
    responses={s: {"model": OpenAIErrorBody} for s in (400, 401, 403, 404, 413, 502, 503)},
)


# -- [ref:...] markers -> [n] -----------------------------------------------------------------


class Markers:
    """Turns ``[ref:chunk_id]`` into ``[n]``, numbering chunks in order of first use. ``feed``
    takes text in pieces (a marker may be split across two) and holds back a possible marker's
    start until it is complete; ``flush`` returns what is held back."""

    def __init__(self) -> None:
        self.order: dict[str, int] = {}
        self._held = ""

    def feed(self, delta: str) -> str:
        text = self._held + delta
        start = text.rfind("[")
        cut = start if start >= 0 and _MARKER_START.match(text, start) else len(text)
        self._held = text[cut:]
        return REF.sub(self._number, text[:cut])

    def flush(self) -> str:
        text, self._held = self._held, ""
        return REF.sub(self._number, text)

    def _number(self, match: re.Match[str]) -> str:
        return f"[{self.order.setdefault(match.group(1), len(self.order) + 1)}]"


def numbered(answer: str) -> tuple[str, dict[str, int]]:
    """The answer with ``[n]`` markers, and each cited chunk's number."""
    markers = Markers()
    text = markers.feed(answer) + markers.flush()
    return text, markers.order


def pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """``text`` cut into pieces of about ``size`` characters, at a space where one is near."""
    out: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        space = text.find(" ", end, end + size)
        end = space + 1 if end < len(text) and space >= 0 else min(len(text), start + 2 * size)
        out.append(text[start:end])
        start = end
    return out


# -- request -> question and conversation ---------------------------------------------------


def conversation(body: ChatCompletionBody) -> tuple[str, tuple[Turn, ...]]:
    """The question (the last message, a user's) and the earlier user and assistant turns."""
    if body.model not in MODELS:
        raise ApiError(404, "model_not_found", f"unknown model {body.model!r}; choose one of: {', '.join(MODELS)}")
    *earlier, last = body.messages
    question = last.text().strip()
    if last.role != "user" or not question:
        raise UserError("the last message must be a user message with text")
    if len(question) > MAX_QUERY_CHARS:
        raise UserError(f"the question is {len(question)} characters; the limit is {MAX_QUERY_CHARS}")
    history = tuple(Turn(m.role, m.text()) for m in earlier if m.role in ("user", "assistant") and m.text().strip())
    return question, history


# -- AskResult -> OpenAI objects -------------------------------------------------------------


def citations_out(result: AskResult, order: dict[str, int]) -> list[CitationOut]:
    by_chunk = {c.chunk_id: c for c in result.frame.citations}
    out = []
    for chunk_id, index in order.items():
        c = by_chunk.get(chunk_id)
        if c is not None:
            heading = " > ".join(c.heading_path) or None
            out.append(
                CitationOut(
                    index=index,
                    path=c.path,
                    title=c.title,
                    heading=heading,
                    heading_path=list(c.heading_path),
                    start_line=c.start_line,
                    end_line=c.end_line,
                    start=c.start,
                    end=c.end,
                    quote=c.quote,
                    note_id=c.note_id,
                    chunk_id=c.chunk_id,
                )
            )
    return out


def sunlib_out(result: AskResult, order: dict[str, int], usage: str) -> SunlibOut:
    frame = result.frame
    cited = {c.chunk_id for c in frame.citations}
    route = next((s for s in result.trace.steps if s.name == Step.ROUTE), None)
    rewrite = read(route, RouteDetails).follow_up if route is not None else None
    return SunlibOut(
        run_id=result.run_id,
        route=frame.route,
        refused=frame.refused,
        reason_code=frame.refusals[0].code if frame.refusals else None,
        refusal_reason=frame.refusal_reason,
        refusals=[RefusalOut(code=r.code, message=r.message) for r in frame.refusals],
        confidence=frame.confidence,
        confidence_level=frame.confidence_level,
        question=frame.question,
        follow_up=FollowUpOut(**as_details(rewrite)) if rewrite else None,
        unverified_markers=sorted(n for chunk_id, n in order.items() if chunk_id not in cited),
        dropped=[s.text for s in frame.sentences if s.dropped],
        usage=usage,
    )


def usage_of(result: AskResult, prompt: Sequence[str], content: str) -> tuple[Usage, str]:
    """Token counts: an LLM's own counts when it reported the prompt it was sent ("reported",
    the judge's call included); otherwise ``estimate_tokens`` over the request's messages and
    over the answer ("estimated": the extractive writer sends no prompt to any model)."""
    summary = next((s for s in result.trace.steps if s.name == Step.SUMMARY), None)
    totals = read(summary, SummaryDetails) if summary is not None else None
    tokens_in, tokens_out = (totals.tokens_in or 0, totals.tokens_out or 0) if totals is not None else (0, 0)
    if tokens_in:
        return Usage(prompt_tokens=tokens_in, completion_tokens=tokens_out, total_tokens=tokens_in + tokens_out), (
            "reported"
        )
    p, c = sum(estimate_tokens(t) for t in prompt), estimate_tokens(content)
    return Usage(prompt_tokens=p, completion_tokens=c, total_tokens=p + c), "estimated"


def completion(result: AskResult, prompt: Sequence[str], model: str) -> ChatCompletion:
    content, order = numbered(result.frame.answer)
    usage, rule = usage_of(result, prompt, content)
    return ChatCompletion(
        id=f"chatcmpl-{result.run_id}",
        created=int(time.time()),
        model=model,
        choices=[Choice(message=MessageOut(content=content))],
        usage=usage,
        citations=citations_out(result, order),
        sunlib=sunlib_out(result, order, rule),
    )


# -- routes ---------------------------------------------------------------------------------


@router.get("/models", response_model=ModelList)
def list_models(request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> ModelList:
    """The models this server answers as."""
    created = int(request.app.state.created)
    return ModelList(data=[ModelOut(id=m, created=created) for m in MODELS])


@router.get("/models/{model}", response_model=ModelOut)
def get_model(model: str, request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> ModelOut:
    if model not in MODELS:
        raise ApiError(404, "model_not_found", f"unknown model {model!r}; choose one of: {', '.join(MODELS)}")
    return ModelOut(id=model, created=int(request.app.state.created))


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses={200: {"content": {"text/event-stream": {}}, "description": "with stream: chat.completion.chunk events"}},
)
async def chat_completions(
    body: ChatCompletionBody,
    request: Request,
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str = Depends(owner_for),
) -> Any:
    """The last user message answered from the notes (a chat.completion), or with ``stream``
    chat.completion.chunk events ending with ``data: [DONE]``."""
    state = request.app.state.sunlib
    question, history = conversation(body)
    prompt = [m.text() for m in body.messages]

    def run(listener: Listener | None, on_token: Callable[[str], None] | None) -> AskResult:
        return state.library.ask(
            question,
            principals=principals,
            listener=listener,
            on_token=on_token,
            history=history,
            start_conversation=False,
            owner=owner,
        )  # the client keeps the conversation: none is stored (the run is, as the caller's)

    if not body.stream:
        result = await _in_thread(state, run)
        return completion(result, prompt, body.model)
    return EventSourceResponse(_chunks(state, run, prompt, body.model))


async def _in_thread(state: Any, run: Callable[[None, None], AskResult]) -> AskResult:
    def tracked() -> AskResult:
        with state.asks.track():
            return run(None, None)

    return await run_in_threadpool(tracked)


async def _chunks(state: Any, run: Any, prompt: Sequence[str], model: str) -> AsyncIterator[str]:
    """The streamed answer: a role chunk, content pieces as the writer writes (markers numbered
    on the way), then one final chunk with ``finish_reason``, citations, sunlib and usage."""
    # one id for every chunk, known before the run has one (its run_id is in the final chunk's sunlib)
    chunk_id, created = f"chatcmpl-{secrets.token_hex(12)}", int(time.time())

    def chunk(delta: Delta, **final: Any) -> str:
        choice = ChunkChoice(delta=delta, finish_reason="stop" if final else None)
        return chunk_json(ChatCompletionChunk(id=chunk_id, created=created, model=model, choices=[choice], **final))

    yield chunk(Delta(role="assistant", content=""))
    markers, sent = Markers(), ""
    async with aclosing(streamed_ask(state, run)) as items:
        async for kind, data in items:
            if kind == "token":
                for piece in pieces(markers.feed(data)):
                    sent += piece
                    yield chunk(Delta(content=piece))
            elif kind == "error":
                yield json.dumps(error_body(data["message"], "server_error", data["error"]), ensure_ascii=False)
            elif kind == "result":
                result: AskResult = data
                for piece in pieces(markers.flush()):  # a held "[" that began no marker
                    sent += piece
                    yield chunk(Delta(content=piece))
                content, numbers = numbered(result.frame.answer)
                # the numbers the client saw: the final text's, or the streamed draft's when that was rejected
                order = numbers if content.startswith(sent) else markers.order
                rest = _rest(result, content, sent)
                for piece in pieces(rest):
                    yield chunk(Delta(content=piece))
                usage, rule = usage_of(result, prompt, sent + rest)
                final = {"citations": citations_out(result, order), "sunlib": sunlib_out(result, order, rule)}
                yield chunk(Delta(), usage=usage, **final)
    yield "[DONE]"


def chunk_json(chunk: ChatCompletionChunk) -> str:
    """A chunk as OpenAI sends one: ``finish_reason`` and ``logprobs`` null until the end, a delta
    without the keys it does not set, and sunlib's fields (and ``usage``) in the final chunk only."""
    data = chunk.model_dump(mode="json")
    for key in ("usage", "citations", "sunlib"):
        if data[key] is None:
            del data[key]
    for choice in data["choices"]:
        choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
    return json.dumps(data, ensure_ascii=False)


def _rest(result: AskResult, content: str, sent: str) -> str:
    """What is still to be sent once the run is over: all of it when nothing was streamed (a
    refusal, a direct reply), the tail when the writer stopped short of its final text, and the
    refusal after a draft the verifier rejected (what was streamed cannot be taken back)."""
    if not sent:
        return content
    if result.frame.refused:
        return "\n\n" + content
    return content[len(sent) :] if content.startswith(sent) else ""


# -- the sub-application --------------------------------------------------------------------


def _error_type(status: int) -> str:
    kinds = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}
    return kinds.get(status, "server_error" if status >= 500 else "invalid_request_error")


def _error(status: int, code: str, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, _error_type(status), code, param), status_code=status)


def install_errors(app: FastAPI) -> None:
    """Every /v1 error in OpenAI's shape: ``{"error": {"message", "type", "code", "param"}}``."""

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.error, exc.message)

    @app.exception_handler(SunlibError)
    async def _sunlib(request: Request, exc: SunlibError) -> JSONResponse:
        return _error(status_of(exc), exc.code, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error(400, "invalid_request", f"{where or 'body'}: {first.get('msg', 'invalid')}", where or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        names = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        return _error(exc.status_code, names.get(exc.status_code, "http_error"), str(exc.detail))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return _error(500, "internal_error", f"internal error ({type(exc).__name__})")


def create_v1(state: Any) -> FastAPI:
    """The /v1 application over the server's state (mounted by ``server.app.create_app``)."""
    app = FastAPI(title="sunlib (OpenAI-compatible)", docs_url=None, redoc_url=None)
    app.state.sunlib = state
    app.state.created = time.time()
    install_errors(app)
    app.include_router(router)
    return app
