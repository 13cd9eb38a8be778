"""Qdrant's engine in-process (``qdrant-edge-py``): the few client calls the indexes make, on shards.

``EdgeClient(folder)`` answers the subset of ``QdrantClient`` that ``lexical.py``, ``vectors.py``
and ``client.py`` call (``collection_exists``, ``create_collection``, ``create_payload_index``,
``upsert``, ``delete``, ``count``, ``scroll``, ``retrieve``, ``query_points``), one
``EdgeShard`` per collection in a subfolder. The same Rust engine as a Qdrant server (HNSW,
sparse index with the IDF modifier, payload indexes, the IDF corpus), without a server: the
point of it is a fast local backend and a contract run against the real engine. Requests and
answers are converted between qdrant-client's models and qdrant-edge's own classes here only.
"""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import qdrant_edge as qe
from qdrant_client import models

# A shard builds its HNSW and sparse index only when its optimizer runs: after this many points written
# by this client, and when it closes after any write (the indexer's end), as a server's optimizer would.
OPTIMIZE_EVERY = 20_000

_SCHEMA = {
    models.PayloadSchemaType.KEYWORD: qe.PayloadSchemaType.Keyword,
    models.PayloadSchemaType.FLOAT: qe.PayloadSchemaType.Float,
}


@dataclass(frozen=True)
class _Count:
    count: int


@dataclass(frozen=True)
class _Points:
    points: list[Any]


def _condition(c: Any) -> qe.FieldCondition:
    if not isinstance(c, models.FieldCondition):
        raise ValueError(f"no qdrant-edge form for the condition {c!r}")
    if isinstance(c.match, models.MatchAny):
        values: Any = list(c.match.any)
        return qe.FieldCondition(c.key, match=qe.MatchAny(values))
    if isinstance(c.match, models.MatchValue):
        return qe.FieldCondition(c.key, match=qe.MatchValue(c.match.value))
    if isinstance(c.range, models.Range):
        r = c.range
        return qe.FieldCondition(c.key, range=qe.RangeFloat(gte=r.gte, gt=r.gt, lte=r.lte, lt=r.lt))
    raise ValueError(f"no qdrant-edge form for the condition {c!r}")


def edge_filter(f: models.Filter | None) -> qe.Filter | None:
    """qdrant-client's Filter (the conditions ``points.compile_filter`` makes) as qdrant-edge's."""
    if f is None:
        return None
    must: list[Any] = f.must if isinstance(f.must, list) else [f.must] if f.must is not None else []
    return qe.Filter(must=[_condition(c) for c in must])


def _vector(v: Any) -> Any:
    if isinstance(v, models.SparseVector):
        return qe.SparseVector(list(v.indices), list(v.values))
    return list(v)


def _named(vector: Any) -> dict[str, Any]:
    """A point's named vectors (the indexes always name theirs: "dense", "bm25")."""
    return dict(vector) if isinstance(vector, dict) else {}


class EdgeClient:
    """One folder of shards, one shard per collection, opened on first use."""

    def __init__(self, folder: str) -> None:
        self.root = Path(folder)
        self.root.mkdir(parents=True, exist_ok=True)
        # One process per folder (shards are not written for two): an flock held while open.
        self._owner = os.open(self.root / ".sunlib-edge.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._owner)
            raise RuntimeError(
                f"the Qdrant folder {folder} is open in another process; use a Qdrant server ([store] url) to"
                " share one index between processes"
            ) from None
        self._shards: dict[str, qe.EdgeShard] = {}
        self._written: dict[str, int] = {}  # points written per collection since its last optimization
        self._lock = threading.Lock()

    def _shard(self, name: str) -> qe.EdgeShard:
        with self._lock:
            shard = self._shards.get(name)
            if shard is None:
                shard = self._shards[name] = qe.EdgeShard.load(str(self.root / name))
            return shard

    def collection_exists(self, name: str) -> bool:
        return name in self._shards or (self.root / name).is_dir()

    def create_collection(
        self, name: str, vectors_config: dict[str, models.VectorParams], sparse_vectors_config: Any = None
    ) -> None:
        dense = {k: qe.EdgeVectorParams(v.size, qe.Distance.Cosine) for k, v in vectors_config.items()}
        sparse = {
            k: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf if v.modifier == models.Modifier.IDF else None)
            for k, v in (sparse_vectors_config or {}).items()
        }
        config = qe.EdgeConfig(vectors=dense or None, sparse_vectors=sparse or None)
        with self._lock:
            self._shards[name] = qe.EdgeShard.create(str(self.root / name), config)

    def create_payload_index(self, name: str, field: str, field_schema: Any, wait: bool = True) -> None:
        self._shard(name).update(qe.UpdateOperation.create_field_index(field, _SCHEMA[field_schema]))

    def upsert(self, name: str, points: list[models.PointStruct], wait: bool = True) -> None:
        edge = [qe.Point(str(p.id), {k: _vector(v) for k, v in _named(p.vector).items()}, p.payload) for p in points]
        shard = self._shard(name)
        shard.update(qe.UpdateOperation.upsert_points(edge))
        self._written[name] = self._written.get(name, 0) + len(edge)
        if self._written[name] >= OPTIMIZE_EVERY:
            shard.optimize()
            self._written[name] = 0

    def delete(self, name: str, points_selector: models.PointIdsList) -> None:
        self._shard(name).update(qe.UpdateOperation.delete_points([str(i) for i in points_selector.points]))

    def count(self, name: str, count_filter: models.Filter | None = None, exact: bool = True) -> _Count:
        return _Count(int(self._shard(name).count(qe.CountRequest(exact=True, filter=edge_filter(count_filter)))))

    def scroll(
        self,
        name: str,
        limit: int,
        offset: Any = None,
        with_payload: Any = True,
        with_vectors: Any = False,
        scroll_filter: models.Filter | None = None,
    ) -> tuple[list[Any], Any]:
        request = qe.ScrollRequest(
            offset=offset,
            limit=limit,
            filter=edge_filter(scroll_filter),
            with_payload=with_payload,
            with_vector=with_vectors,
        )
        return self._shard(name).scroll(request)

    def retrieve(self, name: str, ids: list[str], with_payload: Any = True, with_vectors: Any = False) -> list[Any]:
        point_ids: list[Any] = list(ids)
        return self._shard(name).retrieve(point_ids, with_payload=with_payload, with_vector=with_vectors)

    def query_points(
        self,
        name: str,
        query: Any,
        using: str,
        query_filter: models.Filter | None,
        limit: int,
        with_payload: Any,
        search_params: models.SearchParams | None = None,
    ) -> _Points:
        params = None
        if search_params is not None and isinstance(search_params.idf, models.IdfCorpusParams):
            params = qe.SearchParams(idf=qe.IdfParams(corpus=edge_filter(search_params.idf.corpus)))
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(_vector(query), using=using),
            filter=edge_filter(query_filter),
            with_payload=with_payload,
            params=params,
        )
        return _Points(self._shard(name).query(request))

    def close(self) -> None:
        with self._lock:
            for name, shard in self._shards.items():
                if self._written.get(name):
                    shard.optimize()  # plans nothing (and returns at once) below the indexing threshold
                shard.flush()
                shard.close()
            self._shards.clear()
            if self._owner >= 0:
                os.close(self._owner)  # releases the flock
                self._owner = -1
