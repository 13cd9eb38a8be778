"""Where a vault's index lives, and moving an index out of its vault.

By default the index is under ``$SUNLIB_HOME/indexes/<vault name>-<hash of its path>/``, never
inside the vault. Vaults are often synced (iCloud, Dropbox, Syncthing, Obsidian Sync, git), and a
live SQLite file with its WAL in a synced folder is the classic way to corrupt one: the sync tool
copies the file and its WAL at different moments. ``index_dir`` in the settings puts it anywhere
else; a relative ``index_dir`` (``".sunlib"``) is taken inside the vault.

Earlier versions kept the index in ``<vault>/.sunlib/``. The first open that finds one there (and no
index at the new place) moves it: every file of the folder is copied, the database through SQLite's
backup API, the copy is checked, and only then is the old folder emptied. Nothing moves while
another process has the index open (``store.lock.sole_user``) or an indexer holds it: the index is
then used where it is, and the move is tried again next time. A damaged old index (a sync tool's
torn copy) is left as it was, and a new one is built from the notes.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..config import sunlib_home
from ..errors import IndexerBusy
from ..ingest.ids import sha256_hex
from ..store.db import copy_database
from ..store.lock import IN_USE_SUFFIX, LOCK_SUFFIX, indexer_lock, sole_user

DB_NAME = "sunlib.db"
LEGACY_DIR = ".sunlib"  # where versions before 2026-12-07 kept the index


@dataclass(frozen=True)
class Location:
    path: Path  # the index folder to use
    note: str | None = None  # one line for the user when the index moved, or could not


def home_index_dir(vault: Path, home: Path | None = None) -> Path:
    """The default index folder of ``vault`` (an absolute, resolved path) under ``home``
    (default: ``$SUNLIB_HOME``)."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in vault.name)[:40] or "vault"
    return (home or sunlib_home()) / "indexes" / f"{slug}-{sha256_hex(str(vault))[:10]}"


def has_index(folder: Path) -> bool:
    """True when ``folder`` is a vault with an index, at the default place or the old one."""
    folder = folder.resolve()
    return (home_index_dir(folder) / DB_NAME).is_file() or (folder / LEGACY_DIR / DB_NAME).is_file()


def locate(vault: Path, configured: Path | None) -> Location:
    """The index folder for ``vault``: ``configured`` if given (relative: inside the vault), else
    the default one, moving an old in-vault index there first."""
    if configured is not None:
        return Location(configured if configured.is_absolute() else vault / configured)
    target = home_index_dir(vault)
    legacy = vault / LEGACY_DIR
    if not (legacy / DB_NAME).is_file():
        return Location(target)
    if (target / DB_NAME).is_file():
        return Location(target, f"an older index in {legacy} is not used (the index is {target}); you may delete it")
    return move(legacy, target)


def move(legacy: Path, target: Path) -> Location:
    """Move the index folder ``legacy`` to ``target`` (which holds no index), or say why not."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return Location(legacy, f"the index stays in {legacy}: cannot create {target.parent} ({exc.strerror or exc})")
    db = legacy / DB_NAME
    busy = Location(legacy, f"the index in {legacy} is in use by another process; it moves to {target} next time")
    with sole_user(db) as alone:
        if not alone:
            return busy
        try:
            with indexer_lock(db).held(wait=0):
                staging = target.with_name(target.name + ".moving")
                shutil.rmtree(staging, ignore_errors=True)
                staging.mkdir()
                own = {DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", DB_NAME + LOCK_SUFFIX, DB_NAME + IN_USE_SUFFIX}
                others = [p for p in legacy.iterdir() if p.name not in own]
                for entry in others:
                    if entry.is_dir():
                        shutil.copytree(entry, staging / entry.name, symlinks=True)
                    else:
                        shutil.copy2(entry, staging / entry.name)
                damage = copy_database(db, staging / DB_NAME)
                if damage is not None:
                    shutil.rmtree(staging, ignore_errors=True)
                    return Location(
                        target,
                        f"the index in {legacy} is damaged ({damage}); it is left as it was, "
                        f"and a new one is built in {target}",
                    )
                _replace_dir(staging, target)
                for entry in others:
                    if entry.is_dir():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
                for name in (DB_NAME + "-shm", DB_NAME + "-wal", DB_NAME):
                    (legacy / name).unlink(missing_ok=True)
        except IndexerBusy:
            return busy
        except OSError as exc:
            return Location(legacy, f"the index stays in {legacy}: moving it to {target} failed ({exc})")
    for name in (DB_NAME + LOCK_SUFFIX, DB_NAME + IN_USE_SUFFIX):
        (legacy / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        legacy.rmdir()  # only when empty: a file of the user's own stays, and so does the folder
    return Location(target, f"the index moved out of the vault, from {legacy} to {target}")


def _replace_dir(staging: Path, target: Path) -> None:
    """Put ``staging`` at ``target``: a rename, or entry by entry into a folder already there."""
    if not target.exists():
        staging.replace(target)
        return
    for entry in staging.iterdir():
        entry.replace(target / entry.name)
    staging.rmdir()
