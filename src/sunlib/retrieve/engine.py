"""Search: the Retriever (BM25 route || dense route -> fusion) -> hits with citations and snippets.

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
from ..providers.chat import ChatModel
from ..store import ChunkRow, Space, Store, Visibility
from ..text import query_terms
from ..trace import Tracer
from .retriever import Retriever
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
    """Validates a request, runs the Retriever against one store, and pages the fused ranking
    into hits with citations and snippets. The query embedder is created on first use."""

    def __init__(
        self,
        store: Store,
        settings: SearchSettings,
        space: Space | None,
        embed_query: Callable[[str], np.ndarray] | None,
        retriever: Retriever | None = None,
        crosslang: tuple[Space, Callable[[str], np.ndarray]] | None = None,
        chat: ChatModel | None = None,
        fast: tuple[Space, Callable[[str], np.ndarray]] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.space = space
        self.retriever = retriever or Retriever.default(store, settings, space, embed_query, crosslang, chat, fast)

    def search(self, req: SearchRequest, tracer: Tracer | None = None) -> SearchResult:
        _validate(req)
        tracer = tracer or Tracer("search")
        # The pool per route depends on the page size, never on the offset, so pages of one
        # query are slices of one fused ranking (they never overlap).
        pool = max(self.settings.candidates, req.limit)
        visibility = Visibility.of(req.principals, req.filters)
        with self.store.snapshot():  # the routes and the rows they name come from one state
            ranked = self.retriever.retrieve(req.query, visibility, req.mode, pool, tracer, shown=req.limit)
            page = ranked[req.offset : req.offset + req.limit]
            rows = {row.chunk_id: row for row in self.store.chunks_by_ids([c.chunk_id for c in page])}
        terms = query_terms(req.query)
        hits = tuple(_hit(rows[c.chunk_id], c.score, dict(c.routes), terms) for c in page)
        trace = tracer.finish()
        return SearchResult(req.query, req.mode, hits, len(ranked), trace)


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
    )
