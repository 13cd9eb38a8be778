"""The SQLite backend itself: schema, query plans, versions, and its errors at the store boundary."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from sunlib import Library
from sunlib.contracts import SearchFilters
from sunlib.errors import StoreBusy, StoreCorrupt
from sunlib.store import SqliteStore, Visibility, connect, versions
from sunlib.store.db import visible_sql
from sunlib.store.fts5 import bm25_sql
from sunlib.store.migrations import SCHEMA_VERSION
from sunlib.store.sqlite_vec import knn_sql
from tests.support.paths import ROOT


def plan(lib: Library, sql: str, params: list[object]) -> list[str]:
    return [str(row[3]) for row in lib.store.conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def test_schema_version_and_tables(hash_library: Library) -> None:
    conn = hash_library.store.conn
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table')")}
    assert {"notes", "chunks", "note_acl", "note_tags", "note_meta", "chunks_fts", "spaces", "embedding_cache"} <= names
    assert hash_library.space.vec_table in names


def test_bm25_plan_matches_text_first_and_filters_by_the_visible_set(hash_library: Library) -> None:
    table = hash_library.store.db.visible_table(Visibility(("public",), SearchFilters(tags=("search",))))
    steps = plan(hash_library, bm25_sql(table), ['"search"', 10])
    assert steps[0].startswith("SCAN chunks_fts VIRTUAL TABLE INDEX") and ":M" in steps[0]
    assert "=" not in steps[0].split("INDEX", 1)[1]  # the rowid list does not drive the full-text scan
    assert any(table in s for s in steps)  # ...but filters it, inside the same statement


def test_knn_plan_carries_the_visibility_constraint(hash_library: Library) -> None:
    space = hash_library.space
    table = hash_library.store.db.visible_table(Visibility(("public",)))
    q = np.zeros(space.dim, dtype=np.float32).tobytes()
    steps = plan(hash_library, knn_sql(space, table), [q, 5])
    assert steps[0].startswith(f"SCAN {space.vec_table} VIRTUAL TABLE")
    assert any(table in s for s in steps)


def test_visible_set_is_the_acl_and_filter_sql_and_follows_writes(hash_library: Library) -> None:
    store = hash_library.store
    for principals, filters in ((["public"], SearchFilters()), (["ops"], SearchFilters(folders=("internal",)))):
        visibility = Visibility(tuple(principals), filters)
        table = store.db.visible_table(visibility)
        cached = sorted(r[0] for r in store.conn.execute(f"SELECT id FROM temp.{table}"))
        sql, params = visible_sql(visibility)
        assert cached == sorted(r[0] for r in store.conn.execute(sql, params))
        assert store.db.visible_table(visibility) == table  # reused while nothing is written
    before = store.db.visible_table(Visibility(("public",)))
    (hash_library.vault / "fresh.md").write_text("# Fresh\n\nA brand new public note.\n", encoding="utf-8")
    hash_library.index()
    after = store.db.visible_table(Visibility(("public",)))
    assert after != before  # a write makes a new visible set
    assert hash_library.search("brand new public note", mode="bm25", limit=1).hits[0].path == "fresh.md"


def test_fully_embedded_sees_another_connections_write_and_not_its_own_rollback(hash_library: Library) -> None:
    space, path = hash_library.space, hash_library.db_path
    with SqliteStore(path) as reader, SqliteStore(path) as writer:
        assert reader.vectors.fully_embedded(space)
        rowid = writer.conn.execute("SELECT max(rowid) FROM chunks").fetchone()[0]
        with pytest.raises(RuntimeError), writer.db.write():
            writer.db.bump()
            writer.conn.execute(f"DELETE FROM {space.vec_table} WHERE rowid=?", (rowid,))
            assert not writer.vectors.fully_embedded(space)  # seen inside the write, not kept past it
            raise RuntimeError("roll back")
        with writer.db.write():
            writer.db.bump()  # the generation the rolled-back write had, now with every vector in place
        assert writer.vectors.fully_embedded(space)
        chunk_id = writer.conn.execute("SELECT chunk_id FROM chunks WHERE id=?", (rowid,)).fetchone()[0]
        writer.vectors.delete(space, [chunk_id])
        assert not reader.vectors.fully_embedded(space)


def test_versions_report_sqlite_and_sqlite_vec() -> None:
    info = versions(connect(":memory:"))
    major, minor = (int(x) for x in info["sqlite"].split(".")[:2])
    assert (major, minor) >= (3, 43)  # contentless_delete FTS5 tables need 3.43
    assert info["sqlite_vec"] == "v0.1.9" and info["fts5"] == "True"


# -- errors at the store boundary ----------------------------------------------------------------


def test_nothing_above_the_store_imports_apsw() -> None:
    src = ROOT / "src" / "sunlib"
    importers = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if "store" not in p.relative_to(src).parts[:1] and re.search(r"^\s*(import|from) apsw\b", p.read_text(), re.M)
    ]
    assert importers == []


def test_a_file_that_is_not_an_index_is_store_corrupt(tmp_path: Path) -> None:
    db = tmp_path / "sunlib.db"
    db.write_bytes(b"this is not a database, just some text that fills a page" * 100)
    with pytest.raises(StoreCorrupt, match="cannot open index"):
        SqliteStore(db)


def test_a_writer_held_past_the_busy_timeout_is_store_busy(hash_library: Library) -> None:
    store = hash_library.store
    store.conn.set_busy_timeout(50)  # this backend's knob: the test waits 50 ms instead of 10 s
    other = connect(hash_library.db_path)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreBusy, match="busy"):
            store.set_meta("probe", "1")
        with pytest.raises(StoreBusy), store.transaction():
            store.set_meta("probe", "2")
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.set_meta("probe", "3")  # the lock is gone: writes work again
    assert store.get_meta("probe") == "3"


# -- deletion -----------------------------------------------------------------------------------


def vec_tables(store: SqliteStore) -> list[str]:
    return [r[0] for r in store.conn.execute("SELECT vec_table FROM spaces")]


ALL = ["public", "team", "ops"]


def test_deleted_note_vanishes_from_every_table(vault: Path) -> None:
    target = "internal/ops-runbook.md"
    phrase = "The rebuild window is Sunday 02:00 UTC."
    lib = Library.open(vault, embedding={"provider": "hash"})
    lib.index()
    # a second space, so "every vec table" means more than one
    with Library.open(vault, embedding={"provider": "counting"}) as other:
        other.index()
    store = lib.store
    assert len(vec_tables(store)) == 2

    note_rowid = store.conn.execute("SELECT id FROM notes WHERE path=?", (target,)).fetchone()[0]
    rowids = [r[0] for r in store.conn.execute("SELECT id FROM chunks WHERE note_rowid=?", (note_rowid,))]
    marks = ",".join("?" * len(rowids))
    owned = {
        "notes": ("SELECT count(*) FROM notes WHERE id=?", [note_rowid]),
        "chunks": (f"SELECT count(*) FROM chunks WHERE id IN ({marks})", rowids),
        "note_acl": ("SELECT count(*) FROM note_acl WHERE note_rowid=?", [note_rowid]),
        "note_tags": ("SELECT count(*) FROM note_tags WHERE note_rowid=?", [note_rowid]),
        "note_meta": ("SELECT count(*) FROM note_meta WHERE note_rowid=?", [note_rowid]),
    }
    for table in vec_tables(store):
        owned[table] = (f"SELECT count(*) FROM {table} WHERE rowid IN ({marks})", rowids)

    def fts_rowids() -> set[int]:
        return {r[0] for r in store.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH '\"sunday\"'")}

    for name, (sql, params) in owned.items():
        assert store.conn.execute(sql, params).fetchone()[0] > 0, f"precondition: {name} holds the note"
    assert fts_rowids() & set(rowids)
    hits = lib.search(phrase, mode="bm25", principals=["public", "ops"]).hits
    assert hits[0].path == target

    (vault / target).unlink()
    report = lib.index()
    assert report.deleted == [target]
    assert report.added == report.changed == report.moved == []

    for name, (sql, params) in owned.items():
        assert store.conn.execute(sql, params).fetchone()[0] == 0, f"{name} still holds the deleted note"
    assert not fts_rowids() & set(rowids)
    assert not fts_rowids()  # "sunday" appeared nowhere else
    assert target not in store.note_states()
    for mode in ("bm25", "hybrid"):
        result = lib.search(phrase, mode=mode, principals=ALL, limit=50)
        assert all(h.path != target for h in result.hits), mode
    assert lib.search("Sunday", mode="bm25", principals=ALL).hits == ()
    assert store.integrity_check() == "ok"
    lib.close()


def test_an_index_from_before_stored_scripts_gets_them_once(hash_library: Library) -> None:
    """Schema 8 stores each chunk's script. An index of schema 7 opened by this sunlib is
    classified in the migration: the same scripts as chunks written now, and the same narrowing."""
    from sunlib.text.tokens import text_script

    store = hash_library.store
    rows = store.conn.execute("SELECT id, text, script FROM chunks").fetchall()
    assert {s for _, _, s in rows} == {"cjk", "other"}  # the sample vault has both
    assert all(script == text_script(text) for _, text, script in rows)
    narrowed = {
        script: sorted(r[0] for r in store.conn.execute(*visible_sql(Visibility(("public", "ops")).in_script(script))))
        for script in ("cjk", "other")
    }
    path = hash_library.db_path
    hash_library.close()
    conn = connect(path)
    conn.execute("ALTER TABLE chunks DROP COLUMN script")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION - 1}")
    conn.close()
    with SqliteStore(path) as old:
        assert old.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert old.conn.execute("SELECT id, text, script FROM chunks").fetchall() == rows
        for script, ids in narrowed.items():
            visibility = Visibility(("public", "ops")).in_script(script)
            assert sorted(r[0] for r in old.conn.execute(*visible_sql(visibility))) == ids
