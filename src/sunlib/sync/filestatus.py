"""Per-file index status: ``queued``, ``indexed`` (text), ``embedded`` (text and vectors), ``failed``.

Where each state lives, chosen by what should survive a restart:

- ``indexed`` and ``embedded`` are read from the index itself (a note row; whether each of its
  chunks has a vector in the active space). They are never stored twice, so they are right
  after a restart, after a rebuild by another process, and after a crash.
- ``queued`` (a change seen, its sync not done) and ``failed`` (the file's last sync failed;
  the reason says why) live in memory, in the ``FileBoard`` of the process that watches.
  Neither outlives that process sensibly: at start, ``sunlib serve`` indexes the vault and the
  watcher catches up, which queues and fails each file afresh (the failures of the start-up
  index seed the board). ``sunlib status --files`` is a separate process without a board: it
  compares the vault with the index instead (``disk_states``).

A failed file that was indexed before keeps its older version in the index (and its ACL); one
that never was has no ACL anyone has vetted, so the HTTP listing leaves it out and only the
CLI, which reads the vault directly, shows it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..config import IndexSettings
from ..ingest import NoteError, file_hash, load_note, walk_vault
from ..store import NoteFile, Space, Store

State = Literal["queued", "indexed", "embedded", "failed"]
CHANGES_KEPT = 256  # board changes kept for live listeners (a slower listener reloads the list)


@dataclass(frozen=True)
class FileRow:
    """One file's status, as ``sunlib status --files`` and ``GET /api/index/files`` show it."""

    path: str
    state: State
    note_id: str | None
    chunks: int
    embedded_chunks: int
    reason: str | None
    indexed_at: float | None


@dataclass(frozen=True)
class BoardChange:
    """Some paths whose status changed, with the ACL each had before the change (to tell a
    listener who saw a path that it went away)."""

    version: int
    paths: tuple[str, ...]
    acl_before: Mapping[str, tuple[str, ...]]


class FileBoard:
    """The in-memory part of the status (queued and failed files), and a change feed."""

    def __init__(self) -> None:
        self._queued: set[str] = set()
        self._failed: dict[str, str] = {}
        self._changes: deque[BoardChange] = deque(maxlen=CHANGES_KEPT)
        self._version = 0
        self._cond = threading.Condition()

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    def queue(self, paths: Iterable[str], acl_before: Mapping[str, tuple[str, ...]]) -> None:
        with self._cond:
            added = [p for p in paths if p not in self._queued]
            self._queued.update(added)
            self._publish(added, acl_before)

    def settle(
        self, paths: Iterable[str], failed: Mapping[str, str], acl_before: Mapping[str, tuple[str, ...]]
    ) -> None:
        """Some paths' syncs ended: those in ``failed`` failed (with the reason), the others did not."""
        wanted = list(paths)
        with self._cond:
            for path in wanted:
                self._queued.discard(path)
                if path in failed:
                    self._failed[path] = failed[path]
                else:
                    self._failed.pop(path, None)
            self._publish(wanted, acl_before)

    def touched(self, paths: Iterable[str]) -> None:
        """Some paths changed in the index without a sync of theirs (their vectors were written)."""
        with self._cond:
            self._publish(list(paths), {})

    def overlay(self, path: str) -> tuple[State, str | None] | None:
        with self._cond:
            if path in self._queued:
                return "queued", None
            if path in self._failed:
                return "failed", self._failed[path]
        return None

    def failed(self) -> dict[str, str]:
        with self._cond:
            return dict(self._failed)

    def queued(self) -> set[str]:
        with self._cond:
            return set(self._queued)

    def changes_after(self, version: int) -> list[BoardChange] | None:
        """The changes after ``version``, oldest first; None when some were dropped already."""
        with self._cond:
            if self._changes and self._changes[0].version > version + 1:
                return None
            return [c for c in self._changes if c.version > version]

    def wait(self, version: int, timeout: float) -> bool:
        """True once the board is past ``version`` (False after ``timeout`` seconds)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._version > version, timeout)

    def _publish(self, paths: Sequence[str], acl_before: Mapping[str, tuple[str, ...]]) -> None:
        if not paths:
            return
        self._version += 1
        before = {p: acl_before[p] for p in paths if p in acl_before}
        self._changes.append(BoardChange(self._version, tuple(paths), before))
        self._cond.notify_all()


def file_rows(files: Sequence[NoteFile], store: Store, space: Space, board: FileBoard | None) -> list[FileRow]:
    """The status rows of some indexed notes (the board's queued/failed state wins)."""
    chunk_ids = [c for f in files for c in f.chunk_ids]
    pending = store.vectors.without_vectors(space, chunk_ids) if chunk_ids else set()
    rows = []
    for f in files:
        waiting = sum(c in pending for c in f.chunk_ids)
        state: State = "embedded" if waiting == 0 else "indexed"
        reason = None
        found = board.overlay(f.path) if board is not None else None
        if found is not None:
            state, reason = found
        embedded = len(f.chunk_ids) - waiting
        rows.append(FileRow(f.path, state, f.note_id, len(f.chunk_ids), embedded, reason, f.indexed_at))
    return rows


def unindexed_rows(paths_reasons: Iterable[tuple[str, State, str | None]]) -> list[FileRow]:
    return [FileRow(p, state, None, 0, 0, reason, None) for p, state, reason in paths_reasons]


def disk_states(store: Store, vault: Path, settings: IndexSettings) -> dict[str, tuple[State, str | None]]:
    """What ``sunlib index`` would do to each file, without doing it: ``queued`` for a file new
    or changed since it was indexed (or a note whose file is gone), ``failed`` (with the reason)
    for one that cannot be indexed. Unchanged files are left out."""
    files, problems = walk_vault(vault)
    out: dict[str, tuple[State, str | None]] = {p.rel_path: ("failed", p.reason) for p in problems}
    states = store.note_states()
    for vf in files:
        previous = states.get(vf.rel_path)
        if vf.size > settings.max_note_bytes:
            out[vf.rel_path] = ("failed", f"note is {vf.size:,} bytes; the limit is {settings.max_note_bytes:,}")
            continue
        try:
            if previous is not None and file_hash(vf) == previous.content_hash:
                continue
            load_note(vf, settings.default_acl)
        except NoteError as exc:
            out[vf.rel_path] = ("failed", str(exc))
            continue
        out[vf.rel_path] = ("queued", None)
    present = {vf.rel_path for vf in files}
    out.update({path: ("queued", "file gone: leaves the index") for path in states if path not in present})
    return out
