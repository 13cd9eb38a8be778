"""Language-aware text helpers: FTS tokens, sentence spans, token estimates, Markdown as its reader sees it."""

from .render import render_markdown
from .sentences import sentence_spans
from .terms import Term, TermWeights, content_terms
from .tokens import estimate_tokens, fts_query, fts_tokens, is_cjk, language, query_terms, token_weight

__all__ = [
    "Term",
    "TermWeights",
    "content_terms",
    "estimate_tokens",
    "fts_query",
    "fts_tokens",
    "is_cjk",
    "language",
    "query_terms",
    "render_markdown",
    "sentence_spans",
    "token_weight",
]
