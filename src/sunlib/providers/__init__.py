"""Providers, chosen by name from config through one registry."""

from .registry import (
    EMBEDDERS,
    RERANKERS,
    WRITERS,
    Embedder,
    Reranker,
    Writer,
    create_embedder,
    create_reranker,
    create_writer,
    register_embedder,
    register_reranker,
    register_writer,
    sentence_model,
)

__all__ = [
    "EMBEDDERS",
    "RERANKERS",
    "WRITERS",
    "Embedder",
    "Reranker",
    "Writer",
    "create_embedder",
    "create_reranker",
    "create_writer",
    "register_embedder",
    "register_reranker",
    "register_writer",
    "sentence_model",
]
