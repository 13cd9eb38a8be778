"""Races and faults that must not lose the caller's write.

- A write transaction that reads first and writes later (a note create's sync) while another
  connection commits: it must take the write lock up front (BEGIN IMMEDIATE), not fail.
- The index locked past the busy timeout, or the disk full, while a note is written over the
  API: the answer is 503 or 507, and neither the file nor the index changed.
- Two indexers: one holds the indexer lock, the other waits with one line; a killed holder
  never leaves it held; PATCHes during a rebuild end in a consistent index, and the job's
  progress never counts past its total.

Everything is real: SQLite files, a second connection holding the lock, a small tmpfs for the
full disk (mounting needs root: those tests skip without it), subprocesses for the lock.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import apsw
import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from sunlib import Library
from sunlib.config import EmbeddingSettings
from sunlib.errors import IndexerBusy
from sunlib.library import notes as notes_service
from sunlib.providers.embedders.hashing import HashEmbedder
from sunlib.providers.registry import Kind, register_embedder
from sunlib.server import create_app
from sunlib.store import SqliteStore, connect
from sunlib.store import connection as store_connection
from sunlib.store.check import check_index
from sunlib.store.lock import indexer_lock
from sunlib.sync.notes_io import TEMP_SUFFIX
from tests.support.clients import sunlib

TOUR = "getting-started/quick-tour.md"


def call(app: FastAPI, method: str, url: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1234), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.request(method, url, **kwargs)

    return asyncio.run(go())


def note_id_of(lib: Library, path: str) -> str:
    return lib.store.note_states_of([path])[path].note_id


def leftovers(vault: Path) -> list[Path]:
    return [p for p in vault.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


# -- 10: busy database -------------------------------------------------------------------------


def test_a_write_transaction_that_reads_first_survives_a_commit_in_between(tmp_path: Path) -> None:
    # sync_paths reads the notes it will replace, then writes. In a deferred transaction that read
    # pins a snapshot; another connection's commit in between makes the write fail at once
    # (SQLITE_BUSY, no waiting can help). With BEGIN IMMEDIATE the other writer waits instead.
    db = tmp_path / "index.db"
    store = SqliteStore(db)
    read, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with store.transaction():
                store.get_meta("x")
                read.set()
                go_on.wait(10)
                store.set_meta("x", "mine")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    assert read.wait(10)
    other = connect(db)
    other.set_busy_timeout(200)
    try:
        other.execute("INSERT INTO meta(key, value) VALUES('y', 'theirs')")
        other_committed = True
    except apsw.BusyError:
        other_committed = False  # it waited for the write lock the transaction took up front
    finally:
        go_on.set()
        thread.join(10)
    assert errors == [], errors
    assert store.get_meta("x") == "mine"
    assert not other_committed
    other.close()
    store.close()


@pytest.fixture
def app(hash_library: Library) -> Iterator[FastAPI]:
    application = create_app(hash_library)
    yield application
    application.state.sunlib.jobs.close()


def test_a_create_the_index_cannot_take_answers_503_and_leaves_no_file(
    app: FastAPI, hash_library: Library, hash_vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_connection, "BUSY_TIMEOUT_MS", 100)  # new connections wait 0.1 s, not 10 s
    rel = "inbox/busy.md"
    holder = connect(hash_library.db_path)
    holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock, as a vectors job does
    holder.execute("INSERT INTO meta(key, value) VALUES('held', '1')")
    try:
        r = call(app, "POST", "/api/notes", json={"path": rel, "content": "# Busy\n\nbusyword here.\n"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert r.status_code == 503, r.text
    assert r.json()["error"] == "store_busy"
    assert not (hash_vault / rel).exists()  # nothing landed: the file was taken back
    assert not (hash_vault / "inbox").exists()  # nor the folder made for it
    assert leftovers(hash_vault) == []
    listed = call(app, "GET", "/api/notes", params={"folder": "inbox"}).json()
    assert listed["total"] == 0
    again = call(app, "POST", "/api/notes", json={"path": rel, "content": "# Busy\n\nbusyword here.\n"})
    assert again.status_code == 201, again.text  # a retry works (it was 409: the file had stayed)
    assert call(app, "GET", f"/api/notes/{again.json()['note_id']}").status_code == 200


def test_patch_delete_and_move_the_index_cannot_take_change_nothing(
    app: FastAPI, hash_library: Library, hash_vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_connection, "BUSY_TIMEOUT_MS", 100)
    note_id = note_id_of(hash_library, TOUR)
    before = (hash_vault / TOUR).read_bytes()
    holder = connect(hash_library.db_path)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO meta(key, value) VALUES('held', '1')")
    try:
        patched = call(app, "PATCH", f"/api/notes/{note_id}", json={"content": "# New\n\nnew text.\n"})
        deleted = call(app, "DELETE", f"/api/notes/{note_id}")
        moved = call(app, "POST", f"/api/notes/{note_id}/move", json={"new_path": "elsewhere/tour.md"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [patched.status_code, deleted.status_code, moved.status_code] == [503, 503, 503]
    assert (hash_vault / TOUR).read_bytes() == before
    assert not (hash_vault / "elsewhere").exists()
    assert leftovers(hash_vault) == []
    got = call(app, "GET", f"/api/notes/{note_id}")
    assert got.status_code == 200 and got.json()["in_sync"] and got.json()["path"] == TOUR


# -- 11: disk full -----------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill the disk but ``leave`` bytes; the WAL is checkpointed and truncated first, so the
    index's next write needs new blocks (a reused WAL would not)."""
    for db in disk.rglob("sunlib.db"):
        conn = connect(db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def big_text(words: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    body = " ".join(f"w{int(n)}x{seed}" for n in rng.integers(0, 10**9, size=words))
    return f"# Big {seed}\n\n{body}\n"


def test_a_full_disk_fails_writes_whole_and_changes_nothing(small_disk: Path) -> None:
    vault = small_disk / "vault"
    (vault / "notes").mkdir(parents=True)
    (vault / "notes" / "a.md").write_text("# A\n\nalpha text.\n", encoding="utf-8")
    (vault / "notes" / "b.md").write_text("# B\n\nbeta text.\n", encoding="utf-8")
    (vault / "notes" / "b.metadata.yaml").write_text("tags: [kept]\n", encoding="utf-8")
    # the index on the same small disk as the vault (by default it lives under SUNLIB_HOME)
    lib = Library.open(vault, embedding={"provider": "hash"}, index_dir=small_disk / "index")
    lib.index()
    application = create_app(lib)
    try:
        a_id, b_id = note_id_of(lib, "notes/a.md"), note_id_of(lib, "notes/b.md")
        a_before, b_before = (vault / "notes/a.md").read_bytes(), (vault / "notes/b.md").read_bytes()
        filler = fill(small_disk, leave=150_000)  # room for the new file, not for its index rows

        patched = call(application, "PATCH", f"/api/notes/{a_id}", json={"content": big_text(6_000, 1)})
        assert patched.status_code == 507, patched.text
        assert patched.json()["error"] == "store_full"
        assert (vault / "notes/a.md").read_bytes() == a_before  # the old file, intact
        got = call(application, "GET", f"/api/notes/{a_id}")
        assert got.status_code == 200 and got.json()["in_sync"], got.text
        assert got.json()["content"] == a_before.decode()

        created = call(application, "POST", "/api/notes", json={"path": "new/big.md", "content": big_text(6_000, 2)})
        assert created.status_code == 507, created.text
        assert not (vault / "new").exists()

        filler.unlink()
        filler = fill(small_disk, leave=0)  # links and renames need no blocks; the index does
        deleted = call(application, "DELETE", f"/api/notes/{b_id}")
        moved = call(application, "POST", f"/api/notes/{b_id}/move", json={"new_path": "moved/b.md"})
        assert [deleted.status_code, moved.status_code] == [507, 507], (deleted.text, moved.text)
        assert (vault / "notes/b.md").read_bytes() == b_before
        assert (vault / "notes/b.metadata.yaml").read_text(encoding="utf-8") == "tags: [kept]\n"
        assert not (vault / "moved").exists()
        assert call(application, "GET", f"/api/notes/{b_id}").json()["in_sync"]
        assert leftovers(vault) == []

        filler.unlink()  # space again: the same PATCH works
        patched = call(application, "PATCH", f"/api/notes/{a_id}", json={"content": big_text(6_000, 1)})
        assert patched.status_code == 200, patched.text
        assert call(application, "GET", f"/api/notes/{a_id}").json()["in_sync"]
    finally:
        application.state.sunlib.jobs.close()
        lib.close()
    report = check_index(lib.db_path)
    assert report["ok"], report["problems"]


# -- 12: one indexer per index -------------------------------------------------------------------

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)  # as sunlib.store.lock does: an earlier holder's longer pid leaves no digits behind
os.write(fd, f"{os.getpid()}\\n".encode())
print("held", flush=True)
time.sleep(120)
"""  # another process holding the lock file as sunlib.store.lock does (without importing sunlib: fast)


def test_a_killed_holder_never_leaves_the_indexer_lock_held(tmp_path: Path) -> None:
    db = tmp_path / "sunlib.db"
    lock = indexer_lock(db)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(IndexerBusy, match=f"pid {proc.pid}"):
            lock.acquire(wait=0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        with lock.held(wait=10):  # the kernel dropped it with the process
            assert lock.held_here
        assert not lock.held_here
    finally:
        proc.kill()
        proc.wait()


def test_a_note_write_while_another_process_indexes_answers_503_and_changes_nothing(
    app: FastAPI, hash_library: Library, hash_vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notes_service, "WRITE_WAIT_S", 0.2)
    lock = hash_library.indexer_lock
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        r = call(app, "POST", "/api/notes", json={"path": "inbox/later.md", "content": "# Later\n\nlater.\n"})
    finally:
        proc.kill()
        proc.wait()
    assert r.status_code == 503 and r.json()["error"] == "indexer_busy", r.text
    assert f"pid {proc.pid}" in r.json()["message"]
    assert not (hash_vault / "inbox").exists()
    again = call(app, "POST", "/api/notes", json={"path": "inbox/later.md", "content": "# Later\n\nlater.\n"})
    assert again.status_code == 201, again.text


def test_a_second_indexer_waits_with_one_line_for_the_first(hash_library: Library, hash_vault: Path) -> None:
    (hash_vault / "while-held.md").write_text("# Held\n\nheldword.\n", encoding="utf-8")
    lock = hash_library.indexer_lock
    lock.acquire()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sunlib", "index", str(hash_vault), "--provider", "hash", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the waiter says so once, then waits
        assert line.startswith("waiting: another indexer") and f"pid {os.getpid()}" in line, line
        assert proc.poll() is None
        assert "while-held.md" not in hash_library.store.note_states()  # it has not written meanwhile
    finally:
        lock.release()
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 0, rest
    assert rest.strip() == ""
    assert "while-held.md" in hash_library.store.note_states()


class GatedEmbedder(HashEmbedder):
    """The hash embedder whose first passage batch waits for the test to let it go: a rebuild's
    vectors phase held open while PATCHes land."""

    provider = "gated"
    started: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        if kind == "passage" and not GatedEmbedder.release.is_set():
            GatedEmbedder.started.set()
            GatedEmbedder.release.wait(30)
        return super().embed_batch(texts, kind)


@register_embedder("gated")
def _gated(settings: EmbeddingSettings) -> GatedEmbedder:
    return GatedEmbedder(settings.dimensions or 64)


def test_patches_racing_a_rebuild_end_consistent_and_progress_stays_within_total(vault: Path) -> None:
    GatedEmbedder.started.clear()
    GatedEmbedder.release.clear()
    lib = Library.open(vault, embedding={"provider": "gated", "batch_size": 4})
    application = create_app(lib)
    try:
        job = call(application, "POST", "/api/index/rebuild").json()
        assert GatedEmbedder.started.wait(60), "the rebuild never reached its vectors phase"
        notes = [n["note_id"] for n in call(application, "GET", "/api/notes", params={"limit": 6}).json()["notes"]]
        for i, note_id in enumerate(notes):  # each PATCH adds chunks the rebuild did not count
            text = "# Rewritten\n\n" + "\n\n".join(f"## Part {k}\n\nracing{i} part{k} text." for k in range(4))
            r = call(application, "PATCH", f"/api/notes/{note_id}", json={"content": text})
            assert r.status_code == 200, r.text
        GatedEmbedder.release.set()
        state = application.state.sunlib
        deadline = time.monotonic() + 120
        while (found := state.jobs.get(job["job_id"])) is not None and not found.finished:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for kind in ("rebuild", "embed"):
            for other in state.jobs.recent(kind, n=100):
                while not other.finished:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
        assert found is not None and found.status == "done", found and found.error
        progress = [e for _, e in found.events_after(0) if e["event"] == "progress"]
        assert progress and all(e["progress"]["done"] <= e["progress"]["total"] for e in progress), [
            e["progress"] for e in progress if e["progress"]["done"] > e["progress"]["total"]
        ]
    finally:
        GatedEmbedder.release.set()
        application.state.sunlib.jobs.close()
        lib.close()
    report = check_index(lib.db_path)
    assert report["ok"], report["problems"]
    (space,) = report["spaces"]
    assert space["pending"] == 0 and space["vectors"] == report["counts"]["chunks"]


def test_the_next_index_reconciles_every_space(hash_library: Library, hash_vault: Path) -> None:
    # a vector of a missing chunk in a space that is not the active one: `sunlib index` repairs it
    store = hash_library.store
    other = hash_library.with_settings(embedding={"provider": "counting"})
    other.index()
    table = next(s.name for s in store.vectors.spaces() if s.name.startswith("counting"))
    vec = store.conn.execute("SELECT vec_table FROM spaces WHERE name = ?", (table,)).fetchone()[0]
    blob = store.conn.execute(f"SELECT embedding FROM {vec} LIMIT 1").fetchone()[0]
    store.conn.execute(f"INSERT INTO {vec}(rowid, embedding) VALUES(?, ?)", (10**9, blob))
    assert not check_index(hash_library.db_path)["ok"]
    hash_library.index()
    report = check_index(hash_library.db_path)
    assert report["ok"], report["problems"]


def test_doctor_finds_a_stamp_without_its_vector_and_repair_removes_it(hash_library: Library, hash_vault: Path) -> None:
    store = hash_library.store
    vec = store.conn.execute("SELECT vec_table FROM spaces").fetchone()[0]
    store.conn.execute(f"DELETE FROM {vec} WHERE rowid = (SELECT min(rowid) FROM {vec})")  # its stamp stays
    found = sunlib("doctor", "--json", "-V", str(hash_vault))
    assert found.returncode == 1
    problems = json.loads(found.stdout)["problems"]
    assert any("vector stamps without a vector" in p for p in problems), problems
    repaired = sunlib("doctor", "--repair", "--json", "-V", str(hash_vault))
    assert repaired.returncode == 0, repaired.stdout
    assert json.loads(repaired.stdout)["problems"] == []
