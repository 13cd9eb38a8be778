"""The server's watcher: the vault's changes re-indexed while ``sunlib serve`` runs.

The lifespan starts one ``Watcher`` (``sunlib.sync.watch``) on its own thread. Its text phase takes
the library's write lock like a note write; its vectors phase runs as an ``embed`` job on the
worker service's index lane, after the rebuilds and vectors jobs already queued, so vectors
are never written by two threads at once. At start the lifespan also queues the backfill
(``start_backfill``): the vectors a first index left to do, filled in while the server serves.
Those jobs belong to a principal no token can hold, so no caller reads their results. The
watcher catches up first (every file whose mtime differs from the index), which also puts the
files that still fail to index on the board.
"""

from __future__ import annotations

from collections.abc import Callable

from ..sync.watch import Watcher
from .jobs import Job
from .state import ServerState

WATCHER_PRINCIPAL = "\x00sunlib-watch"  # owns the watcher's jobs: not a name any token can map to
READY_TIMEOUT = 10.0  # seconds the lifespan waits for the watches to be in place


class BackfillStopped(Exception):
    """Ends the backfill job when the server stops."""


def start_backfill(state: ServerState) -> None:
    """Queue the embedding of every chunk still without a vector (``Library.embed``): a server
    started on a big new index serves at once, on the fast tier, while e5 fills in behind it on
    the index lane, its threads at ``[embedding] bulk_nice`` so that searches go first."""
    library = state.library
    if library.settings.store.replica or not library.settings.index.embed:
        return

    def work(job: Job) -> dict[str, object]:
        def progress(phase: str, done: int, total: int) -> None:
            if state.jobs.closing:  # the server stops: committed batches stay, the next start goes on
                raise BackfillStopped("the server is stopping; the backfill goes on at its next start")
            state.jobs.progress(job, phase, done, total)

        return library.embed(progress=progress).as_dict()

    state.jobs.submit("embed", (WATCHER_PRINCIPAL,), work, prefix="embed")


def start_watcher(state: ServerState) -> Watcher:
    def vectors(embed: Callable[[], None]) -> None:
        state.jobs.submit("embed", (WATCHER_PRINCIPAL,), lambda job: embed(), prefix="embed")

    watcher = Watcher(state.library, board=state.board, vectors=vectors)
    watcher.start()
    watcher.ready.wait(READY_TIMEOUT)
    return watcher
