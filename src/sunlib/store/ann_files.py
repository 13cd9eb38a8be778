"""The ANN engine's files: derived data beside the SQLite file, saved so that no crash can tear them.

One space's graph lives in the index folder, in a directory named after the SQLite file
(``sunlib.ann/`` beside ``sunlib.db``), as three files::

    sunlib.ann/<vec_table>.json               the stamp: which save is current, what it was built from
    sunlib.ann/<vec_table>-<token>.usearch    the HNSW graph (usearch's own format)
    sunlib.ann/<vec_table>-<token>.keys.npy   its keys (chunk rowids), each vector's write generation

A save writes the two data files under a fresh token, then replaces the JSON stamp by a rename
(temp file + ``os.replace``): a SIGKILL at any moment leaves either the old stamp with its files
or the new one with its files, plus at worst some unreferenced files that the next save removes.
A stamp that does not match the SQLite file (another ``index_uuid``, space, dimension or vector
type), or whose files are missing or unreadable, is not used: the graph is rebuilt from SQLite's
vectors. A stamp older than the store's write generation is caught up incrementally.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1  # the layout above; a stamp of another format is rebuilt


@dataclass(frozen=True)
class AnnStamp:
    """What one saved graph was built from: enough to tell whether it belongs to this index."""

    format: int
    index_uuid: str  # the SQLite file's index_uuid (meta)
    space: str
    dim: int
    dtype: str  # usearch's scalar kind: "f32", "f16" or "i8"
    generation: int  # the store's write generation the graph was caught up to
    vectors: int
    token: str  # names the data files of this save
    graph_bytes: int = 0  # the graph file's size: a shorter file is damaged


@dataclass(frozen=True)
class Loaded:
    """A saved graph read back: the stamp, the graph file, and its keys with their chunk stamps."""

    stamp: AnnStamp
    graph: Path
    keys: np.ndarray  # int64, sorted
    stamps: np.ndarray  # int64, aligned with keys: the generation each vector was written at


class AnnFiles:
    """The files of one space's graph in an index file's ANN directory."""

    def __init__(self, folder: Path, table: str) -> None:
        self.folder = folder
        self.table = table

    @property
    def stamp_path(self) -> Path:
        return self.folder / f"{self.table}.json"

    def graph_path(self, token: str) -> Path:
        return self.folder / f"{self.table}-{token}.usearch"

    def keys_path(self, token: str) -> Path:
        return self.folder / f"{self.table}-{token}.keys.npy"

    def read_stamp(self) -> AnnStamp | None:
        """The current stamp, or None when there is none or it cannot be read."""
        try:
            raw = json.loads(self.stamp_path.read_text(encoding="utf-8"))
            return AnnStamp(**raw)
        except (OSError, ValueError, TypeError):
            return None

    def load(self) -> Loaded | None:
        """The current save, or None when it is missing or damaged (the caller rebuilds)."""
        stamp = self.read_stamp()
        if stamp is None or stamp.format != FORMAT:
            return None
        graph = self.graph_path(stamp.token)
        try:
            pairs = np.load(self.keys_path(stamp.token), allow_pickle=False)
        except (OSError, ValueError):
            return None
        try:
            size = graph.stat().st_size
        except OSError:
            return None
        if pairs.ndim != 2 or pairs.shape != (2, stamp.vectors) or size != stamp.graph_bytes:
            return None
        return Loaded(stamp, graph, pairs[0].astype(np.int64), pairs[1].astype(np.int64))

    def save(self, stamp: AnnStamp, write_graph: Any, keys: np.ndarray, stamps: np.ndarray) -> None:
        """Write a new save (``write_graph(path)`` writes the graph) and make it current atomically,
        then remove the files of older saves."""
        self.folder.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(6)
        graph = self.graph_path(token)
        write_graph(str(graph))
        _fsync(graph)
        stamp = AnnStamp(**{**asdict(stamp), "token": token, "graph_bytes": graph.stat().st_size})
        with open(self.keys_path(token), "wb") as fh:
            np.save(fh, np.stack([keys.astype(np.int64), stamps.astype(np.int64)]), allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
        temp = self.folder / f".{self.table}.{token}.json.tmp"
        with open(temp, "w", encoding="utf-8") as fh:
            json.dump(asdict(stamp), fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, self.stamp_path)
        _fsync_dir(self.folder)
        self.remove_unreferenced(keep=token)

    def remove_unreferenced(self, keep: str | None) -> int:
        """Remove this space's data files of any save but ``keep`` (and leftover temp files)."""
        removed = 0
        for path in self.folder.glob(f"{self.table}-*"):
            if keep is None or not path.name.startswith(f"{self.table}-{keep}."):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        for path in self.folder.glob(f".{self.table}.*.json.tmp"):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
        return removed

    def remove_all(self) -> None:
        self.remove_unreferenced(keep=None)
        with contextlib.suppress(OSError):
            self.stamp_path.unlink()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be synced
        _fsync(folder)


def ann_folder(db_path: Path | str) -> Path | None:
    """The ANN directory of an index file (None for an in-memory database): ``sunlib.ann`` beside
    ``sunlib.db``, so two index files in one folder never share graphs."""
    if str(db_path) == ":memory:":
        return None
    path = Path(db_path).resolve()
    return path.with_name(path.stem + ".ann")
