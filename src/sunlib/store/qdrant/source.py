"""What the Qdrant indexes read from the SQLite document store they are composed with.

The SQLite file stays the source of truth for notes and chunks (and their FTS5 rows); the
Qdrant collections are derived from it and converge on it. These are the few reads that
derivation needs, in SQL, kept in the store package like every other query.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..db import Db, batches
from ..protocols import PendingChunk, Space, VectorItem, Visibility, chunk_tokens, embed_text_for
from ..sqlite_vec import SqliteVectors
from .points import ChunkSource, NoteSource, filter_payload

_SOURCE_SQL = (
    "SELECT c.chunk_id, c.stamp, c.embed_hash, c.ordinal, c.heading_path, c.text, c.start16, c.end16,"
    " c.start_line, c.end_line, n.note_id, n.path, n.title, n.mtime,"
    " (SELECT json_group_array(principal) FROM note_acl a WHERE a.note_rowid = n.id),"
    " (SELECT json_group_array(tag) FROM note_tags t WHERE t.note_rowid = n.id),"
    " (SELECT json_group_array(json_array(key, value)) FROM note_meta m WHERE m.note_rowid = n.id)"
    " FROM chunks c JOIN notes n ON n.id = c.note_rowid"
)


def _source(r: Sequence[Any], tokens: Mapping[str, Sequence[str]] | None) -> ChunkSource:
    heading_path = tuple(json.loads(r[4]))
    known = None if tokens is None else tokens.get(str(r[0]))
    if tokens is None:
        toks: tuple[str, ...] = ()
    elif known is not None:
        toks = tuple(known)
    else:
        toks = tuple(chunk_tokens(r[12], heading_path, r[5]))
    return ChunkSource(
        chunk_id=str(r[0]),
        stamp=int(r[1]),
        embed_hash=str(r[2]),
        ordinal=int(r[3]),
        heading_path=heading_path,
        text=str(r[5]),
        start16=int(r[6]),
        end16=int(r[7]),
        start_line=int(r[8]),
        end_line=int(r[9]),
        note_id=str(r[10]),
        path=str(r[11]),
        title=str(r[12]),
        mtime=float(r[13]),
        acl=tuple(sorted(json.loads(r[14]))),
        tags=tuple(sorted(json.loads(r[15]))),
        meta=tuple(sorted((str(k), str(v)) for k, v in json.loads(r[16]))),
        tokens=toks,
    )


def chunk_sources(
    db: Db,
    chunk_ids: Sequence[str] | None = None,
    tokens: Mapping[str, Sequence[str]] | None = None,
    with_tokens: bool = True,
) -> list[ChunkSource]:
    """Chunks with their note's filter fields (all of them, or some by id), in note then reading
    order. Tokens are the indexer's (``protocols.chunk_tokens``: what FTS5 got),
    taken from ``tokens`` when given, else computed again from the stored text; none at all
    without ``with_tokens``."""
    given = (tokens or {}) if with_tokens else None
    if chunk_ids is None:
        rows = db.conn.execute(_SOURCE_SQL + " ORDER BY c.note_rowid, c.ordinal").fetchall()
        return [_source(r, given) for r in rows]
    out: list[ChunkSource] = []
    for batch in batches(list(dict.fromkeys(chunk_ids))):
        marks = ",".join("?" * len(batch))
        sql = _SOURCE_SQL + f" WHERE c.chunk_id IN ({marks}) ORDER BY c.note_rowid, c.ordinal"
        out.extend(_source(r, given) for r in db.conn.execute(sql, batch))
    return out


def chunk_stamps(db: Db) -> dict[str, int]:
    """Every chunk's current stamp, by chunk id."""
    return {str(c): int(s) for c, s in db.conn.execute("SELECT chunk_id, stamp FROM chunks")}


def chunk_order(db: Db) -> list[tuple[str, int]]:
    """(chunk_id, stamp) of every chunk, the notes changed last first, each in reading order: the
    order of ``pending``."""
    rows = db.conn.execute(
        "SELECT c.chunk_id, c.stamp FROM chunks c JOIN notes n ON n.id = c.note_rowid"
        " ORDER BY n.mtime DESC, c.note_rowid, c.ordinal"
    )
    return [(str(c), int(s)) for c, s in rows]


def visible_ids(db: Db, visibility: Visibility) -> list[str]:
    """The chunk ids a visibility lets through in SQLite (what ``count_pending`` counts among)."""
    table = db.visible_table(visibility)
    return [
        str(r[0]) for r in db.conn.execute(f"SELECT chunk_id FROM chunks WHERE id IN (SELECT id FROM temp.{table})")
    ]


def note_chunk_ids(db: Db, note_id: str, path: str) -> list[str]:
    """The chunk ids stored now for a note (by id or path): what a rewrite replaces."""
    rows = db.conn.execute(
        "SELECT c.chunk_id FROM chunks c JOIN notes n ON n.id = c.note_rowid WHERE n.note_id = ? OR n.path = ?",
        (note_id, path),
    )
    return [str(r[0]) for r in rows]


def token_totals(db: Db) -> tuple[int, int]:
    """(chunks, tokens) in the FTS5 index: the corpus mean length FTS5's BM25 uses."""
    from ..bm25 import varint

    sizes = db.conn.execute("SELECT sz FROM chunks_fts_docsize")
    rows = tokens = 0
    for (sz,) in sizes:
        rows += 1
        tokens += varint(bytes(sz))
    return rows, tokens


_NOTE_SQL = (
    "SELECT n.note_id, n.path, n.title, n.metadata, n.links, n.content_hash, n.mtime, n.chunker, n.indexed_at,"
    " (SELECT json_group_array(principal) FROM note_acl a WHERE a.note_rowid = n.id),"
    " (SELECT json_group_array(tag) FROM note_tags t WHERE t.note_rowid = n.id),"
    " (SELECT json_group_array(chunk_id) FROM (SELECT chunk_id FROM chunks c WHERE c.note_rowid = n.id"
    "  ORDER BY c.ordinal))"
    " FROM notes n"
)


def _note(r: Sequence[Any]) -> NoteSource:
    return NoteSource(
        note_id=str(r[0]),
        path=str(r[1]),
        title=str(r[2]),
        metadata_json=str(r[3]),
        links=tuple(json.loads(r[4])),
        content_hash=str(r[5]),
        mtime=float(r[6]),
        chunker=str(r[7]),
        indexed_at=float(r[8]),
        acl=tuple(json.loads(r[9])),
        tags=tuple(json.loads(r[10])),
        chunk_ids=tuple(json.loads(r[11])),
    )


def note_sources(db: Db, note_ids: Sequence[str] | None = None) -> list[NoteSource]:
    """Notes with their ACL, tags and chunk ids (all of them, or some by id; unknown ids left out)."""
    if note_ids is None:
        return [_note(r) for r in db.conn.execute(_NOTE_SQL)]
    out: list[NoteSource] = []
    for batch in batches(list(dict.fromkeys(note_ids))):
        marks = ",".join("?" * len(batch))
        out.extend(_note(r) for r in db.conn.execute(_NOTE_SQL + f" WHERE n.note_id IN ({marks})", batch))
    return out


def note_versions(db: Db) -> dict[str, float]:
    """(note_id -> indexed_at) of every note: what the notes collection is diffed on."""
    return {str(n): float(t) for n, t in db.conn.execute("SELECT note_id, indexed_at FROM notes")}


def note_ids_at(db: Db, note_id: str, path: str) -> list[str]:
    """The ids of the notes stored now under a note id or a path: what a write replaces."""
    rows = db.conn.execute("SELECT note_id FROM notes WHERE note_id = ? OR path = ?", (note_id, path))
    return [str(r[0]) for r in rows]


def meta_rows(db: Db) -> dict[str, str]:
    return {str(k): str(v) for k, v in db.conn.execute("SELECT key, value FROM meta")}


def cached_count(db: Db) -> int:
    return int(db.one("SELECT count(*) FROM embedding_cache") or 0)


SPACES_META = "qdrant_spaces"  # the spaces registered in the index, a JSON list of [provider, model, dim, chunker]


def spaces_of(raw: str | None) -> list[Space]:
    return [Space(*entry) for entry in json.loads(raw or "[]")]


class SqliteView:
    """What ``QdrantVectors`` reads and writes besides Qdrant, on the indexing host: the chunks and
    their stamps, the registered spaces and the embedding cache, in the SQLite file. Every write
    advances its write generation and then calls ``published`` (the replicas' meta follows)."""

    def __init__(self, db: Db, stamps: Callable[[], dict[str, int]], published: Callable[[], None]) -> None:
        self.db, self._stamps, self._published = db, stamps, published
        self._cache = SqliteVectors(db)  # the embedding cache only (cached_vectors)

    def generation(self) -> int:
        return self.db.generation()

    def stamps(self) -> Mapping[str, int]:
        return self._stamps()

    def chunk_order(self) -> list[tuple[str, int]]:
        return chunk_order(self.db)

    def visible_ids(self, visibility: Visibility) -> list[str]:
        return visible_ids(self.db, visibility)

    def pending_chunks(self, chunk_ids: Sequence[str]) -> list[PendingChunk]:
        return [
            PendingChunk(s.chunk_id, s.stamp, s.embed_hash, embed_text_for(s.title, s.heading_path, s.text))
            for s in chunk_sources(self.db, chunk_ids, with_tokens=False)
        ]

    def filter_payloads(self, chunk_ids: Sequence[str]) -> dict[str, tuple[int, dict[str, Any]]]:
        """chunk id -> (its stamp, the filter payload its vectors carry)."""
        return {s.chunk_id: (s.stamp, filter_payload(s)) for s in chunk_sources(self.db, chunk_ids, with_tokens=False)}

    def spaces(self) -> list[Space]:
        return spaces_of(self.db.get_meta(SPACES_META, "[]"))

    def register_space(self, space: Space) -> None:
        with self.db.write():
            entries = [[s.provider, s.model, s.dim, s.chunker] for s in self.spaces()]
            entries.append([space.provider, space.model, space.dim, space.chunker])
            self.db.set_meta(SPACES_META, json.dumps(entries))
            self.db.bump()
        self._published()

    def advance(self) -> None:
        with self.db.write():
            self.db.bump()
        self._published()

    def cache(self, space: Space, items: Sequence[VectorItem]) -> None:
        with self.db.write():
            self.db.conn.executemany(
                "INSERT OR IGNORE INTO embedding_cache(space, embed_hash, vector) VALUES(?,?,?)",
                [(space.cache_key, i.embed_hash, np.asarray(i.vector, np.float32).tobytes()) for i in items],
            )

    def cached(self, space: Space, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        return self._cache.cached_vectors(space, hashes)
