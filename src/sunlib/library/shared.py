"""What the libraries derived from one another share (``Shared``), and the one place that opens
the index (``open_store``).

``Library`` is the composition root: it builds the store connections, the embedders,
the ask pipeline and the rescoring embedder from its frozen settings, each once.
``Library.with_settings`` gives a new Library over the same index that shares a
``Shared``: the per-thread connections, the write lock and the parts built through
``Shared.part`` whose settings did not change (the embedders: a loaded model is not
loaded again for the same configuration).

Threads. Every thread reads through its own SQLite connection (``ThreadStores``; WAL
lets readers run while one writer commits). The write lock (``Shared.write_lock``)
orders note writes, syncs and the text phase of index jobs in this process; it is
never held across a provider call (embedding, LLM). Parts are built under a lock per
part, so two threads asking for one model at once load it once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ..config import StoreSettings
from ..errors import UserError
from ..store import SqliteStore
from ..store.lock import mark_closed, mark_in_use

if TYPE_CHECKING:
    from ..store.qdrant.replica import QdrantReplica

    # What a Library reads and writes through: the SQLite file (with Qdrant indexes beside it, or
    # not), or a read-only replica on the Qdrant collections alone.
    IndexStore: TypeAlias = SqliteStore | QdrantReplica

T = TypeVar("T")


def open_store(
    path: Path, dense_engine: str, backend: StoreSettings | None = None, lexical_engine: str = "fts5"
) -> IndexStore:
    """The one place that opens the index for a Library (a connection of its own).

    Connections with the numpy engine share one in-memory matrix per index, space and
    write generation (``store.numpy_vectors.SHARED``) instead of loading a copy each. With
    ``[store] backend = "qdrant"`` the SQLite file holds the notes and chunks and Qdrant
    the lexical and vector indexes (``store.qdrant``); with ``replica = true`` too, there is no
    SQLite file: a read-only replica answers from the Qdrant collections alone."""
    if backend is not None and backend.replica:
        from ..store.qdrant import open_qdrant_replica

        return open_qdrant_replica(path, backend)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the index folder {path.parent}: {exc.strerror or exc}") from None
    if backend is not None and backend.backend == "qdrant":
        from ..store.qdrant import open_qdrant_store

        return open_qdrant_store(path, backend)
    return SqliteStore(path, dense_engine, lexical_engine)


class ThreadStores:
    """One store (connection) per thread over one index file, opened on a thread's first use.

    ``current()`` is the calling thread's store. A part that lives across threads (a
    reranker bound to the index) holds this object instead: its attributes are those of
    the calling thread's store. Only its own thread closes a store (``release()``), or
    any thread once its owner has ended: at the next open and at ``close()``."""

    def __init__(
        self, path: Path, dense_engine: str, backend: StoreSettings | None = None, lexical_engine: str = "fts5"
    ) -> None:
        self.path, self.dense_engine, self.backend = path, dense_engine, backend
        self.lexical_engine = lexical_engine
        self._lock = threading.Lock()
        self._open: dict[int, tuple[threading.Thread, IndexStore]] = {}
        self._marks = backend is None or not backend.replica  # a replica has no index folder of its own

    def current(self) -> IndexStore:
        thread = threading.current_thread()
        entry = self._open.get(thread.ident or 0)
        if entry is not None and entry[0] is thread:
            return entry[1]
        with self._lock:
            self._close_ended()
        store = open_store(self.path, self.dense_engine, self.backend, self.lexical_engine)
        if self._marks:
            mark_in_use(self.path)  # while a connection is open, no other process moves the index
        with self._lock:
            self._open[thread.ident or 0] = (thread, store)
        return store

    def _closed(self, store: IndexStore) -> None:
        store.close()
        if self._marks:
            mark_closed(self.path)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.current(), name)

    def connections(self) -> int:
        """How many connections are open (one per thread that read since it started)."""
        with self._lock:
            return len(self._open)

    def release(self) -> None:
        """Close the calling thread's store, if it has one."""
        thread = threading.current_thread()
        with self._lock:
            entry = self._open.get(thread.ident or 0)
            if entry is not None and entry[0] is thread:
                del self._open[thread.ident or 0]
                self._closed(entry[1])

    def close(self) -> None:
        """Close the calling thread's store and those of ended threads. Another live thread
        may be in the middle of a read: its store closes when it releases it or ends."""
        self.release()
        with self._lock:
            self._close_ended()

    def _close_ended(self) -> None:
        for ident, (thread, store) in list(self._open.items()):
            if not thread.is_alive():
                del self._open[ident]
                self._closed(store)


class Shared:
    """What the libraries over one index file share: connections, the write lock, built parts."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        # An RLock: a note write re-reads its note under the lock and may sync it first.
        self.write_lock = threading.RLock()
        self._lock = threading.Lock()
        self._stores: dict[tuple[str, str, StoreSettings | None], ThreadStores] = {}
        self._parts: dict[Hashable, Any] = {}
        self._building: dict[Hashable, threading.Lock] = {}

    def stores(
        self, dense_engine: str, backend: StoreSettings | None = None, lexical_engine: str = "fts5"
    ) -> ThreadStores:
        with self._lock:
            key = (dense_engine, lexical_engine, backend)
            stores = self._stores.get(key)
            if stores is None:
                stores = self._stores[key] = ThreadStores(self.db_path, dense_engine, backend, lexical_engine)
            return stores

    def part(self, key: Hashable, build: Callable[[], T]) -> T:
        """The part built for ``key`` (built once, by the first thread that asks for it)."""
        with self._lock:
            if key in self._parts:
                return self._parts[key]
            turn = self._building.setdefault(key, threading.Lock())
        with turn:
            with self._lock:
                if key in self._parts:
                    return self._parts[key]
            value = build()
            with self._lock:
                self._parts[key] = value
                self._building.pop(key, None)
            return value

    def release_thread(self) -> None:
        """Close the calling thread's connections (a worker thread that ends calls it)."""
        with self._lock:
            all_stores = list(self._stores.values())
        for stores in all_stores:
            stores.release()

    def close(self) -> None:
        """Close the calling thread's connections and those of ended threads."""
        with self._lock:
            all_stores = list(self._stores.values())
        for stores in all_stores:
            stores.close()
