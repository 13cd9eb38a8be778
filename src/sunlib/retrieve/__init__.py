"""Retrieval: named routes (BM25, dense, ...), fusion, snippets, the search engine."""

from .engine import SearchEngine, SearchRequest
from .fusion import FUSIONS, Fused, fuse
from .retriever import Candidate, Retriever
from .routes import DenseRoute, LexicalRoute, Route

__all__ = [
    "FUSIONS",
    "Candidate",
    "DenseRoute",
    "Fused",
    "LexicalRoute",
    "Retriever",
    "Route",
    "SearchEngine",
    "SearchRequest",
    "fuse",
]
