"""Where the index lives: outside the vault by default, an old in-vault index
moved on first open with nothing lost, and a vault copied mid-write (as a sync tool copies it)
never carries a torn database into the copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sunlib import Library
from sunlib.library import DB_NAME
from tests.support.clients import sunlib
from tests.support.paths import index_of

HASH = {"SUNLIB_EMBEDDING__PROVIDER": "hash"}
QUERY = "how do I back up the index"


def db_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("sunlib.db*"))


def top_paths(lib: Library) -> list[str]:
    return [h.path for h in lib.search(QUERY, mode="hybrid", limit=5).hits]


def legacy_index(vault: Path) -> list[str]:
    """Index ``vault`` the way versions before 2026-12-07 did, into ``vault/.sunlib``; its top paths."""
    with Library.open(vault, embedding={"provider": "hash"}, index_dir=vault / ".sunlib") as lib:
        lib.index()
        found = top_paths(lib)
    assert (vault / ".sunlib" / DB_NAME).is_file()
    return found


def test_a_new_index_is_outside_the_vault(vault: Path) -> None:
    r = sunlib("index", str(vault), "--provider", "hash", "--json", "-q")
    assert r.returncode == 0, r.stderr
    assert Path(json.loads(r.stdout)["index"]) == index_of(vault) / DB_NAME
    assert db_files(vault) == [] and not (vault / ".sunlib").exists()
    r = sunlib("search", QUERY, "--vault", str(vault), "--json", env=HASH)
    assert r.returncode == 0 and json.loads(r.stdout)["results"], r.stderr


def test_an_index_inside_the_vault_moves_out_on_first_open_and_keeps_everything(vault: Path) -> None:
    before = legacy_index(vault)
    (vault / ".sunlib" / "extra").mkdir()  # a derived file of the index folder (an ANN graph, say)
    (vault / ".sunlib" / "extra" / "graph.bin").write_bytes(b"\x01\x02")
    with Library.open(vault, embedding={"provider": "hash"}) as lib:
        assert lib.index_note is not None and "moved out of the vault" in lib.index_note
        assert lib.index_dir == index_of(vault)
        assert (lib.index_dir / "extra" / "graph.bin").read_bytes() == b"\x01\x02"
        assert top_paths(lib) == before
        report = lib.index()
        assert report.vectors_embedded == 0 and not report.added  # nothing was redone
    assert not (vault / ".sunlib").exists()
    with Library.open(vault, embedding={"provider": "hash"}) as again:
        assert again.index_note is None and again.index_dir == index_of(vault)


def test_the_cli_says_once_that_the_index_moved(vault: Path) -> None:
    legacy_index(vault)
    r = sunlib("status", "--vault", str(vault), env=HASH)
    assert r.returncode == 0 and r.stderr.count("moved out of the vault") == 1, r.stderr
    r = sunlib("status", "--vault", str(vault), env=HASH)
    assert r.returncode == 0 and "moved" not in r.stderr


def test_an_index_another_process_has_open_is_not_moved(vault: Path) -> None:
    before = legacy_index(vault)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from sunlib import Library; "
            "lib = Library.open(sys.argv[1], embedding={'provider': 'hash'}, index_dir=sys.argv[2]); "
            "lib.store; print('open', flush=True); time.sleep(60)",
            str(vault),
            str(vault / ".sunlib"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with Library.open(vault, embedding={"provider": "hash"}) as lib:
            assert lib.index_dir == vault / ".sunlib" and lib.index_note and "in use" in lib.index_note
            assert top_paths(lib) == before
    finally:
        holder.kill()
        holder.wait()
    assert not index_of(vault).exists()
    with Library.open(vault, embedding={"provider": "hash"}) as lib:  # nobody has it open now: it moves
        assert lib.index_dir == index_of(vault) and top_paths(lib) == before


def test_a_damaged_old_index_is_left_alone_and_a_new_one_is_built(vault: Path) -> None:
    legacy_index(vault)
    db = vault / ".sunlib" / DB_NAME
    torn = db.read_bytes()[:12288] + os.urandom(8192)  # what a copy cut mid-write may hold
    db.write_bytes(torn)
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    with Library.open(vault, embedding={"provider": "hash"}) as lib:
        assert lib.index_note is not None and "damaged" in lib.index_note
        assert lib.index_dir == index_of(vault)
        assert len(lib.index().added) == 21 and top_paths(lib)
    assert db.read_bytes() == torn  # left exactly as it was


def test_a_relative_index_dir_is_inside_the_vault(vault: Path) -> None:
    (vault / "sunlib.toml").write_text('index_dir = ".sunlib"\n', encoding="utf-8")
    r = sunlib("index", str(vault), "--provider", "hash", "-q")
    assert r.returncode == 0, r.stderr
    assert (vault / ".sunlib" / DB_NAME).is_file() and not index_of(vault).exists()


def big_vault(vault: Path, notes: int = 600) -> None:
    body = " ".join(f"word{i} backup rotation snapshot" for i in range(120))
    for i in range(notes):
        (vault / "bulk" / f"n{i:04d}.md").parent.mkdir(exist_ok=True)
        (vault / "bulk" / f"n{i:04d}.md").write_text(f"# Bulk {i}\n\n{body}\n", "utf-8")


def copy_mid_write(vault: Path, dest: Path, env: dict[str, str]) -> None:
    """Copy ``vault`` to ``dest`` while ``sunlib index`` writes its index, as a sync tool would."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sunlib", "index", str(vault), "--provider", "hash", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    try:
        deadline = time.monotonic() + 60
        db = Path(env["SUNLIB_INDEX_DIR"]) / DB_NAME if "SUNLIB_INDEX_DIR" in env else index_of(vault) / DB_NAME
        while not Path(str(db) + "-wal").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the index run ended before the copy"
            time.sleep(0.01)
        shutil.copytree(vault, dest)
        assert proc.poll() is None, "the copy was not taken mid-write"
    finally:
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err


def test_a_vault_copied_mid_write_holds_no_database(vault: Path, tmp_path: Path) -> None:
    big_vault(vault)
    copy_mid_write(vault, tmp_path / "copy", {})
    assert db_files(tmp_path / "copy") == []  # nothing of the live index went with the copy
    r = sunlib("index", str(tmp_path / "copy"), "--provider", "hash", "--json", "-q")
    assert r.returncode == 0 and len(json.loads(r.stdout)["added"]) == 621, r.stderr


def test_an_old_in_vault_index_copied_mid_write_opens_whole_or_is_rebuilt(vault: Path, tmp_path: Path) -> None:
    big_vault(vault)
    copy_mid_write(vault, tmp_path / "copy", {"SUNLIB_INDEX_DIR": str(vault / ".sunlib")})
    copy = tmp_path / "copy"
    assert (copy / ".sunlib" / DB_NAME).is_file()  # the old layout: the copy took the live file along
    with Library.open(copy, embedding={"provider": "hash"}) as lib:
        assert lib.index_dir == index_of(copy)
        assert lib.index_note and ("moved out of the vault" in lib.index_note or "damaged" in lib.index_note)
        lib.index()
        assert lib.status().counts.notes == 621
        assert lib.search("word7 rotation", mode="bm25", limit=3).hits
