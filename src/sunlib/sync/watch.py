"""Watch mode: the vault re-indexes itself when a file changes (``sunlib index --watch``,
``sunlib serve --watch``).

One watcher thread per vault, built on ``watchfiles`` (inotify, FSEvents or ReadDirectoryChangesW
underneath). It turns each burst of file events into one *batch* of vault-relative note paths
and applies it with the indexer's own per-path sync (``indexing.sync_paths``, the one note
writes use), under the library's write lock:

- **Debounce.** A batch closes after ``STEP_MS`` without a new event, or ``DEBOUNCE_MS`` after
  its first one while events keep coming (a ``git checkout`` of 1,000 files is a few batches).
- **Paths.** ``NAME.md`` is the note; ``NAME.metadata.yaml`` (the sidecar) stands for
  ``NAME.md``; a folder that appears (a folder renamed or moved in) stands for the notes found
  under it; a path that disappears and was not a note file stands for the indexed notes under
  it (a folder renamed away or deleted). Anything under a hidden folder (``.git``,
  ``.obsidian``, ``.sunlib``), a tool folder (``node_modules``, ``__pycache__``), a hidden file
  (editors' swap files, sunlib's own ``.NAME.<hex>.sunlib-tmp``) or a backup ``NAME~`` is ignored.
- **Atomic saves and moves.** An editor that writes a temp file and renames it over the note
  produces events for both names: the temp name is ignored and the note is synced. A move
  (``mv a.md b/a.md``, a folder rename) lists both sides in one batch, and ``sync_paths`` keeps
  the note's id when the content at the new path is the content that left the old one.
- **Two phases.** Text and metadata (ACL included) are committed first, so BM25 and every ACL
  check see the new state when the batch ends; vectors follow through ``vectors`` (in the
  server: a job on the worker service's index lane; in ``sunlib index --watch``: inline).
  At most one vectors run waits at a time: a burst of batches coalesces into it.
- **Status.** Every path moves through the ``FileBoard`` (queued -> indexed / failed -> embedded).
- **New notes wait for their sidecar.** A note that is not in the index yet and has no sidecar
  waits ``[index] sidecar_settle_s`` (2 s) before it is indexed; its sidecar arriving meanwhile
  ends the wait, and the two are indexed as one. So a restricted note written as two files is never
  public in between. A note already indexed is synced at once, with or without a sidecar.
- **Failures** of one batch (a busy index, a full disk) mark its paths failed with the reason;
  the watcher goes on, and the next change to those files (or the next full index) retries.

Between a save and the end of its batch, the read paths check the files of the notes they
return (``sunlib.sync.freshness``), so no read serves a note under a state its file no longer has.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import watchfiles

from ..config import Settings
from ..ingest import walk_vault
from ..ingest.vault import SIDECAR_SUFFIX, SKIP_DIRS
from ..store import Store
from ..store.lock import IndexerLock
from .filestatus import FileBoard
from .indexing import IndexReport, sync_paths

STEP_MS = 50  # a burst ends after this long without an event: an atomic save is one batch
DEBOUNCE_MS = 400  # ... or this long after its first event, so a long burst still lands in steps
POLL_MS = 200  # how often the watcher wakes without events (to notice a stop; ``ready`` is set on the first)

Vectors = Callable[[Callable[[], None]], None]  # runs the vectors phase: now, or as a background job


@dataclass(frozen=True)
class Batch:
    """One applied batch: what ``sunlib index --watch`` prints a line about."""

    paths: tuple[str, ...]
    report: IndexReport
    seconds: float
    error: str | None = None

    def line(self) -> str:
        r = self.report
        parts = [
            f"{len(r.added)} added" if r.added else "",
            f"{len(r.changed)} changed" if r.changed else "",
            f"{len(r.moved)} moved" if r.moved else "",
            f"{len(r.deleted)} deleted" if r.deleted else "",
            f"{len(r.failed)} failed" if r.failed else "",
        ]
        summary = ", ".join(p for p in parts if p) or "no change"
        if self.error:
            summary = f"failed: {self.error}"
        return f"{len(self.paths)} file(s): {summary} ({self.seconds * 1000:.0f} ms)"


def ignored(rel: str) -> bool:
    """True for a vault-relative path the watcher never looks at (see the module docstring)."""
    parts = rel.split("/")
    return any(p.startswith(".") or p in SKIP_DIRS for p in parts) or parts[-1].endswith("~")


def _relative(vault: Path, raw: str) -> str | None:
    try:
        rel = Path(raw).relative_to(vault).as_posix()
    except ValueError:
        return None
    return None if rel in ("", ".") else rel


class Watched(Protocol):
    """What the watcher needs of a library (a ``Library`` is one): its vault and settings, the
    calling thread's store, the locks that order writes, and the vector phase."""

    @property
    def vault(self) -> Path: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> Store: ...
    @property
    def write_lock(self) -> threading.RLock: ...
    @property
    def indexer_lock(self) -> IndexerLock: ...
    def embed(self) -> IndexReport: ...
    def release_thread(self) -> None: ...


class Watcher:
    """Watches one library's vault on a thread of its own (``start``/``stop``), or on the
    calling thread (``run``). ``on_batch`` hears of every applied batch."""

    def __init__(
        self,
        library: Watched,
        board: FileBoard | None = None,
        vectors: Vectors | None = None,
        on_batch: Callable[[Batch], None] | None = None,
        catch_up: bool = True,
    ) -> None:
        self.library = library
        self.vault = library.vault.resolve()
        self.board = board or FileBoard()
        self._vectors = vectors if library.settings.index.embed else None
        self._on_batch = on_batch
        self._catch_up = catch_up
        self._stop = threading.Event()
        self.ready = threading.Event()  # set once the watches are in place (and the catch-up is done)
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # why the watcher thread stopped, if it did on its own
        self._embed_lock = threading.Lock()
        self._embed_waiting: set[str] = set()
        self._embed_queued = False
        self._settling: dict[str, float] = {}  # new note without a sidecar -> when it stops waiting

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, daemon=True, name="sunlib-watch")
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _serve(self) -> None:
        try:
            self.run()
        except Exception as exc:  # e.g. the system's limit of watches: say so, never a traceback
            self.error = f"{type(exc).__name__}: {exc}"
            sys.stderr.write(f"warning: the vault watcher stopped: {self.error}\n")
        finally:
            self.ready.set()  # nobody waits for a watcher that is gone
            self.library.release_thread()

    def run(self) -> None:
        """Watch until ``stop`` (or Ctrl-C, which is raised to the caller)."""
        for changes in watchfiles.watch(
            self.vault,
            watch_filter=self._wanted,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self._stop,
            rust_timeout=POLL_MS,
            yield_on_timeout=True,
            raise_interrupt=True,
        ):
            if not self.ready.is_set():
                if self._catch_up:  # what changed before the watches were in place
                    self._apply_all()
                self.ready.set()
            if changes:
                self.apply(changes)
            self.release_settled()

    def _wanted(self, change: watchfiles.Change, raw: str) -> bool:
        rel = _relative(self.vault, raw)
        return rel is not None and not ignored(rel)

    # -- batches ------------------------------------------------------------------------------

    def note_paths(self, changes: Iterable[tuple[watchfiles.Change, str]]) -> set[str]:
        """The vault-relative note paths a set of file events stands for."""
        out: set[str] = set()
        for _, raw in changes:
            rel = _relative(self.vault, raw)
            if rel is None or ignored(rel):
                continue
            name = rel.rsplit("/", 1)[-1]
            if name.endswith(SIDECAR_SUFFIX):
                out.add(rel[: -len(SIDECAR_SUFFIX)] + ".md")
            elif name.lower().endswith(".md"):
                out.add(rel)
            elif os.path.isdir(self.vault / rel):  # a folder moved in: its notes
                files, _ = walk_vault(self.vault / rel)
                out.update(f"{rel}/{vf.rel_path}" for vf in files)
                out.update(self.library.store.note_paths_under(rel))
            elif not os.path.lexists(self.vault / rel):  # gone: a folder's notes, if it was one
                out.update(self.library.store.note_paths_under(rel))
        return out

    def apply(self, changes: Iterable[tuple[watchfiles.Change, str]]) -> Batch | None:
        paths = self.hold_new_alone(self.note_paths(changes))
        return self.apply_paths(paths) if paths else None

    def hold_new_alone(self, paths: set[str]) -> set[str]:
        """``paths`` less the new notes that have no sidecar yet: those wait (``release_settled``)
        for ``sidecar_settle_s``. A path whose sidecar has come, or that is gone, goes now, and so
        does the whole batch when an indexed note leaves in it: a move, whose note keeps its id."""
        settle = self.library.settings.index.sidecar_settle_s
        if settle <= 0 or not paths:
            return paths
        known = self.library.store.note_states_of(sorted(paths))
        if any(not (self.vault / p).exists() for p in known):
            for path in paths:
                self._settling.pop(path, None)
            return paths
        now = time.monotonic()
        ready = set()
        for path in paths:
            alone = (self.vault / path).is_file() and not (self.vault / (path[:-3] + SIDECAR_SUFFIX)).exists()
            if path in known or not alone:
                self._settling.pop(path, None)
                ready.add(path)
            else:
                self._settling.setdefault(path, now + settle)
        if len(ready) < len(paths):
            self.board.queue(sorted(paths - ready), {})
        return ready

    def release_settled(self) -> Batch | None:
        """Index the new notes whose wait for a sidecar is over."""
        now = time.monotonic()
        due = [p for p, at in self._settling.items() if at <= now]
        for path in due:
            del self._settling[path]
        return self.apply_paths(due) if due else None

    def apply_paths(self, paths: Iterable[str]) -> Batch:
        """Sync some note paths (text phase now, vectors after) and report the batch."""
        t0 = time.perf_counter()
        wanted = sorted(set(paths))
        store = self.library.store
        acl_before = {f.path: f.acl for f in store.note_files(None, wanted)[0]}
        self.board.queue(wanted, acl_before)
        error = None
        try:
            # one indexer per index: another process's `sunlib index` finishes first
            with self.library.indexer_lock.held(), self.library.write_lock:
                report = sync_paths(store, self.vault, self.library.settings.index, wanted)
            failed = dict(report.failed)
        except Exception as exc:  # the watcher outlives a bad batch: a busy or full index
            report, error = IndexReport(), f"{type(exc).__name__}: {exc}"
            failed = dict.fromkeys(wanted, error)
        self.board.settle(wanted, failed, acl_before)
        batch = Batch(tuple(wanted), report, time.perf_counter() - t0, error)
        if report.added or report.changed or report.moved:
            self._want_vectors([p for p in wanted if p not in failed])
        if self._on_batch is not None:
            self._on_batch(batch)
        return batch

    def _apply_all(self) -> None:
        """Catch up with the whole vault: every file that changed since the index was last synced."""
        store = self.library.store
        files, problems = walk_vault(self.vault)
        present = {vf.rel_path for vf in files}
        states = store.note_states()
        stale = [vf.rel_path for vf in files if vf.rel_path not in states or states[vf.rel_path].mtime != vf.mtime]
        gone = [p for p in states if p not in present]
        if stale or gone or problems:
            self.apply_paths([*stale, *gone, *(p.rel_path for p in problems if p.rel_path.endswith(".md"))])

    # -- vectors ------------------------------------------------------------------------------

    def _want_vectors(self, paths: list[str]) -> None:
        if self._vectors is None:
            return
        with self._embed_lock:
            self._embed_waiting.update(paths)
            if self._embed_queued:
                return  # the run that waits will embed these too
            self._embed_queued = True
        try:
            self._vectors(self._embed)
        except Exception:  # the worker service refused (full, closing): the next batch asks again
            with self._embed_lock:
                self._embed_queued = False

    def _embed(self) -> None:
        with self._embed_lock:
            paths, self._embed_waiting, self._embed_queued = self._embed_waiting, set(), False
        try:
            self.library.embed()
        finally:
            self.board.touched(sorted(paths))
