"""The server's watcher: the vault's changes re-indexed while ``sunlib serve`` runs.

The lifespan starts one ``Watcher`` (``sunlib.sync.watch``) on its own thread. Its text phase takes
the library's write lock like a note write; its vectors phase runs as an ``embed`` job on the
worker service's index lane, after the rebuilds and vectors jobs already queued, so vectors
are never written by two threads at once. Those jobs belong to a principal no token can hold,
so no caller reads their results. The watcher catches up first (every file whose mtime
differs from the index), which also puts the files that still fail to index on the board.
"""

from __future__ import annotations

from collections.abc import Callable

from ..sync.watch import Watcher
from .state import ServerState

WATCHER_PRINCIPAL = "\x00sunlib-watch"  # owns the watcher's jobs: not a name any token can map to
READY_TIMEOUT = 10.0  # seconds the lifespan waits for the watches to be in place


def start_watcher(state: ServerState) -> Watcher:
    def vectors(embed: Callable[[], None]) -> None:
        state.jobs.submit("embed", (WATCHER_PRINCIPAL,), lambda job: embed(), prefix="embed")

    watcher = Watcher(state.library, board=state.board, vectors=vectors)
    watcher.start()
    watcher.ready.wait(READY_TIMEOUT)
    return watcher
