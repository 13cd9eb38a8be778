"""Watch mode: a real watcher (watchfiles) on a temp vault, and the CLI's ``index --watch``.

Every assertion polls the index with a timeout (``until``); none sleeps a fixed time. The
watcher's tests read the index through the store, never through ``Library.search``, whose
read-path check (sunlib.sync.freshness) would re-index a changed file itself and hide a watcher bug.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sunlib import Library
from sunlib.store import NoteState, Visibility
from sunlib.sync.watch import Watcher, ignored
from tests.support.clients import ctrl_c_default, sunlib

TIMEOUT = 15.0  # seconds: generous for a loaded machine; a passing run takes well under one


def until(check: Callable[[], object], what: str, timeout: float = TIMEOUT) -> object:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Library, Watcher]]:
    """One small vault, indexed with the hash embedder, and a watcher running on it."""
    root = tmp_path_factory.mktemp("watched")
    vault = root / "vault"
    (vault / "dir").mkdir(parents=True)
    (vault / "sub").mkdir()
    notes = {
        "edit.md": "# Edit\n\nThe quick brown fox.\n",
        "atomic.md": "# Atomic\n\nSaved by an editor.\n",
        "move.md": "# Move\n\nA note that moves somewhere else.\n",
        "gone.md": "# Gone\n\nA note to delete.\n",
        "acl.md": "# Secret plans\n\nA public note for now.\n",
        "side.md": "# Side\n\nA note with a sidecar later.\n",
        "dir/one.md": "# One\n\nFirst note of a folder.\n",
        "dir/two.md": "# Two\n\nSecond note of a folder.\n",
    }
    for rel, text in notes.items():
        (vault / rel).write_text(text, encoding="utf-8")
    with pytest.MonkeyPatch.context() as env:
        for key in [k for k in os.environ if k.startswith("SUNLIB_")]:
            env.delenv(key)
        env.setenv("SUNLIB_HOME", str(root / "home"))
        lib = Library.open(vault, embedding={"provider": "hash"}, index_dir=root / "index")
        lib.index()
        watcher = Watcher(lib, vectors=lambda embed: embed())
        watcher.start()
        assert watcher.ready.wait(TIMEOUT), "the watcher did not start"
        yield lib, watcher
        watcher.stop()
        lib.close()


def state(lib: Library, path: str) -> NoteState | None:
    return lib.store.note_states_of([path]).get(path)


def text_of(lib: Library, path: str) -> str:
    st = state(lib, path)
    return "\n".join(c.text for c in lib.store.chunks_of_note(st.note_id)) if st else ""


def test_an_edit_is_indexed_then_embedded(watched: tuple[Library, Watcher]) -> None:
    lib, watcher = watched
    (lib.vault / "edit.md").write_text("# Edit\n\nThe quick brown fox jumps over xylophones.\n", encoding="utf-8")
    until(lambda: "xylophones" in text_of(lib, "edit.md"), "the edit in the text index")
    st = state(lib, "edit.md")
    assert st is not None
    chunk_ids = [c.chunk_id for c in lib.store.chunks_of_note(st.note_id)]
    until(lambda: not lib.store.vectors.without_vectors(lib.space, chunk_ids), "the edit's vectors")
    until(lambda: "edit.md" not in watcher.board.queued(), "the board to settle")
    assert "edit.md" not in watcher.board.failed()


def test_an_atomic_save_is_one_note_and_temp_files_are_ignored(watched: tuple[Library, Watcher]) -> None:
    lib, _ = watched
    before = state(lib, "atomic.md")
    assert before is not None
    (lib.vault / ".atomic.md.0a1b2c3d.sunlib-tmp").write_text("# left by a killed server\n", encoding="utf-8")
    tmp = lib.vault / "atomic.md.tmp4242"  # an editor's temp file, renamed over the note
    tmp.write_text("# Atomic\n\nSaved by an editor, atomically: quokka.\n", encoding="utf-8")
    os.replace(tmp, lib.vault / "atomic.md")
    until(lambda: "quokka" in text_of(lib, "atomic.md"), "the atomic save")
    after = state(lib, "atomic.md")
    assert after is not None and after.note_id == before.note_id
    indexed = lib.store.note_states()
    assert not [p for p in indexed if "tmp" in p], indexed.keys()


def test_a_move_keeps_the_note_id(watched: tuple[Library, Watcher]) -> None:
    lib, _ = watched
    before = state(lib, "move.md")
    assert before is not None
    os.rename(lib.vault / "move.md", lib.vault / "sub" / "moved.md")
    moved = until(lambda: state(lib, "sub/moved.md"), "the note at its new path")
    assert isinstance(moved, NoteState) and moved.note_id == before.note_id
    assert state(lib, "move.md") is None


def test_a_folder_rename_keeps_every_note_id(watched: tuple[Library, Watcher]) -> None:
    lib, _ = watched
    ids = {rel: state(lib, f"dir/{rel}") for rel in ("one.md", "two.md")}
    os.rename(lib.vault / "dir", lib.vault / "renamed")
    for rel, before in ids.items():
        after = until(lambda rel=rel: state(lib, f"renamed/{rel}"), f"renamed/{rel}")
        assert before is not None and isinstance(after, NoteState) and after.note_id == before.note_id
    assert lib.store.note_paths_under("dir") == []


def test_a_deleted_note_leaves_the_index(watched: tuple[Library, Watcher]) -> None:
    lib, _ = watched
    (lib.vault / "gone.md").unlink()
    until(lambda: state(lib, "gone.md") is None, "the deletion")


def test_an_acl_change_on_disk_and_in_a_sidecar(watched: tuple[Library, Watcher]) -> None:
    lib, _ = watched
    note = lib.vault / "acl.md"
    note.write_text("---\nacl: [ops]\n---\n# Secret plans\n\nNow for ops only.\n", encoding="utf-8")
    st = state(lib, "acl.md")
    assert st is not None
    until(lambda: lib.store.note_by_id(st.note_id).acl == ("ops",), "the new ACL")  # type: ignore[union-attr]

    sidecar = lib.vault / "side.metadata.yaml"
    side = state(lib, "side.md")
    assert side is not None
    sidecar.write_text("acl: [team]\ntags: [sidecar]\n", encoding="utf-8")
    until(lambda: lib.store.note_by_id(side.note_id).acl == ("team",), "the sidecar's ACL")  # type: ignore[union-attr]
    sidecar.unlink()
    until(lambda: lib.store.note_by_id(side.note_id).acl == ("public",), "the default ACL again")  # type: ignore[union-attr]


def test_a_new_note_and_its_sidecar_written_one_after_the_other_are_never_public_between(
    watched: tuple[Library, Watcher],
) -> None:
    """A new note waits ``sidecar_settle_s`` for its sidecar, so a restricted note
    written as two files (the note, then its sidecar a moment later) is indexed restricted, and
    no public search finds it in between; a new note without a sidecar is indexed once the wait ends."""
    lib, _ = watched
    public = Visibility(("public",))
    t0 = time.monotonic()
    (lib.vault / "payroll.md").write_text("# Payroll\n\nThe codeword is marzipan.\n", encoding="utf-8")
    deadline = time.monotonic() + 0.8  # the sidecar comes later, as a sync tool delivers files
    while time.monotonic() < deadline:
        assert not lib.store.lexical.bm25('"marzipan"', public, 10), "public before its sidecar came"
        time.sleep(0.02)
    (lib.vault / "payroll.metadata.yaml").write_text("acl: [hr]\n", encoding="utf-8")
    until(lambda: state(lib, "payroll.md"), "the note, with its sidecar")
    assert not lib.store.lexical.bm25('"marzipan"', public, 10)
    assert lib.store.lexical.bm25('"marzipan"', Visibility(("public", "hr")), 10)

    (lib.vault / "plain.md").write_text("# Plain\n\nNo sidecar is coming.\n", encoding="utf-8")
    t1 = time.monotonic()
    until(lambda: state(lib, "plain.md"), "the note without a sidecar")
    assert time.monotonic() - t1 >= lib.settings.index.sidecar_settle_s * 0.9  # it waited first
    assert time.monotonic() - t0 < TIMEOUT


def test_a_broken_note_is_failed_with_its_reason_and_recovers(watched: tuple[Library, Watcher]) -> None:
    lib, watcher = watched
    path = lib.vault / "broken.md"
    path.write_text("---\ntitle: [unclosed\n---\n# Broken\n", encoding="utf-8")
    reason = until(lambda: watcher.board.failed().get("broken.md"), "the failure on the board")
    assert isinstance(reason, str) and reason
    path.write_text("# Fixed\n\nNow it parses.\n", encoding="utf-8")
    until(lambda: state(lib, "broken.md"), "the fixed note")
    until(lambda: "broken.md" not in watcher.board.failed(), "the failure to clear")


def test_a_burst_of_200_files_then_a_bulk_delete(watched: tuple[Library, Watcher]) -> None:
    lib, watcher = watched
    burst = lib.vault / "burst"
    burst.mkdir()
    for i in range(200):
        (burst / f"n{i:03}.md").write_text(f"# Note {i}\n\nBurst note number {i}.\n", encoding="utf-8")
    until(lambda: len(lib.store.note_paths_under("burst")) == 200, "200 notes indexed")
    until(lambda: not watcher.board.queued(), "nothing queued")
    shutil.rmtree(burst)
    until(lambda: lib.store.note_paths_under("burst") == [], "the folder's notes gone")


def test_hidden_and_tool_folders_are_ignored(watched: tuple[Library, Watcher]) -> None:
    lib, _ = watched
    for rel in (".obsidian/cache.md", "node_modules/pkg/readme.md", ".hidden.md", "notes.md~"):
        (lib.vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (lib.vault / rel).write_text("# Not a note\n", encoding="utf-8")
    (lib.vault / "sentinel.md").write_text("# Sentinel\n", encoding="utf-8")  # written after them
    until(lambda: state(lib, "sentinel.md"), "the sentinel")
    indexed = set(lib.store.note_states())
    assert not indexed & {".obsidian/cache.md", "node_modules/pkg/readme.md", ".hidden.md"}
    assert ignored(".sunlib/sunlib.db-wal") and ignored("a/.b.md.0f.sunlib-tmp") and not ignored("a/b.md")


def test_cli_index_watch_prints_a_line_per_batch_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_text("# A\n\nalpha\n", encoding="utf-8")
    env = {**os.environ, "SUNLIB_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "sunlib", "index", str(vault), "--provider", "hash", "--watch", "-q"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_default
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        until(lambda: "watching" in proc.stderr.readline(), "the watcher to start")  # type: ignore[union-attr]
        (vault / "b.md").write_text("# B\n\nbeta\n", encoding="utf-8")
        line = until(lambda: "file(s)" in (got := proc.stdout.readline()) and got, "a batch line")  # type: ignore[union-attr]
        assert "1 file(s): 1 added" in str(line)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(4 * TIMEOUT) == 0  # the exit, on a loaded machine too
        assert "stopped watching" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_status_files_compares_the_vault_with_the_index(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for name in ("same", "edited", "broken", "gone"):
        (vault / f"{name}.md").write_text(f"# {name}\n\nText of {name}.\n", encoding="utf-8")
    lib = Library.open(vault, embedding={"provider": "hash"})
    lib.index()
    lib.close()
    (vault / "edited.md").write_text("# edited\n\nNew text.\n", encoding="utf-8")
    (vault / "broken.md").write_text("---\ntitle: [unclosed\n---\n", encoding="utf-8")
    (vault / "gone.md").unlink()
    (vault / "new.md").write_text("# new\n", encoding="utf-8")
    env = {"SUNLIB_EMBEDDING__PROVIDER": "hash"}  # the space the vault was indexed in
    r = sunlib("status", "--files", "--json", "-V", str(vault), env=env)
    assert r.returncode == 0, r.stderr
    rows = {f["path"]: f for f in json.loads(r.stdout)["files"]}
    assert {p: f["state"] for p, f in rows.items()} == {
        "same.md": "embedded",
        "edited.md": "queued",
        "broken.md": "failed",
        "gone.md": "queued",
        "new.md": "queued",
    }
    assert rows["broken.md"]["reason"] and rows["broken.md"]["chunks"] == 1  # its last good version stays
    text = sunlib("status", "--files", "-V", str(vault), env=env)
    assert text.returncode == 0 and "5 files: 3 queued, 0 indexed, 1 embedded, 1 failed" in text.stdout
