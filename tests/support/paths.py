"""Where things are: the repository, the tests' folder, the bundled sample vault and QA sets, and the
index folder sunlib uses by default for a vault."""

from __future__ import annotations

import shutil
from pathlib import Path

from sunlib.library import DB_NAME, home_index_dir

ROOT = Path(__file__).resolve().parents[2]
TESTS_DIR = ROOT / "tests"
SAMPLE_VAULT = ROOT / "src" / "sunlib" / "sample_vault"
QA_DIR = ROOT / "src" / "sunlib" / "qa"


def index_of(vault: Path, home: Path | None = None) -> Path:
    """The index folder sunlib uses by default for ``vault`` under ``home`` (default: this test's
    SUNLIB_HOME; a fixture wider than a test has none of its own and names one)."""
    return home_index_dir(vault.resolve(), home)


def place_index(vault: Path, index: Path, home: Path | None = None) -> Path:
    """Copy the index file of the folder ``index`` to ``vault``'s default index folder."""
    local = index_of(vault, home)
    local.mkdir(parents=True)
    shutil.copyfile(index / DB_NAME, local / DB_NAME)
    return local
