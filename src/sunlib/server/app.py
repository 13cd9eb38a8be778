"""The FastAPI application: REST + SSE over one library, and the web UI as static files.

Requests are served in parallel: FastAPI runs each route on a worker thread, and each
thread reads through its own SQLite connection (``Library.store``; WAL lets readers run
beside a writer). No lock is held across a request. Note writes take the library's
write lock from the ACL check to the index sync; query embedding and the writer's LLM
call hold no lock at all. Background jobs (rebuilds, vectors after note writes, RAG
benchmark runs) run on the worker service (``Jobs``), started and closed by the app's
lifespan; see ``server/jobs.py``. With ``watch``, the lifespan also runs the vault's watcher
(``server/watching.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..library import Library
from ..version import __version__
from .errors import body as api_error
from .errors import install as install_error_handlers
from .jobs import Jobs
from .openai_schemas import error_body
from .policy import serving
from .state import ServerState

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the worker service and the /mcp transport; at shutdown let running asks end, then close them."""
    from .mcp_http import sessions

    state: ServerState = app.state.sunlib
    state.jobs.start()
    from .watching import start_backfill, start_watcher

    start_backfill(state)
    watcher = await asyncio.to_thread(start_watcher, state) if state.watch else None
    try:
        async with sessions(app):  # the /mcp transport's task group
            yield
    finally:
        if watcher is not None:
            await asyncio.to_thread(watcher.stop)
        await asyncio.to_thread(state.asks.wait_idle, 30.0)
        await asyncio.to_thread(state.jobs.close)


class BodyLimit:
    """413 for a body over the limit, whether it declares its length or arrives chunked."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(413, f"request body over {self.limit} bytes")
            return message

        await self.app(scope, limited, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The error in the shape of the API asked: OpenAI's under /v1, sunlib's elsewhere."""
        message = f"request body over {self.limit} bytes"
        if str(scope.get("path", "")).startswith("/v1/"):
            body = error_body(message, "invalid_request_error", "too_large")
        else:
            body = api_error("too_large", message)
        await JSONResponse(body, status_code=413)(scope, receive, send)


# Framing (clickjacking): only sunlib's own pages may frame a sunlib page (the Evaluate page frames the
# report). The web UI, three static files that never build HTML from data, gets a policy that allows
# nothing but its own files.
FRAME_POLICY = b"frame-ancestors 'self'"
UI_POLICY = (
    b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    b"frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'self'"
)


class FrameGuard:
    """Adds the framing headers to every HTTP response, and the UI's content security policy to ``/``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ui = scope.get("path") == "/"

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-frame-options"]
                headers.append((b"x-frame-options", b"SAMEORIGIN"))
                if all(k.lower() != b"content-security-policy" for k, _ in headers):  # a route's own policy stays
                    headers.append((b"content-security-policy", UI_POLICY if ui else FRAME_POLICY))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, guarded)


def create_app(library: Library, watch: bool = False) -> FastAPI:
    """The app over one library, with the serving policy applied (``policy.serving``: the server's
    engines, and no public host without tokens); ``watch``: its lifespan keeps the index in step
    with the vault."""
    library = serving(library)
    settings = library.settings
    app = FastAPI(
        title="sunlib",
        version=__version__,
        description="Search and ask your Markdown notes: cited answers, honest refusals, the run chain.",
        lifespan=lifespan,
    )
    # an app served without its lifespan (an ASGI test transport) starts a lane on its first job
    app.state.sunlib = ServerState(library, settings, Jobs(release=library.release_thread), watch=watch)
    install_error_handlers(app)
    app.add_middleware(BodyLimit, limit=settings.server.max_body_bytes)
    app.add_middleware(FrameGuard)
    if settings.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.server.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    from .routes_conversations import router as conversations
    from .routes_evals import router as evals
    from .routes_files import router as files
    from .routes_index import router as index
    from .routes_notes import router as notes
    from .routes_query import router as query
    from .routes_runs import router as runs

    for router in (query, runs, conversations, index, files, notes, evals):
        app.include_router(router)
    from .routes_openai import create_v1

    app.mount("/v1", create_v1(app.state.sunlib))  # OpenAI-compatible: same tokens and rules, OpenAI's errors

    if settings.mcp.http:
        from .mcp_http import mount as mount_mcp

        mount_mcp(app, app.state.sunlib)

    if (WEB_DIR / "index.html").is_file():
        app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")

        @app.get("/", include_in_schema=False)
        def index_page() -> FileResponse:
            return FileResponse(WEB_DIR / "index.html")

    return app
