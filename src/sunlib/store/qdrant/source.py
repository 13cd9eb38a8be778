"""What the Qdrant indexes read from the SQLite document store they are composed with.

The SQLite file stays the source of truth for notes and chunks (and their FTS5 rows); the
Qdrant collections are derived from it and converge on it. These are the few reads that
derivation needs, in SQL, kept in the store package like every other query.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..db import Db, batches
from ..protocols import Visibility, chunk_tokens
from .points import ChunkSource

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
    """(chunk_id, stamp) of every chunk in note then reading order: the order of ``pending``."""
    rows = db.conn.execute("SELECT chunk_id, stamp FROM chunks ORDER BY note_rowid, ordinal")
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
