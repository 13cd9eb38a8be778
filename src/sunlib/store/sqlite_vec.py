"""The sqlite-vec VectorIndex: one vec0 table per embedding space, in the index file.

Vectors are unit length and stored under sqlite-vec's default L2 metric; cosine similarity
is recovered as ``1 - d**2 / 2`` (L2 on unit vectors scans about 2x faster than the cosine
metric in sqlite-vec 0.1.9). The visibility TEMP table is the ``rowid IN (...)`` constraint
of the KNN, so k counts visible rows only. Each vector's stamp (``vector_stamps``) is the
stamp of the chunk it was computed from; a write for a chunk that is gone or was rewritten
since is refused, and ``reconcile`` removes any vector whose stamp no longer matches.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .db import Db, batches, chunk_ids_of, rowids_of, visible_sql
from .errors import at_boundary
from .protocols import PendingChunk, Reconciled, Space, SpaceInfo, VectorItem, Visibility, embed_text_for


def knn_sql(space: Space, visible_table: str) -> str:
    """The dense route; params are [query blob, k]. sqlite-vec applies the rowid constraint
    during the KNN scan, so k counts visible rows only."""
    return (
        f"SELECT rowid, distance FROM {space.vec_table} WHERE embedding MATCH ? AND k = ?"
        f" AND rowid IN (SELECT id FROM temp.{visible_table}) ORDER BY distance"
    )


def _rowids(space: Space) -> str:
    """sqlite-vec's plain shadow table of a vec0 table's rowids: set lookups there are ~100x
    cheaper than probing the virtual table row by row."""
    return f"{space.vec_table}_rowids"


def _blob(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype=np.float32).tobytes()


# Vectors whose chunk is gone, or whose stamp is not their chunk's (params: space name).
_ORPHANS = "SELECT v.rowid FROM {rowids} v WHERE v.rowid NOT IN (SELECT id FROM chunks)"
_STALE = (
    "SELECT v.rowid FROM {rowids} v JOIN chunks c ON c.id = v.rowid"
    " LEFT JOIN vector_stamps s ON s.space = ? AND s.chunk_rowid = v.rowid"
    " WHERE s.stamp IS NULL OR s.stamp != c.stamp"
)


@at_boundary
class SqliteVectors:
    def __init__(self, db: Db) -> None:
        self.db = db
        self._full: dict[str, tuple[int, bool]] = {}  # space name -> (write generation, fully embedded)

    # -- spaces --------------------------------------------------------------------------------

    def ensure_space(self, space: Space) -> None:
        with self.db.write():
            self.db.conn.execute(
                "INSERT OR IGNORE INTO spaces(name, provider, model, dim, chunker, vec_table, created_at)"
                " VALUES(?,?,?,?,?,?,?)",
                (space.name, space.provider, space.model, space.dim, space.chunker, space.vec_table, time.time()),
            )
            self.db.conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {space.vec_table} USING vec0(embedding float[{space.dim}])"
            )

    def has_space(self, space: Space) -> bool:
        return self.db.one("SELECT 1 FROM spaces WHERE name=?", (space.name,)) is not None

    def spaces(self) -> list[SpaceInfo]:
        rows: list[tuple[Any, ...]] = self.db.conn.execute(
            "SELECT name, provider, model, dim, chunker, vec_table FROM spaces ORDER BY created_at"
        ).fetchall()
        return [
            SpaceInfo(name, provider, model, dim, chunker, int(self.db.one(f"SELECT count(*) FROM {table}") or 0))
            for name, provider, model, dim, chunker, table in rows
        ]

    # -- writes --------------------------------------------------------------------------------

    def upsert(self, space: Space, items: Sequence[VectorItem], cache: bool = True) -> int:
        """Store vectors whose chunk still has the item's stamp, in one transaction; returns how
        many were stored. A chunk rewritten (or deleted) since it was read for embedding keeps
        no vector of its old text: it is pending again."""
        written = 0
        with self.db.write():
            c = self.db.conn
            generation = self.db.bump()
            for item in items:
                blob = _blob(item.vector)
                if cache:
                    c.execute(
                        "INSERT OR IGNORE INTO embedding_cache(space, embed_hash, vector) VALUES(?,?,?)",
                        (space.cache_key, item.embed_hash, blob),
                    )
                rowid = self.db.one("SELECT id FROM chunks WHERE chunk_id=? AND stamp=?", (item.chunk_id, item.stamp))
                if rowid is None:
                    continue
                c.execute(f"DELETE FROM {space.vec_table} WHERE rowid=?", (rowid,))
                c.execute(f"INSERT INTO {space.vec_table}(rowid, embedding) VALUES(?, ?)", (rowid, blob))
                c.execute(
                    "INSERT OR REPLACE INTO vector_stamps(space, chunk_rowid, stamp, written) VALUES(?,?,?,?)",
                    (space.name, rowid, item.stamp, generation),
                )
                written += 1
        return written

    def delete(self, space: Space, chunk_ids: Sequence[str]) -> None:
        rowids = list(rowids_of(self.db, chunk_ids).values())
        with self.db.write():
            self.db.bump()
            self._drop(space, rowids)

    def _drop(self, space: Space, rowids: Sequence[int]) -> None:
        for batch in batches(list(rowids)):
            marks = ",".join("?" * len(batch))
            self.db.conn.execute(f"DELETE FROM {space.vec_table} WHERE rowid IN ({marks})", batch)
            self.db.conn.execute(
                f"DELETE FROM vector_stamps WHERE space = ? AND chunk_rowid IN ({marks})", [space.name, *batch]
            )

    def reconcile(self, space: Space) -> Reconciled:
        """Drop vectors whose chunk is gone or carries another stamp, and stamps without a vector."""
        if not self.has_space(space):
            return Reconciled(space.name, 0, 0, self.count_pending(space)[0])
        orphans, stale = self._out_of_step(space)
        loose = self.db.one(
            f"SELECT 1 FROM vector_stamps WHERE space = ? AND chunk_rowid NOT IN (SELECT rowid FROM {_rowids(space)})"
            " LIMIT 1",
            (space.name,),
        )
        if orphans or stale or loose:
            # Write first, then look again under the write lock: a read that turns into a write
            # would fail at once (SQLITE_BUSY) if another process committed in between.
            with self.db.write():
                self.db.bump()
                orphans, stale = self._out_of_step(space)
                self._drop(space, orphans + stale)
                self.db.conn.execute(
                    "DELETE FROM vector_stamps WHERE space = ?"
                    f" AND chunk_rowid NOT IN (SELECT rowid FROM {_rowids(space)})",
                    (space.name,),
                )
        return Reconciled(space.name, len(orphans), len(stale), self.count_pending(space)[0])

    def _out_of_step(self, space: Space) -> tuple[list[int], list[int]]:
        """(rowids of vectors whose chunk is gone, rowids of vectors with another stamp than their chunk)."""
        orphans = [int(r[0]) for r in self.db.conn.execute(_ORPHANS.format(rowids=_rowids(space)))]
        stale = [int(r[0]) for r in self.db.conn.execute(_STALE.format(rowids=_rowids(space)), (space.name,))]
        return orphans, stale

    # -- reads ---------------------------------------------------------------------------------

    def knn(self, space: Space, query: np.ndarray, visibility: Visibility, k: int) -> list[tuple[str, float]]:
        """(chunk_id, cosine similarity) best first, among visible chunks only (filter inside the KNN)."""
        sql = knn_sql(space, self.db.visible_table(visibility))
        rows: list[tuple[Any, ...]] = self.db.conn.execute(sql, [_blob(query), k]).fetchall()
        ids = chunk_ids_of(self.db, [int(r[0]) for r in rows])
        return [(ids[int(r[0])], 1.0 - float(r[1]) ** 2 / 2.0) for r in rows if int(r[0]) in ids]

    def pending(self, space: Space, limit: int | None = None, first: Sequence[str] = ()) -> list[PendingChunk]:
        """Chunks without a vector in this space: those of ``first``, then the notes changed last
        (file mtime) first, each in reading order."""
        wanted = list(dict.fromkeys(first))[:500]
        ranks = " ".join(f"WHEN ? THEN {i}" for i in range(len(wanted)))
        order = f"CASE c.chunk_id {ranks} ELSE {len(wanted)} END, " if wanted else ""
        sql = (
            "SELECT c.chunk_id, c.stamp, c.embed_hash, n.title, c.heading_path, c.text FROM chunks c"
            " JOIN notes n ON n.id = c.note_rowid"
            f" WHERE c.id NOT IN (SELECT rowid FROM {_rowids(space)})"
            f" ORDER BY {order}n.mtime DESC, c.note_rowid, c.ordinal"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [
            PendingChunk(r[0], int(r[1]), r[2], embed_text_for(r[3], json.loads(r[4]), r[5]))
            for r in self.db.conn.execute(sql, wanted)
        ]

    def count_pending(self, space: Space, visibility: Visibility | None = None) -> tuple[int, int]:
        """(chunks without vectors, all chunks), optionally among visible chunks only."""
        if visibility is None:
            base, params = "SELECT id FROM chunks", list[Any]()
        else:
            base, params = visible_sql(visibility)
        if not self.has_space(space):
            total = int(self.db.one(f"SELECT count(*) FROM ({base})", params) or 0)
            return total, total
        row = self.db.conn.execute(
            f"SELECT count(*), sum(b.id NOT IN (SELECT rowid FROM {_rowids(space)})) FROM ({base}) AS b", params
        ).fetchone()
        total = int(row[0]) if row and row[0] else 0
        return (int(row[1] or 0) if row else 0), total

    def still_pending(self, space: Space, chunks: Sequence[PendingChunk]) -> list[PendingChunk]:
        """Those of ``chunks`` whose chunk still has the listed stamp and no vector in the space:
        one indexed lookup per 500 chunks (by chunk id, then the rowid shadow table)."""
        ids = list(dict.fromkeys(c.chunk_id for c in chunks))
        if not ids:
            return []
        has_space = self.has_space(space)
        current: dict[str, int] = {}
        for batch in batches(ids):
            marks = ",".join("?" * len(batch))
            if has_space:
                sql = (
                    f"SELECT c.chunk_id, c.stamp FROM chunks c LEFT JOIN {_rowids(space)} v ON v.rowid = c.id"
                    f" WHERE c.chunk_id IN ({marks}) AND v.rowid IS NULL"
                )
            else:
                sql = f"SELECT chunk_id, stamp FROM chunks WHERE chunk_id IN ({marks})"
            current.update((str(r[0]), int(r[1])) for r in self.db.conn.execute(sql, batch))
        return [c for c in chunks if current.get(c.chunk_id) == c.stamp]

    def fully_embedded(self, space: Space) -> bool:
        """True when every chunk has a vector in the space: two b-tree counts, no scan of the
        visibility subquery (vectors are deleted with their chunks and reconciled against
        them, so equal counts mean full). The answer is kept until the next write: every write to
        chunks or vectors advances the generation, and the counts cost ~9 ms at a million chunks."""
        if not self.has_space(space):
            return False
        generation = self.db.generation()
        known = self._full.get(space.name)
        if known is not None and known[0] == generation:
            return known[1]
        full = bool(self.db.one(f"SELECT (SELECT count(*) FROM chunks) = (SELECT count(*) FROM {_rowids(space)})"))
        if not self.db.writing:  # never a count seen inside a write that may roll back
            self._full[space.name] = (generation, full)
        return full

    def without_vectors(self, space: Space, chunk_ids: Sequence[str]) -> set[str]:
        """Those of some chunks that have no vector in the space: one indexed join per batch of
        ids, chunks by chunk id to the vec0 table's rowid shadow table (an unknown id has none)."""
        wanted = set(chunk_ids)
        if not wanted or not self.has_space(space):
            return wanted
        embedded: set[str] = set()
        for batch in batches(sorted(wanted)):
            marks = ",".join("?" * len(batch))
            sql = (
                f"SELECT c.chunk_id FROM chunks c JOIN {_rowids(space)} v ON v.rowid = c.id"
                f" WHERE c.chunk_id IN ({marks})"
            )
            embedded.update(str(r[0]) for r in self.db.conn.execute(sql, batch))
        return wanted - embedded

    def cached_vectors(self, space: Space, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for batch in batches(list(dict.fromkeys(hashes))):
            marks = ",".join("?" * len(batch))
            for h, blob in self.db.conn.execute(
                f"SELECT embed_hash, vector FROM embedding_cache WHERE space=? AND embed_hash IN ({marks})",
                [space.cache_key, *batch],
            ):
                out[h] = np.frombuffer(blob, dtype=np.float32)
        return out

    def vectors_for(self, space: Space, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors of some chunks in a space (chunks without one are left out)."""
        if not chunk_ids or not self.has_space(space):
            return {}
        by_rowid = {rowid: cid for cid, rowid in rowids_of(self.db, chunk_ids).items()}
        out: dict[str, np.ndarray] = {}
        for batch in batches(list(by_rowid)):
            marks = ",".join("?" * len(batch))
            for rowid, blob in self.db.conn.execute(
                f"SELECT rowid, embedding FROM {space.vec_table} WHERE rowid IN ({marks})", batch
            ):
                out[by_rowid[int(rowid)]] = np.frombuffer(bytes(blob), dtype=np.float32)
        return out

    def all_vectors(self, space: Space) -> tuple[list[str], np.ndarray]:
        """Every (chunk_id, vector) of a space as a list and a matrix, in rowid order: what the
        numpy engine loads (a VectorSource)."""
        if not self.has_space(space):
            return [], np.zeros((0, space.dim), dtype=np.float32)
        rows: list[tuple[Any, ...]] = self.db.conn.execute(
            f"SELECT c.chunk_id, v.embedding FROM {space.vec_table} v JOIN chunks c ON c.id = v.rowid ORDER BY v.rowid"
        ).fetchall()
        matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32).reshape(len(rows), space.dim)
        return [str(r[0]) for r in rows], matrix
