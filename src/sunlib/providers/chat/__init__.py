"""Chat models: the LLM kind of provider, behind the writers and the LLM router."""

from .base import (
    ChatCapabilities,
    ChatMessage,
    ChatModel,
    ChatReply,
    ChatRequest,
    OnToken,
    ToolCall,
    ToolSpec,
)

__all__ = [
    "ChatCapabilities",
    "ChatMessage",
    "ChatModel",
    "ChatReply",
    "ChatRequest",
    "OnToken",
    "ToolCall",
    "ToolSpec",
]
