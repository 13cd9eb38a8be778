"""The SQLite DocumentStore: notes, chunks, ACL, tags, metadata, runs and meta."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..contracts import Chunk, Note
from ..ingest.ids import sha256_hex
from ..text.tokens import text_script
from .db import Db, batches, visible_sql
from .errors import at_boundary
from .protocols import (
    LOCAL_OWNER,
    ChunkRow,
    Counts,
    NoteFile,
    NoteRecord,
    NoteState,
    NoteSummary,
    RunRecord,
    RunSummary,
    Visibility,
    embed_text_for,
)

_CHUNK_COLUMNS = (
    "c.id, c.chunk_id, c.ordinal, c.heading_path, c.text, c.start16, c.end16, c.start_line, c.end_line,"
    " n.note_id, n.path, n.title, (SELECT json_group_array(tag) FROM note_tags t WHERE t.note_rowid = n.id)"
)
RUN_COLUMNS = "run_id, kind, created_at, principals, question, refused, total_ms"
# A run is readable by principals that hold every principal it was asked as (param: JSON array).
RUN_READABLE = (
    "NOT EXISTS (SELECT 1 FROM json_each(r.principals) p WHERE p.value NOT IN (SELECT value FROM json_each(?)))"
)
# ...and only by its owner (param: the owner; NULL for every owner's, an admin's read).
RUN_OWNED = "r.owner = coalesce(?, r.owner)"


def _chunk(r: Sequence[Any]) -> ChunkRow:
    return ChunkRow(
        r[1], r[2], tuple(json.loads(r[3])), r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], tuple(json.loads(r[12]))
    )


@at_boundary
class SqliteDocuments:
    """Notes and chunks in SQLite. Deleting a chunk also drops its full-text row and its vectors
    in the same transaction (one file can); other backends' vectors converge by reconcile."""

    def __init__(self, db: Db) -> None:
        self.db = db

    # -- meta and transactions ---------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        return self.db.get_meta(key, default)

    def set_meta(self, key: str, value: str) -> None:
        self.db.set_meta(key, value)

    def generation(self) -> int:
        return self.db.generation()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """``with store.transaction(): ...`` commits on success and rolls back on error."""
        with self.db.transaction():
            yield

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Several reads that see one state of the index, even while another process commits
        (a read transaction in WAL mode)."""
        with self.db.snapshot():
            yield

    # -- notes ---------------------------------------------------------------------------------

    def note_states(self) -> dict[str, NoteState]:
        rows = self.db.conn.execute("SELECT note_id, path, content_hash, mtime, chunker FROM notes")
        return {r[1]: NoteState(*r) for r in rows}

    def note_states_of(self, paths: Sequence[str]) -> dict[str, NoteState]:
        """note_states() for some paths only (those not indexed are left out)."""
        out: dict[str, NoteState] = {}
        for batch in batches(list(dict.fromkeys(paths))):
            marks = ",".join("?" * len(batch))
            for r in self.db.conn.execute(
                f"SELECT note_id, path, content_hash, mtime, chunker FROM notes WHERE path IN ({marks})", batch
            ):
                out[r[1]] = NoteState(*r)
        return out

    def upsert_note(
        self, note: Note, chunks: Sequence[Chunk], fts_tokens: Sequence[Sequence[str]], chunker: str
    ) -> None:
        """Replace a note and everything derived from it; its chunks carry the new generation as
        their stamp. Call inside a transaction."""
        c = self.db.conn
        stamp = self.db.bump()
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
                " start_line, end_line, token_count, embed_hash, stamp, script) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
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
                    stamp,
                    text_script(chunk.text),
                ),
            )
            c.execute("INSERT INTO chunks_fts(rowid, tokens) VALUES(?, ?)", (c.last_insert_rowid(), " ".join(tokens)))

    def delete_note(self, path: str) -> bool:
        row = self.db.conn.execute("SELECT id FROM notes WHERE path=?", (path,)).fetchone()
        if row is None:
            return False
        with self.db.write():
            self._delete_note_rowid(int(row[0]))
        return True

    def _delete_note_rowid(self, note_rowid: int) -> None:
        c = self.db.conn
        self.db.bump()
        rowids = [r[0] for r in c.execute("SELECT id FROM chunks WHERE note_rowid=?", (note_rowid,))]
        if rowids:
            marks = ",".join("?" * len(rowids))
            c.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", rowids)
            for name, table in c.execute("SELECT name, vec_table FROM spaces").fetchall():
                c.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", rowids)
                c.execute(f"DELETE FROM vector_stamps WHERE space = ? AND chunk_rowid IN ({marks})", [name, *rowids])
        c.execute("DELETE FROM notes WHERE id=?", (note_rowid,))  # cascades to chunks, acl, tags, meta

    def note_by_id(self, note_id: str) -> NoteRecord | None:
        row = self.db.conn.execute(
            "SELECT id, note_id, path, title, metadata, links, content_hash, mtime, indexed_at"
            " FROM notes WHERE note_id=?",
            (note_id,),
        ).fetchone()
        if row is None:
            return None
        acl = tuple(
            str(r[0]) for r in self.db.conn.execute("SELECT principal FROM note_acl WHERE note_rowid=?", (row[0],))
        )
        links = tuple(json.loads(row[5]))
        return NoteRecord(row[1], row[2], row[3], json.loads(row[4]), links, row[6], row[7], acl, row[8])

    def iter_notes(self) -> list[tuple[str, str, str]]:
        """(note_id, path, title) of every note, by path."""
        rows = self.db.conn.execute("SELECT note_id, path, title FROM notes ORDER BY path")
        return [(str(a), str(b), str(c)) for a, b, c in rows]

    def list_notes(
        self,
        principals: Sequence[str],
        folder: str | None = None,
        tag: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[NoteSummary], int]:
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
        total = self.db.one(f"SELECT count(*) FROM notes n WHERE {condition}", params)
        rows = self.db.conn.execute(
            f"SELECT n.note_id, n.path, n.title, n.metadata, n.mtime FROM notes n WHERE {condition}"
            " ORDER BY n.path LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        notes = []
        for note_id, path, title, metadata, mtime in rows:
            meta = json.loads(metadata)
            tags = meta.get("tags", []) if isinstance(meta, dict) else []
            notes.append(NoteSummary(note_id, path, title, tuple(tags), meta, mtime))
        return notes, int(total or 0)

    def note_files(
        self, principals: Sequence[str] | None, paths: Sequence[str] | None = None, limit: int = 0, offset: int = 0
    ) -> tuple[list[NoteFile], int]:
        """(indexed notes as files by path, how many match): those the principals may see (None:
        all), optionally only some paths; ``limit`` 0 means all."""
        where, params = ["1"], list[Any]()
        if principals is not None:
            marks = ",".join("?" * len(principals)) or "NULL"
            where.append(f"EXISTS (SELECT 1 FROM note_acl a WHERE a.note_rowid = n.id AND a.principal IN ({marks}))")
            params.extend(principals)
        if paths is not None:
            wanted = list(dict.fromkeys(paths))
            where.append("n.path IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(wanted))
        condition = " AND ".join(where)
        total = int(self.db.one(f"SELECT count(*) FROM notes n WHERE {condition}", params) or 0)
        page = f" LIMIT {int(limit)} OFFSET {int(offset)}" if limit else ""
        rows = self.db.conn.execute(
            "SELECT n.note_id, n.path, n.indexed_at,"
            " (SELECT json_group_array(principal) FROM note_acl a WHERE a.note_rowid = n.id),"
            " (SELECT json_group_array(chunk_id) FROM (SELECT chunk_id FROM chunks c"
            "  WHERE c.note_rowid = n.id ORDER BY c.ordinal))"
            f" FROM notes n WHERE {condition} ORDER BY n.path{page}",
            params,
        )
        files = [
            NoteFile(note_id, path, tuple(sorted(json.loads(acl))), tuple(json.loads(chunks)), indexed_at)
            for note_id, path, indexed_at, acl, chunks in rows
        ]
        return files, total

    def note_paths_under(self, folder: str) -> list[str]:
        """The indexed paths under a vault-relative folder, any depth (a range scan of the
        path index: '0' is the character after '/')."""
        prefix = folder.strip("/")
        if not prefix:
            return [p for _, p, _ in self.iter_notes()]
        rows = self.db.conn.execute(
            "SELECT path FROM notes WHERE path >= ? AND path < ? ORDER BY path", (prefix + "/", prefix + "0")
        )
        return [str(r[0]) for r in rows]

    # -- chunks --------------------------------------------------------------------------------

    def _rows(self, rowids: Sequence[int]) -> list[ChunkRow]:
        """Chunks by rowid, in the order given (a row deleted in between is left out)."""
        found: dict[int, ChunkRow] = {}
        for batch in batches(list(rowids)):
            marks = ",".join("?" * len(batch))
            for r in self.db.conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN notes n ON n.id = c.note_rowid WHERE c.id IN ({marks})",
                batch,
            ):
                found[int(r[0])] = _chunk(r)
        return [found[i] for i in rowids if i in found]

    def chunks_of_note(self, note_id: str) -> list[ChunkRow]:
        ids = [
            int(r[0])
            for r in self.db.conn.execute(
                "SELECT c.id FROM chunks c JOIN notes n ON n.id=c.note_rowid WHERE n.note_id=? ORDER BY c.ordinal",
                (note_id,),
            )
        ]
        return self._rows(ids)

    def chunks_by_ids(self, chunk_ids: Sequence[str]) -> list[ChunkRow]:
        """Chunks by their stable ids, in the order given (unknown ids are left out)."""
        found: dict[str, ChunkRow] = {}
        for batch in batches(list(dict.fromkeys(chunk_ids))):
            marks = ",".join("?" * len(batch))
            for r in self.db.conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN notes n ON n.id = c.note_rowid"
                f" WHERE c.chunk_id IN ({marks})",
                batch,
            ):
                found[str(r[1])] = _chunk(r)
        return [found[c] for c in chunk_ids if c in found]

    def neighbours(self, chunk_id: str, radius: int) -> list[ChunkRow]:
        """Chunks of the same note within ``radius`` ordinals of this one (itself excluded), in
        reading order. They share the note's ACL and metadata, so they are exactly as visible."""
        ids = [
            int(r[0])
            for r in self.db.conn.execute(
                "SELECT c.id FROM chunks c JOIN chunks s ON s.note_rowid = c.note_rowid"
                " WHERE s.chunk_id = ? AND c.id != s.id AND abs(c.ordinal - s.ordinal) <= ? ORDER BY c.ordinal",
                (chunk_id, radius),
            )
        ]
        return self._rows(ids)

    def visible_chunk_ids(self, visibility: Visibility) -> list[str]:
        """Ids of the chunks a visibility lets through, by rowid (insertion) order."""
        sql, params = visible_sql(visibility)
        rows = self.db.conn.execute(f"SELECT chunk_id FROM chunks WHERE id IN ({sql}) ORDER BY id", params)
        return [str(r[0]) for r in rows]

    def count_visible(self, visibility: Visibility) -> int:
        """How many chunks a visibility lets through (a count of its cached TEMP table)."""
        return int(self.db.one(f"SELECT count(*) FROM temp.{self.db.visible_table(visibility)}") or 0)

    def filter_visible(self, visibility: Visibility, chunk_ids: Sequence[str]) -> set[str]:
        """The chunk ids among ``chunk_ids`` that a visibility lets through."""
        table = self.db.visible_table(visibility)
        found: set[str] = set()
        for batch in batches(list(dict.fromkeys(chunk_ids))):
            marks = ",".join("?" * len(batch))
            rows = self.db.conn.execute(
                f"SELECT chunk_id FROM chunks WHERE chunk_id IN ({marks}) AND id IN (SELECT id FROM temp.{table})",
                batch,
            )
            found.update(str(r[0]) for r in rows)
        return found

    def counts(self) -> Counts:
        return Counts(
            int(self.db.one("SELECT count(*) FROM notes") or 0),
            int(self.db.one("SELECT count(*) FROM chunks") or 0),
            int(self.db.one("SELECT count(*) FROM embedding_cache") or 0),
        )

    # -- runs ----------------------------------------------------------------------------------

    def save_run(self, run: RunRecord) -> None:
        """Persist one run (its frame and trace are JSON-ready documents) as its owner's."""
        with self.db.write():
            self.db.conn.execute(
                "INSERT OR REPLACE INTO runs(run_id, kind, created_at, principals, question, refused, total_ms,"
                " frame, trace, owner) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    run.run_id,
                    run.kind,
                    run.created_at,
                    json.dumps(sorted(set(run.principals))),
                    run.question,
                    int(run.refused),
                    run.total_ms,
                    json.dumps(run.frame, ensure_ascii=False),
                    json.dumps(run.trace, ensure_ascii=False),
                    run.owner,
                ),
            )

    def list_runs(
        self,
        principals: Sequence[str],
        limit: int = 20,
        offset: int = 0,
        kind: str | None = None,
        *,
        owner: str | None = LOCAL_OWNER,
    ) -> list[RunSummary]:
        """The runs of ``owner`` (None: every owner's) the principals may read (every principal the run
        was asked as is among them), newest first; with ``kind``, only runs of that kind ("ask", "eval")."""
        rows = self.db.conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs r WHERE {RUN_OWNED} AND {RUN_READABLE} AND (? IS NULL OR kind = ?)"
            " ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?",
            (owner, json.dumps(list(principals)), kind, kind, limit, offset),
        )
        return [run_summary(r) for r in rows]

    def get_run(self, run_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER) -> RunRecord | None:
        """One run with its frame and trace, or None when it does not exist, is not ``owner``'s (None:
        any owner's) or the principals may not read it."""
        row = self.db.conn.execute(
            f"SELECT {RUN_COLUMNS}, frame, trace, owner FROM runs r WHERE {RUN_OWNED} AND {RUN_READABLE}"
            " AND run_id = ?",
            (owner, json.dumps(list(principals)), run_id),
        ).fetchone()
        if row is None:
            return None
        return run_record(row)


def run_summary(r: Sequence[Any]) -> RunSummary:
    return RunSummary(str(r[0]), str(r[1]), float(r[2]), tuple(json.loads(r[3])), str(r[4]), bool(r[5]), float(r[6]))


def run_record(r: Sequence[Any]) -> RunRecord:
    """A run from its ``RUN_COLUMNS``, then frame, trace and owner."""
    summary = dataclasses.asdict(run_summary(r))
    return RunRecord(**summary, frame=json.loads(r[7]), trace=json.loads(r[8]), owner=str(r[9]))


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
