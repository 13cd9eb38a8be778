"""The usearch VectorIndex: an HNSW graph per space beside the SQLite file, ACL inside the search.

SQLite's vectors (the sqlite-vec tables) stay the source of truth and take every write; this
engine answers ``knn`` from a graph derived from them (store/usearch_files.py keeps it on disk).
Each graph remembers, per key (the chunk rowid), the write generation its vector was stored at
(``vector_stamps.written``), and the store's generation it was caught up to. When the store's
generation moves, the graph is caught up by difference: vectors whose (rowid, written) it lacks
are added (a replaced vector is removed first), keys SQLite no longer holds are removed.
Nothing is rebuilt for an update; a missing or foreign file is rebuilt from SQLite's vectors.

Quantized graphs (``usearch-i8``) hold each vector scaled so that its largest component is 1:
usearch maps [-1, 1] onto int8, and the components of a unit 384-d vector are ~0.05, so
unscaled they would use a dozen of the 255 levels. Cosine ignores the scale. Their scores are
the quantized ones (ranking candidates again by SQLite's float32 vectors was tried: sqlite-vec
reads a vector by rowid in ~0.7 ms, 70 ms for 100 candidates). ``usearch-f16`` halves memory
with float32's recall.

Visibility (ACL, filters, script) is applied inside the search, before ranking, from the
visible rowids the store materialises (``Db.visible_table``):

* a small visible set (at most ``EXACT_ROWS`` vectors, or under ``EXACT_SHARE`` of the space)
  is searched exactly: its vectors are taken from the graph once per write generation and
  scored by a matrix product, so a principal who sees 1% of a million chunks gets the exact
  top-k of what it sees;
* otherwise the graph is searched for more candidates than asked (``k`` over the visible share,
  times ``OVERFETCH``, at least ``MIN_CANDIDATES``; usearch raises ef to the candidates asked)
  and the visible ones are kept, asking again for four times as many until ``k`` visible ones
  are found. When even the whole graph does not yield them, the visible set is searched
  exactly: a visible chunk is never crowded out by restricted ones.

Graphs are shared by every connection of a process (keyed by the index file's identity), behind
a lock per graph. ``refresh`` catches up and saves (the indexer calls it after the vector phase,
``sunlib doctor --repair`` through ``reconcile``); a query that finds the graph behind catches up
in memory and saves only when the file was missing or the unsaved changes pass ``SAVE_SHARE``.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import ConfigError
from .db import Db, batches, chunk_ids_of
from .derived import Registry
from .numpy_vectors import Delegating
from .protocols import DocumentStore, Reconciled, Space, Visibility
from .sqlite_vec import SqliteVectors
from .usearch_files import FORMAT, AnnFiles, AnnStamp, ann_folder

# HNSW parameters (Malkov & Yashunin 2018). M=16 links per node and ef_construction=128 are the
# usual balance of build time and recall for 384-d text embeddings. ef at query time is what moves
# recall: on 100k synthetic vectors of intrinsic dimension 32, asking for 100 candidates, recall@10
# against exact search was 0.961 with ef=128, 0.994 with ef=256 and 0.998 with ef=512; on the 1M
# graph of `make bench-1m`, 0.942 with ef=256, 0.982 with ef=384 and 0.990 with ef=512, for 5.2,
# 7.6 and 10.0 ms p50 per graph search (docs/benchmarks.md "HNSW engines": ef sweep, and "A
# million chunks"). 384 is the smallest of those above the 0.97 goal at 1M; usearch raises ef to
# the candidates asked.
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 384
EXACT_ROWS = 20_000  # a visible set this small is scored exactly (~1 ms for 384-d float32)
EXACT_SHARE = 0.02  # ... and so is one under 2% of the space (over-fetching would ask for k/0.02)
OVERFETCH = 2.0  # candidates asked = k / visible share * OVERFETCH
# ... and never fewer than this: a graph search asked for 10 misses more of the true top 10 than one
# asked for 100 and cut to 10, for a little more time on a search that takes well under a
# millisecond (docs/benchmarks.md "HNSW engines"). The dense route asks for 100 anyway.
MIN_CANDIDATES = 100
SAVE_SHARE = 0.05  # a query saves a caught-up graph when this share of it is unsaved
SUBSETS_KEPT = 8  # exact-search matrices (one per visible set and generation) kept per graph
MASKS_KEPT = 32  # visibility masks kept per graph
BUILD_BATCH = 10_000  # vectors read from SQLite and added to a graph at a time


@dataclass(frozen=True)
class AnnState:
    """What ``sunlib doctor`` says about one space's graph file."""

    space: str
    state: str  # "fresh", "behind", "missing", "damaged" or "foreign"
    detail: str
    vectors: int  # in the saved graph (0 when there is none)
    generation: int  # the write generation the saved graph was caught up to


@runtime_checkable
class DerivedVectors(Protocol):
    """A vector engine holding derived data that the indexer brings up to date after writing."""

    def refresh(self, space: Space) -> None: ...


def _usearch() -> Any:
    # onnxruntime (the models) must load first: usearch's compiled module, loaded before it, makes
    # onnxruntime's import crash the process (a segfault in its pybind11 set-up; usearch 2.26.6 with
    # onnxruntime 1.32.0). A search with this engine loads a model anyway, so the import costs nothing.
    with contextlib.suppress(ImportError):
        import onnxruntime  # noqa: F401
    try:
        from usearch.index import Index
    except ImportError:
        raise ConfigError("the usearch dense engine needs the usearch package: pip install usearch==2.26.6") from None
    return Index


class _Graph:
    """One space's graph in memory, with the stamps of its vectors (held by one process)."""

    def __init__(self, index: Any, keys: np.ndarray, stamps: np.ndarray, generation: int, saved: bool) -> None:
        self.index = index
        self.keys = keys  # sorted chunk rowids
        self.stamps = stamps
        self.generation = generation
        self.saved = saved  # the file holds this graph (or one it was caught up from)
        self.unsaved = 0  # changes since the file was written
        self.added = 0  # vectors added to this graph in this process (a rebuild adds them all)
        self.lock = threading.RLock()
        self.subsets: OrderedDict[tuple[object, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.masks: OrderedDict[tuple[object, ...], tuple[np.ndarray, int]] = OrderedDict()


GRAPHS: Registry[_Graph] = Registry()  # the process's graphs, by (index identity, space, vector type)


class UsearchVectors(Delegating):
    """A VectorIndex answering KNN from an HNSW graph; every write goes to SQLite's vectors."""

    def __init__(self, db: Db, documents: DocumentStore, dtype: str = "f32", exact_rows: int = EXACT_ROWS) -> None:
        self.Index = _usearch()
        self.db = db
        self.source = SqliteVectors(db)
        self.documents = documents
        self.dtype = dtype
        self.exact_rows = exact_rows
        self.folder: Path | None = ann_folder(db.path)

    # -- the graph -----------------------------------------------------------------------------

    def files(self, space: Space) -> AnnFiles | None:
        """The graph files of a space for this engine's vector type (None for an in-memory database)."""
        return AnnFiles(self.folder, f"{space.vec_table}.{self.dtype}") if self.folder is not None else None

    def _new_index(self, space: Space) -> Any:
        return self.Index(
            ndim=space.dim,
            metric="cos",
            dtype=self.dtype,
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )

    def graph(self, space: Space, save: bool = False) -> _Graph:
        """The space's graph caught up to the store's write generation (opened, or rebuilt, once
        per process); ``save`` writes it when the file is not current."""
        key = (self.db.identity(), space.name, self.dtype)

        def bring_up(graph: _Graph) -> None:
            self._catch_up(graph, space)
            if save or not graph.saved or graph.unsaved > SAVE_SHARE * max(len(graph.keys), 1):
                self._save(graph, space)

        return GRAPHS.current(key, self.documents.generation(), lambda: self._open(space), bring_up, save)

    def _open(self, space: Space) -> _Graph:
        """The saved graph when it belongs to this index and space, else an empty one."""
        files = self.files(space)
        loaded = files.load() if files is not None else None
        if loaded is not None and self._belongs(loaded.stamp, space):
            index = self._new_index(space)
            try:
                index.load(str(loaded.graph))
            except (OSError, RuntimeError, ValueError):
                index = None
            if index is not None and len(index) == loaded.stamp.vectors:
                index.expansion_search = EXPANSION_SEARCH
                return _Graph(index, loaded.keys, loaded.stamps, loaded.stamp.generation, saved=True)
        empty = np.zeros(0, dtype=np.int64)
        return _Graph(self._new_index(space), empty, empty, -1, saved=False)

    def _belongs(self, stamp: AnnStamp, space: Space) -> bool:
        return (
            stamp.format == FORMAT
            and stamp.index_uuid == (self.db.get_meta("index_uuid") or "")
            and (stamp.space, stamp.dim, stamp.dtype) == (space.name, space.dim, self.dtype)
        )

    def _catch_up(self, graph: _Graph, space: Space) -> None:
        """Apply to the graph what SQLite's vectors changed since it was caught up, in one read
        transaction (so the generation it records is the one its vectors are from)."""
        with self.db.snapshot():
            generation = self.documents.generation()
            if generation == graph.generation:
                return
            keys, stamps = self._stored_stamps(space)
            common, ia, ib = np.intersect1d(graph.keys, keys, assume_unique=True, return_indices=True)
            changed = common[graph.stamps[ia] != stamps[ib]]
            gone = np.setdiff1d(graph.keys, keys, assume_unique=True)
            new = np.setdiff1d(keys, graph.keys, assume_unique=True)
            drop = np.concatenate([gone, changed])
            if len(drop):
                graph.index.remove(drop.astype(np.uint64))
            self._add(graph, space, np.sort(np.concatenate([new, changed])), full=len(graph.keys) == 0)
        graph.keys, graph.stamps, graph.generation = keys, stamps, generation
        graph.unsaved += len(drop) + len(new)
        graph.subsets.clear()
        graph.masks.clear()

    def _stored_stamps(self, space: Space) -> tuple[np.ndarray, np.ndarray]:
        """(rowids of the space's vectors in SQLite, sorted; the write generation each was stored
        at, -1 without a stamp row)."""
        if not self.source.has_space(space):
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        rows = self.db.conn.execute(
            f"SELECT v.rowid, coalesce(s.written, -1) FROM {space.vec_table}_rowids v"
            " LEFT JOIN vector_stamps s ON s.space = ? AND s.chunk_rowid = v.rowid ORDER BY v.rowid",
            (space.name,),
        ).fetchall()
        pairs = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return pairs[:, 0].copy(), pairs[:, 1].copy()

    def _add(self, graph: _Graph, space: Space, rowids: np.ndarray, full: bool) -> None:
        """Add the vectors of some rowids from SQLite: a scan of the table for a new graph, else
        lookups by rowid."""
        if not len(rowids):
            return
        if full:
            rows: list[Any] = []
            for row in self.db.conn.execute(f"SELECT rowid, embedding FROM {space.vec_table}"):
                rows.append(row)
                if len(rows) == BUILD_BATCH:
                    self._insert(graph, space, rows)
                    rows = []
            self._insert(graph, space, rows)
            return
        for batch in batches(rowids.tolist(), BUILD_BATCH // 20):
            marks = ",".join("?" * len(batch))
            rows = self.db.conn.execute(
                f"SELECT rowid, embedding FROM {space.vec_table} WHERE rowid IN ({marks})", batch
            ).fetchall()
            self._insert(graph, space, rows)

    def _insert(self, graph: _Graph, space: Space, rows: list[Any]) -> None:
        if not rows:
            return
        keys = np.array([int(r[0]) for r in rows], dtype=np.uint64)
        matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32).reshape(len(rows), space.dim)
        if self.dtype != "f32":  # spread each vector over the quantized range (cosine ignores scale)
            peak = np.abs(matrix).max(axis=1, keepdims=True)
            matrix = (matrix / np.where(peak > 0, peak, 1.0)).astype(np.float32)
        graph.index.add(keys, matrix, threads=1)
        graph.added += len(keys)

    def _save(self, graph: _Graph, space: Space) -> None:
        files = self.files(space)
        if files is None:  # an in-memory database keeps its graph in memory
            graph.saved, graph.unsaved = True, 0
            return
        stamp = AnnStamp(
            FORMAT,
            self.db.get_meta("index_uuid") or "",
            space.name,
            space.dim,
            self.dtype,
            graph.generation,
            len(graph.keys),
        )
        files.save_graph(stamp, graph.index.save, graph.keys, graph.stamps)
        graph.saved, graph.unsaved = True, 0

    # -- reads ---------------------------------------------------------------------------------

    def knn(self, space: Space, query: np.ndarray, visibility: Visibility, k: int) -> list[tuple[str, float]]:
        """(chunk_id, cosine similarity) best first, among visible chunks only (filtered in the search)."""
        if k <= 0 or not self.source.has_space(space):
            return []
        graph = self.graph(space)
        with graph.lock:
            mask, visible = self._mask(graph, visibility)
            if visible == 0:
                return []
            q = np.asarray(query, dtype=np.float32)
            if visible <= self.exact_rows or visible < EXACT_SHARE * len(graph.keys):
                found = self._exact(graph, visibility.key, mask, q, k)
            else:
                found = self._filtered(graph, visibility.key, mask, visible, q, k)
        ids = chunk_ids_of(self.db, [key for key, _ in found])
        return [(ids[key], score) for key, score in found if key in ids]

    def _mask(self, graph: _Graph, visibility: Visibility) -> tuple[np.ndarray, int]:
        """A boolean array over rowids (True: visible and in the graph), and how many are True."""
        key = visibility.key
        found = graph.masks.get(key)
        if found is not None:
            graph.masks.move_to_end(key)
            return found
        table = self.db.visible_table(visibility)
        visible = np.array([int(r[0]) for r in self.db.conn.execute(f"SELECT id FROM temp.{table}")], dtype=np.int64)
        size = int(max(graph.keys.max(initial=-1), visible.max(initial=-1))) + 1
        mask = np.zeros(size, dtype=bool)
        mask[np.intersect1d(visible, graph.keys, assume_unique=True)] = True
        found = graph.masks[key] = (mask, int(mask.sum()))
        while len(graph.masks) > MASKS_KEPT:
            graph.masks.popitem(last=False)
        return found

    def _exact(
        self, graph: _Graph, key: tuple[object, ...], mask: np.ndarray, q: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        """The exact top-k of the visible vectors (taken from the graph once per generation and
        visible set ``key``)."""
        subset = graph.subsets.get(key)
        if subset is None:
            keys = np.flatnonzero(mask)
            raw = np.asarray(graph.index.get(keys.astype(np.uint64)), dtype=np.float32).reshape(len(keys), -1)
            unit = raw
            if self.dtype != "f32":  # quantized vectors come back scaled: make them unit again
                norms = np.linalg.norm(raw, axis=1, keepdims=True)
                unit = (raw / np.where(norms > 0, norms, 1.0)).astype(np.float32)
            subset = graph.subsets[key] = (keys, unit)
            while len(graph.subsets) > SUBSETS_KEPT:
                graph.subsets.popitem(last=False)
        else:
            graph.subsets.move_to_end(key)
        keys, unit = subset
        scores = unit @ q
        k = min(k, len(keys))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(keys) else np.arange(len(keys))
        top = top[np.lexsort((keys[top], -scores[top]))]  # ties: by rowid, the order vectors were stored in
        return [(int(keys[i]), float(scores[i])) for i in top]

    def _filtered(
        self, graph: _Graph, key: tuple[object, ...], mask: np.ndarray, visible: int, q: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        """HNSW over the whole graph, keeping visible keys only; asks for more until k are visible."""
        total = len(graph.keys)
        want = min(k, visible)
        count = min(total, max(k, MIN_CANDIDATES, int(np.ceil(k * total / visible * OVERFETCH))))
        while True:
            matches = graph.index.search(q, count, threads=1)
            keys = np.asarray(matches.keys, dtype=np.int64)
            inside = keys[(keys < len(mask))]
            keep = inside[mask[inside]]
            if len(keep) >= want:
                break
            if count >= total:  # the graph did not reach every visible vector: score them exactly
                return self._exact(graph, key, mask, q, k)
            count = min(total, count * 4)
        scores = {int(row): 1.0 - float(d) for row, d in zip(keys, matches.distances, strict=True)}
        ranked = sorted((int(row) for row in keep), key=lambda row: (-scores[row], row))
        return [(row, scores[row]) for row in ranked[:k]]

    # -- derived data --------------------------------------------------------------------------

    def refresh(self, space: Space) -> None:
        """Catch the graph up with SQLite's vectors and save it (after the indexer's vector phase)."""
        if self.source.has_space(space):
            self.graph(space, save=True)

    def state(self, space: Space) -> AnnState:
        """The saved graph of a space against the store (``sunlib doctor``); loads nothing big."""
        files = self.files(space)
        stamp = files.read_stamp() if files is not None else None
        if files is None or stamp is None:
            return AnnState(space.name, "missing", "built on the next search or `sunlib doctor --repair`", 0, -1)
        if not self._belongs(stamp, space):
            return AnnState(space.name, "foreign", "built for another index or space: rebuilt", stamp.vectors, -1)
        if files.load() is None or not self._readable(files.graph_path(stamp.token), stamp):
            return AnnState(space.name, "damaged", "unreadable: rebuilt from SQLite's vectors", 0, -1)
        generation = self.documents.generation()
        if stamp.generation != generation:
            return AnnState(
                space.name,
                "behind",
                f"at write generation {stamp.generation} of {generation}: caught up on open",
                stamp.vectors,
                stamp.generation,
            )
        return AnnState(space.name, "fresh", str(files.stamp_path), stamp.vectors, stamp.generation)

    def _readable(self, graph: Path, stamp: AnnStamp) -> bool:
        """Whether a graph file's header reads and agrees with its stamp (the body is not read)."""
        try:
            header = self.Index.metadata(str(graph))
        except (OSError, RuntimeError, ValueError):
            return False
        return bool(header) and header.get("count_present") == stamp.vectors and header.get("dimensions") == stamp.dim

    def verify(self, space: Space, sample: int = 200) -> list[str]:
        """Problems of the saved graph against SQLite (the kill trials' check): its keys and stamps
        must be SQLite's vectors' and, for float32, a sample of its vectors equal to theirs."""
        files = self.files(space)
        loaded = files.load() if files is not None else None
        if loaded is None or not self._belongs(loaded.stamp, space):
            return [f"{space.name}: no usable graph file ({self.state(space).state})"]
        with self.db.snapshot():
            keys, stamps = self._stored_stamps(space)
            generation = self.documents.generation()
        problems = []
        if loaded.stamp.generation != generation:
            problems.append(f"{space.name}: graph at generation {loaded.stamp.generation}, store at {generation}")
        if not (np.array_equal(loaded.keys, keys) and np.array_equal(loaded.stamps, stamps)):
            problems.append(f"{space.name}: graph keys or stamps differ from SQLite's vectors")
            return problems
        index = self._new_index(space)
        index.load(str(loaded.graph))
        if len(index) != len(keys):
            problems.append(f"{space.name}: graph holds {len(index)} vectors, SQLite {len(keys)}")
        if self.dtype == "f32" and len(keys):
            picked = keys[:: max(1, len(keys) // sample)]
            stored = self.source.vectors_for(space, list(chunk_ids_of(self.db, picked.tolist()).values()))
            ids = chunk_ids_of(self.db, picked.tolist())
            got = np.asarray(index.get(picked.astype(np.uint64)), dtype=np.float32)
            for row, vector in zip(picked.tolist(), got, strict=True):
                if not np.allclose(vector, stored[ids[row]], atol=1e-6):
                    problems.append(f"{space.name}: the graph's vector of rowid {row} is not SQLite's")
                    break
        return problems

    def reconcile(self, space: Space) -> Reconciled:
        """Reconcile SQLite's vectors with the chunks, then bring the graph file up to date."""
        done = self.source.reconcile(space)
        self.refresh(space)
        return done
