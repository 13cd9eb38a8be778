"""Retrieval: BM25 and dense routes, fusion, snippets."""

from .engine import SearchEngine, SearchRequest
from .fusion import FUSIONS, Fused, fuse

__all__ = ["FUSIONS", "Fused", "SearchEngine", "SearchRequest", "fuse"]
