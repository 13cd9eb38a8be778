"""``sunlib migrate --to qdrant|sqlite``: move an index between the backends without re-embedding.

Both backends keep notes and chunks (and their FTS5 rows) in the same SQLite file, so a
migration copies only what the target lacks:

* to Qdrant: every chunk becomes a point of ``<prefix>_chunks`` (payload and BM25 weights from
  the indexer's tokens), ``avgdl`` is fixed at the FTS5 index's mean length (the one SQLite's
  BM25 uses, so both rank alike), and every space's vectors are copied from sqlite-vec;
* to SQLite: every Qdrant space's vectors are copied into sqlite-vec tables.

Vectors keep the stamps of their chunks, so nothing is pending afterwards. The source is left
as it was: switching ``[store] backend`` back and forth needs no second migration unless the
index changed in between.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...config import StoreSettings
from ...errors import UserError
from ..protocols import Space, VectorIndex, VectorItem
from ..sqlite import SqliteStore
from ..sqlite_vec import SqliteVectors
from . import open_qdrant_store
from .source import chunk_sources, token_totals
from .store import QdrantStore

BACKENDS = ("qdrant", "sqlite")
COPY_BATCH = 512  # vectors per write


@dataclass(frozen=True)
class Migrated:
    to: str
    chunks: int
    vectors: dict[str, int] = field(default_factory=dict)  # space name -> vectors copied


def migrate(
    db_path: Path, settings: StoreSettings, to: str, progress: Callable[[str, int], None] | None = None
) -> Migrated:
    if to not in BACKENDS:
        raise UserError(f"unknown backend {to!r}; choose one of: {', '.join(BACKENDS)}")
    if not db_path.is_file():
        raise UserError(f"no index at {db_path}: run `sunlib index` first")
    store = open_qdrant_store(db_path, settings)
    try:
        if to == "qdrant":
            return _to_qdrant(store, progress)
        return _to_sqlite(store, progress)
    finally:
        store.close()


def _to_qdrant(store: QdrantStore, progress: Callable[[str, int], None] | None) -> Migrated:
    rows, tokens = token_totals(store.db)
    store.set_avgdl(tokens / rows if rows and tokens else store.avgdl())
    written, _ = store.sync_lexical(rewrite=True)
    source = SqliteVectors(store.db)
    copied = {}
    for info in source.spaces():
        space = Space(info.provider, info.model, info.dim, info.chunker)
        store.vectors.ensure_space(space)
        copied[space.name] = _copy(store, space, source, store.vectors, progress)
    return Migrated("qdrant", written, copied)


def _to_sqlite(store: QdrantStore, progress: Callable[[str, int], None] | None) -> Migrated:
    target = SqliteVectors(store.db)
    copied = {}
    for info in store.vectors.spaces():
        space = Space(info.provider, info.model, info.dim, info.chunker)
        target.ensure_space(space)
        copied[space.name] = _copy(store, space, store.qdrant_vectors, target, progress)
    return Migrated("sqlite", store.counts().chunks, copied)


def _copy(
    store: SqliteStore,
    space: Space,
    source: SqliteVectors | VectorIndex,
    target: VectorIndex,
    progress: Callable[[str, int], None] | None,
) -> int:
    ids, matrix = source.all_vectors(space)  # type: ignore[union-attr]
    by_id = {s.chunk_id: s for s in chunk_sources(store.db, ids, with_tokens=False)}
    done = 0
    for start in range(0, len(ids), COPY_BATCH):
        items = [
            VectorItem(c, by_id[c].stamp, by_id[c].embed_hash, matrix[start + i])
            for i, c in enumerate(ids[start : start + COPY_BATCH])
            if c in by_id
        ]
        done += target.upsert(space, items, cache=False)
        if progress is not None:
            progress(space.name, done)
    return done
