"""The numpy VectorIndex: brute-force KNN over a space's matrix held in memory, ACL first.

sqlite-vec scans vectors inside SQLite (about 5-10x the cost of a numpy matrix product at
100k chunks on this class of machine, see docs/benchmarks.md). A long-running process (the
server, a benchmark) can keep each space's matrix in memory instead. Vectors persist in a
``VectorSource`` (the sqlite-vec index of the same file), which also takes every write; this
engine only answers ``knn``. Visibility is compiled to a boolean mask over the matrix rows
from the document store's visible chunk ids, applied to the scores BEFORE ranking, so a
closer restricted vector can never take a visible one's place.

The matrices and masks live in one process-wide cache keyed by the index file's identity
and its write generation, behind a lock: every connection (one per reader thread) shares
them, and a write anywhere (a new generation) makes the next query load afresh.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .protocols import DocumentStore, PendingChunk, Reconciled, Space, SpaceInfo, VectorIndex, VectorItem, Visibility

MATRIX_CACHE = 8  # spaces (of any index file) kept in memory
MASK_CACHE = 64  # visibility masks kept (distinct principals/filters per generation)


class VectorSource(VectorIndex, Protocol):
    """A persistent VectorIndex that can hand over a whole space at once."""

    def all_vectors(self, space: Space) -> tuple[list[str], np.ndarray]: ...


@dataclass(frozen=True)
class _Matrix:
    generation: int  # the write generation the matrix was read at
    chunk_ids: tuple[str, ...]
    position: dict[str, int]
    matrix: np.ndarray


class MatrixCache:
    """Thread-safe LRU of space matrices (one per index and space: a newer write generation
    replaces the matrix, so an embedding job never piles up copies) and visibility masks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._matrices: OrderedDict[tuple[str, str], _Matrix] = OrderedDict()
        self._loading: dict[tuple[str, str], threading.Lock] = {}
        self._masks: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
        self.loads = 0  # matrices loaded from a source so far (what sharing saves)

    def __len__(self) -> int:
        """How many matrices are held."""
        with self._lock:
            return len(self._matrices)

    def _current(self, key: tuple[str, str], generation: int) -> _Matrix | None:
        with self._lock:
            found = self._matrices.get(key)
            if found is None or found.generation != generation:
                return None
            self._matrices.move_to_end(key)
            return found

    def matrix(self, key: tuple[str, str], generation: int, load: SourceLoad) -> _Matrix:
        """The matrix of ``key`` (index, space) at ``generation``, loaded once however many
        threads ask for it at once."""
        found = self._current(key, generation)
        if found is not None:
            return found
        with self._lock:
            turn = self._loading.setdefault(key, threading.Lock())
        with turn:  # readers of this space wait for one load; other spaces do not
            found = self._current(key, generation)
            if found is not None:
                return found
            chunk_ids, matrix = load()
            matrix.setflags(write=False)
            entry = _Matrix(generation, tuple(chunk_ids), {c: i for i, c in enumerate(chunk_ids)}, matrix)
            with self._lock:
                self.loads += 1
                self._matrices[key] = entry
                self._matrices.move_to_end(key)
                while len(self._matrices) > MATRIX_CACHE:
                    self._matrices.popitem(last=False)
        return entry

    def mask(self, key: tuple[object, ...], build: MaskBuild) -> np.ndarray:
        with self._lock:
            found = self._masks.get(key)
            if found is not None:
                self._masks.move_to_end(key)
                return found
        mask = build()
        mask.setflags(write=False)
        with self._lock:
            self._masks[key] = mask
            while len(self._masks) > MASK_CACHE:
                self._masks.popitem(last=False)
        return mask


class SourceLoad(Protocol):
    def __call__(self) -> tuple[list[str], np.ndarray]: ...


class MaskBuild(Protocol):
    def __call__(self) -> np.ndarray: ...


SHARED = MatrixCache()


class Delegating:
    """The VectorIndex calls an in-memory or derived engine passes to its persistent ``source``
    unchanged: an engine subclasses this and answers ``knn`` (and whatever else it keeps) itself."""

    source: VectorSource

    def ensure_space(self, space: Space) -> None:
        self.source.ensure_space(space)

    def has_space(self, space: Space) -> bool:
        return self.source.has_space(space)

    def spaces(self) -> list[SpaceInfo]:
        return self.source.spaces()

    def upsert(self, space: Space, items: Sequence[VectorItem], cache: bool = True) -> int:
        return self.source.upsert(space, items, cache)

    def delete(self, space: Space, chunk_ids: Sequence[str]) -> None:
        self.source.delete(space, chunk_ids)

    def pending(self, space: Space, limit: int | None = None, first: Sequence[str] = ()) -> list[PendingChunk]:
        return self.source.pending(space, limit, first)

    def count_pending(self, space: Space, visibility: Visibility | None = None) -> tuple[int, int]:
        return self.source.count_pending(space, visibility)

    def still_pending(self, space: Space, chunks: Sequence[PendingChunk]) -> list[PendingChunk]:
        return self.source.still_pending(space, chunks)

    def fully_embedded(self, space: Space) -> bool:
        return self.source.fully_embedded(space)

    def without_vectors(self, space: Space, chunk_ids: Sequence[str]) -> set[str]:
        return self.source.without_vectors(space, chunk_ids)

    def vectors_for(self, space: Space, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        return self.source.vectors_for(space, chunk_ids)

    def cached_vectors(self, space: Space, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        return self.source.cached_vectors(space, hashes)

    def reconcile(self, space: Space) -> Reconciled:
        return self.source.reconcile(space)


class NumpyVectors(Delegating):
    """A VectorIndex answering KNN from memory; every other call goes to the persistent source."""

    def __init__(
        self, source: VectorSource, documents: DocumentStore, identity: str, cache: MatrixCache = SHARED
    ) -> None:
        self.source = source
        self.documents = documents
        self.identity = identity  # names the index file, so connections to one file share matrices
        self.cache = cache

    def knn(self, space: Space, query: np.ndarray, visibility: Visibility, k: int) -> list[tuple[str, float]]:
        generation = self.documents.generation()
        entry = self.cache.matrix((self.identity, space.name), generation, lambda: self.source.all_vectors(space))
        if not entry.chunk_ids:
            return []

        def build() -> np.ndarray:
            mask = np.zeros(len(entry.chunk_ids), dtype=bool)
            rows = [entry.position[c] for c in self.documents.visible_chunk_ids(visibility) if c in entry.position]
            mask[rows] = True
            return mask

        mask = self.cache.mask((self.identity, generation, space.name, *visibility.key), build)
        scores = np.where(mask, entry.matrix @ np.asarray(query, dtype=np.float32), -np.inf)
        k = min(k, int(mask.sum()))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]  # ties: the order vectors were stored in
        return [(entry.chunk_ids[i], float(scores[i])) for i in top if np.isfinite(scores[i])]
