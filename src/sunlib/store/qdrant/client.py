"""One Qdrant client per location in a process, and the collection calls the indexes share.

A location is a server (``url``) or qdrant-client's local mode (a folder, or ":memory:").
Local mode keeps its folder locked by one client, so every store (one per thread) over the
same folder shares one client, counted, and closed with the last store; its calls are
serialised by a lock (local mode is not written for concurrent callers). A server client
is shared the same way (httpx pools its connections) without the lock.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ...errors import ConfigError, StoreBusy
from .points import FILTER_FIELDS

SCROLL_PAGE = 1000  # points per scroll request when reading a whole collection
# A collection of payloads only (notes, meta, runs) still declares one vector: qdrant-edge refuses a
# shard without any (qdrant-client's local mode and a server accept none). It is a sparse vector no
# point ever carries, so it costs nothing.
UNUSED_VECTOR = "unused"


@dataclass(frozen=True)
class Location:
    """Where the collections live: ``url`` (a server) or ``path`` (local mode; ":memory:" too)."""

    url: str = ""
    path: str = ""
    api_key: str = ""
    engine: str = "qdrant-client"  # for a path: "qdrant-client" (its local mode) or "qdrant-edge" (in-process)
    # (the settings default to qdrant-edge; this default keeps a bare Location on the pure-Python engine)
    # Create the payload indexes of FILTER_FIELDS with each collection (a server, qdrant-edge). They
    # speed filtered search up at scale and change no result; each costs ~60 ms to create.
    payload_indexes: bool = True

    @property
    def key(self) -> str:
        return f"url:{self.url}" if self.url else f"path:{self.engine}:{self.path}"

    @property
    def local(self) -> bool:
        return not self.url


class Shared:
    """A client and the lock its local mode needs."""

    def __init__(self, location: Location) -> None:
        self.location = location
        self.client: Any
        if location.url:
            # no version probe at open (one more request per connection); the client is pinned
            self.client = QdrantClient(
                url=location.url, api_key=location.api_key or None, timeout=30, check_compatibility=False
            )
        elif location.engine == "qdrant-edge" and location.path:
            from .edge import EdgeClient

            self.client = EdgeClient(location.path)
        elif location.path == ":memory:":
            self.client = QdrantClient(location=":memory:")
        elif location.path:
            self.client = QdrantClient(path=location.path)
        else:
            raise ConfigError("[store] backend 'qdrant' needs a url or a path")
        self.users = 0
        self._lock: threading.RLock | None = threading.RLock() if location.local else None

    @contextlib.contextmanager
    def call(self) -> Iterator[Any]:
        """The client, for one call: local mode's lock held; a server that does not answer (or
        answers with an error) becomes StoreBusy, as a busy SQLite file does."""
        try:
            if self._lock is None:
                yield self.client
                return
            with self._lock:
                yield self.client
        except (ResponseHandlingException, UnexpectedResponse, httpx.HTTPError, OSError) as exc:
            where = self.location.url or self.location.path
            raise StoreBusy(f"Qdrant at {where} did not answer ({exc}); try again") from None


_CLIENTS: dict[str, Shared] = {}
_CLIENTS_LOCK = threading.Lock()


def acquire(location: Location) -> Shared:
    with _CLIENTS_LOCK:
        shared = _CLIENTS.get(location.key)
        if shared is None:
            shared = _CLIENTS[location.key] = Shared(location)
        shared.users += 1
        return shared


def release(shared: Shared) -> None:
    with _CLIENTS_LOCK:
        shared.users -= 1
        if shared.users > 0 or _CLIENTS.get(shared.location.key) is not shared:
            return
        del _CLIENTS[shared.location.key]
    shared.client.close()


def ensure_collection(
    shared: Shared,
    name: str,
    dense: models.VectorParams | None = None,
    sparse: models.SparseVectorParams | None = None,
    extra_keywords: Sequence[str] = (),
    indexes: Mapping[str, models.PayloadSchemaType] = FILTER_FIELDS,
) -> bool:
    """Create a collection with its payload indexes unless it exists; True when created. Without
    ``dense`` and ``sparse`` it holds payloads only (see ``UNUSED_VECTOR``)."""
    with shared.call() as client:
        if client.collection_exists(name):
            return False
        sparse_config: dict[str, models.SparseVectorParams] | None
        if dense is None and sparse is None:
            sparse_config = {UNUSED_VECTOR: models.SparseVectorParams()}
        else:
            sparse_config = {"bm25": sparse} if sparse is not None else None
        client.create_collection(
            name, vectors_config={"dense": dense} if dense is not None else {}, sparse_vectors_config=sparse_config
        )
        if not shared.location.payload_indexes or (shared.location.local and shared.location.engine != "qdrant-edge"):
            return True  # qdrant-client's local mode scans every point and warns that indexes do nothing
        fields: dict[str, Any] = {**indexes, **{k: models.PayloadSchemaType.KEYWORD for k in extra_keywords}}
        for field, schema in fields.items():
            client.create_payload_index(name, field, field_schema=schema, wait=True)
        return True


def scroll_all(
    shared: Shared, name: str, fields: Sequence[str] | bool, where: models.Filter | None = None
) -> Iterator[models.Record]:
    """Every point of a collection (those ``where`` lets through) with some payload fields (True:
    all of them), page by page."""
    offset: Any = None
    payload: Any = fields if isinstance(fields, bool) else list(fields)
    while True:
        with shared.call() as client, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            points, offset = client.scroll(
                name, scroll_filter=where, limit=SCROLL_PAGE, offset=offset, with_payload=payload, with_vectors=False
            )
        yield from points
        if offset is None:
            return


def retrieve(shared: Shared, name: str, ids: Sequence[str], fields: Sequence[str] | bool = True) -> list[models.Record]:
    """Some points by id (those that exist), with some payload fields (True: all of them)."""
    if not ids:
        return []
    payload: Any = fields if isinstance(fields, bool) else list(fields)
    with shared.call() as client:
        return list(client.retrieve(name, list(ids), with_payload=payload, with_vectors=False))


def upsert_points(shared: Shared, name: str, points: Sequence[models.PointStruct], batch: int = 256) -> None:
    for start in range(0, len(points), batch):
        with shared.call() as client:
            client.upsert(name, points=list(points[start : start + batch]), wait=True)


def delete_points(shared: Shared, name: str, ids: Sequence[str]) -> None:
    if ids:
        with shared.call() as client:
            client.delete(name, points_selector=models.PointIdsList(points=list(ids)))


def count(shared: Shared, name: str, where: models.Filter | None = None) -> int:
    with shared.call() as client:
        return int(client.count(name, count_filter=where, exact=True).count)
