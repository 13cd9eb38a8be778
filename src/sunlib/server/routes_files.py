"""/api/index/files: the per-file index status (``sunlib.sync.filestatus``), and its live feed over SSE.

A caller sees only the files it may read: an indexed note by its ACL as the index has it (a
note whose ACL changed is shown under its new one once synced), a queued or failed file only
when an indexed version of it is visible to the caller. A file that never made it into the
index has no vetted ACL and is not listed here (``sunlib status --files`` shows it). The feed
tells a caller that saw a path before a change that it went away (``gone``), whatever the
reason (deleted, moved, or no longer visible), and nothing else about it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse

from ..sync.filestatus import FileRow, file_rows
from .auth import principals_for
from .errors import ERROR_RESPONSES, SSE_RESPONSE
from .state import ServerState

router = APIRouter(prefix="/api/index", tags=["index and benchmarks"], responses=ERROR_RESPONSES)
FEED_WAIT = 0.25  # seconds the feed sleeps between looks at the board (the event loop never blocks)


class FileOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    state: Literal["queued", "indexed", "embedded", "failed"]
    note_id: str | None
    chunks: int = Field(description="chunks of the indexed version")
    embedded_chunks: int = Field(description="of those, how many have a vector in the active space")
    reason: str | None = Field(None, description="why the last sync failed (state failed)")
    indexed_at: float | None = Field(None, description="when the indexed version was stored (epoch seconds)")


class FilesOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: list[FileOut]
    total: int = Field(description="files visible to the caller")
    limit: int
    offset: int
    watching: bool = Field(description="the server re-indexes files as they change")


def _out(row: FileRow) -> FileOut:
    return FileOut(
        path=row.path,
        state=row.state,
        note_id=row.note_id,
        chunks=row.chunks,
        embedded_chunks=row.embedded_chunks,
        reason=row.reason,
        indexed_at=row.indexed_at,
    )


def _rows(
    state: ServerState, principals: tuple[str, ...], paths: list[str] | None, limit: int, offset: int
) -> tuple[list[FileRow], int]:
    lib = state.library
    files, total = lib.store.note_files(principals, paths, limit, offset)
    return file_rows(files, lib.store, lib.space, state.board), total


@router.get("/files", response_model=FilesOut)
def index_files(
    request: Request,
    limit: int = Query(200, ge=1, le=2000),
    offset: int = Query(0, ge=0, le=10_000_000),
    principals: tuple[str, ...] = Depends(principals_for),
) -> FilesOut:
    """Each visible file's status: queued, indexed (text), embedded (text and vectors), failed."""
    state: ServerState = request.app.state.sunlib
    rows, total = _rows(state, principals, None, limit, offset)
    return FilesOut(files=[_out(r) for r in rows], total=total, limit=limit, offset=offset, watching=state.watch)


def feed_event(state: ServerState, principals: tuple[str, ...], version: int) -> tuple[int, dict[str, Any] | None]:
    """The caller's view of the board's changes after ``version``: the board's version it has now
    seen, and the event (its name and data, without a version; None: nothing for it). The board's
    own version is never sent: it counts the saves of notes the caller may not see."""
    changes = state.board.changes_after(version)
    if changes is None:  # fell behind the kept changes: the client reloads the list
        return state.board.version, {"event": "reload", "data": {}}
    if not changes:
        return version, None
    paths = sorted({p for c in changes for p in c.paths})
    seen_before = {p for c in changes for p, acl in c.acl_before.items() if set(acl) & set(principals)}
    rows, _ = _rows(state, principals, paths, 0, 0)
    shown = {r.path for r in rows}
    gone = sorted(seen_before - shown)
    latest = changes[-1].version
    if not rows and not gone:
        return latest, None
    return latest, {"event": "files", "data": {"files": [_out(r).model_dump() for r in rows], "gone": gone}}


@router.get("/files/events", response_class=EventSourceResponse, responses=SSE_RESPONSE)
async def index_file_events(
    request: Request, principals: tuple[str, ...] = Depends(principals_for)
) -> EventSourceResponse:
    """SSE: ``files`` events ({version, files: [...], gone: [paths]}) as statuses change; ``reload``
    when the client fell behind and should fetch the list again. ``version`` counts the events this
    stream sent (``ready`` is 0): changes the caller may not see move nothing."""
    state: ServerState = request.app.state.sunlib
    start = state.board.version

    async def events() -> AsyncIterator[dict[str, Any]]:
        board, sent = start, 0
        yield {"event": "ready", "data": json.dumps({"version": sent, "watching": state.watch})}
        while True:
            board, event = await asyncio.to_thread(feed_event, state, principals, board)
            if event is not None:
                sent += 1
                data = {"version": sent, **event["data"]}
                yield {"event": event["event"], "data": json.dumps(data, ensure_ascii=False)}
            await asyncio.sleep(FEED_WAIT)

    return EventSourceResponse(events())
