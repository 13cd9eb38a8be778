"""Reads never serve a note in a state its file no longer has.

The watcher (``sunlib.sync.watch``) re-indexes a saved file within a second, but a read can land in
that second, or on a server that runs without the watcher. So every read path that returns
notes (search hits, and through search the ask pipeline's evidence; the notes listing; a
single note, which compares hashes itself) checks the notes *in its result* against their
files before it answers:

1. ``stat`` the note and its sidecar: (mtime in ns, ctime in ns, size, inode) of each, the
   sidecar's absence included. ctime counts because a tool can put an old mtime back after an
   in-place rewrite of the same size (``touch -d``, ``os.utime``): only the kernel sets ctime.
   That is two system calls per note in the result, never a walk.
2. A signature seen before for the same indexed version (content hash) is fresh: the check
   ends there. The cache holds one entry per path and is shared by every thread and every
   library derived from one index; a new version of the note (a new content hash, i.e. a new
   write generation of that note) simply misses it.
3. Otherwise the file's bytes are hashed as the indexer hashes them and compared with the
   indexed hash. Equal: the signature is remembered. Different: the note is stale.

A stale note whose file exists is re-indexed at once (``indexing.sync_paths`` under the write
lock, as a note write does), and the read runs again. A note whose file is gone, or that is
still stale after the sync (a file that cannot be indexed keeps its old version), is
*withheld* from the answer: it is left out rather than shown under a state its file no longer
has. A gone file is not synced here: that is the watcher's work, which sees both sides of a
move and keeps the note's id.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..config import IndexSettings
from ..errors import StoreError
from ..ingest.ids import sha256_hex
from ..ingest.vault import SIDECAR_SUFFIX
from ..store import DocumentStore
from .indexing import sync_paths

T = TypeVar("T")
Stamp = tuple[int, int, int, int]  # (mtime ns, ctime ns, size, inode)


@dataclass(frozen=True)
class FileSignature:
    note: Stamp
    sidecar: Stamp | None


@dataclass(frozen=True)
class Staleness:
    changed: frozenset[str]  # files that differ from their indexed version
    missing: frozenset[str]  # indexed notes whose file is gone (or is no longer a regular file)

    @property
    def any(self) -> bool:
        return bool(self.changed or self.missing)


def _stamp(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


def signature(vault: Path, rel: str) -> FileSignature | None:
    """The note file's signature, or None when it is not a regular file any more."""
    path = vault / rel
    note = _stamp(path)
    if note is None:
        return None
    return FileSignature(note, _stamp(path.with_name(path.name[:-3] + SIDECAR_SUFFIX)))


def _content_hash(vault: Path, rel: str, sig: FileSignature) -> str | None:
    """The hash the indexer gives this file and its sidecar (``ingest.file_hash``)."""
    path = vault / rel
    try:
        parts = [path.read_bytes()]
        if sig.sidecar is not None:
            parts.append(path.with_name(path.name[:-3] + SIDECAR_SUFFIX).read_bytes())
    except OSError:
        return None
    return sha256_hex(*parts)


class Freshness:
    """The verified-signature cache and the check; one per index file (``Library.freshness``)."""

    def __init__(self) -> None:
        self._verified: dict[str, tuple[str, FileSignature]] = {}
        self._lock = threading.Lock()

    def check(self, store: DocumentStore, vault: Path, paths: Sequence[str]) -> Staleness:
        """Which of some indexed paths no longer match their files (see the module docstring)."""
        wanted = list(dict.fromkeys(paths))
        if not wanted:
            return Staleness(frozenset(), frozenset())
        states = store.note_states_of(wanted)
        changed, missing = set(), set()
        for rel in wanted:
            state = states.get(rel)
            sig = signature(vault, rel) if state is not None else None
            if state is None or sig is None:
                missing.add(rel)  # gone from the index meanwhile, or from the disk
                continue
            with self._lock:
                known = self._verified.get(rel)
            if known == (state.content_hash, sig):
                continue
            if _content_hash(vault, rel, sig) == state.content_hash:
                with self._lock:
                    self._verified[rel] = (state.content_hash, sig)
            else:
                changed.add(rel)
        return Staleness(frozenset(changed), frozenset(missing))


@dataclass(frozen=True)
class FreshRead:
    """What ``fresh_read`` needs of a library (kept small so the check is easy to test)."""

    store: DocumentStore
    vault: Path
    settings: IndexSettings
    lock: threading.RLock
    freshness: Freshness
    # False on a read-only replica: its notes' files are on the indexing host, whose watcher and
    # indexer keep the collections in step with them; there is nothing here to compare with.
    check: bool = True


def fresh_read(ctx: FreshRead, read: Callable[[], T], paths_of: Callable[[T], Sequence[str]]) -> tuple[T, set[str]]:
    """Run ``read``; when some notes in its result changed on disk, re-index them and read again.

    Returns the result and the paths to withhold from it (gone, or still stale after a sync)."""
    result = read()
    if not ctx.check:
        return result, set()
    stale = ctx.freshness.check(ctx.store, ctx.vault, paths_of(result))
    if not stale.changed:
        return result, set(stale.missing)
    try:
        with ctx.lock:
            sync_paths(ctx.store, ctx.vault, ctx.settings, sorted(stale.changed))
    except (StoreError, OSError):  # a read-only or busy index: withhold rather than serve stale
        return result, set(stale.changed | stale.missing)
    result = read()
    again = ctx.freshness.check(ctx.store, ctx.vault, paths_of(result))
    return result, set(again.changed | again.missing)
