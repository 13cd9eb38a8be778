"""Every error is JSON ``{error, message}`` with a fitting status; never a traceback.

sunlib's exceptions map to statuses in one place (``status_of``): the caller's mistakes are
400 (``NotFound``: 404; ``StoreReadOnly``, a write asked of a read-only replica: 409), a
failing provider 502 (503 without its key), and the store's failures 507 when the disk is full
(``StoreFull``) and 503 otherwise (``StoreBusy``, ``StoreCorrupt``, any other index error): the
request may succeed later, once space is freed, the writer is done or the index is repaired.
``error`` is the exception's ``code`` (``store_full``, ``store_busy``, ...).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import (
    ConfigError,
    Conflict,
    DatasetError,
    IndexUnusable,
    InvalidNote,
    MissingCredentials,
    NotFound,
    ProviderError,
    StoreFull,
    StoreReadOnly,
    SunlibError,
    UserError,
    VaultError,
    VaultFull,
)

log = logging.getLogger("sunlib.server")


class ApiError(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


def status_of(exc: SunlibError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, StoreReadOnly | Conflict):
        return 409
    if isinstance(exc, InvalidNote):
        return 422
    if isinstance(exc, VaultFull):
        return 507
    if isinstance(exc, VaultError):
        return 500
    if isinstance(exc, ConfigError | DatasetError | UserError):
        return 400
    if isinstance(exc, MissingCredentials):
        return 503
    if isinstance(exc, ProviderError):
        return 502
    if isinstance(exc, StoreFull):
        return 507
    if isinstance(exc, IndexUnusable):  # StoreBusy, StoreCorrupt and the index's other failures
        return 503
    return 500


def relative_paths(message: str, vault: Path, index: Path) -> str:
    """``message`` with the server's absolute paths taken out: a path in the vault becomes
    vault-relative, the index folder ``<index>``. Errors over HTTP go through it."""
    for root, shown in ((index.parent, "<index>"), (vault, ".")):
        for variant in dict.fromkeys((str(root), str(root.resolve()))):
            message = message.replace(variant + "/", "" if shown == "." else shown + "/").replace(variant, shown)
    return message


def body(error: str, message: str) -> dict[str, str]:
    return {"error": error, "message": message}


class ErrorBody(BaseModel):
    error: str
    message: str


def _described(text: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": text}


# Declared on every router, so the OpenAPI document lists what clients can really get.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _described("bad request: a bad path, query, QA set or setting"),
    401: _described("a token is required, or it is unknown"),
    403: _described("forbidden: not loopback without tokens, a foreign Host or a cross-site request"),
    404: _described("not found, or not visible to you"),
    409: _described("conflict: the path is taken"),
    413: _described("the request body is too large"),
    422: _described("the request body or parameters are invalid"),
    429: _described("too busy: your earlier note writes' vectors are still being computed; try again later"),
    502: _described("an embedding or LLM provider failed"),
    503: _described("unavailable for now: the index is busy, damaged or missing, or a provider has no key"),
    507: _described("the disk holding the index is full; what was committed before is kept"),
}
SSE_EVENT = {  # one server-sent event: its name and its data, a JSON document
    "type": "object",
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
}
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"description": "server-sent events", "content": {"text/event-stream": {"schema": SSE_EVENT}}}
}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        library = request.app.state.sunlib.library
        message = relative_paths(exc.message, library.vault, library.db_path)
        return JSONResponse(body(exc.error, message), status_code=exc.status)

    @app.exception_handler(SunlibError)
    async def _sunlib(request: Request, exc: SunlibError) -> JSONResponse:
        library = request.app.state.sunlib.library  # an HTTP caller never reads the server's paths
        message = relative_paths(str(exc), library.vault, library.db_path)
        return JSONResponse(body(exc.code, message), status_code=status_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(body("invalid_request", f"{where}: {first.get('msg', 'invalid')}"), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        names = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        return JSONResponse(
            body(names.get(exc.status_code, "http_error"), str(exc.detail)), status_code=exc.status_code
        )

    app.add_middleware(CatchAll)


class CatchAll:
    """A bug's 500 as JSON, on a connection that stays open.

    Starlette's outermost middleware answers an unhandled exception and then raises it again
    into the server, which closes the keep-alive connection: every 500 cost the client its
    connection. This middleware sits inside it, answers the 500 itself and returns normally. An
    exception after the response has started (a broken stream) is raised as before: the client
    cannot be told otherwise.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            log.exception("internal error on %s", scope.get("path", ""))
            if started:
                raise
            response = JSONResponse(body("internal_error", f"internal error ({type(exc).__name__})"), status_code=500)
            await response(scope, receive, send)
