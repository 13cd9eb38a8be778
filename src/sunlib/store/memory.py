"""The in-memory dense engine: numpy brute force over a space's vectors, ACL first.

sqlite-vec scans vectors inside SQLite (about 5-10x the cost of a numpy matrix
product at 100k chunks on this class of machine, see docs/benchmarks.md). A
long-running process (the server, a benchmark) can keep each space's matrix in
memory instead. Visibility is the same SQL subquery as everywhere else, turned
into a boolean mask that is applied to the scores BEFORE ranking, so a closer
restricted vector can never take a visible one's place. The matrix and the masks
are cached per store write generation and reloaded after any write. One instance may
serve the connections of many threads: its caches are guarded by a lock, and the
matrix is loaded once per generation, by the first thread that needs it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..contracts import SearchFilters

if TYPE_CHECKING:
    from .sqlite import Space, SqliteStore

MASK_CACHE = 64


class MemoryVectors:
    def __init__(self) -> None:
        self._spaces: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
        self._masks: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def knn(
        self,
        store: SqliteStore,
        space: Space,
        query: np.ndarray,
        principals: Sequence[str],
        filters: SearchFilters,
        k: int,
    ) -> list[tuple[int, float]]:
        generation = store.generation()
        with self._lock:  # other threads wait for this load rather than load a copy
            cached = self._spaces.get(space.name)
            if cached is None or cached[0] != generation:
                rowids, matrix = store.load_vectors(space)
                cached = (generation, rowids, matrix)
                self._spaces[space.name] = cached
        _, rowids, matrix = cached
        if not len(rowids):
            return []
        mask = self._mask(store, generation, space.name, rowids, principals, filters)
        scores = matrix @ np.asarray(query, dtype=np.float32)
        scores = np.where(mask, scores, -np.inf)
        n_visible = int(mask.sum())
        k = min(k, n_visible)
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.lexsort((rowids[top], -scores[top]))]
        return [(int(rowids[i]), float(scores[i])) for i in top if np.isfinite(scores[i])]

    def _mask(
        self,
        store: SqliteStore,
        generation: int,
        space: str,
        rowids: np.ndarray,
        principals: Sequence[str],
        filters: SearchFilters,
    ) -> np.ndarray:
        key = (generation, space, tuple(sorted(principals)), filters)
        with self._lock:
            mask = self._masks.get(key)
            if mask is not None:
                self._masks.move_to_end(key)
                return mask
        mask = np.isin(rowids, store.visible_rowids(principals, filters))
        with self._lock:
            self._masks[key] = mask
            while len(self._masks) > MASK_CACHE:
                self._masks.popitem(last=False)
        return mask
