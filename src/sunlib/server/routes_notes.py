"""/api/notes: list, read, create, update, delete and move the vault's Markdown notes.

A thin adapter over the notes service (``Library.notes``, ``sunlib.library.notes``), which holds the
rules: visibility by ACL (a note the caller cannot see answers 404 exactly like an unknown id; read
access is write access), the write lock and the indexer lock from the ACL check to the index sync,
the freshness check of a file changed outside sunlib, and undoing a file change whose sync failed.
Its errors map to statuses in ``server/errors.py``: 400 ``bad_path``, 404 ``not_found``, 409
``conflict`` (a path is taken, also by a note the caller cannot see), 422 ``invalid_note``, 503
``indexer_busy`` / ``store_busy``, 507 ``store_full`` / ``vault_full``. After a write that needs
vectors the route starts a background job (kind ``embed``, named by ``vectors_job``; null when
nothing needs embedding or ``index.embed`` is off) on the worker service's index lane, or joins
the caller's embed job that is still queued (one waits per caller; it embeds every pending chunk).

A limit on the work one caller queues (``[server] max_queued_chunks``): the chunks a caller's writes
gave its unfinished embed jobs are counted, and while they reach the limit its create, update
and move answer 429 ``too_busy`` before anything is written (delete is never refused). The check,
the write and the job's count happen under the library's write lock, so concurrent requests do not
slip past it: a caller queues at most the limit plus one note's chunks. A chunk deleted or
rewritten before its batch is never embedded (``embed_pending``), so a note created and deleted
costs no embedding.

``content`` in responses is the file's text as chunk offsets count it (BOM dropped, CRLF and a lone
CR as LF); chunk ``start``/``end`` are UTF-16 code units into it, lines 1-based and inclusive.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..library.notes import MAX_NOTE_BYTES, NotePage, NoteView, NoteWrite
from ..store import NoteRecord, NoteSummary
from ..sync import notes_io
from .auth import principals_for
from .errors import ERROR_RESPONSES, ApiError
from .jobs import Job
from .schemas import NoteOut, NotesOut, NoteWrittenOut
from .state import ServerState, server_state

router = APIRouter(prefix="/api/notes", tags=["notes"], responses=ERROR_RESPONSES)


# -- request bodies --------------------------------------------------------------------------


def _small(text: str) -> str:
    if len(text.encode("utf-8")) > MAX_NOTE_BYTES:
        raise ValueError(f"a note may hold at most {MAX_NOTE_BYTES} bytes of UTF-8 text")
    return text


NoteText = Annotated[str, Field(max_length=MAX_NOTE_BYTES), AfterValidator(_small)]


class NoteCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(max_length=notes_io.MAX_PATH_CHARS, description="vault-relative, '/'-separated, ends with .md")
    content: NoteText


class NoteUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: NoteText


class NoteMove(BaseModel):
    model_config = ConfigDict(extra="forbid")

    new_path: str = Field(max_length=notes_io.MAX_PATH_CHARS)


# -- the service's records as JSON -------------------------------------------------------------


def summary_json(row: NoteRecord | NoteSummary) -> dict[str, Any]:
    metadata = row.metadata
    return {
        "note_id": row.note_id,
        "path": row.path,
        "title": row.title,
        "tags": metadata.get("tags", []),
        "metadata": metadata,
        "mtime": row.mtime,
    }


def view_json(view: NoteView) -> dict[str, Any]:
    row = view.record
    return {
        **summary_json(row),
        "links": list(row.links),
        "content_hash": row.content_hash,
        "in_sync": view.in_sync,
        "content": view.content,
        "chunks": [
            {
                "chunk_id": c.chunk_id,
                "ordinal": c.ordinal,
                "heading_path": list(c.heading_path),
                "start": c.start16,
                "end": c.end16,
                "start_line": c.start_line,
                "end_line": c.end_line,
            }
            for c in view.chunks
        ],
    }


def page_json(page: NotePage) -> dict[str, Any]:
    return {
        "notes": [summary_json(n) for n in page.notes],
        "total": page.total,
        "limit": page.limit,
        "offset": page.offset,
    }


def written_json(state: ServerState, principals: tuple[str, ...], write: NoteWrite) -> dict[str, Any]:
    """The note as written, with the vectors job started for it (null when none is needed)."""
    return {**view_json(write.note), "vectors_job": _start_vectors(state, principals, write)}


@contextmanager
def vectors_budget(state: ServerState, principals: tuple[str, ...]) -> Iterator[None]:
    """A note write that may queue vectors work: refuses it (429 ``too_busy``) while the caller's
    unfinished embed jobs hold ``[server] max_queued_chunks`` chunks, and holds the library's write
    lock from that check through the write to ``written_json``'s job, so concurrent writes of one
    caller cannot all pass the check before any of them counts."""
    limit = state.settings.server.max_queued_chunks
    with state.library.write_lock:
        if limit and state.settings.index.embed:
            queued = state.jobs.queued_units("embed", principals)
            if queued >= limit:
                raise ApiError(
                    429,
                    "too_busy",
                    f"{queued} chunks of your earlier note writes are still waiting for their vectors (the limit"
                    f" is {limit}, [server] max_queued_chunks); try again once your vectors job is done",
                )
        yield


def _start_vectors(state: ServerState, principals: tuple[str, ...], write: NoteWrite) -> str | None:
    if not state.settings.index.embed or not write.needs_vectors:
        return None

    def work(job: Job) -> dict[str, object]:
        """Embed every chunk without a vector, as `sunlib index` does after the text phase."""

        def progress(phase: str, done: int, total: int) -> None:
            state.jobs.progress(job, phase, done, total)

        return state.library.embed(progress=progress).as_dict()

    units = write.report.chunks_written
    return state.jobs.submit("embed", principals, work, prefix="embed", coalesce=True, units=units).job_id


# -- routes ----------------------------------------------------------------------------------


@router.get("", response_model=NotesOut)
def list_notes(
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=10_000_000),
    folder: str | None = Query(None, max_length=1024, description="notes under this folder, any depth"),
    tag: str | None = Query(None, max_length=200),
    principals: tuple[str, ...] = Depends(principals_for),
    state: ServerState = Depends(server_state),
) -> dict[str, Any]:
    """Notes visible to the caller, by path."""
    return page_json(state.library.notes.list(principals, folder=folder, tag=tag, limit=limit, offset=offset))


@router.post("", status_code=201, response_model=NoteWrittenOut)
def create_note(
    body: NoteCreate, principals: tuple[str, ...] = Depends(principals_for), state: ServerState = Depends(server_state)
) -> dict[str, Any]:
    """Write a new note file (409 when the path is taken) and index it before answering."""
    with vectors_budget(state, principals):
        return written_json(state, principals, state.library.notes.create(body.path, body.content))


@router.get("/{note_id}", response_model=NoteOut)
def get_note(
    note_id: str, principals: tuple[str, ...] = Depends(principals_for), state: ServerState = Depends(server_state)
) -> dict[str, Any]:
    """A note's metadata, its text and its chunks' spans (to highlight a citation)."""
    return view_json(state.library.notes.read(note_id, principals))


@router.patch("/{note_id}", response_model=NoteWrittenOut)
def update_note(
    note_id: str,
    body: NoteUpdate,
    principals: tuple[str, ...] = Depends(principals_for),
    state: ServerState = Depends(server_state),
) -> dict[str, Any]:
    """Replace a note's text (atomically); the note keeps its id."""
    with vectors_budget(state, principals):
        return written_json(state, principals, state.library.notes.update(note_id, body.content, principals))


@router.delete("/{note_id}", status_code=204, response_class=Response, response_model=None)
def delete_note(
    note_id: str, principals: tuple[str, ...] = Depends(principals_for), state: ServerState = Depends(server_state)
) -> Response:
    """Remove the note file and its sidecar; search stops finding it before this answers."""
    state.library.notes.delete(note_id, principals)
    return Response(status_code=204)


@router.post("/{note_id}/move", response_model=NoteWrittenOut)
def move_note(
    note_id: str,
    body: NoteMove,
    principals: tuple[str, ...] = Depends(principals_for),
    state: ServerState = Depends(server_state),
) -> dict[str, Any]:
    """Move (rename) a note and its sidecar; it keeps its note_id. 409 when the target is taken."""
    with vectors_budget(state, principals):
        return written_json(state, principals, state.library.notes.move(note_id, body.new_path, principals))
