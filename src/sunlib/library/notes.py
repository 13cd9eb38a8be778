"""The notes service (``Library.notes``): list, read, create, update, move and delete a vault's notes.

The HTTP routes (``server/routes_notes.py``) and the MCP tools are thin adapters over it, and Python
callers get the same safe writes.

Access. A note is visible to principals one of whom is in its ACL (``Visibility.allows``; an empty
ACL is visible to nobody). Reading is the right to write: update, move and delete of a note the
caller cannot see raise ``NotFound``, exactly as for an unknown id. Anyone may create.

Consistency. Every write holds the library's write lock and the indexer lock (another process's
indexer is waited for up to ``WRITE_WAIT_S``, then ``IndexerBusy``) from the ACL check through the
file write to the index sync of the paths it touched, in one transaction; when the sync fails the
file change is undone (``notes_io``'s ``index`` hook), so a write either lands in file and index
or changes neither. Before a read or a write of an existing note its file is compared with the
index; a file changed outside sunlib is re-indexed first, so the ACL checked is the file's own. A
file that cannot be indexed keeps its last indexed ACL: it reads with ``content=None``, and a move
is refused (``Conflict``) until it is fixed. Vectors are not computed under the locks: a write
says whether the note needs them (``NoteWrite.needs_vectors``), and ``embed=True`` computes them
before returning (the server runs them as a background job instead).

Errors, all under ``SunlibError``: ``NotFound``, ``BadPath``, ``Conflict``, ``InvalidNote`` (the
new text would not index), ``VaultFull`` / ``VaultError`` (the file could not be written; nothing
changed), and the store's own (``StoreFull``, ``StoreBusy``).
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..config import Settings
from ..errors import Conflict, IndexUnusable, InvalidNote, NotFound, VaultError, VaultFull
from ..ingest import NoteError, VaultFile, load_note
from ..store import ChunkRow, DocumentStore, NoteRecord, NoteSummary, Visibility
from ..store.connection import BUSY_TIMEOUT_MS
from ..store.lock import IndexerLock
from ..sync import notes_io
from ..sync.freshness import FreshRead, fresh_read
from ..sync.indexing import IndexReport, sync_paths

MAX_NOTE_BYTES = 1_000_000  # UTF-8 bytes of a note's text
WRITE_WAIT_S = BUSY_TIMEOUT_MS / 1000  # a write waits this long for another process's indexer, as for SQLite's lock


class NotesHost(Protocol):
    """What the notes service needs of a library (a ``Library`` is one)."""

    @property
    def vault(self) -> Path: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> DocumentStore: ...
    @property
    def write_lock(self) -> threading.RLock: ...
    @property
    def indexer_lock(self) -> IndexerLock: ...
    @property
    def freshness(self) -> FreshRead: ...
    def embed(self) -> IndexReport: ...


@dataclass(frozen=True)
class NotePage:
    """One page of the notes visible to the caller, by path; ``total`` counts visible notes only."""

    notes: tuple[NoteSummary, ...]
    total: int
    limit: int
    offset: int


@dataclass(frozen=True)
class NoteView:
    """A note as the index has it: its record, its file's text (None when the file no longer matches
    the index and cannot be re-indexed) and its chunks' spans."""

    record: NoteRecord
    content: str | None
    chunks: tuple[ChunkRow, ...]

    @property
    def in_sync(self) -> bool:
        return self.content is not None


@dataclass(frozen=True)
class NoteWrite:
    """What a write left: the note as indexed right after it, and the index sync's report."""

    note: NoteView
    report: IndexReport

    @property
    def needs_vectors(self) -> bool:
        return bool(self.report.added or self.report.changed or self.report.moved)


class Notes:
    """The notes of one library, read and written under its ACL and its locks."""

    def __init__(self, host: NotesHost) -> None:
        self._host = host

    # -- reads ----------------------------------------------------------------------------------

    def list(
        self,
        principals: Sequence[str],
        *,
        folder: str | None = None,
        tag: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> NotePage:
        """Notes visible to ``principals``, by path; a note changed on disk is re-indexed first, or left out."""
        store = self._host.store
        (notes, total), withheld = fresh_read(
            self._host.freshness,
            lambda: store.list_notes(tuple(principals), folder, tag, limit, offset),
            lambda page: [n.path for n in page[0]],
        )
        shown = tuple(n for n in notes if n.path not in withheld)
        return NotePage(shown, total - (len(notes) - len(shown)), limit, offset)

    def read(self, note_id: str, principals: Sequence[str]) -> NoteView:
        """A visible note with its text and chunk spans; ``NotFound`` when unknown or not visible."""
        store = self._host.store
        for _ in range(3):  # without a lock: a write may land between the checks and the reads
            row, text = self._current(note_id, principals)
            with store.snapshot():  # the row and its chunks from one state of the index
                if store.note_by_id(note_id) == row:
                    return self._view(row, text)
        with self._host.write_lock:  # writes keep coming: read between two of them
            row, text = self._current(note_id, principals)
            return self._view(row, text)

    # -- writes ---------------------------------------------------------------------------------

    def create(self, path: str, content: str, *, embed: bool = False) -> NoteWrite:
        """Write a new note file and index it; ``Conflict`` when the path is taken. Anyone may create,
        so no principals: the note's own ACL (or ``[index] default_acl``) says who sees it."""
        rel = notes_io.check_path(path)
        _check_size(content)
        sync = _Sync(self._host, rel)
        with self._writing():
            with _vault_errors():
                notes_io.write_note(
                    self._host.vault, rel, content, create=True, validate=self._validator(rel), index=sync
                )
            written = self._written(None, rel, sync.report)
        return self._embedded(written, embed)

    def update(self, note_id: str, content: str, principals: Sequence[str], *, embed: bool = False) -> NoteWrite:
        """Replace a visible note's whole text, atomically; it keeps its id."""
        _check_size(content)
        with self._writing():
            row, _ = self._current(note_id, principals)
            sync = _Sync(self._host, row.path)
            with _vault_errors():
                notes_io.write_note(
                    self._host.vault, row.path, content, create=False, validate=self._validator(row.path), index=sync
                )
            written = self._written(note_id, row.path, sync.report)
        return self._embedded(written, embed)

    def move(self, note_id: str, new_path: str, principals: Sequence[str], *, embed: bool = False) -> NoteWrite:
        """Move a visible note and its sidecar; it keeps its id. ``Conflict`` when the target is taken."""
        new = notes_io.check_path(new_path)
        with self._writing():
            row, text = self._current(note_id, principals)
            old = row.path
            if new == old:
                return NoteWrite(self._view(row, text), IndexReport())
            if text is None:
                raise Conflict(f"{old} changed outside sunlib and cannot be indexed: fix it first")
            sync = _Sync(self._host, old, new)
            with _vault_errors():
                notes_io.move_note(self._host.vault, old, new, index=sync)
            written = self._written(note_id, new, sync.report)
        return self._embedded(written, embed)

    def delete(self, note_id: str, principals: Sequence[str]) -> None:
        """Remove a visible note's file and sidecar; search stops finding it before this returns."""
        with self._writing():
            row, _ = self._current(note_id, principals)
            with _vault_errors():
                notes_io.delete_note(self._host.vault, row.path, index=_Sync(self._host, row.path))

    # -- helpers --------------------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """The locks of a note write: this process's write lock, then the indexer lock."""
        with self._host.write_lock, self._host.indexer_lock.held(wait=WRITE_WAIT_S):
            yield

    def _current(self, note_id: str, principals: Sequence[str]) -> tuple[NoteRecord, str | None]:
        """(index row, file text or None) of a note the caller may see; re-indexes its path first
        when the file changed outside sunlib (under the write lock, which writers hold already).
        A read-only replica never re-indexes (the indexing host does): without the file as indexed,
        the note comes without its text."""
        host = self._host
        store, vault, visible = host.store, host.vault, Visibility.of(principals)
        row = store.note_by_id(note_id)
        if row is None or not visible.allows(row.acl):
            raise NotFound(f"no note {note_id!r}")
        current = notes_io.read_note(vault, row.path)
        stale = current is None or current.content_hash != row.content_hash
        if stale and not host.settings.store.replica:
            with host.write_lock:
                sync_paths(store, vault, host.settings.index, [row.path])
            row = store.note_by_id(note_id)
            if row is None or not visible.allows(row.acl):
                raise NotFound(f"no note {note_id!r}")
            current = notes_io.read_note(vault, row.path)
        if current is None or current.content_hash != row.content_hash:
            return row, None
        return row, current.text

    def _view(self, row: NoteRecord, text: str | None) -> NoteView:
        return NoteView(row, text, tuple(self._host.store.chunks_of_note(row.note_id)))

    def _validator(self, rel: str) -> notes_io.Validate:
        """Load the new text as the indexer will (sidecar included) before it is published."""
        default_acl = self._host.settings.index.default_acl

        def check(tmp: Path, sidecar: Path | None) -> None:
            st = tmp.stat()
            try:
                load_note(VaultFile(rel, tmp, sidecar, st.st_mtime, st.st_size), default_acl)
            except NoteError as exc:
                raise InvalidNote(f"{rel}: {exc}") from None

        return check

    def _written(self, note_id: str | None, path: str, report: IndexReport) -> NoteWrite:
        """The note as the index has it right after a write (write lock held)."""
        store = self._host.store
        if note_id is None:
            indexed = store.note_states_of([path]).get(path)
            note_id = indexed.note_id if indexed is not None else None
        row = store.note_by_id(note_id) if note_id is not None else None
        if row is None or row.path != path:
            reason = "; ".join(f"{p}: {why}" for p, why in report.failed) or "not indexed"
            raise IndexUnusable(f"{path} was written but the index disagrees ({reason})")
        current = notes_io.read_note(self._host.vault, path)
        text = current.text if current is not None and current.content_hash == row.content_hash else None
        return NoteWrite(self._view(row, text), report)

    def _embedded(self, written: NoteWrite, embed: bool) -> NoteWrite:
        if embed and written.needs_vectors and self._host.settings.index.embed:
            self._host.embed()
        return written


class _Sync:
    """A note write's ``index`` hook (notes_io): syncs the paths in one transaction, keeps the report."""

    def __init__(self, host: NotesHost, *paths: str) -> None:
        self.host, self.paths = host, paths
        self.report = IndexReport()

    def __call__(self) -> None:
        self.report = sync_paths(self.host.store, self.host.vault, self.host.settings.index, self.paths)


def _check_size(content: str) -> None:
    if len(content.encode("utf-8")) > MAX_NOTE_BYTES:
        raise InvalidNote(f"a note may hold at most {MAX_NOTE_BYTES} bytes of UTF-8 text")


@contextmanager
def _vault_errors() -> Iterator[None]:
    """The vault's OS errors as sunlib's (BadPath and Conflict pass through as they are)."""
    try:
        yield
    except FileNotFoundError as exc:  # removed on disk between the check and the write
        raise Conflict(f"a file or folder went away on disk meanwhile: {exc.strerror}") from None
    except OSError as exc:  # a read-only vault, a full disk: say so, without a traceback
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise VaultFull(f"the disk holding the vault is full: {exc.strerror}") from None
        raise VaultError(f"cannot write to the vault: {exc.strerror or exc}") from None
