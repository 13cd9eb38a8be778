"""What the indexing host publishes to Qdrant for replicas, beside the chunk and vector points.

A replica (``replica.QdrantReplica``) has no SQLite file, so the indexer also keeps:

* ``<prefix>_notes``: one point per note (``points.note_payload``: path, title, metadata, links,
  content hash, mtime, chunker, ACL and tags in stored order, chunk ids in reading order);
* ``<prefix>_meta``: one point holding the SQLite ``meta`` table as it was at the last write
  that reached Qdrant (the write generation, ``index_uuid``, the registered spaces, avgdl, the
  calibrations) and the embedding cache's size.

Both are payloads only (``client.UNUSED_VECTOR``). They follow the rules of the chunk points:
written after the SQLite transaction commits (``QdrantStore.flush``), the meta last, so a
replica that sees a new generation sees the points written before it; ``reconcile`` rewrites
whatever a crash left behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from qdrant_client import models

from .client import Shared, delete_points, ensure_collection, retrieve, scroll_all, upsert_points
from .points import NOTE_FIELDS, POINT_NAMESPACE, NoteSource, note_payload, note_point_id

META_POINT = str(uuid.uuid5(POINT_NAMESPACE, "meta"))


def notes_collection(prefix: str) -> str:
    return f"{prefix}_notes"


def meta_collection(prefix: str) -> str:
    return f"{prefix}_meta"


def ensure_published(shared: Shared, prefix: str) -> None:
    ensure_collection(shared, notes_collection(prefix), indexes=NOTE_FIELDS)
    ensure_collection(shared, meta_collection(prefix), indexes={})


def write_notes(shared: Shared, prefix: str, notes: Sequence[NoteSource]) -> None:
    points = [models.PointStruct(id=note_point_id(n.note_id), vector={}, payload=note_payload(n)) for n in notes]
    upsert_points(shared, notes_collection(prefix), points)


def delete_notes(shared: Shared, prefix: str, note_ids: Sequence[str]) -> None:
    delete_points(shared, notes_collection(prefix), [note_point_id(n) for n in note_ids])


def notes_ledger(shared: Shared, prefix: str) -> dict[str, float]:
    """(note_id -> indexed_at) of every published note: what reconcile diffs with SQLite."""
    out: dict[str, float] = {}
    for p in scroll_all(shared, notes_collection(prefix), ["note_id", "indexed_at"]):
        payload = p.payload or {}
        out[str(payload.get("note_id"))] = float(payload.get("indexed_at", "-1"))
    return out


@dataclass(frozen=True)
class PublishedMeta:
    """The indexing host's meta table and embedding cache size, as last published."""

    meta: Mapping[str, str] = field(default_factory=dict)
    cached_embeddings: int = 0

    @property
    def generation(self) -> int:
        return int(self.meta.get("generation", "0") or 0)


def write_meta(shared: Shared, prefix: str, meta: Mapping[str, str], cached_embeddings: int) -> None:
    payload: dict[str, Any] = {"meta": dict(meta), "cached_embeddings": cached_embeddings}
    upsert_points(shared, meta_collection(prefix), [models.PointStruct(id=META_POINT, vector={}, payload=payload)])


def read_meta(shared: Shared, prefix: str) -> PublishedMeta | None:
    """The published meta; None when nothing was published under this prefix."""
    found = retrieve(shared, meta_collection(prefix), [META_POINT])
    if not found:
        return None
    payload = found[0].payload or {}
    meta = {str(k): str(v) for k, v in (payload.get("meta") or {}).items()}
    return PublishedMeta(meta, int(payload.get("cached_embeddings", 0)))
