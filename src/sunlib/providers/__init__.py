"""Providers, chosen by name from config through one registry per kind (``registry.py``)."""

from .base import Embedder, Reranker, Writer
from .chat import ChatCapabilities, ChatMessage, ChatModel, ChatReply, ChatRequest, ToolCall, ToolSpec
from .registry import (
    CHAT_MODELS,
    EMBEDDERS,
    RERANKERS,
    WRITERS,
    Registry,
    create_chat_model,
    create_embedder,
    create_reranker,
    create_writer,
    register_chat_model,
    register_embedder,
    register_reranker,
    register_writer,
    sentence_model,
)

__all__ = [
    "CHAT_MODELS",
    "EMBEDDERS",
    "RERANKERS",
    "WRITERS",
    "ChatCapabilities",
    "ChatMessage",
    "ChatModel",
    "ChatReply",
    "ChatRequest",
    "Embedder",
    "Registry",
    "Reranker",
    "ToolCall",
    "ToolSpec",
    "Writer",
    "create_chat_model",
    "create_embedder",
    "create_reranker",
    "create_writer",
    "register_chat_model",
    "register_embedder",
    "register_reranker",
    "register_writer",
    "sentence_model",
]
