"""Disk full during indexing: a clear one-line error, and the index is still usable.

The index goes on a small tmpfs (mounting needs root; the test skips without it)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunlib import Library
from sunlib.store.check import check_index


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _vault(root: Path, notes: int) -> Path:
    vault = root / "vault"
    for i in range(notes):
        folder = vault / f"f{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        words = " ".join(f"word{(i * 7 + j) % 997} topic{i % 13}" for j in range(120))
        (folder / f"note-{i:04d}.md").write_text(f"# Note {i}\n\n{words}.\n\nSecond paragraph {i}.\n", "utf-8")
    return vault


def test_disk_full_is_one_line_and_the_index_stays_usable(tmp_path: Path, small_disk: Path) -> None:
    vault = _vault(tmp_path, 600)  # far more text than 1 MB of index can hold
    index_dir = small_disk / "index"
    env = {**os.environ, "SUNLIB_HOME": str(tmp_path / "home"), "SUNLIB_INDEX_DIR": str(index_dir)}
    env.pop("SUNLIB_CONFIG", None)
    r = subprocess.run(
        [sys.executable, "-m", "sunlib", "index", str(vault), "--provider", "hash", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the disk holding the index is full"), r.stderr
    # what was committed is intact and searchable
    report = check_index(index_dir / "sunlib.db")
    assert report["ok"], report["problems"]
    with Library.open(vault, embedding={"provider": "hash"}, index_dir=index_dir) as lib:
        counts = lib.store.counts()
        assert 0 < counts.notes < 600
        hits = lib.search("topic3", mode="bm25", limit=3).hits
        assert hits and all(h.path.startswith("f") for h in hits)
