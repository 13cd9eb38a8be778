"""The one place that opens SQLite.

The stdlib ``sqlite3`` on many Pythons cannot load extensions, so sunlib uses
APSW, a maintained wrapper that bundles a current SQLite (FTS5 included) and
allows extension loading; sqlite-vec is loaded from its PyPI wheel.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import sqlite_vec

BUSY_TIMEOUT_MS = 10_000
MMAP_BYTES = 1 << 30  # lets sqlite-vec scan vector chunks from the page cache without copies


def connect(path: Path | str, readonly: bool = False) -> apsw.Connection:
    """Open (creating if needed) a database with sqlite-vec loaded, WAL and foreign keys on."""
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn = apsw.Connection(str(path), flags=flags)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)
    if not readonly and str(path) != ":memory:":
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
    conn.execute("PRAGMA temp_store=MEMORY")
    return conn


def versions(conn: apsw.Connection | None = None) -> dict[str, str]:
    """SQLite, sqlite-vec and APSW versions, as `sunlib doctor` prints them."""
    own = conn is None
    c = conn or connect(":memory:")
    try:
        sqlite, vec, fts5 = c.execute(
            "SELECT sqlite_version(), vec_version(), sqlite_compileoption_used('ENABLE_FTS5')"
        ).fetchall()[0]
    finally:
        if own:
            c.close()
    return {"sqlite": str(sqlite), "sqlite_vec": str(vec), "apsw": apsw.apsw_version(), "fts5": str(bool(fts5))}
