"""Derived data beside the SQLite file: its files, saved so that no crash can tear them, and the
process-wide registry that shares one copy in memory between connections.

Two engines keep such data in the index folder, each in a directory named after the SQLite file:
the HNSW graphs (``sunlib.ann/``, store/usearch.py) and the lexical postings (``sunlib.postings/``,
store/postings.py). One structure (one graph, one set of postings) is a JSON stamp naming the data
files of its current save::

    <folder>/<name>.json                the stamp: the engine's fields, the save's token, each file's size
    <folder>/<name>-<token>.<suffix>    one data file per suffix ("usearch", "keys.npy", "docs.npy", ...)

A save writes every data file under a fresh token (each fsynced), then replaces the stamp by a
rename (temp file + ``os.replace``, then the directory fsynced): a SIGKILL at any moment leaves
either the old stamp with its files or the new one with its files, plus at worst some
unreferenced files that the next save removes. A stamp that cannot be read, or whose files are
missing, of another size or (with ``checksums``) of another CRC-32 than it records, is not used:
the engine rebuilds from SQLite. Files are never written in place, so a reader that mapped an
older save's arrays keeps reading them after a newer save removes their names.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

CRC_BLOCK = 1 << 22  # bytes read at a time to check a file's CRC-32

Writer = Callable[[Path], None]  # writes one data file at the path it is given


@dataclass(frozen=True)
class Saved:
    """A save as its stamp names it: the engine's fields, the token and the data files by suffix."""

    fields: Mapping[str, Any]
    token: str
    paths: Mapping[str, Path]
    sizes: Mapping[str, int]
    crcs: Mapping[str, int | None]


class DerivedFiles:
    """The files of one derived structure (``name``) in an index file's folder for its engine."""

    def __init__(self, folder: Path, name: str, checksums: bool = False) -> None:
        self.folder = folder
        self.name = name
        self.checksums = checksums  # record each file's CRC-32 and check it on load (reads every byte)

    @property
    def stamp_path(self) -> Path:
        return self.folder / f"{self.name}.json"

    def path(self, token: str, suffix: str) -> Path:
        return self.folder / f"{self.name}-{token}.{suffix}"

    def read(self) -> Saved | None:
        """The current stamp, or None when there is none or it cannot be read (files not checked)."""
        try:
            raw = json.loads(self.stamp_path.read_text(encoding="utf-8"))
            token, files = str(raw.pop("token")), dict(raw.pop("files"))
            sizes = {str(suffix): int(entry["bytes"]) for suffix, entry in files.items()}
            crcs = {str(suffix): entry.get("crc32") for suffix, entry in files.items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None
        return Saved(raw, token, {s: self.path(token, s) for s in sizes}, sizes, crcs)

    def load(self) -> Saved | None:
        """The current save when its stamp reads and every file it names is whole (its recorded
        size, and CRC-32 with ``checksums``); None otherwise (the caller rebuilds)."""
        saved = self.read()
        if saved is None:
            return None
        for suffix, path in saved.paths.items():
            try:
                if path.stat().st_size != saved.sizes[suffix]:
                    return None
                if self.checksums and _crc32(path) != saved.crcs[suffix]:
                    return None
            except OSError:
                return None
        return saved

    def save(self, fields: Mapping[str, Any], writers: Mapping[str, Writer]) -> Saved:
        """Write a new save (``writers[suffix](path)`` writes each data file) and make it current
        atomically, then remove the files of older saves."""
        self.folder.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(6)
        files: dict[str, dict[str, Any]] = {}
        for suffix, write in writers.items():
            path = self.path(token, suffix)
            write(path)
            _fsync(path)
            files[suffix] = {"bytes": path.stat().st_size, "crc32": _crc32(path) if self.checksums else None}
        temp = self.folder / f".{self.name}.{token}.json.tmp"
        with open(temp, "w", encoding="utf-8") as fh:
            json.dump({**fields, "token": token, "files": files}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, self.stamp_path)
        _fsync_dir(self.folder)
        self.remove_unreferenced(keep=token)
        saved = self.read()
        assert saved is not None  # just written
        return saved

    def remove_unreferenced(self, keep: str | None) -> int:
        """Remove the data files of any save but ``keep`` (and leftover temp files)."""
        removed = 0
        for path in self.folder.glob(f"{self.name}-*"):
            if keep is None or not path.name.startswith(f"{self.name}-{keep}."):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        for path in self.folder.glob(f".{self.name}.*.json.tmp"):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
        return removed

    def remove_all(self) -> None:
        self.remove_unreferenced(keep=None)
        with contextlib.suppress(OSError):
            self.stamp_path.unlink()


def array_writer(array: np.ndarray) -> Writer:
    """A writer of one numpy array (``.npy``, no pickle)."""

    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            np.save(fh, np.ascontiguousarray(array), allow_pickle=False)

    return write


def open_array(path: Path, mmap: bool = True) -> np.ndarray | None:
    """A saved array, mapped read-only (``mmap``) or read; None when it cannot be read."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError):
        return None


def derived_folder(db_path: Path | str, kind: str) -> Path | None:
    """The folder of one kind of derived data (``"ann"``, ``"postings"``) of an index file: for
    ``sunlib.db`` it is ``sunlib.<kind>`` beside it, so two index files in one folder never share
    it. None for an in-memory database (its engines keep everything in memory)."""
    if str(db_path) == ":memory:":
        return None
    path = Path(db_path).resolve()
    return path.with_name(f"{path.stem}.{kind}")


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as fh:
        while block := fh.read(CRC_BLOCK):
            crc = zlib.crc32(block, crc)
    return crc


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be synced
        _fsync(folder)


# -- sharing in memory -------------------------------------------------------------------------


class Held(Protocol):
    """What the registry shares: a structure caught up to some write generation, behind its lock."""

    generation: int
    lock: threading.RLock


H = TypeVar("H", bound=Held)


class Registry(Generic[H]):
    """The process's copies of one kind of derived structure, by key (the index file's identity
    first). Every connection of the process (one per reader thread) shares them: one opens or
    rebuilds a structure while the others asking for it wait, then each catch-up runs under the
    structure's lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[tuple[str, ...], H] = {}
        self.opening: dict[tuple[str, ...], threading.Lock] = {}

    def current(
        self, key: tuple[str, ...], generation: int, open_: Callable[[], H], bring_up: Callable[[H], None], force: bool
    ) -> H:
        """The structure of ``key``: opened once (``open_``) and brought up (``bring_up``, under its
        lock) when it is behind the store's ``generation`` or ``force`` says so."""
        found = self.held.get(key)
        if found is None or found.generation != generation or force:
            with self.turn(key):
                found = self.held.get(key)
                if found is None:
                    found = open_()
                    with self.lock:
                        self.held[key] = found
                with found.lock:
                    bring_up(found)
        return found

    def turn(self, key: tuple[str, ...]) -> threading.Lock:
        with self.lock:
            return self.opening.setdefault(key, threading.Lock())

    def forget(self, identity: str) -> None:
        """Drop the structures of one index file from memory (the next use opens its saved files)."""
        with self.lock:
            for key in [key for key in self.held if key[0] == identity]:
                del self.held[key]
