"""The embedded store: one SQLite file with FTS5 and sqlite-vec. All SQL lives here.

Vectors live in one vec0 table per embedding space (provider, model, dimension
and chunker fingerprint), so a model change never mixes vectors. Vectors are
unit length and stored under sqlite-vec's default L2 metric; cosine similarity
is recovered as ``1 - d**2 / 2`` (L2 on unit vectors scans about 2x faster than
the cosine metric in sqlite-vec 0.1.9).

Visibility (ACL principals + filters) is one SQL subquery over chunk rowids,
used inside the FTS5 query and as the ``rowid IN (...)`` constraint of the KNN,
so ranking only ever sees rows the caller may see.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from ..contracts import Chunk, Note, SearchFilters
from ..errors import IndexError_
from ..ingest.ids import sha256_hex
from .connection import connect
from .memory import MemoryVectors
from .migrations import migrate

OPEN_RETRY_S = 10.0  # how long opening a busy new index is retried
VISIBLE_TABLES = 16  # cached visibility sets per connection (distinct principals/filters)


@dataclass(frozen=True)
class NoteState:
    rowid: int
    note_id: str
    path: str
    content_hash: str
    mtime: float
    chunker: str


@dataclass(frozen=True)
class Space:
    """An embedding space: vectors from one model over one chunking."""

    provider: str
    model: str
    dim: int
    chunker: str

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}:{self.dim}:{self.chunker}"

    @property
    def cache_key(self) -> str:
        return f"{self.provider}:{self.model}:{self.dim}"

    @property
    def vec_table(self) -> str:
        return "vec_" + sha256_hex(self.name)[:12]


@dataclass(frozen=True)
class ChunkRow:
    rowid: int
    chunk_id: str
    ordinal: int
    heading_path: tuple[str, ...]
    text: str
    start16: int
    end16: int
    start_line: int
    end_line: int
    note_id: str
    path: str
    title: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class PendingChunk:
    rowid: int
    embed_hash: str
    embed_text: str


def embed_text_for(title: str, heading_path: Sequence[str], text: str) -> str:
    """What embedders see for a chunk: its note title and heading path, then the text."""
    path = list(heading_path)
    if path and path[0] == title:  # a note's H1 usually is its title: say it once
        path = path[1:]
    context = " / ".join([title, *path]) if title or path else ""
    return f"{context}\n{text}" if context else text


def _blob(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype=np.float32).tobytes()


class SqliteStore:
    def __init__(self, path: Path | str, dense_engine: str = "sqlite-vec") -> None:
        self.path = Path(path) if str(path) != ":memory:" else path
        self.memory_vectors: MemoryVectors | None = MemoryVectors() if dense_engine == "numpy" else None
        self._visible: OrderedDict[tuple[object, ...], str] = OrderedDict()
        self.conn = self._open(path)

    @staticmethod
    def _open(path: Path | str) -> apsw.Connection:
        # Opening a brand-new file switches it to WAL and migrates it; when other processes do
        # the same at that moment SQLite may answer "locked" without waiting (it would deadlock),
        # so the open is retried for a while before it is an error.
        deadline = time.monotonic() + OPEN_RETRY_S
        while True:
            conn = None
            try:
                conn = connect(path)
                migrate(conn)
                return conn
            except apsw.BusyError as exc:
                if conn is not None:
                    conn.close()
                if time.monotonic() > deadline:
                    raise IndexError_(f"cannot open index {path}: {exc}") from None
                time.sleep(0.05)
            except apsw.Error as exc:
                if conn is not None:
                    conn.close()
                raise IndexError_(f"cannot open index {path}: {exc}") from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta ------------------------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else default

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def _bump(self) -> None:
        """Advance the write generation (in the caller's transaction): in-memory caches key on it."""
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES('generation', '1')"
            " ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def generation(self) -> int:
        return int(self.get_meta("generation", "0") or 0)

    # -- notes and chunks ------------------------------------------------------------------

    def note_states(self) -> dict[str, NoteState]:
        rows = self.conn.execute("SELECT id, note_id, path, content_hash, mtime, chunker FROM notes")
        return {r[2]: NoteState(*r) for r in rows}

    def transaction(self) -> apsw.Connection:
        """``with store.transaction(): ...`` commits on success and rolls back on error."""
        return self.conn

    def snapshot(self) -> apsw.Connection:
        """``with store.snapshot(): ...``: several reads that see one state of the index, even
        while another process commits (a read transaction in WAL mode)."""
        return self.conn

    def upsert_note(
        self, note: Note, chunks: Sequence[Chunk], fts_tokens: Sequence[Sequence[str]], chunker: str
    ) -> int:
        """Replace a note and everything derived from it. Call inside a transaction."""
        c = self.conn
        self._bump()
        old: list[tuple[Any, ...]] = c.execute(
            "SELECT id FROM notes WHERE note_id=? OR path=?", (note.note_id, note.path)
        ).fetchall()
        for (rowid,) in old:
            self._delete_note_rowid(int(rowid))
        c.execute(
            "INSERT INTO notes(note_id, path, title, metadata, links, content_hash, mtime, chunker, indexed_at)"
            " VALUES(?,?,?,?,?,?,?,?,?)",
            (
                note.note_id,
                note.path,
                note.title,
                json.dumps(note.metadata, ensure_ascii=False),
                json.dumps(list(note.links), ensure_ascii=False),
                note.content_hash,
                note.mtime,
                chunker,
                time.time(),
            ),
        )
        note_rowid = c.last_insert_rowid()
        c.executemany("INSERT INTO note_acl(note_rowid, principal) VALUES(?,?)", [(note_rowid, p) for p in note.acl])
        c.executemany("INSERT INTO note_tags(note_rowid, tag) VALUES(?,?)", [(note_rowid, t) for t in note.tags])
        c.executemany(
            "INSERT OR IGNORE INTO note_meta(note_rowid, key, value) VALUES(?,?,?)",
            [(note_rowid, k, v) for k, v in _meta_pairs(note.metadata)],
        )
        for chunk, tokens in zip(chunks, fts_tokens, strict=True):
            embed_hash = sha256_hex(embed_text_for(note.title, chunk.heading_path, chunk.text))
            c.execute(
                "INSERT INTO chunks(chunk_id, note_rowid, ordinal, heading_path, text, start16, end16,"
                " start_line, end_line, token_count, embed_hash) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                (
                    chunk.chunk_id,
                    note_rowid,
                    chunk.ordinal,
                    json.dumps(list(chunk.heading_path), ensure_ascii=False),
                    chunk.text,
                    chunk.start,
                    chunk.end,
                    chunk.start_line,
                    chunk.end_line,
                    chunk.token_count,
                    embed_hash,
                ),
            )
            c.execute(
                "INSERT INTO chunks_fts(rowid, tokens) VALUES(?, ?)",
                (c.last_insert_rowid(), " ".join(tokens)),
            )
        return note_rowid

    def delete_note(self, path: str) -> bool:
        row = self.conn.execute("SELECT id FROM notes WHERE path=?", (path,)).fetchone()
        if row is None:
            return False
        with self.conn:
            self._delete_note_rowid(int(row[0]))
        return True

    def _delete_note_rowid(self, note_rowid: int) -> None:
        c = self.conn
        self._bump()
        rowids = [r[0] for r in c.execute("SELECT id FROM chunks WHERE note_rowid=?", (note_rowid,))]
        if rowids:
            marks = ",".join("?" * len(rowids))
            c.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", rowids)
            for table in self._vec_tables():
                c.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", rowids)
        c.execute("DELETE FROM notes WHERE id=?", (note_rowid,))  # cascades to chunks, acl, tags, meta

    def note_by_id(self, note_id: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            "SELECT id, note_id, path, title, metadata, links, content_hash, mtime FROM notes WHERE note_id=?",
            (note_id,),
        ).fetchone()
        if row is None:
            return None
        acl = [r[0] for r in self.conn.execute("SELECT principal FROM note_acl WHERE note_rowid=?", (row[0],))]
        return {
            "note_id": row[1],
            "path": row[2],
            "title": row[3],
            "metadata": json.loads(row[4]),
            "links": json.loads(row[5]),
            "content_hash": row[6],
            "mtime": row[7],
            "acl": acl,
        }

    def chunks_of_note(self, note_id: str) -> list[ChunkRow]:
        ids = [
            r[0]
            for r in self.conn.execute(
                "SELECT c.id FROM chunks c JOIN notes n ON n.id=c.note_rowid WHERE n.note_id=? ORDER BY c.ordinal",
                (note_id,),
            )
        ]
        rows = self.fetch_chunks(ids)
        return [rows[i] for i in ids if i in rows]  # a row deleted in between is left out

    def fetch_chunks(self, rowids: Sequence[int]) -> dict[int, ChunkRow]:
        if not rowids:
            return {}
        out: dict[int, ChunkRow] = {}
        for batch in _batches(list(rowids), 500):
            marks = ",".join("?" * len(batch))
            rows = self.conn.execute(
                "SELECT c.id, c.chunk_id, c.ordinal, c.heading_path, c.text, c.start16, c.end16, c.start_line,"
                " c.end_line, n.note_id, n.path, n.title,"
                " (SELECT json_group_array(tag) FROM note_tags t WHERE t.note_rowid = n.id)"
                f" FROM chunks c JOIN notes n ON n.id = c.note_rowid WHERE c.id IN ({marks})",
                batch,
            )
            for r in rows:
                out[r[0]] = ChunkRow(
                    r[0],
                    r[1],
                    r[2],
                    tuple(json.loads(r[3])),
                    r[4],
                    r[5],
                    r[6],
                    r[7],
                    r[8],
                    r[9],
                    r[10],
                    r[11],
                    tuple(json.loads(r[12])),
                )
        return out

    def chunks_by_ids(self, chunk_ids: Sequence[str]) -> list[ChunkRow]:
        """Chunks by their stable ids, in the order given (unknown ids are left out)."""
        found: dict[str, int] = {}
        for batch in _batches(list(chunk_ids), 500):
            marks = ",".join("?" * len(batch))
            for cid, rowid in self.conn.execute(f"SELECT chunk_id, id FROM chunks WHERE chunk_id IN ({marks})", batch):
                found[str(cid)] = int(rowid)
        rows = self.fetch_chunks(list(found.values()))
        return [rows[found[c]] for c in chunk_ids if c in found and found[c] in rows]

    def neighbours(self, rowid: int, radius: int) -> list[ChunkRow]:
        """Chunks of the same note within ``radius`` ordinals of this one (itself excluded), in
        reading order. They share the note's ACL and metadata, so they are exactly as visible."""
        ids = [
            int(r[0])
            for r in self.conn.execute(
                "SELECT c.id FROM chunks c JOIN chunks s ON s.note_rowid = c.note_rowid"
                " WHERE s.id = ? AND c.id != s.id AND abs(c.ordinal - s.ordinal) <= ? ORDER BY c.ordinal",
                (rowid, radius),
            )
        ]
        rows = self.fetch_chunks(ids)
        return [rows[i] for i in ids if i in rows]  # a row deleted in between is left out

    def doc_freqs(self, terms: Sequence[str], principals: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(chunks the principals may see, how many of them contain each term). Counted among
        visible chunks only, so term statistics never tell whether a hidden note has a word."""
        table = self.visible_table(principals, SearchFilters())
        total = self.conn.execute(f"SELECT count(*) FROM temp.{table}").fetchone()
        found: dict[str, int] = {}
        for term in dict.fromkeys(terms):
            row = self.conn.execute(
                f"SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ? AND +rowid IN (SELECT id FROM temp.{table})",
                ['"' + term.replace('"', '""') + '"'],
            ).fetchone()
            if row and row[0]:
                found[term] = int(row[0])
        return (int(total[0]) if total else 0), found

    # -- runs ------------------------------------------------------------------------------

    def save_run(self, run: Mapping[str, Any]) -> None:
        """Persist one run: keys run_id, kind, created_at, principals, question, refused,
        total_ms, frame, trace (the last two JSON-ready objects)."""
        with self.conn:
            self.conn.execute(
                "INSERT OR REPLACE INTO runs(run_id, kind, created_at, principals, question, refused, total_ms,"
                " frame, trace) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    run["run_id"],
                    run["kind"],
                    run["created_at"],
                    json.dumps(sorted(set(run["principals"]))),
                    run["question"],
                    int(bool(run["refused"])),
                    run["total_ms"],
                    json.dumps(run["frame"], ensure_ascii=False),
                    json.dumps(run["trace"], ensure_ascii=False),
                ),
            )

    def list_runs(self, principals: Sequence[str], limit: int = 20, offset: int = 0) -> list[dict[str, Any]]:
        """Runs the principals may read (every principal the run was asked as is among them), newest first."""
        rows = self.conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM runs r WHERE {_RUN_READABLE}"
            " ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?",
            (json.dumps(list(principals)), limit, offset),
        )
        return [_run(r) for r in rows]

    def get_run(self, run_id: str, principals: Sequence[str]) -> dict[str, Any] | None:
        """One run with its frame and trace, or None when it does not exist or the principals may not read it."""
        row = self.conn.execute(
            f"SELECT {_RUN_COLUMNS}, frame, trace FROM runs r WHERE {_RUN_READABLE} AND run_id = ?",
            (json.dumps(list(principals)), run_id),
        ).fetchone()
        if row is None:
            return None
        return {**_run(row), "frame": json.loads(row[7]), "trace": json.loads(row[8])}

    # -- visibility ------------------------------------------------------------------------

    @staticmethod
    def visible_sql(principals: Sequence[str], filters: SearchFilters) -> tuple[str, list[Any]]:
        """SQL selecting the rowids of chunks the principals may see and the filters allow."""
        params: list[Any] = list(principals)
        where = [
            "EXISTS (SELECT 1 FROM note_acl a WHERE a.note_rowid = n.id AND a.principal IN ("
            + ",".join("?" * len(principals))
            + "))"
            if principals
            else "0"
        ]
        if filters.folders:
            ors = []
            for folder in filters.folders:
                prefix = folder.strip("/").replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                ors.append("n.path LIKE ? ESCAPE '\\'")
                params.append(prefix + "/%")
            where.append("(" + " OR ".join(ors) + ")")
        for tag in filters.tags:
            where.append("EXISTS (SELECT 1 FROM note_tags t WHERE t.note_rowid = n.id AND t.tag = ?)")
            params.append(tag.lstrip("#").lower())
        if filters.note_ids:
            where.append("n.note_id IN (" + ",".join("?" * len(filters.note_ids)) + ")")
            params.extend(filters.note_ids)
        if filters.since is not None:
            where.append("n.mtime >= ?")
            params.append(filters.since)
        if filters.until is not None:
            where.append("n.mtime <= ?")
            params.append(filters.until)
        for key, value in filters.metadata:
            where.append("EXISTS (SELECT 1 FROM note_meta m WHERE m.note_rowid = n.id AND m.key = ? AND m.value = ?)")
            params.extend([key, value])
        sql = "SELECT c.id FROM chunks c JOIN notes n ON n.id = c.note_rowid WHERE " + " AND ".join(where)
        return sql, params

    def visible_table(self, principals: Sequence[str], filters: SearchFilters) -> str:
        """A TEMP table of the visible chunk rowids, built by visible_sql() and reused until the
        next write (keyed by the write generation): both routes probe it instead of re-running
        the ACL and filter joins over every chunk on every query (~6x faster BM25 at 100k)."""
        key = (self.generation(), tuple(sorted(set(principals))), filters)
        name = self._visible.get(key)
        if name is not None:
            self._visible.move_to_end(key)
            return name
        name = "visible_" + sha256_hex(repr(key))[:16]
        visible, params = self.visible_sql(principals, filters)
        with self.conn:
            self.conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} (id INTEGER PRIMARY KEY)")
            self.conn.execute(f"DELETE FROM temp.{name}")
            self.conn.execute(f"INSERT INTO temp.{name} {visible}", params)
        self._visible[key] = name
        while len(self._visible) > VISIBLE_TABLES:
            _, old = self._visible.popitem(last=False)
            # if a statement still reads it, the temp table goes when the connection closes
            with contextlib.suppress(apsw.LockedError):
                self.conn.execute(f"DROP TABLE IF EXISTS temp.{old}")
        return name

    # -- lexical route ---------------------------------------------------------------------

    def bm25(
        self, match: str, principals: Sequence[str], filters: SearchFilters, limit: int
    ) -> list[tuple[int, float]]:
        """(rowid, score) best first; score is FTS5's BM25 negated so that higher is better."""
        rows = self.conn.execute(bm25_sql(self.visible_table(principals, filters)), [match, limit])
        return [(int(r[0]), float(r[1])) for r in rows]

    # -- vectors ---------------------------------------------------------------------------

    def ensure_space(self, space: Space) -> str:
        table = space.vec_table
        with self.conn:
            self.conn.execute(
                "INSERT OR IGNORE INTO spaces(name, provider, model, dim, chunker, vec_table, created_at)"
                " VALUES(?,?,?,?,?,?,?)",
                (space.name, space.provider, space.model, space.dim, space.chunker, table, time.time()),
            )
            self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0(embedding float[{space.dim}])")
        return table

    def has_space(self, space: Space) -> bool:
        return self.conn.execute("SELECT 1 FROM spaces WHERE name=?", (space.name,)).fetchone() is not None

    def spaces(self) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT name, provider, model, dim, chunker, vec_table FROM spaces ORDER BY created_at"
        )
        out = []
        for name, provider, model, dim, chunker, table in rows:
            count = self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            out.append(
                {
                    "name": name,
                    "provider": provider,
                    "model": model,
                    "dim": dim,
                    "chunker": chunker,
                    "vectors": int(count[0]) if count else 0,
                }
            )
        return out

    def _vec_tables(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT vec_table FROM spaces")]

    def pending_chunks(self, space: Space, limit: int | None = None) -> list[PendingChunk]:
        """Chunks without a vector in this space, in note then reading order."""
        sql = (
            "SELECT c.id, c.embed_hash, n.title, c.heading_path, c.text FROM chunks c"
            " JOIN notes n ON n.id = c.note_rowid"
            f" WHERE c.id NOT IN (SELECT rowid FROM {_rowids(space)}) ORDER BY c.note_rowid, c.ordinal"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [PendingChunk(r[0], r[1], embed_text_for(r[2], json.loads(r[3]), r[4])) for r in self.conn.execute(sql)]

    def count_pending(
        self, space: Space, principals: Sequence[str] | None = None, filters: SearchFilters | None = None
    ) -> tuple[int, int]:
        """(chunks without vectors, all chunks), optionally among visible chunks only."""
        if principals is None:
            base, params = "SELECT id FROM chunks", list[Any]()
        else:
            base, params = self.visible_sql(principals, filters or SearchFilters())
        if not self.has_space(space):
            row = self.conn.execute(f"SELECT count(*) FROM ({base})", params).fetchone()
            total = int(row[0]) if row else 0
            return total, total
        row = self.conn.execute(
            f"SELECT count(*), sum(b.id NOT IN (SELECT rowid FROM {_rowids(space)})) FROM ({base}) AS b", params
        ).fetchone()
        total = int(row[0]) if row and row[0] else 0
        return (int(row[1] or 0) if row else 0), total

    def fully_embedded(self, space: Space) -> bool:
        """True when every chunk has a vector in the space: two b-tree counts, no scan of the
        visibility subquery (vector rows are deleted with their chunks, so equal counts mean full)."""
        if not self.has_space(space):
            return False
        row = self.conn.execute(
            f"SELECT (SELECT count(*) FROM chunks) = (SELECT count(*) FROM {_rowids(space)})"
        ).fetchone()
        return bool(row and row[0])

    def cached_vectors(self, space: Space, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for batch in _batches(list(dict.fromkeys(hashes)), 500):
            marks = ",".join("?" * len(batch))
            for h, blob in self.conn.execute(
                f"SELECT embed_hash, vector FROM embedding_cache WHERE space=? AND embed_hash IN ({marks})",
                [space.cache_key, *batch],
            ):
                out[h] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put_vectors(self, space: Space, rows: Sequence[tuple[int, str, np.ndarray]], cache: bool = True) -> None:
        """Store (chunk rowid, embed hash, vector) rows in the space and the cache, in one transaction."""
        with self.conn:
            c = self.conn
            self._bump()
            for rowid, embed_hash, vec in rows:
                blob = _blob(vec)
                c.execute(f"DELETE FROM {space.vec_table} WHERE rowid=?", (rowid,))
                c.execute(f"INSERT INTO {space.vec_table}(rowid, embedding) VALUES(?, ?)", (rowid, blob))
                if cache:
                    c.execute(
                        "INSERT OR IGNORE INTO embedding_cache(space, embed_hash, vector) VALUES(?,?,?)",
                        (space.cache_key, embed_hash, blob),
                    )

    def load_vectors(self, space: Space) -> tuple[np.ndarray, np.ndarray]:
        """All (rowids, vectors) of a space, for the in-memory dense engine."""
        rows: list[tuple[Any, ...]] = self.conn.execute(
            f"SELECT rowid, embedding FROM {space.vec_table} ORDER BY rowid"
        ).fetchall()
        rowids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32).reshape(len(rows), space.dim)
        return rowids, matrix

    def vectors_for(self, space: Space, rowids: Sequence[int]) -> dict[int, np.ndarray]:
        """Stored vectors of some chunks in a space (chunks without one are left out)."""
        if not rowids or not self.has_space(space):
            return {}
        out: dict[int, np.ndarray] = {}
        for batch in _batches(list(rowids), 500):
            marks = ",".join("?" * len(batch))
            for rowid, blob in self.conn.execute(
                f"SELECT rowid, embedding FROM {space.vec_table} WHERE rowid IN ({marks})", batch
            ):
                out[int(rowid)] = np.frombuffer(bytes(blob), dtype=np.float32)
        return out

    def visible_rowids(self, principals: Sequence[str], filters: SearchFilters) -> np.ndarray:
        visible, params = self.visible_sql(principals, filters)
        return np.fromiter((int(r[0]) for r in self.conn.execute(visible, params)), dtype=np.int64)

    def knn(
        self, space: Space, query: np.ndarray, principals: Sequence[str], filters: SearchFilters, k: int
    ) -> list[tuple[int, float]]:
        """(rowid, cosine similarity) best first, among visible chunks only (filter inside the KNN)."""
        if self.memory_vectors is not None:
            return self.memory_vectors.knn(self, space, query, principals, filters, k)
        rows = self.conn.execute(knn_sql(space, self.visible_table(principals, filters)), [_blob(query), k])
        return [(int(r[0]), 1.0 - float(r[1]) ** 2 / 2.0) for r in rows]

    # -- status ----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        def one(sql: str) -> int:
            row = self.conn.execute(sql).fetchone()
            return int(row[0]) if row else 0

        return {
            "notes": one("SELECT count(*) FROM notes"),
            "chunks": one("SELECT count(*) FROM chunks"),
            "cached_embeddings": one("SELECT count(*) FROM embedding_cache"),
        }

    def iter_notes(self) -> Iterator[tuple[str, str, str]]:
        yield from self.conn.execute("SELECT note_id, path, title FROM notes ORDER BY path")

    # -- notes API -------------------------------------------------------------------------

    def note_states_of(self, paths: Sequence[str]) -> dict[str, NoteState]:
        """note_states() for some paths only (those not indexed are left out)."""
        out: dict[str, NoteState] = {}
        for batch in _batches(list(dict.fromkeys(paths)), 500):
            marks = ",".join("?" * len(batch))
            for r in self.conn.execute(
                f"SELECT id, note_id, path, content_hash, mtime, chunker FROM notes WHERE path IN ({marks})", batch
            ):
                out[r[2]] = NoteState(*r)
        return out

    def list_notes(
        self,
        principals: Sequence[str],
        folder: str | None = None,
        tag: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[dict[str, Any]], int]:
        """(notes by path, how many match): notes the principals may see, with the rule of search
        (one of the note's ACL principals is among them; an empty ACL is visible to nobody),
        optionally under a folder (any depth) and carrying a tag."""
        if not principals:
            return [], 0
        where = [
            "EXISTS (SELECT 1 FROM note_acl a WHERE a.note_rowid = n.id AND a.principal IN ("
            + ",".join("?" * len(principals))
            + "))"
        ]
        params: list[Any] = list(principals)
        prefix = (folder or "").strip("/")
        if prefix:
            where.append("n.path LIKE ? ESCAPE '\\'")
            params.append(prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "/%")
        if tag:
            where.append("EXISTS (SELECT 1 FROM note_tags t WHERE t.note_rowid = n.id AND t.tag = ?)")
            params.append(tag.lstrip("#").lower())
        condition = " AND ".join(where)
        row = self.conn.execute(f"SELECT count(*) FROM notes n WHERE {condition}", params).fetchone()
        rows = self.conn.execute(
            f"SELECT n.note_id, n.path, n.title, n.metadata, n.mtime FROM notes n WHERE {condition}"
            " ORDER BY n.path LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        notes = []
        for note_id, path, title, metadata, mtime in rows:
            meta = json.loads(metadata)
            tags = meta.get("tags", []) if isinstance(meta, dict) else []
            notes.append(
                {"note_id": note_id, "path": path, "title": title, "tags": tags, "metadata": meta, "mtime": mtime}
            )
        return notes, (int(row[0]) if row else 0)

    def integrity_check(self) -> str:
        row = self.conn.execute("PRAGMA quick_check").fetchone()
        return str(row[0]) if row else "unknown"

    def check(self) -> dict[str, Any]:
        """The full consistency check (sunlib.store.check) on this connection; changes nothing."""
        from .check import check_connection

        return check_connection(self.conn)


_RUN_COLUMNS = "run_id, kind, created_at, principals, question, refused, total_ms"
# A run is readable by principals that hold every principal it was asked as (param: JSON array).
_RUN_READABLE = (
    "NOT EXISTS (SELECT 1 FROM json_each(r.principals) p WHERE p.value NOT IN (SELECT value FROM json_each(?)))"
)


def _run(r: Sequence[Any]) -> dict[str, Any]:
    return {
        "run_id": r[0],
        "kind": r[1],
        "created_at": r[2],
        "principals": json.loads(r[3]),
        "question": r[4],
        "refused": bool(r[5]),
        "total_ms": r[6],
    }


def bm25_sql(visible_table: str) -> str:
    """The lexical route; params are [match, limit]. ``visible_table`` holds the visible rowids."""
    # The unary + keeps FTS5 from driving the scan by the rowid list (a full-text lookup
    # per visible row: ~300x slower); the visibility filter still applies before LIMIT.
    return (
        "SELECT rowid, -bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
        f" AND +rowid IN (SELECT id FROM temp.{visible_table}) ORDER BY rank LIMIT ?"
    )


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


def _meta_pairs(metadata: Any) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for key, value in metadata.items():
        if key in ("acl", "tags"):
            continue
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str | int | float | bool):
                pairs.append((str(key), str(v)))
    return pairs


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
