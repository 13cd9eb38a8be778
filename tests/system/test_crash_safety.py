"""Crashes and faults: a killed `sunlib index` leaves a sound index that completes to a clean build;
the integrity checker catches broken indexes; readers keep working while another process indexes.

Kills are real SIGKILLs of `python -m sunlib index` subprocesses (the kill trials of
tests/harness/kill_trials.py, fewer and smaller); checks use sunlib.store.check.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.store import connect
from sunlib.store.check import check_index, differences, fingerprint
from sunlib.sync.indexing import NOTE_BATCH
from tests.harness import kill_trials as kt

ALL = ["public", "team", "ops"]


def start_index(vault: Path, index_dir: Path, home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        kt.index_command(vault),
        env=kt.index_env(index_dir, home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def one(db: Path, sql: str) -> int:
    conn = connect(db)
    try:
        row = conn.execute(sql).fetchone()
        return int(row[0]) if row and row[0] is not None else 0
    finally:
        conn.close()


def kill_when(proc: subprocess.Popen[str], db: Path, sql: str, until: float = 60.0) -> int:
    """Poll ``sql`` (a count) on the index until it is positive, then SIGKILL the indexer; the count seen."""
    deadline = time.monotonic() + until
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the indexer ended before the kill point: {proc.stderr and proc.stderr.read()}"
        try:
            seen = one(db, sql) if db.is_file() else 0
        except Exception:  # the schema is not there yet
            seen = 0
        if seen > 0:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return seen
        time.sleep(0.002)
    proc.kill()
    raise AssertionError("kill point not reached")


def complete_and_compare(vault: Path, index_dir: Path, home: Path, clean_dir: Path) -> None:
    kt.run_index(vault, index_dir, home)
    assert check_index(index_dir / kt.DB)["ok"]
    kt.clean_build(vault, clean_dir)
    queries = kt.matches()
    assert differences(fingerprint(index_dir / kt.DB, queries), fingerprint(clean_dir / kt.DB, queries)) == []


# -- kill trials -----------------------------------------------------------------------------


def test_kill_trials_leave_sound_indexes_that_complete_to_a_clean_build(tmp_path: Path) -> None:
    summary = kt.run_trials(trials=5, notes=120, seed=11, work=tmp_path, say=lambda line: None, measure=1)
    assert summary["trials"] == 5 and summary["kills"] >= 5
    assert summary["corrupt"] == 0, summary["failures"]
    assert summary["mismatches"] == 0, summary["failures"]


def test_kill_trials_with_the_hnsw_engine_leave_graphs_that_match_sqlite(tmp_path: Path) -> None:
    """The indexer saves the HNSW graph after its vector phase: kills land in text, vectors and
    graph saves; the completed index's graph files hold exactly SQLite's vectors (verify)."""
    summary = kt.run_trials(
        trials=2, notes=60, seed=12, work=tmp_path, say=lambda line: None, measure=1, engine="usearch"
    )
    assert summary["trials"] == 2 and summary["kills"] >= 2
    assert summary["corrupt"] == 0, summary["failures"]
    assert summary["mismatches"] == 0, summary["failures"]
    assert list((tmp_path / "index" / "sunlib.ann").glob("*.usearch"))


def test_kill_between_text_batches_keeps_whole_batches_and_completes(tmp_path: Path) -> None:
    vault = kt.build_vault(tmp_path / "vault", 3 * NOTE_BATCH + 20, seed=3)
    index_dir, home = tmp_path / "index", tmp_path / "home"
    db = index_dir / kt.DB
    proc = start_index(vault.root, index_dir, home)
    kill_when(proc, db, "SELECT count(*) FROM notes")
    report = check_index(db)
    assert report["ok"], report["problems"]
    notes = report["counts"]["notes"]
    assert notes > 0 and (notes % NOTE_BATCH == 0 or notes == len(vault.notes())), notes  # whole batches only
    assert report["counts"]["fts_rows"] == report["counts"]["chunks"]
    complete_and_compare(vault.root, index_dir, home, tmp_path / "clean")


def test_kill_while_embedding_keeps_a_searchable_index_that_completes(tmp_path: Path) -> None:
    vault = kt.build_vault(tmp_path / "vault", 120, seed=4)
    index_dir, home = tmp_path / "index", tmp_path / "home"
    db = index_dir / kt.DB
    proc = start_index(vault.root, index_dir, home)
    kill_when(proc, db, "SELECT count(*) FROM spaces")  # the text is in; vectors are being written
    report = check_index(db)
    assert report["ok"], report["problems"]
    assert report["counts"]["notes"] == len(vault.notes())
    [space] = report["spaces"]
    assert space["vectors"] + space["pending"] == report["counts"]["chunks"]
    with Library.open(vault.root, embedding={"provider": "hash"}, index_dir=index_dir) as lib:
        assert lib.search("garden tomato", mode="bm25", principals=ALL).hits
        assert lib.search("garden tomato", mode="hybrid", principals=ALL).hits
    complete_and_compare(vault.root, index_dir, home, tmp_path / "clean")


# -- the checker can fail --------------------------------------------------------------------


def _corrupt(db: Path, case: str) -> None:
    conn = connect(db)
    try:
        vec = str(conn.execute("SELECT vec_table FROM spaces").fetchone()[0])
        rowid = int(conn.execute("SELECT id FROM chunks ORDER BY id LIMIT 1 OFFSET 7").fetchone()[0])
        if case == "chunk row gone, its FTS and vector rows left":
            conn.execute("DELETE FROM chunks WHERE id = ?", (rowid,))
        elif case == "FTS row gone":
            conn.execute("DELETE FROM chunks_fts WHERE rowid = ?", (rowid,))
        elif case == "vector of a missing chunk":
            blob = conn.execute(f"SELECT embedding FROM {vec} WHERE rowid = ?", (rowid,)).fetchone()[0]
            conn.execute(f"INSERT INTO {vec}(rowid, embedding) VALUES(?, ?)", (10**9, blob))
        elif case == "vector of an older version of its chunk":
            conn.execute("UPDATE vector_stamps SET stamp = stamp + 1000 WHERE chunk_rowid = ?", (rowid,))
        elif case == "stamp left without its vector":
            conn.execute(f"DELETE FROM {vec} WHERE rowid = ?", (rowid,))
        elif case == "vector rowid map out of step":
            conn.execute(f"DELETE FROM {vec}_rowids WHERE rowid = ?", (rowid,))
        elif case == "note gone, its rows left":
            conn.execute("PRAGMA foreign_keys=OFF")
            conn.execute("DELETE FROM notes WHERE id = (SELECT note_rowid FROM chunks WHERE id = ?)", (rowid,))
        else:
            raise AssertionError(case)
    finally:
        conn.close()


CORRUPTIONS = {
    "chunk row gone, its FTS and vector rows left": ["full-text rows without a chunk", "vectors of missing chunks"],
    "FTS row gone": ["chunks without a full-text row"],
    "vector of a missing chunk": ["vectors of missing chunks"],
    "vector of an older version of its chunk": ["vectors computed from another version of their chunk"],
    "vector rowid map out of step": ["slot in"],
    "stamp left without its vector": ["vector stamps without a vector"],
    "note gone, its rows left": ["chunks rows of missing notes", "note_acl rows of missing notes"],
}


@pytest.fixture(scope="module")
def indexed_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample vault indexed with the hash embedder, closed (no WAL left): a db file to copy."""
    from tests.support.paths import SAMPLE_VAULT

    root = tmp_path_factory.mktemp("sample")
    vault = root / "vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".sunlib"))
    with Library.open(vault, embedding={"provider": "hash"}, index_dir=root / "index") as lib:
        lib.index()
        assert lib.store.check()["ok"]  # the same check through the store
    return root / "index" / kt.DB


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_checker_reports_a_deliberately_broken_index(indexed_sample: Path, tmp_path: Path, case: str) -> None:
    db = tmp_path / kt.DB
    shutil.copy(indexed_sample, db)
    sound = check_index(db)
    assert sound["ok"] and sound["integrity_check"] == "ok" and sound["fts_integrity_check"] == "ok"
    assert sound["counts"]["chunks"] == sound["counts"]["fts_rows"] == sound["spaces"][0]["vectors"] > 0

    _corrupt(db, case)
    report = check_index(db)
    assert not report["ok"]
    for expected in CORRUPTIONS[case]:
        assert any(expected in problem for problem in report["problems"]), (expected, report["problems"])


def test_doctor_finds_orphan_and_stale_vectors_and_repair_reconciles_them(indexed_sample: Path, tmp_path: Path) -> None:
    index_dir, home = tmp_path / "index", tmp_path / "home"
    index_dir.mkdir()
    shutil.copy(indexed_sample, index_dir / kt.DB)
    vault = indexed_sample.parent.parent / "vault"
    _corrupt(index_dir / kt.DB, "vector of a missing chunk")
    _corrupt(index_dir / kt.DB, "vector of an older version of its chunk")

    def doctor(*args: str) -> tuple[int, dict[str, Any]]:
        cmd = [sys.executable, "-m", "sunlib", "doctor", "--json", "-V", str(vault), *args]
        r = subprocess.run(cmd, env=kt.index_env(index_dir, home), capture_output=True, text=True, timeout=120)
        return r.returncode, json.loads(r.stdout)

    code, found = doctor()
    assert code == 1 and found["integrity"] == "problems"
    assert any("vectors of missing chunks" in p for p in found["problems"]), found["problems"]
    assert any("another version of their chunk" in p for p in found["problems"]), found["problems"]
    code, repaired = doctor("--repair")
    assert code == 0 and repaired["problems"] == [], repaired["problems"]
    (space,) = repaired["repaired"]
    assert (space["orphans_removed"], space["stale_removed"], space["pending"]) == (1, 1, 1)
    kt.run_index(vault, index_dir, home)  # the stale vector's chunk is embedded again
    report = check_index(index_dir / kt.DB)
    assert report["ok"] and report["spaces"][0]["pending"] == 0


def test_checker_reports_a_damaged_file(indexed_sample: Path, tmp_path: Path) -> None:
    db = tmp_path / kt.DB
    shutil.copy(indexed_sample, db)
    conn = connect(db)
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    root = int(conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chunks'").fetchone()[0])
    conn.close()
    with db.open("r+b") as f:  # scribble over the root page of the chunks table
        f.seek((root - 1) * page_size)
        f.write(b"\xa5" * page_size)
    report = check_index(db)
    assert not report["ok"]
    assert report["problems"]


# -- readers while another process writes ------------------------------------------------------


def test_readers_keep_working_while_another_process_indexes(tmp_path: Path) -> None:
    vault = kt.build_vault(tmp_path / "vault", 60, seed=8)
    index_dir, home = tmp_path / "index", tmp_path / "home"
    kt.run_index(vault.root, index_dir, home)  # readers open an existing index
    for _ in range(60):
        vault.add()
    for _ in range(20):
        vault.edit()
    for _ in range(5):
        vault.delete()

    stop = threading.Event()
    indexing = threading.Event()
    tracebacks: list[str] = []
    during: dict[str, int] = {"search": 0, "ask": 0}
    lock = threading.Lock()

    ready = threading.Barrier(4)  # the readers and this thread: models loaded before the index starts

    def reader(kind: str, queries: list[str]) -> None:
        with Library.open(vault.root, embedding={"provider": "hash"}, index_dir=index_dir) as lib:
            if kind == "ask":
                lib.ask(queries[0], principals=ALL)
            else:
                for mode in ("bm25", "hybrid", "dense"):
                    lib.search(queries[0], mode=mode, principals=ALL, limit=10)
            ready.wait(timeout=120)
            i = 0
            while not stop.is_set():
                q = queries[i % len(queries)]
                i += 1
                busy = indexing.is_set()
                try:
                    if kind == "ask":
                        result: Any = lib.ask(q, principals=ALL)
                        assert result is not None
                    else:
                        lib.search(q, mode=("bm25", "hybrid", "dense")[i % 3], principals=ALL, limit=10)
                except Exception:
                    with lock:
                        tracebacks.append(traceback.format_exc())
                    continue
                if busy and indexing.is_set():
                    with lock:
                        during[kind] += 1

    queries = ["vector index recovery", "garden tomato", "向量 索引", "crash journal", "river bridge backup"]
    threads = [
        threading.Thread(target=reader, args=("search", queries)),
        threading.Thread(target=reader, args=("search", queries[::-1])),
        threading.Thread(target=reader, args=("ask", queries)),
    ]
    for t in threads:
        t.start()
    try:
        ready.wait(timeout=120)  # else the first queries load the models while the whole run goes by
        indexing.set()
        proc = start_index(vault.root, index_dir, home)
        _, stderr = proc.communicate(timeout=120)
        indexing.clear()
        assert proc.returncode == 0, stderr
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    # Regression: a search used to read its candidate rowids and then the chunk rows in separate
    # WAL snapshots, and raised KeyError when the indexer committed in between; the routes and
    # the rows now come from one read transaction (SqliteStore.snapshot).
    assert tracebacks == []
    assert during["search"] > 0, during
    report = check_index(index_dir / kt.DB)
    assert report["ok"], report["problems"]
    assert report["counts"]["notes"] == len(vault.notes())


def test_many_openers_of_a_new_index_migrate_it_once(tmp_path: Path) -> None:
    """Regression: two processes opening a brand-new index at once both ran migration 1, and the
    loser failed with "table meta already exists"; the version is now re-read under BEGIN IMMEDIATE."""
    import threading

    from sunlib.store import SqliteStore
    from sunlib.store.migrations import SCHEMA_VERSION

    errors: list[str] = []
    for trial in range(15):
        db = tmp_path / f"new-{trial}.db"
        barrier = threading.Barrier(6)

        def open_it(db: Path = db, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                store = SqliteStore(db)
                assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
                store.close()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert errors == []


# -- two writers -------------------------------------------------------------------------------


def test_two_index_processes_on_one_vault_never_leave_orphan_vectors(tmp_path: Path) -> None:
    # Both processes read the same notes as changed, so each rewrites chunks whose old versions the
    # other is embedding. A vector computed from a chunk that was rewritten or deleted meanwhile
    # must be refused (its stamp is gone), never stored under a row that no chunk owns.
    vault = kt.build_vault(tmp_path / "vault", notes=60, seed=5)
    index_dir, home = tmp_path / "idx", tmp_path / "home"
    for round_ in range(4):
        if round_:
            vault.mutate(25)
        procs = [start_index(vault.root, index_dir, home) for _ in range(2)]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
        report = check_index(index_dir / kt.DB)
        assert report["ok"], (round_, report["problems"])
        for space in report["spaces"]:
            assert space["pending"] == 0, (round_, space)
    queries = kt.matches()
    clean = tmp_path / "clean"
    kt.run_index(vault.root, clean, home)
    assert differences(fingerprint(index_dir / kt.DB, queries), fingerprint(clean / kt.DB, queries)) == []
