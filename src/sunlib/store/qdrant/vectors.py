"""The Qdrant VectorIndex: one collection per embedding space, ACL and filters inside the KNN.

Each space is a collection ``<prefix>_<hash of the space name>`` with one dense vector
("dense", cosine) per chunk and the chunk's filter payload (``points.filter_payload``) plus
the stamp of the chunk it was computed from. The KNN's payload filter is the caller's
Visibility, so Qdrant's filtered HNSW search counts visible points only (k = 1 cannot be
crowded out). Stamps work as in the SQLite backend: a vector for a chunk that is gone or was
rewritten since is refused, a point whose stamp is not its chunk's is never returned and
``reconcile`` removes it, and ``pending`` lists the chunks without a current point.

What it knows of the chunks besides Qdrant comes from a ``ChunkView``: on the indexing host the
SQLite file (``source.SqliteView``: the chunks, their stamps, the embedding cache, vectors by text
hash so re-chunking does not re-embed, and which spaces exist, meta ``qdrant_spaces``); on a
replica the collections themselves (``replica.ReplicaView``, read-only). Every write advances
the write generation, so every process's cached view of a space (``ledger``) is read again after it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from qdrant_client import models

from ...ingest.ids import sha256_hex
from ..db import batches
from ..protocols import PendingChunk, Reconciled, Space, SpaceInfo, VectorItem, Visibility
from .client import Shared, ensure_collection, scroll_all
from .lexical import TIE_MARGIN, current_hits
from .points import compile_filter, point_id

DENSE_VECTOR = "dense"
WRITE_BATCH = 256


class ChunkView(Protocol):
    """The chunks as the vectors see them (their stamps, order and visibility), the registered
    spaces and the embedding cache: the SQLite file on the indexing host, the collections on a
    replica (whose writes raise ``StoreReadOnly``)."""

    def generation(self) -> int: ...
    def stamps(self) -> Mapping[str, int]: ...
    def chunk_order(self) -> list[tuple[str, int]]: ...
    def visible_ids(self, visibility: Visibility) -> list[str]: ...
    def pending_chunks(self, chunk_ids: Sequence[str]) -> list[PendingChunk]: ...
    def filter_payloads(self, chunk_ids: Sequence[str]) -> dict[str, tuple[int, dict[str, Any]]]: ...
    def spaces(self) -> list[Space]: ...
    def register_space(self, space: Space) -> None: ...
    def advance(self) -> None: ...
    def cache(self, space: Space, items: Sequence[VectorItem]) -> None: ...
    def cached(self, space: Space, hashes: Iterable[str]) -> dict[str, np.ndarray]: ...


class QdrantVectors:
    def __init__(self, shared: Shared, prefix: str, view: ChunkView) -> None:
        self.shared, self.prefix, self.view = shared, prefix, view
        self._ledgers: dict[tuple[int, str], dict[str, int]] = {}
        self._exists: tuple[int, list[Space]] = (-1, [])

    def collection(self, space: Space) -> str:
        return f"{self.prefix}_{sha256_hex(space.name)[:12]}"

    # -- spaces --------------------------------------------------------------------------------

    def present(self) -> list[Space]:
        """The spaces registered in the index whose collection exists (a new or wiped cluster has
        none: their vectors are pending again), looked up once per write generation."""
        generation = self.view.generation()
        if self._exists[0] != generation:
            with self.shared.call() as client:
                found = [s for s in self.view.spaces() if client.collection_exists(self.collection(s))]
            self._exists = (generation, found)
        return self._exists[1]

    def ensure_space(self, space: Space) -> None:
        ensure_collection(
            self.shared,
            self.collection(space),
            dense=models.VectorParams(size=space.dim, distance=models.Distance.COSINE),
        )
        if space not in self.view.spaces():
            self.view.register_space(space)
        self._exists = (-1, [])  # the collection may be new: look again

    def has_space(self, space: Space) -> bool:
        return space in self.present()

    def spaces(self) -> list[SpaceInfo]:
        out = []
        for s in self.present():
            with self.shared.call() as client:
                n = int(client.count(self.collection(s), exact=True).count)
            out.append(SpaceInfo(s.name, s.provider, s.model, s.dim, s.chunker, n))
        return out

    # -- writes --------------------------------------------------------------------------------

    def upsert(self, space: Space, items: Sequence[VectorItem], cache: bool = True) -> int:
        """Store the vectors whose chunk still has the item's stamp; returns how many were stored."""
        if cache and items:
            self.view.cache(space, items)
        wanted = {i.chunk_id: i for i in items}
        sources = self.view.filter_payloads(list(wanted))
        points = [
            models.PointStruct(
                id=point_id(i.chunk_id),
                vector={DENSE_VECTOR: np.asarray(i.vector, np.float32).tolist()},
                payload={**sources[i.chunk_id][1], "embed_hash": i.embed_hash},
            )
            for i in wanted.values()
            if i.chunk_id in sources and sources[i.chunk_id][0] == i.stamp
        ]
        for start in range(0, len(points), WRITE_BATCH):
            with self.shared.call() as client:
                client.upsert(self.collection(space), points=points[start : start + WRITE_BATCH], wait=True)
        if points:
            self._advance()
        return len(points)

    def delete(self, space: Space, chunk_ids: Sequence[str]) -> None:
        if not chunk_ids or not self.has_space(space):
            return
        self.drop(space, chunk_ids)
        self._advance()

    def drop(self, space: Space, chunk_ids: Sequence[str]) -> None:
        """Delete some chunks' points (no generation bump: the caller's write does that)."""
        for batch in batches(list(chunk_ids)):
            with self.shared.call() as client:
                client.delete(
                    self.collection(space), points_selector=models.PointIdsList(points=[point_id(c) for c in batch])
                )

    def _advance(self) -> None:
        self.view.advance()

    def reconcile(self, space: Space) -> Reconciled:
        """Remove points whose chunk is gone or carries another stamp; report what is pending."""
        if not self.has_space(space):
            return Reconciled(space.name, 0, 0, self.count_pending(space)[0])
        stamps, held = self.view.stamps(), self.ledger(space)
        orphans = [c for c in held if c not in stamps]
        stale = [c for c, s in held.items() if c in stamps and stamps[c] != s]
        if orphans or stale:
            self.delete(space, orphans + stale)
        return Reconciled(space.name, len(orphans), len(stale), self.count_pending(space)[0])

    # -- reads ---------------------------------------------------------------------------------

    def ledger(self, space: Space) -> dict[str, int]:
        """(chunk_id -> stamp) of every point of a space, read once per write generation."""
        key = (self.view.generation(), space.name)
        found = self._ledgers.get(key)
        if found is None:
            found = {}
            for p in scroll_all(self.shared, self.collection(space), ["chunk_id", "stamp"]):
                payload = p.payload or {}
                found[str(payload.get("chunk_id"))] = int(payload.get("stamp", -1))
            self._ledgers = {k: v for k, v in self._ledgers.items() if k[0] == key[0]}
            self._ledgers[key] = found
        return found

    def knn(self, space: Space, query: np.ndarray, visibility: Visibility, k: int) -> list[tuple[str, float]]:
        """(chunk_id, cosine similarity) best first, among visible chunks only (filter inside the KNN)."""
        where = compile_filter(visibility)
        if where is None or k <= 0 or not self.has_space(space):
            return []
        with self.shared.call() as client, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = client.query_points(
                self.collection(space),
                query=np.asarray(query, np.float32).tolist(),
                using=DENSE_VECTOR,
                query_filter=where,
                limit=k + TIE_MARGIN,
                with_payload=["chunk_id", "stamp"],
            ).points
        return current_hits(found, self.view.stamps(), k)

    def _missing(self, space: Space, order: Iterable[tuple[str, int]]) -> list[str]:
        held = self.ledger(space) if self.has_space(space) else {}
        return [c for c, s in order if held.get(c) != s]

    def pending(self, space: Space, limit: int | None = None, first: Sequence[str] = ()) -> list[PendingChunk]:
        """Chunks without a current vector: those of ``first``, then the notes changed last first."""
        ids = self._missing(space, self.view.chunk_order())
        if first:
            wanted = set(first)
            ids = [c for c in ids if c in wanted] + [c for c in ids if c not in wanted]
        if limit is not None:
            ids = ids[: max(0, int(limit))]
        return self.view.pending_chunks(ids)

    def count_pending(self, space: Space, visibility: Visibility | None = None) -> tuple[int, int]:
        """(chunks without a current vector, all chunks), among visible chunks when a visibility is given."""
        stamps = self.view.stamps()
        ids = list(stamps) if visibility is None else self.view.visible_ids(visibility)
        order = [(c, stamps[c]) for c in ids if c in stamps]
        return len(self._missing(space, order)), len(order)

    def still_pending(self, space: Space, chunks: Sequence[PendingChunk]) -> list[PendingChunk]:
        """Those of ``chunks`` whose chunk still has the listed stamp (one SQLite lookup by id) and no
        point of that stamp (one retrieve by id): never a scroll of the collection."""
        ids = list(dict.fromkeys(c.chunk_id for c in chunks))
        current = {p.chunk_id: p.stamp for p in self.view.pending_chunks(ids)} if ids else {}
        alive = [c for c in chunks if current.get(c.chunk_id) == c.stamp]
        if not alive or not self.has_space(space):
            return alive
        held: dict[str, int] = {}
        for batch in batches(list(dict.fromkeys(c.chunk_id for c in alive))):
            with self.shared.call() as client:
                records = client.retrieve(
                    self.collection(space), [point_id(c) for c in batch], with_payload=["chunk_id", "stamp"]
                )
            for r in records:
                payload: dict[str, Any] = r.payload or {}
                held[str(payload.get("chunk_id"))] = int(payload.get("stamp", -1))
        return [c for c in alive if held.get(c.chunk_id) != c.stamp]

    def fully_embedded(self, space: Space) -> bool:
        return self.has_space(space) and not self._missing(space, self.view.stamps().items())

    def without_vectors(self, space: Space, chunk_ids: Sequence[str]) -> set[str]:
        wanted = set(chunk_ids)
        if not wanted or not self.has_space(space):
            return wanted
        stamps = self.view.stamps()
        return set(self._missing(space, [(c, stamps.get(c, -2)) for c in wanted]))

    def vectors_for(self, space: Space, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        if not chunk_ids or not self.has_space(space):
            return {}
        stamps, out = self.view.stamps(), {}
        for batch in batches(list(dict.fromkeys(chunk_ids))):
            with self.shared.call() as client:
                records = client.retrieve(
                    self.collection(space), [point_id(c) for c in batch], with_payload=True, with_vectors=[DENSE_VECTOR]
                )
            for r in records:
                payload: dict[str, Any] = r.payload or {}
                vec = (r.vector or {}).get(DENSE_VECTOR) if isinstance(r.vector, dict) else None
                if vec is not None and stamps.get(str(payload.get("chunk_id"))) == payload.get("stamp"):
                    out[str(payload["chunk_id"])] = np.asarray(vec, dtype=np.float32)
        return out

    def cached_vectors(self, space: Space, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        return self.view.cached(space, hashes)

    def all_vectors(self, space: Space) -> tuple[list[str], np.ndarray]:
        """Every current (chunk_id, vector) of a space, in reading order (``sunlib migrate``)."""
        order = [c for c, s in self.view.chunk_order() if self.ledger(space).get(c) == s]
        found = self.vectors_for(space, order)
        ids = [c for c in order if c in found]
        matrix = np.stack([found[c] for c in ids]) if ids else np.zeros((0, space.dim), np.float32)
        return ids, matrix
