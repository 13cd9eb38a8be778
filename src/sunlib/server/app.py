"""The FastAPI application: REST + SSE over one library, and the web UI as static files.

One SQLite connection serves the requests, one at a time (a lock; a question takes tens of
milliseconds). Long work (rebuilds, benchmark runs) runs on its own thread with its own
connection, so searches and questions keep working meanwhile (SQLite WAL).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..config import Settings
from ..library import Library
from . import errors
from .jobs import Jobs

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


@dataclass
class ServerState:
    library: Library
    settings: Settings
    lock: threading.RLock
    jobs: Jobs


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
        response = JSONResponse(errors.body("too_large", f"request body over {self.limit} bytes"), status_code=413)
        await response(scope, receive, send)


def create_app(library: Library) -> FastAPI:
    settings = library.settings
    app = FastAPI(
        title="sunlib",
        version=__version__,
        description="Search and ask your Markdown notes: cited answers, honest refusals, the run chain.",
    )
    app.state.sunlib = ServerState(library, settings, threading.RLock(), Jobs())
    errors.install(app)
    app.add_middleware(BodyLimit, limit=settings.server.max_body_bytes)
    if settings.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.server.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    from . import routes_index, routes_notes, routes_query, routes_runs

    for module in (routes_query, routes_runs, routes_index, routes_notes):
        app.include_router(module.router)

    if (WEB_DIR / "index.html").is_file():
        app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")

        @app.get("/", include_in_schema=False)
        def index_page() -> FileResponse:
            return FileResponse(WEB_DIR / "index.html")

    return app
