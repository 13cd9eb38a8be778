"""The SQLite backend's shared parts: one connection, the write generation, and Visibility
compiled to SQL (a TEMP table of visible chunk rowids, reused until the next write)."""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw

from ..errors import IndexUnusable, StoreBusy, StoreCorrupt, StoreFull
from ..ingest.ids import sha256_hex
from .connection import connect
from .errors import FULL, translated
from .migrations import migrate
from .protocols import Visibility

OPEN_RETRY_S = 10.0  # how long opening a busy new index is retried
# BEGIN IMMEDIATE waits up to the busy timeout (connection.BUSY_TIMEOUT_MS) for the write lock;
# when it still answers busy it is tried again after these pauses (seconds), then StoreBusy.
WRITE_RETRY_PAUSES = (0.05, 0.1, 0.2)
VISIBLE_TABLES = 16  # cached visibility sets per connection (distinct principals/filters)


def open_connection(path: Path | str) -> apsw.Connection:
    """Connect and migrate. Opening a brand-new file switches it to WAL and migrates it; when other
    processes do the same at that moment SQLite may answer "locked" without waiting (it would
    deadlock), so the open is retried for a while before it is an error."""
    deadline = time.monotonic() + OPEN_RETRY_S
    while True:
        conn = None
        try:
            conn = connect(path)
            migrate(conn)
            return conn
        except apsw.BusyError as exc:
            _close(conn)
            if time.monotonic() > deadline:
                raise StoreBusy(f"cannot open index {path}: {exc}") from None
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            _close(conn)
            raise StoreCorrupt(f"cannot open index {path}: {exc}; run `sunlib doctor`") from None
        except apsw.FullError:
            _close(conn)
            raise StoreFull(FULL) from None
        except apsw.Error as exc:
            _close(conn)
            raise IndexUnusable(f"cannot open index {path}: {exc}") from None
        except BaseException:
            _close(conn)
            raise
        time.sleep(0.05)


def _close(conn: apsw.Connection | None) -> None:
    if conn is not None:
        conn.close()


def visible_sql(visibility: Visibility) -> tuple[str, list[Any]]:
    """SQL selecting the rowids of chunks the principals may see and the filters allow."""
    principals, filters = visibility.principals, visibility.filters
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
    if visibility.script is not None:
        where.append("c.script = ?")  # stored with the chunk (text.tokens.text_script)
        params.append(visibility.script)
    sql = "SELECT c.id FROM chunks c JOIN notes n ON n.id = c.note_rowid WHERE " + " AND ".join(where)
    return sql, params


class Db:
    """One connection to one index file, shared by the document, lexical and vector parts."""

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self.conn = open_connection(path)
        self._visible: OrderedDict[tuple[object, ...], str] = OrderedDict()
        self._resolved: str | None = None  # the file's resolved path (identity), found once
        self._writes = 0  # open write() blocks: while one is open, reads may see writes not yet committed

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction: see ``write``."""
        with self.write():
            yield

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction (deferred): several reads that see one state of the index."""
        with translated(), self.conn:
            yield

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """A write transaction that takes SQLite's write lock when it begins (``BEGIN IMMEDIATE``),
        so that its reads and writes see one state: a deferred transaction that reads first and
        writes later fails at once with SQLITE_BUSY when another connection committed in between
        (its snapshot is stale; waiting cannot help). Beginning is retried on busy with a bounded
        backoff; then it is StoreBusy, with nothing written. Nested, it is a savepoint of the outer
        transaction. Commits on success, rolls back on error."""
        with translated():
            self._writes += 1
            try:
                if not self.conn.getautocommit():
                    with self.conn:
                        yield
                    return
                self._begin_immediate()
                try:
                    yield
                except BaseException:
                    self._rollback()
                    raise
                try:
                    self.conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            finally:
                self._writes -= 1

    @property
    def writing(self) -> bool:
        """True inside ``write``: what is read now may still be rolled back."""
        return self._writes > 0

    def _begin_immediate(self) -> None:
        for pause in (*WRITE_RETRY_PAUSES, None):
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except apsw.BusyError:
                if pause is None:
                    raise
                time.sleep(pause)

    def _rollback(self) -> None:
        if not self.conn.getautocommit():  # SQLite may have rolled back already (a full disk, an I/O error)
            self.conn.execute("ROLLBACK")

    def one(self, sql: str, params: Any = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return row[0] if row else None

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else default

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def generation(self) -> int:
        return int(self.get_meta("generation", "0") or 0)

    def bump(self) -> int:
        """Advance the write generation (in the caller's transaction) and return it: in-memory
        caches key on it, and chunks written now carry it as their stamp."""
        row = self.conn.execute(
            "INSERT INTO meta(key, value) VALUES('generation', '1')"
            " ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1 RETURNING value"
        ).fetchone()
        assert row is not None  # RETURNING always yields the row it wrote
        return int(row[0])

    def identity(self) -> str:
        """A value that names this index file across connections (and changes if it is recreated)."""
        if str(self.path) == ":memory:":
            return f":memory:{id(self)}"
        if self._resolved is None:
            self._resolved = str(Path(self.path).resolve())
        return f"{self._resolved}#{self.get_meta('index_uuid', '')}"

    def visible_table(self, visibility: Visibility) -> str:
        """A TEMP table of the visible chunk rowids, built by visible_sql() and reused until the
        next write (keyed by the write generation): both routes probe it instead of re-running
        the ACL and filter joins over every chunk on every query (~6x faster BM25 at 100k)."""
        key = (self.generation(), *visibility.key)
        name = self._visible.get(key)
        if name is not None:
            self._visible.move_to_end(key)
            return name
        name = "visible_" + sha256_hex(repr(key))[:16]
        sql, params = visible_sql(visibility)
        with self.conn:
            self.conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} (id INTEGER PRIMARY KEY)")
            self.conn.execute(f"DELETE FROM temp.{name}")
            self.conn.execute(f"INSERT INTO temp.{name} {sql}", params)
        self._visible[key] = name
        while len(self._visible) > VISIBLE_TABLES:
            _, old = self._visible.popitem(last=False)
            # if a statement still reads it, the temp table goes when the connection closes
            with contextlib.suppress(apsw.LockedError):
                self.conn.execute(f"DROP TABLE IF EXISTS temp.{old}")
        return name


def batches(items: list[Any], size: int = 500) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def chunk_ids_of(db: Db, rowids: Sequence[int]) -> dict[int, str]:
    """The chunk ids of some chunk rowids (rows that are gone are left out)."""
    out: dict[int, str] = {}
    for batch in batches(list(rowids)):
        marks = ",".join("?" * len(batch))
        for rowid, chunk_id in db.conn.execute(f"SELECT id, chunk_id FROM chunks WHERE id IN ({marks})", batch):
            out[int(rowid)] = str(chunk_id)
    return out


def rowids_of(db: Db, chunk_ids: Sequence[str]) -> dict[str, int]:
    """The rowids of some chunk ids (unknown ids are left out)."""
    out: dict[str, int] = {}
    for batch in batches(list(dict.fromkeys(chunk_ids))):
        marks = ",".join("?" * len(batch))
        for chunk_id, rowid in db.conn.execute(f"SELECT chunk_id, id FROM chunks WHERE chunk_id IN ({marks})", batch):
            out[str(chunk_id)] = int(rowid)
    return out


def copy_database(source: Path, target: Path) -> str | None:
    """Copy the index file ``source`` (with what its WAL holds) to ``target`` through SQLite's
    backup API, then check the copy. None when the copy is whole; else why not (``target`` is
    then removed). ``source`` is only read."""
    try:
        src = connect(source, readonly=True)
        try:
            dst = connect(target)
            try:
                with dst.backup("main", src, "main") as backup:
                    backup.step(-1)
                found = [str(row[0]) for row in dst.execute("PRAGMA integrity_check")]
                dst.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                dst.close()
        finally:
            src.close()
    except apsw.Error as exc:
        found = [str(exc)]
    if found == ["ok"]:
        return None
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            Path(str(target) + suffix).unlink()
    return "; ".join(found[:3])
