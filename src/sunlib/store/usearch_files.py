"""The usearch engine's files: one space's HNSW graph, saved beside the SQLite file (store/derived.py).

One space's graph lives in the index folder, in a directory named after the SQLite file
(``sunlib.ann/`` beside ``sunlib.db``), as three files::

    sunlib.ann/<vec_table>.<type>.json               the stamp: which save is current, what it was built from
    sunlib.ann/<vec_table>.<type>-<token>.usearch    the HNSW graph (usearch's own format)
    sunlib.ann/<vec_table>.<type>-<token>.keys.npy   its keys (chunk rowids), each vector's write generation

Saves are atomic (store/derived.py). A stamp that does not match the SQLite file (another
``index_uuid``, space, dimension or vector type), or whose files are missing or of another size,
is not used: the graph is rebuilt from SQLite's vectors. A stamp older than the store's write
generation is caught up incrementally.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from .derived import DerivedFiles, array_writer, derived_folder, open_array

# The layout above; a stamp of another format is rebuilt. 2: the stamp lists its files
# (store/derived.py) instead of naming the graph's size alone.
FORMAT = 2
GRAPH, KEYS = "usearch", "keys.npy"


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
    token: str = ""  # names the data files of this save (set by the save)
    graph_bytes: int = 0  # the graph file's size (set by the save)


STAMPED = [f.name for f in fields(AnnStamp) if f.name not in ("token", "graph_bytes")]


@dataclass(frozen=True)
class Loaded:
    """A saved graph read back: the stamp, the graph file, and its keys with their chunk stamps."""

    stamp: AnnStamp
    graph: Path
    keys: np.ndarray  # int64, sorted
    stamps: np.ndarray  # int64, aligned with keys: the generation each vector was written at


class AnnFiles(DerivedFiles):
    """The files of one space's graph in an index file's ANN directory."""

    def __init__(self, folder: Path, table: str) -> None:
        super().__init__(folder, table)
        self.table = table

    def graph_path(self, token: str) -> Path:
        return self.path(token, GRAPH)

    def keys_path(self, token: str) -> Path:
        return self.path(token, KEYS)

    def read_stamp(self) -> AnnStamp | None:
        """The current stamp, or None when there is none or it cannot be read."""
        saved = self.read()
        if saved is None or GRAPH not in saved.sizes:
            return None
        try:
            known = {name: saved.fields[name] for name in STAMPED}
            return AnnStamp(**known, token=saved.token, graph_bytes=saved.sizes[GRAPH])
        except (KeyError, TypeError):
            return None

    def load(self) -> Loaded | None:  # type: ignore[override]
        """The current save, or None when it is missing or damaged (the caller rebuilds)."""
        saved, stamp = super().load(), self.read_stamp()
        if saved is None or stamp is None or stamp.format != FORMAT or KEYS not in saved.paths:
            return None
        pairs = open_array(saved.paths[KEYS], mmap=False)
        if pairs is None or pairs.ndim != 2 or pairs.shape != (2, stamp.vectors):
            return None
        return Loaded(stamp, saved.paths[GRAPH], pairs[0].astype(np.int64), pairs[1].astype(np.int64))

    def save_graph(self, stamp: AnnStamp, write_graph: Any, keys: np.ndarray, stamps: np.ndarray) -> None:
        """Write a new save (``write_graph(path)`` writes the graph) and make it current atomically."""
        pairs = np.stack([keys.astype(np.int64), stamps.astype(np.int64)])
        known = {name: value for name, value in asdict(stamp).items() if name in STAMPED}
        self.save(known, {GRAPH: lambda path: write_graph(str(path)), KEYS: array_writer(pairs)})


def ann_folder(db_path: Path | str) -> Path | None:
    """The ANN directory of an index file (None for an in-memory database): ``sunlib.ann`` beside
    ``sunlib.db``, so two index files in one folder never share graphs."""
    return derived_folder(db_path, "ann")
