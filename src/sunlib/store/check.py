"""Index integrity: is an index file internally consistent? And what is its logical content?

``check_index(path)`` answers the first question after a crash or a kill: SQLite's own
``PRAGMA integrity_check``, FTS5's ``integrity-check`` command, and the cross-table
invariants the store keeps in one transaction per batch (every chunk has exactly one
full-text row, every vector row belongs to a chunk and carries its chunk's generation
stamp, nothing hangs off a missing note) and the counts per space (the vec0 table, its rowid
map and the stamps agree; no more vectors than chunks). ``sunlib doctor`` runs all of it.
Vector problems are what ``sunlib doctor --repair`` (``SqliteStore.reconcile``) fixes.
A partially built index (notes without vectors yet, notes still to be added) is
consistent; a half-written batch is not.

``fingerprint(path, matches)`` answers the second: the index's content with its
storage-specific parts (rowids, timestamps, the embedding cache) left out, so that two
indexes of the same vault state compare equal however they were built.

Both open the file themselves (never creating it, never migrating it) and change nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from .connection import connect

FTS = "chunks_fts"
# FTS5's `integrity-check` on a contentless table checks the index's own structure (segments,
# doclists, the tombstones contentless_delete keeps) but cannot compare it with any content;
# with rank=1 it also checks the contentless_delete tombstone counts.
FTS_INTEGRITY = f"INSERT INTO {FTS}({FTS}, rank) VALUES('integrity-check', 1)"
MAX_LISTED = 20  # offending rowids listed per problem


def _one(conn: apsw.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def _ids(conn: apsw.Connection, sql: str) -> list[int]:
    return [int(r[0]) for r in conn.execute(f"{sql} LIMIT {MAX_LISTED}")]


def _tables(conn: apsw.Connection) -> set[str]:
    return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _open(db_path: Path | str) -> apsw.Connection:
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"no index at {path}")
    # read-write (not read-only): after a kill, opening runs WAL recovery, which writes the -shm file
    return connect(path)


def check_index(db_path: Path | str) -> dict[str, Any]:
    """Check one index file. Returns ``{"ok": bool, "problems": [...], "integrity_check": ...,
    "fts_integrity_check": ..., "counts": {...}, "spaces": [...]}``; ``ok`` is True when
    ``problems`` is empty. Raises FileNotFoundError when there is no file at all."""
    conn = _open(db_path)
    try:
        return check_connection(conn)
    finally:
        conn.close()


def check_connection(conn: apsw.Connection) -> dict[str, Any]:
    """``check_index`` on an open connection (read only)."""
    problems: list[str] = []
    report: dict[str, Any] = {"ok": False, "problems": problems, "counts": {}, "spaces": []}
    try:
        _check(conn, report, problems)
    except apsw.Error as exc:  # a damaged file can fail any query
        problems.append(f"checking stopped: {type(exc).__name__}: {exc}")
    report["ok"] = not problems
    return report


def _check(conn: apsw.Connection, report: dict[str, Any], problems: list[str]) -> None:

    try:
        results = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    except apsw.Error as exc:  # a file that is not a database at all
        results = [f"{type(exc).__name__}: {exc}"]
    report["integrity_check"] = "ok" if results == ["ok"] else results
    if results != ["ok"]:
        problems.append("PRAGMA integrity_check: " + "; ".join(results[:MAX_LISTED]))
        if results and results[0].startswith(("NotADBError", "CorruptError")):
            return

    version = int(_one(conn, "PRAGMA user_version") or 0)
    report["schema_version"] = version
    tables = _tables(conn)
    if version == 0 and not tables:
        return  # an empty file: killed before the schema was written
    required = {"notes", "chunks", "note_acl", "note_tags", "note_meta", "spaces", FTS, f"{FTS}_docsize"}
    missing = sorted(required - tables)
    if missing:
        problems.append(f"schema v{version} lacks tables: {', '.join(missing)}")
        return

    try:
        conn.execute(FTS_INTEGRITY)
        report["fts_integrity_check"] = "ok"
    except apsw.Error as exc:
        report["fts_integrity_check"] = f"{type(exc).__name__}: {exc}"
        problems.append(f"FTS5 integrity-check: {type(exc).__name__}: {exc}")

    counts = {
        "notes": int(_one(conn, "SELECT count(*) FROM notes")),
        "chunks": int(_one(conn, "SELECT count(*) FROM chunks")),
        "fts_rows": int(_one(conn, f"SELECT count(*) FROM {FTS}_docsize")),
    }
    report["counts"] = counts

    # every chunk has its full-text row and every full-text row its chunk (rowid = chunks.id)
    lost = _ids(conn, f"SELECT id FROM chunks WHERE id NOT IN (SELECT id FROM {FTS}_docsize)")
    if lost:
        problems.append(f"chunks without a full-text row: {lost}")
    stray = _ids(conn, f"SELECT id FROM {FTS}_docsize WHERE id NOT IN (SELECT id FROM chunks)")
    if stray:
        problems.append(f"full-text rows without a chunk: {stray}")
    fts_count = int(_one(conn, f"SELECT count(*) FROM {FTS}"))
    if fts_count != counts["fts_rows"]:
        problems.append(f"{FTS} counts {fts_count} rows but its docsize table holds {counts['fts_rows']}")

    # nothing hangs off a missing note
    for table, column in (("chunks", "note_rowid"), ("note_acl", "note_rowid"), ("note_tags", "note_rowid")):
        orphans = _ids(conn, f"SELECT DISTINCT {column} FROM {table} WHERE {column} NOT IN (SELECT id FROM notes)")
        if orphans:
            problems.append(f"{table} rows of missing notes: {orphans}")
    orphans = _ids(conn, "SELECT DISTINCT note_rowid FROM note_meta WHERE note_rowid NOT IN (SELECT id FROM notes)")
    if orphans:
        problems.append(f"note_meta rows of missing notes: {orphans}")
    gaps = _ids(
        conn,
        "SELECT note_rowid FROM chunks GROUP BY note_rowid HAVING min(ordinal) != 0 OR max(ordinal) != count(*) - 1",
    )
    if gaps:
        problems.append(f"notes whose chunk ordinals are not 0..n-1: {gaps}")
    fk = [tuple(r) for r in conn.execute("PRAGMA foreign_key_check")]
    if fk:
        problems.append(f"foreign key violations: {fk[:MAX_LISTED]}")

    # every vector belongs to a chunk; every space has its table
    spaces: list[dict[str, Any]] = []
    rows: list[tuple[Any, ...]] = conn.execute("SELECT name, dim, vec_table FROM spaces ORDER BY name").fetchall()
    for name, dim, table in rows:
        entry: dict[str, Any] = {"name": name, "vec_table": table}
        spaces.append(entry)
        if table not in tables or f"{table}_rowids" not in tables:
            problems.append(f"space {name}: vector table {table} is missing")
            continue
        entry["vectors"] = int(_one(conn, f"SELECT count(*) FROM {table}_rowids"))
        entry["pending"] = int(
            _one(conn, f"SELECT count(*) FROM chunks WHERE id NOT IN (SELECT rowid FROM {table}_rowids)")
        )
        stray = _ids(conn, f"SELECT rowid FROM {table}_rowids WHERE rowid NOT IN (SELECT id FROM chunks)")
        if stray:
            problems.append(f"space {name}: vectors of missing chunks: {stray}")
        _count_vectors(conn, name, table, counts["chunks"], entry, problems)
        if "vector_stamps" in tables:
            stale = [
                int(r[0])
                for r in conn.execute(
                    f"SELECT v.rowid FROM {table}_rowids v JOIN chunks c ON c.id = v.rowid"
                    " LEFT JOIN vector_stamps s ON s.space = ? AND s.chunk_rowid = v.rowid"
                    f" WHERE s.stamp IS NULL OR s.stamp != c.stamp LIMIT {MAX_LISTED}",
                    (name,),
                )
            ]
            if stale:
                problems.append(f"space {name}: vectors computed from another version of their chunk: {stale}")
        misplaced = _vec_slots(conn, table)
        if misplaced:
            problems.append(f"space {name}: vector rows whose slot in {table}_chunks disagrees: {misplaced}")
        if f"{table}_vector_chunks00" in tables:
            blobless = _ids(
                conn,
                f"SELECT chunk_id FROM {table}_chunks"
                f" WHERE chunk_id NOT IN (SELECT rowid FROM {table}_vector_chunks00)",
            )
            if blobless:
                problems.append(f"space {name}: vector chunks without their vector blob: {blobless}")
        bad_cache = int(
            _one(
                conn,
                "SELECT count(*) FROM embedding_cache WHERE space = ? AND length(vector) != ?",
                (name.rsplit(":", 1)[0], 4 * int(dim)),
            )
        )
        if bad_cache:
            problems.append(f"space {name}: {bad_cache} cached vectors of the wrong length")
    if "vector_stamps" in tables:
        unknown = [
            str(r[0])
            for r in conn.execute(
                "SELECT DISTINCT space FROM vector_stamps WHERE space NOT IN (SELECT name FROM spaces)"
            )
        ]
        if unknown:
            problems.append(f"vector stamps of unknown spaces: {unknown[:MAX_LISTED]}")
    report["spaces"] = spaces


def _count_vectors(
    conn: apsw.Connection, name: str, table: str, chunks: int, entry: dict[str, Any], problems: list[str]
) -> None:
    """A space's counts agree: the vec0 table and its rowid map hold as many rows, no more
    vectors than chunks, and one stamp per vector (a stamp without its vector is a leftover)."""
    scanned = int(_one(conn, f"SELECT count(*) FROM {table}"))
    if scanned != entry["vectors"]:
        problems.append(f"space {name}: {table} scans {scanned} vectors but its rowid map holds {entry['vectors']}")
    if entry["vectors"] > chunks:
        problems.append(f"space {name}: {entry['vectors']} vectors for {chunks} chunks")
    if not {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE name = 'vector_stamps'")}:
        return
    stamps = int(_one(conn, "SELECT count(*) FROM vector_stamps WHERE space = ?", (name,)))
    entry["stamps"] = stamps
    loose = [
        int(r[0])
        for r in conn.execute(
            "SELECT chunk_rowid FROM vector_stamps WHERE space = ?"
            f" AND chunk_rowid NOT IN (SELECT rowid FROM {table}_rowids) LIMIT {MAX_LISTED}",
            (name,),
        )
    ]
    if loose:
        problems.append(f"space {name}: vector stamps without a vector: {loose}")
    elif stamps != entry["vectors"]:
        problems.append(f"space {name}: {stamps} vector stamps for {entry['vectors']} vectors")


def _vec_slots(conn: apsw.Connection, table: str) -> list[int]:
    """Rowids whose entry in sqlite-vec's ``_rowids`` shadow does not match the slot it names in
    ``_chunks`` (the slot's validity bit must be set and hold that rowid), plus valid slots that
    no ``_rowids`` entry claims. sqlite-vec keeps both in step in one transaction."""
    slots: dict[tuple[int, int], int] = {}
    for chunk_id, size, validity, rowids in conn.execute(
        f"SELECT chunk_id, size, validity, rowids FROM {table}_chunks"
    ):
        ids = np.frombuffer(bytes(rowids), dtype="<i8")
        bits = np.unpackbits(np.frombuffer(bytes(validity), dtype=np.uint8), bitorder="little")
        for offset in np.flatnonzero(bits[: int(size)]):
            slots[(int(chunk_id), int(offset))] = int(ids[offset])
    bad: list[int] = []
    claimed: set[tuple[int, int]] = set()
    for rowid, chunk_id, offset in conn.execute(f"SELECT rowid, chunk_id, chunk_offset FROM {table}_rowids"):
        key = (int(chunk_id if chunk_id is not None else -1), int(offset if offset is not None else -1))
        claimed.add(key)
        if slots.get(key) != int(rowid):
            bad.append(int(rowid))
    bad.extend(rowid for key, rowid in slots.items() if key not in claimed)
    return sorted(bad)[:MAX_LISTED]


def fingerprint(db_path: Path | str, matches: Sequence[str] = ()) -> dict[str, Any]:
    """The logical content of an index, for comparing two builds of one vault state: notes
    (ids, paths, metadata, ACL, tags), chunks (ids, texts, offsets), the full-text vocabulary,
    every full-text match (chunk id and BM25 rounded to 6 places) of each FTS5 query in
    ``matches``, and per space the vector count and a digest of each chunk's vector.
    Rowids, timestamps, run logs and the embedding cache are left out."""
    conn = _open(db_path)
    try:
        notes = {
            str(r[0]): {
                "path": r[1],
                "title": r[2],
                "metadata": json.loads(r[3]),
                "links": json.loads(r[4]),
                "content_hash": r[5],
                "mtime": r[6],
                "chunker": r[7],
                "acl": sorted(json.loads(r[8])),
                "tags": sorted(json.loads(r[9])),
                "meta": sorted(json.loads(r[10])),
            }
            for r in conn.execute(
                "SELECT n.note_id, n.path, n.title, n.metadata, n.links, n.content_hash, n.mtime, n.chunker,"
                " (SELECT json_group_array(principal) FROM note_acl WHERE note_rowid = n.id),"
                " (SELECT json_group_array(tag) FROM note_tags WHERE note_rowid = n.id),"
                " (SELECT json_group_array(key || '=' || value) FROM note_meta WHERE note_rowid = n.id)"
                " FROM notes n"
            )
        }
        chunks = {
            str(r[0]): list(r[1:])
            for r in conn.execute(
                "SELECT c.chunk_id, n.note_id, c.ordinal, c.heading_path, c.text, c.start16, c.end16,"
                " c.start_line, c.end_line, c.token_count, c.embed_hash"
                " FROM chunks c JOIN notes n ON n.id = c.note_rowid"
            )
        }
        vocab = sorted((str(t), int(d), int(n)) for t, d, n in conn.execute("SELECT term, doc, cnt FROM chunks_vocab"))
        fts: dict[str, list[tuple[str, float]]] = {}
        for match in matches:
            rows = conn.execute(
                f"SELECT c.chunk_id, bm25({FTS}) FROM {FTS} JOIN chunks c ON c.id = {FTS}.rowid WHERE {FTS} MATCH ?",
                (match,),
            )
            fts[match] = sorted((str(cid), round(float(score), 6)) for cid, score in rows)
        spaces: dict[str, dict[str, Any]] = {}
        for name, table in conn.execute("SELECT name, vec_table FROM spaces").fetchall():
            digests = {
                str(cid): hashlib.sha256(bytes(blob)).hexdigest()[:16]
                for cid, blob in conn.execute(
                    f"SELECT c.chunk_id, v.embedding FROM {table} v JOIN chunks c ON c.id = v.rowid"
                )
            }
            spaces[str(name)] = {"vectors": int(_one(conn, f"SELECT count(*) FROM {table}")), "digests": digests}
        return {"notes": notes, "chunks": chunks, "vocab": vocab, "fts": fts, "spaces": spaces}
    finally:
        conn.close()


def differences(a: dict[str, Any], b: dict[str, Any], limit: int = 5) -> list[str]:
    """What differs between two fingerprints (empty when they are equal), a few examples per part."""
    out: list[str] = []
    for part in ("notes", "chunks"):
        ka, kb = set(a[part]), set(b[part])
        if ka - kb:
            out.append(f"{part} only in the first: {sorted(ka - kb)[:limit]}")
        if kb - ka:
            out.append(f"{part} only in the second: {sorted(kb - ka)[:limit]}")
        changed = sorted(k for k in ka & kb if a[part][k] != b[part][k])
        if changed:
            out.append(f"{part} that differ: {changed[:limit]}")
    if a["vocab"] != b["vocab"]:
        diff = sorted(set(map(tuple, a["vocab"])) ^ set(map(tuple, b["vocab"])))
        out.append(f"full-text vocabulary differs: {diff[:limit]}")
    for match in sorted(set(a["fts"]) | set(b["fts"])):
        if a["fts"].get(match) != b["fts"].get(match):
            out.append(f"full-text results differ for {match!r}")
    for name in sorted(set(a["spaces"]) | set(b["spaces"])):
        sa, sb = a["spaces"].get(name), b["spaces"].get(name)
        if sa is None or sb is None:
            out.append(f"space {name} only in the {'second' if sa is None else 'first'}")
        elif sa["vectors"] != sb["vectors"]:
            out.append(f"space {name}: {sa['vectors']} vs {sb['vectors']} vectors")
        elif sa["digests"] != sb["digests"]:
            out.append(f"space {name}: vectors differ")
    return out
