"""/api/notes: list, read, create, update, delete and move the vault's Markdown notes.

Who may do what (principals come from ``principals_for``: a bearer token's, or the
loopback default when the server has no tokens):

- **List and read**: only notes visible to the caller, by the rule search uses: one of the
  note's ACL principals is among the caller's (an empty ACL is visible to nobody). A note
  that exists but is not visible answers 404 exactly like an unknown id.
- **Create**: any caller the server lets in.
- **Update, delete, move**: only callers who can see the note (read access is write
  access); anyone else gets the same 404 as for an unknown id.
- The ACL lives in the note itself (frontmatter ``acl:`` or the sidecar), so a writer can
  change it with the text: a note can be created or edited so that its writer no longer
  sees it. The write's response still shows what was written; later reads answer 404.
- A 409 on create or move says that a path is taken, also by a note the caller cannot see
  (it tells a path exists, never what is in it).
- Before a read or a write of an existing note, its file is compared with the index (hash
  of the note and its sidecar); when it changed outside the API the path is re-indexed
  first, so the ACL checked is the file's current one and a read never returns text the
  index has not vetted. A file that cannot be indexed (broken frontmatter) keeps its last
  indexed ACL; a read then returns ``content: null`` and ``in_sync: false``, and a move is
  refused (409) until the file is fixed or replaced with PATCH. The listing checks the notes of
  its page the same way (``sunlib.sync.freshness``): a changed one is re-indexed before the page is
  answered, one that cannot be is left out.

Consistency: every write holds the library's write lock and the indexer lock (shared with
this server's own rebuild and vectors jobs; another process's indexer is waited for up to
``WRITE_WAIT_S``, then 503 ``indexer_busy``) from the ACL check through the file write to the
index sync of the affected paths (``indexing.sync_paths``, one ``BEGIN IMMEDIATE``
transaction), so full-text search and metadata match the file when the response leaves, and
concurrent writes to one note are applied one after the other (the file is always one whole
version). When the sync fails (a full disk: 507 ``store_full``; an index busy past the busy
timeout: 503 ``store_busy``) the file change is undone (``notes_io``'s ``index`` hook): the
answer is an error and nothing changed, neither the file nor the index. A full disk while
writing the file itself is 507 ``vault_full``, also with nothing changed. Reads take no
lock (each request thread has its own connection); a read that finds its file changed
outside the API syncs it under the write lock. Vectors follow in a background job (kind
``embed``, named by ``vectors_job`` in the response; null when nothing needs embedding or
``index.embed`` is off) on the worker service's index lane, which runs rebuilds and vectors
jobs one at a time, with no lock held while the embedder works. A move keeps ``note_id``;
so does an update, also of a note that was moved before.

Paths and atomic writes: see ``sunlib.sync.notes_io`` (400 ``bad_path``, 409 ``conflict``). The
new text is checked the way the indexer will read it (frontmatter, ACL type, NUL bytes)
before it replaces anything: 422 ``invalid_note``. ``content`` in responses is the file's
text as chunk offsets count it (BOM dropped, CRLF and a lone CR as LF); chunk ``start``/``end`` are UTF-16
code units into it, lines 1-based and inclusive.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..config import Settings
from ..ingest import NoteError, VaultFile, load_note
from ..store import DocumentStore, NoteRecord, NoteSummary
from ..store.connection import BUSY_TIMEOUT_MS
from ..sync import notes_io
from ..sync.freshness import fresh_read
from ..sync.indexing import IndexReport, sync_paths
from .auth import principals_for
from .errors import ERROR_RESPONSES, ApiError
from .jobs import Job
from .schemas import NoteOut, NotesOut, NoteWrittenOut
from .state import ServerState

MAX_NOTE_BYTES = 1_000_000  # UTF-8 bytes of a note's text
WRITE_WAIT_S = BUSY_TIMEOUT_MS / 1000  # a write waits this long for another process's indexer, as for SQLite's lock


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


# -- the vectors job -------------------------------------------------------------------------


def _start_vectors(state: ServerState, principals: tuple[str, ...], report: IndexReport) -> str | None:
    if not state.settings.index.embed or not (report.added or report.changed or report.moved):
        return None

    def work(job: Job) -> dict[str, object]:
        """Embed every chunk without a vector, as `sunlib index` does after the text phase."""

        def progress(phase: str, done: int, total: int) -> None:
            state.jobs.progress(job, phase, done, total)

        return state.library.embed(progress=progress).as_dict()

    return state.jobs.submit("embed", principals, work, prefix="embed").job_id


# -- helpers ---------------------------------------------------------------------------------


@contextmanager
def _vault_errors() -> Iterator[None]:
    try:
        yield
    except notes_io.BadPath as exc:
        raise ApiError(400, "bad_path", str(exc)) from None
    except notes_io.Conflict as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except FileNotFoundError as exc:  # removed on disk between the check and the write
        raise ApiError(409, "conflict", f"a file or folder went away on disk meanwhile: {exc.strerror}") from None
    except OSError as exc:  # a read-only vault, a full disk: say so, without a traceback
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ApiError(507, "vault_full", f"the disk holding the vault is full: {exc.strerror}") from None
        raise ApiError(500, "write_failed", f"cannot write to the vault: {exc.strerror or exc}") from None


@contextmanager
def _writing(state: ServerState) -> Iterator[None]:
    """The locks of a note write: this server's write lock, then the indexer lock."""
    with state.library.write_lock, state.library.indexer_lock.held(wait=WRITE_WAIT_S):
        yield


class _Sync:
    """A note write's ``index`` hook (notes_io): syncs the paths in one transaction, keeps the report."""

    def __init__(self, state: ServerState, *paths: str) -> None:
        self.state, self.paths = state, paths
        self.report = IndexReport()

    def __call__(self) -> None:
        lib = self.state.library
        self.report = sync_paths(lib.store, lib.vault, self.state.settings.index, self.paths)


def _checked(path: str) -> str:
    with _vault_errors():
        return notes_io.check_path(path)


def _visible(row: NoteRecord | None, principals: tuple[str, ...]) -> bool:
    return row is not None and bool(set(row.acl) & set(principals))


def _not_found(note_id: str) -> ApiError:
    return ApiError(404, "not_found", f"no note {note_id!r}")


def _current(state: ServerState, note_id: str, principals: tuple[str, ...]) -> tuple[NoteRecord, str | None]:
    """(index row, file text or None) of a note the caller may see; re-indexes its path first
    when the file changed outside the API (under the write lock, which writers hold already).
    A read-only replica never re-indexes (the indexing host does): without the file as indexed,
    the note comes without its text."""
    store, vault = state.library.store, state.library.vault
    row = store.note_by_id(note_id)
    if row is None or not _visible(row, principals):
        raise _not_found(note_id)
    current = notes_io.read_note(vault, row.path)
    stale = current is None or current.content_hash != row.content_hash
    if stale and not state.settings.store.replica:
        with state.library.write_lock:
            sync_paths(store, vault, state.settings.index, [row.path])
        row = store.note_by_id(note_id)
        if row is None or not _visible(row, principals):
            raise _not_found(note_id)
        current = notes_io.read_note(vault, row.path)
    if current is None or current.content_hash != row.content_hash:
        return row, None
    return row, current.text


def _validator(rel: str, settings: Settings) -> notes_io.Validate:
    """Load the new text as the indexer will (sidecar included) before it is published."""

    def check(tmp: Path, sidecar: Path | None) -> None:
        st = tmp.stat()
        try:
            load_note(VaultFile(rel, tmp, sidecar, st.st_mtime, st.st_size), settings.index.default_acl)
        except NoteError as exc:
            raise ApiError(422, "invalid_note", f"{rel}: {exc}") from None

    return check


def _summary(row: NoteRecord | NoteSummary) -> dict[str, Any]:
    metadata = row.metadata
    return {
        "note_id": row.note_id,
        "path": row.path,
        "title": row.title,
        "tags": metadata.get("tags", []),
        "metadata": metadata,
        "mtime": row.mtime,
    }


def _detail(store: DocumentStore, row: NoteRecord, text: str | None) -> dict[str, Any]:
    return {
        **_summary(row),
        "links": list(row.links),
        "content_hash": row.content_hash,
        "in_sync": text is not None,
        "content": text,
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
            for c in store.chunks_of_note(row.note_id)
        ],
    }


def _written(state: ServerState, note_id: str | None, path: str, report: IndexReport) -> dict[str, Any]:
    """The note as the index has it right after a write (write lock held)."""
    store = state.library.store
    if note_id is None:
        indexed = store.note_states_of([path]).get(path)
        note_id = indexed.note_id if indexed is not None else None
    row = store.note_by_id(note_id) if note_id is not None else None
    if row is None or row.path != path:
        reason = "; ".join(f"{p}: {why}" for p, why in report.failed) or "not indexed"
        raise ApiError(500, "index_error", f"{path} was written but the index disagrees ({reason})")
    current = notes_io.read_note(state.library.vault, path)
    text = current.text if current is not None and current.content_hash == row.content_hash else None
    return _detail(store, row, text)


# -- operations (the routes below and the MCP tools, sunlib.server.mcp, call these) -------------


def list_visible(
    state: ServerState, principals: tuple[str, ...], folder: str | None, tag: str | None, limit: int, offset: int
) -> dict[str, Any]:
    """Notes visible to the caller, by path, one page."""
    store = state.library.store
    (notes, total), withheld = fresh_read(  # a note changed on disk: re-indexed first, or left out
        state.library.freshness,
        lambda: store.list_notes(principals, folder, tag, limit, offset),
        lambda page: [n.path for n in page[0]],
    )
    shown = [_summary(n) for n in notes if n.path not in withheld]
    return {"notes": shown, "total": total - (len(notes) - len(shown)), "limit": limit, "offset": offset}


def read(state: ServerState, note_id: str, principals: tuple[str, ...]) -> dict[str, Any]:
    """A visible note's metadata, text and chunk spans; ``ApiError`` 404 when unknown or not visible."""
    store = state.library.store
    for _ in range(3):  # without a lock: a write may land between the checks and the reads
        row, text = _current(state, note_id, principals)
        with store.snapshot():  # the row and its chunks from one state of the index
            if store.note_by_id(note_id) == row:
                return _detail(store, row, text)
    with state.library.write_lock:  # writes keep coming: read between two of them
        row, text = _current(state, note_id, principals)
        return _detail(store, row, text)


def create(state: ServerState, principals: tuple[str, ...], body: NoteCreate) -> dict[str, Any]:
    """Write a new note file (409 when the path is taken) and index it before returning."""
    rel = _checked(body.path)
    vault = state.library.vault
    sync = _Sync(state, rel)
    with _writing(state):
        with _vault_errors():
            notes_io.write_note(
                vault, rel, body.content, create=True, validate=_validator(rel, state.settings), index=sync
            )
        note = _written(state, None, rel, sync.report)
    return {**note, "vectors_job": _start_vectors(state, principals, sync.report)}


def update(state: ServerState, principals: tuple[str, ...], note_id: str, body: NoteUpdate) -> dict[str, Any]:
    """Replace a visible note's text (atomically); the note keeps its id."""
    vault = state.library.vault
    with _writing(state):
        row, _ = _current(state, note_id, principals)
        rel = row.path
        sync = _Sync(state, rel)
        with _vault_errors():
            notes_io.write_note(
                vault, rel, body.content, create=False, validate=_validator(rel, state.settings), index=sync
            )
        note = _written(state, note_id, rel, sync.report)
    return {**note, "vectors_job": _start_vectors(state, principals, sync.report)}


def move(state: ServerState, principals: tuple[str, ...], note_id: str, body: NoteMove) -> dict[str, Any]:
    """Move a visible note and its sidecar; it keeps its note_id. 409 when the target is taken."""
    new = _checked(body.new_path)
    vault = state.library.vault
    with _writing(state):
        row, text = _current(state, note_id, principals)
        old = row.path
        if new == old:
            return {**_detail(state.library.store, row, text), "vectors_job": None}
        if text is None:
            raise ApiError(409, "conflict", f"{old} changed outside sunlib and cannot be indexed: fix it first")
        sync = _Sync(state, old, new)
        with _vault_errors():
            notes_io.move_note(vault, old, new, index=sync)
        note = _written(state, note_id, new, sync.report)
    return {**note, "vectors_job": _start_vectors(state, principals, sync.report)}


# -- routes ----------------------------------------------------------------------------------


@router.get("", response_model=NotesOut)
def list_notes(
    request: Request,
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=10_000_000),
    folder: str | None = Query(None, max_length=1024, description="notes under this folder, any depth"),
    tag: str | None = Query(None, max_length=200),
    principals: tuple[str, ...] = Depends(principals_for),
) -> dict[str, Any]:
    """Notes visible to the caller, by path."""
    return list_visible(request.app.state.sunlib, principals, folder, tag, limit, offset)


@router.post("", status_code=201, response_model=NoteWrittenOut)
def create_note(
    body: NoteCreate, request: Request, principals: tuple[str, ...] = Depends(principals_for)
) -> dict[str, Any]:
    """Write a new note file (409 when the path is taken) and index it before answering."""
    return create(request.app.state.sunlib, principals, body)


@router.get("/{note_id}", response_model=NoteOut)
def get_note(note_id: str, request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> dict[str, Any]:
    """A note's metadata, its text and its chunks' spans (to highlight a citation)."""
    return read(request.app.state.sunlib, note_id, principals)


@router.patch("/{note_id}", response_model=NoteWrittenOut)
def update_note(
    note_id: str, body: NoteUpdate, request: Request, principals: tuple[str, ...] = Depends(principals_for)
) -> dict[str, Any]:
    """Replace a note's text (atomically); the note keeps its id."""
    return update(request.app.state.sunlib, principals, note_id, body)


@router.delete("/{note_id}", status_code=204, response_class=Response, response_model=None)
def delete_note(note_id: str, request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> Response:
    """Remove the note file and its sidecar; search stops finding it before this answers."""
    state: ServerState = request.app.state.sunlib
    vault = state.library.vault
    with _writing(state):
        row, _ = _current(state, note_id, principals)
        with _vault_errors():
            notes_io.delete_note(vault, row.path, index=_Sync(state, row.path))
    return Response(status_code=204)


@router.post("/{note_id}/move", response_model=NoteWrittenOut)
def move_note(
    note_id: str, body: NoteMove, request: Request, principals: tuple[str, ...] = Depends(principals_for)
) -> dict[str, Any]:
    """Move (rename) a note and its sidecar; it keeps its note_id. 409 when the target is taken."""
    return move(request.app.state.sunlib, principals, note_id, body)
