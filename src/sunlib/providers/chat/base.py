"""The chat model interface: typed messages in, a typed reply out, tokens streamed through a callback.

A ``ChatModel`` declares what its endpoint can do (``ChatCapabilities``); asking for
JSON mode or tools from a model that cannot do them raises ``UnsupportedCapability``
before anything is sent. A model holds its configuration and its connection only:
everything about one call travels in the ``ChatRequest`` and the ``ChatReply``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...errors import UnsupportedCapability

Role = Literal["system", "user", "assistant", "tool"]
OnToken = Callable[[str], None]


@dataclass(frozen=True)
class ToolCall:
    """A function call the model asked for; ``arguments`` is the JSON text as the model wrote it."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> Any:
        """The arguments decoded (ValueError when the model wrote no valid JSON)."""
        return json.loads(self.arguments or "{}")


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str
    tool_call_id: str | None = None  # a "tool" message answers this call
    tool_calls: tuple[ToolCall, ...] = ()  # an "assistant" message that called tools

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        return cls("system", content)

    @classmethod
    def user(cls, content: str) -> ChatMessage:
        return cls("user", content)


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call; ``parameters`` is its JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ChatRequest:
    """One call. ``json_mode`` asks for a reply that is one JSON object; ``tools`` offers functions
    (``tool_choice``: "auto", "none", "required" or a tool's name). Unset sampling values come from
    the model's settings."""

    messages: tuple[ChatMessage, ...]
    json_mode: bool = False
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class ChatReply:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    streamed: bool = False  # the text reached on_token delta by delta
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None


@dataclass(frozen=True)
class ChatCapabilities:
    """What the endpoint supports. Streaming is best effort: without it, on_token is never called."""

    streaming: bool = True
    json_mode: bool = False
    tool_calls: bool = False


class ChatModel(ABC):
    """A chat endpoint. ``chat`` checks the request against the capabilities, then calls ``_chat``."""

    name: str  # the provider: "openai", "llama-cpp", ...
    model: str
    capabilities: ChatCapabilities = ChatCapabilities()

    def chat(self, request: ChatRequest, on_token: OnToken | None = None) -> ChatReply:
        """The model's reply. When the model streams and ``on_token`` is given, each text delta is
        passed to it as it arrives (``reply.streamed`` says whether that happened)."""
        self.require(request)
        return self._chat(request, on_token)

    def require(self, request: ChatRequest) -> None:
        """Raise UnsupportedCapability when the request needs what this model cannot do."""
        missing = []
        if request.json_mode and not self.capabilities.json_mode:
            missing.append("JSON mode")
        if (request.tools or request.tool_choice) and not self.capabilities.tool_calls:
            missing.append("tool calls")
        if missing:
            raise UnsupportedCapability(
                f"the {self.name} chat model {self.model!r} does not support {' or '.join(missing)}; "
                f"it supports: {describe(self.capabilities)}"
            )

    @abstractmethod
    def _chat(self, request: ChatRequest, on_token: OnToken | None) -> ChatReply: ...


def describe(capabilities: ChatCapabilities) -> str:
    flags = (
        (capabilities.streaming, "streaming"),
        (capabilities.json_mode, "JSON mode"),
        (capabilities.tool_calls, "tool calls"),
    )
    return ", ".join(label for on, label in flags if on) or "plain replies only"
