"""The server's state: the library it serves, its settings, its worker service and what runs.

Route modules read it through the ``server_state`` dependency (``Depends(server_state)``), so no
module imports the app to reach it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from fastapi import Request

from ..config import Settings
from ..library import Library
from ..sync.filestatus import FileBoard
from .jobs import Jobs

PRINCIPALS_KEY = "sunlib.principals"  # the principals of an /mcp request, in its ASGI scope, for the tools
OWNER_KEY = "sunlib.owner"  # ...and its owner (auth.Caller.owner): whose the runs it saves are


class InFlight:
    """The asks running on worker threads. A streamed ask outlives its response when the
    client leaves (it stops at its next step or token); shutdown waits for them."""

    def __init__(self) -> None:
        self._n = 0
        self._idle = threading.Condition()

    @contextmanager
    def track(self) -> Iterator[None]:
        with self._idle:
            self._n += 1
        try:
            yield
        finally:
            with self._idle:
                self._n -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """True once no ask runs (False after ``timeout`` seconds)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._n == 0, timeout)


@dataclass(frozen=True)
class ServerState:
    library: Library
    settings: Settings
    jobs: Jobs
    asks: InFlight = field(default_factory=InFlight)
    board: FileBoard = field(default_factory=FileBoard)  # per-file status (sunlib.sync.filestatus)
    watch: bool = False  # the lifespan runs a watcher on the vault (sunlib.sync.watch, server/watching.py)


def server_state(request: Request) -> ServerState:
    """The state of the app serving ``request`` (a FastAPI dependency)."""
    state: ServerState = request.app.state.sunlib
    return state
