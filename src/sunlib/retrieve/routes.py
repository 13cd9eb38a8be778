"""Retrieval routes: each turns (query, visibility, pool) into ranked (chunk_id, score).

A route is anything with a ``name`` (its key in fusion and in ``Hit.routes``), a fusion
``weight``, ``retrieve`` and ``unscored``. ``retrieve`` records its own trace step and returns
None when it cannot run at all (no embedder, no vectors yet), which is not the same as finding
nothing. ``unscored`` names, among chunks another route found, those this route cannot score at
all (the dense route: chunks still waiting for their vector), as opposed to chunks it ranked
below its pool; fusion fills their contribution in rather than charging them the route's floor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..steps import Step
from ..store import LexicalIndex, Space, VectorIndex, Visibility
from ..text import fts_query
from ..trace import Tracer

Ranked = list[tuple[str, float]]


class Route(Protocol):
    name: str
    weight: float

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        """Up to ``pool`` visible chunks, best first; None when the route is unavailable."""
        ...

    def unscored(self, chunk_ids: Sequence[str]) -> set[str]:
        """Those of ``chunk_ids`` (visible chunks other routes returned) this route cannot score yet."""
        ...


class LexicalRoute:
    """BM25 over the full-text index (step "BM25 Retrieval")."""

    def __init__(self, lexical: LexicalIndex, weight: float, name: str = "bm25") -> None:
        self.lexical = lexical
        self.weight = weight
        self.name = name

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        with tracer.step(Step.BM25, f"query={query!r} pool={pool}") as step:
            match = fts_query(query)
            if match is None:
                step.skip("query has no searchable words")
                return []
            items = self.lexical.bm25(match, visibility, pool)
            step.done(
                f"{len(items)} chunks" + (f", top score {items[0][1]:.3f}" if items else ""),
                fts_match=match,
                principals=list(visibility.principals),
                filters=visibility.filters.describe(),
                top=[{"chunk_id": c, "score": round(s, 4)} for c, s in items[:10]],
            )
            return items

    def unscored(self, chunk_ids: Sequence[str]) -> set[str]:
        """None: a chunk's text is in the full-text index as soon as the chunk is stored."""
        return set()


class DenseRoute:
    """KNN in one embedding space (step "Dense Retrieval"); says how many visible chunks still
    wait for vectors, and skips (never silently compares a partial route) when none has one."""

    def __init__(
        self,
        vectors: VectorIndex,
        space: Space | None,
        embed_query: Callable[[str], np.ndarray] | None,
        weight: float,
        name: str = "dense",
    ) -> None:
        self.vectors = vectors
        self.space = space
        self.embed_query = embed_query
        self.weight = weight
        self.name = name

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        with tracer.step(Step.DENSE, f"query={query!r} pool={pool}") as step:
            if self.space is None or self.embed_query is None:
                step.skip("no embedding provider configured")
                tracer.warn("dense route unavailable: no embedding provider configured")
                return None
            missing = self._missing_vectors(self.space, visibility, tracer)
            if missing is None:
                step.skip(f"no vectors yet in space {self.space.name}")
                return None
            items = self.vectors.knn(self.space, self.embed_query(query), visibility, pool)
            step.done(
                f"{len(items)} chunks" + (f", top cosine {items[0][1]:.3f}" if items else ""),
                space=self.space.name,
                missing_vectors=missing,
                top=[{"chunk_id": c, "cosine": round(s, 4)} for c, s in items[:10]],
            )
            return items

    def unscored(self, chunk_ids: Sequence[str]) -> set[str]:
        """The chunks without a vector in the space yet: a lookup of these ids only (never a
        count over the index), so it costs the same however large the vault is."""
        if self.space is None:
            return set(chunk_ids)
        return self.vectors.without_vectors(self.space, chunk_ids)

    def _missing_vectors(self, space: Space, visibility: Visibility, tracer: Tracer) -> int | None:
        """Visible chunks without a vector (warned about, never silent); None when there are no vectors at all."""
        if self.vectors.fully_embedded(space):  # two counts; skips the per-filter scan in the common case
            return 0
        if not self.vectors.has_space(space):
            tracer.warn(f"dense route skipped: no vectors in {space.provider}:{space.model} yet; run `sunlib index`")
            return None
        missing, total = self.vectors.count_pending(space, visibility)
        if total and missing == total:
            others = {sp.provider for sp in self.vectors.spaces() if sp.vectors and sp.name != space.name}
            hint = f" (this index has vectors from: {', '.join(sorted(others))})" if others else ""
            tracer.warn(
                f"dense route skipped: none of the {total} visible chunks has a vector in "
                f"{space.provider}:{space.model}{hint}; run `sunlib index` to embed them"
            )
            return None
        if missing:
            tracer.warn(
                f"dense route covers {total - missing}/{total} visible chunks; {missing} still wait "
                "for vectors (BM25 covers them; run `sunlib index` to finish)"
            )
        return missing
