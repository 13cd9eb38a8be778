"""Search: BM25 route || dense route -> fusion -> hits with citations and snippets.

Every step runs through the tracer, so ``--explain`` shows what each route
returned, what fusion did with it, and whether vectors were missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..config import SearchSettings
from ..contracts import MODES, Citation, Hit, RouteScore, SearchFilters, SearchResult
from ..errors import UserError
from ..store import ChunkRow, Space, SqliteStore
from ..text import fts_query, query_terms
from ..trace import Tracer
from .fusion import fuse
from .snippets import make_snippet

MAX_QUERY_CHARS = 4000


@dataclass(frozen=True)
class SearchRequest:
    query: str
    mode: str = "hybrid"
    filters: SearchFilters = field(default_factory=SearchFilters)
    principals: tuple[str, ...] = ("public",)
    limit: int = 10
    offset: int = 0


class SearchEngine:
    """Runs the retrieval routes against one store; the query embedder is created on first use."""

    def __init__(
        self,
        store: SqliteStore,
        settings: SearchSettings,
        space: Space | None,
        embed_query: Callable[[str], np.ndarray] | None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.space = space
        self._embed_query = embed_query

    def search(self, req: SearchRequest, tracer: Tracer | None = None) -> SearchResult:
        _validate(req)
        tracer = tracer or Tracer("search")
        # The pool per route depends on the page size, never on the offset, so pages of one
        # query are slices of one fused ranking (they never overlap).
        pool = max(self.settings.candidates, req.limit)
        lists: dict[str, list[tuple[int, float]]] = {}
        with self.store.snapshot():  # the routes and the rows they name come from one state
            if req.mode in ("bm25", "hybrid"):
                lists["bm25"] = self._bm25(req, pool, tracer)
            if req.mode in ("dense", "hybrid"):
                dense = self._dense(req, pool, tracer)
                if dense is not None:
                    lists["dense"] = dense
            rows = self.store.fetch_chunks(sorted({rowid for items in lists.values() for rowid, _ in items}))
        ranked = self._fuse(req, lists, rows, tracer)
        terms = query_terms(req.query)
        page = ranked[req.offset : req.offset + req.limit]
        hits = tuple(_hit(rows[rowid], score, routes, terms) for rowid, score, routes in page)
        trace = tracer.finish()
        return SearchResult(req.query, req.mode, hits, len(ranked), trace)

    # -- routes ----------------------------------------------------------------------------

    def _bm25(self, req: SearchRequest, pool: int, tracer: Tracer) -> list[tuple[int, float]]:
        with tracer.step("BM25 Retrieval", f"query={req.query!r} pool={pool}") as step:
            match = fts_query(req.query)
            if match is None:
                step.skip("query has no searchable words")
                return []
            items = self.store.bm25(match, req.principals, req.filters, pool)
            step.done(
                f"{len(items)} chunks" + (f", top score {items[0][1]:.3f}" if items else ""),
                fts_match=match,
                principals=list(req.principals),
                filters=req.filters.describe(),
                top=[{"rowid": r, "score": round(s, 4)} for r, s in items[:10]],
            )
            return items

    def _dense(self, req: SearchRequest, pool: int, tracer: Tracer) -> list[tuple[int, float]] | None:
        with tracer.step("Dense Retrieval", f"query={req.query!r} pool={pool}") as step:
            if self.space is None or self._embed_query is None:
                step.skip("no embedding provider configured")
                tracer.warn("dense route unavailable: no embedding provider configured")
                return None
            missing = self._missing_vectors(self.space, req, tracer)
            if missing is None:
                step.skip(f"no vectors yet in space {self.space.name}")
                return None
            qvec = self._embed_query(req.query)
            items = self.store.knn(self.space, qvec, req.principals, req.filters, pool)
            step.done(
                f"{len(items)} chunks" + (f", top cosine {items[0][1]:.3f}" if items else ""),
                space=self.space.name,
                missing_vectors=missing,
                top=[{"rowid": r, "cosine": round(s, 4)} for r, s in items[:10]],
            )
            return items

    def _missing_vectors(self, space: Space, req: SearchRequest, tracer: Tracer) -> int | None:
        """Visible chunks without a vector (warned about, never silent); None when there are no vectors at all."""
        if self.store.fully_embedded(space):  # two counts; skips the per-filter scan in the common case
            return 0
        if not self.store.has_space(space):
            tracer.warn(f"dense route skipped: no vectors in {space.provider}:{space.model} yet; run `sunlib index`")
            return None
        missing, total = self.store.count_pending(space, req.principals, req.filters)
        if total and missing == total:
            others = {sp["provider"] for sp in self.store.spaces() if sp["vectors"] and sp["name"] != space.name}
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

    def _fuse(
        self,
        req: SearchRequest,
        lists: dict[str, list[tuple[int, float]]],
        rows: dict[int, ChunkRow],
        tracer: Tracer,
    ) -> list[tuple[int, float, dict[str, RouteScore]]]:
        by_chunk = {row.chunk_id: rowid for rowid, row in rows.items()}
        keyed = {route: [(rows[r].chunk_id, s) for r, s in items] for route, items in lists.items()}
        if len(keyed) < 2:
            route = next(iter(keyed), None)
            if route is None:
                return []
            # equal scores are ordered by chunk id, as fusion does, so every engine ranks alike
            items = sorted(keyed[route], key=lambda item: (-round(item[1], 6), item[0]))
            return [(by_chunk[k], s, {route: RouteScore(i, s, s)}) for i, (k, s) in enumerate(items, 1)]
        s = self.settings
        with tracer.step("Hybrid Fusion", f"{len(keyed['bm25'])} bm25 + {len(keyed['dense'])} dense") as step:
            fused = fuse(keyed, s.fusion, {"bm25": s.bm25_weight, "dense": s.dense_weight}, s.rrf_k)
            step.done(
                f"{len(fused)} unique chunks",
                method=s.fusion,
                k=s.rrf_k if s.fusion == "rrf" else None,
                weights={"bm25": s.bm25_weight, "dense": s.dense_weight},
                top=[
                    {
                        "chunk_id": f.key,
                        "score": round(f.score, 5),
                        "routes": {
                            r: {
                                "rank": v.rank,
                                "score": round(v.score, 4),
                                "contribution": round(v.contribution, 5),
                            }
                            for r, v in f.routes.items()
                        },
                    }
                    for f in fused[: max(10, req.limit)]
                ],
            )
        return [(by_chunk[f.key], f.score, dict(f.routes)) for f in fused]


def _validate(req: SearchRequest) -> None:
    if req.mode not in MODES:
        raise UserError(f"unknown mode {req.mode!r}; choose one of: {', '.join(MODES)}")
    if not req.query.strip():
        raise UserError("the query is empty")
    if len(req.query) > MAX_QUERY_CHARS:
        raise UserError(f"the query is {len(req.query)} characters; the limit is {MAX_QUERY_CHARS}")
    if req.limit < 1 or req.offset < 0:
        raise UserError("limit must be >= 1 and offset >= 0")


def _hit(row: ChunkRow, score: float, routes: dict[str, RouteScore], terms: Sequence[str]) -> Hit:
    snippet, highlights = make_snippet(row.text, terms)
    citation = Citation(
        citation_id="cit_" + row.chunk_id,
        chunk_id=row.chunk_id,
        note_id=row.note_id,
        path=row.path,
        title=row.title,
        heading_path=row.heading_path,
        start=row.start16,
        end=row.end16,
        start_line=row.start_line,
        end_line=row.end_line,
        quote=snippet,
    )
    return Hit(
        chunk_id=row.chunk_id,
        note_id=row.note_id,
        path=row.path,
        title=row.title,
        heading_path=row.heading_path,
        text=row.text,
        score=score,
        routes=routes,
        citation=citation,
        snippet=snippet,
        highlights=highlights,
        tags=row.tags,
        ordinal=row.ordinal,
        rowid=row.rowid,
    )
