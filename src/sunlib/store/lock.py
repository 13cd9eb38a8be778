"""One indexer per index: an advisory lock on a file beside the index (``sunlib.db.lock``).

Whatever writes the index in bulk holds it: ``sunlib index``, the server's rebuild and
vectors jobs, ``sunlib doctor --repair``, and the notes API's writes (briefly). It is
``flock`` on a descriptor this process keeps open, so the kernel drops it when the holder
exits in any way, SIGKILL included: a killed indexer never leaves it held, and there is no
stale-lock file to clean. The file holds the holder's pid, for the message of whoever waits.

Across processes it is exclusive. Inside one process it is shared by every thread (a count
of holders): the threads of one server already take turns through the library's write lock
(text) and the worker lane (vectors), and a note write must not wait for the rebuild job
that runs beside it. Where ``fcntl`` is missing (Windows) there is no lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import IndexerBusy

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

POLL_S = 0.05  # how often a waiter tries the lock again
LOCK_SUFFIX = ".lock"

OnWait = Callable[[int | None], None]  # told once, with the holder's pid (None: unknown), when a wait begins


class IndexerLock:
    """The lock of one index file; get it with ``indexer_lock(db_path)``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._holders = 0

    @contextlib.contextmanager
    def held(self, wait: float | None = None, on_wait: OnWait | None = None) -> Iterator[None]:
        """Hold the lock for a block. ``wait``: seconds to wait for another process's indexer
        (None: as long as it takes); then IndexerBusy, with nothing done."""
        self.acquire(wait, on_wait)
        try:
            yield
        finally:
            self.release()

    def acquire(self, wait: float | None = None, on_wait: OnWait | None = None) -> None:
        deadline = None if wait is None else time.monotonic() + wait
        told = False
        while True:
            with self._mutex:
                if self._holders or self._try():
                    self._holders += 1
                    return
            holder = self.holder()
            if deadline is not None and time.monotonic() >= deadline:
                who = f" (pid {holder})" if holder else ""
                raise IndexerBusy(f"another indexer{who} is writing this index; try again when it is done")
            if not told and on_wait is not None:
                on_wait(holder)
                told = True
            time.sleep(POLL_S)

    def release(self) -> None:
        with self._mutex:
            self._holders -= 1
            if self._holders == 0 and self._fd is not None and fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    @property
    def held_here(self) -> bool:
        """True while a thread of this process holds the lock."""
        return self._holders > 0

    def holder(self) -> int | None:
        """The pid written by the last process that took the lock (the holder, while it is held)."""
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def _try(self) -> bool:
        if fcntl is None:
            return True
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        with contextlib.suppress(OSError):  # the pid is for messages only
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return True


_LOCKS: dict[Path, IndexerLock] = {}
_LOCKS_MUTEX = threading.Lock()


def indexer_lock(db_path: Path) -> IndexerLock:
    """The one IndexerLock of this process for an index file (its folder must exist)."""
    path = Path(os.path.abspath(db_path))
    path = path.with_name(path.name + LOCK_SUFFIX)
    with _LOCKS_MUTEX:
        lock = _LOCKS.get(path)
        if lock is None:
            lock = _LOCKS[path] = IndexerLock(path)
        return lock


# While a process has an index open it holds a shared flock on ``sunlib.db.inuse``; moving the
# index (``library.location``) needs it exclusively, so an index is never moved from under a
# process that reads or writes it. Counted per connection: the last one closed lets it go.
IN_USE_SUFFIX = ".inuse"
_IN_USE: dict[Path, tuple[int, int]] = {}  # lock file -> (descriptor, open connections)


def _in_use_path(db_path: Path) -> Path:
    path = Path(os.path.abspath(db_path))
    return path.with_name(path.name + IN_USE_SUFFIX)


def mark_in_use(db_path: Path) -> None:
    """Say that this process opened a connection to the index ``db_path`` (its folder exists)."""
    path = _in_use_path(db_path)
    with _LOCKS_MUTEX:
        if path in _IN_USE:
            fd, count = _IN_USE[path]
            _IN_USE[path] = (fd, count + 1)
            return
        if fcntl is None:
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        deadline = time.monotonic() + 10.0  # a move under way takes seconds; then open regardless
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(POLL_S)
        _IN_USE[path] = (fd, 1)


def mark_closed(db_path: Path) -> None:
    """Say that this process closed a connection it marked with ``mark_in_use``."""
    path = _in_use_path(db_path)
    with _LOCKS_MUTEX:
        if path not in _IN_USE:
            return
        fd, count = _IN_USE[path]
        if count > 1:
            _IN_USE[path] = (fd, count - 1)
            return
        del _IN_USE[path]
        os.close(fd)  # drops the shared lock


@contextlib.contextmanager
def sole_user(db_path: Path) -> Iterator[bool]:
    """Yield True while no other process has the index open (and none can open it), else False.
    A process that has it open itself is another user too: flock is per open file."""
    path = _in_use_path(db_path)
    if fcntl is None:
        yield False  # no way to know: never move
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
