"""The OpenAI-compatible API's types (pydantic): the chat request as OpenAI clients send it, and
the objects sunlib answers with (chat.completion, chat.completion.chunk, the model list), each
extended with sunlib's ``citations`` and ``sunlib`` fields.

Requests accept the usual OpenAI fields and ignore any other one, so a client that sends a
newer field keeps working; the sampling fields are accepted and not applied (the writer's own
settings decide, see the README's "OpenAI-compatible API").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..retrieve.engine import MAX_QUERY_CHARS

MAX_MESSAGES = 200  # a long chat: only the last user turns are read (answer.conversation.MAX_TURNS)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ContentPart(_Lenient):
    """One part of a message's content; only ``text`` parts are read."""

    type: str
    text: str | None = Field(None, max_length=MAX_QUERY_CHARS)


class MessageIn(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text: its string content, or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content or () if p.type == "text" and p.text)


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatCompletionBody(_Lenient):
    model: str = Field(min_length=1, max_length=200)
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # accepted for compatibility and not applied
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1, le=1)  # one answer per question
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    user: str | None = Field(None, max_length=512)


# -- responses ------------------------------------------------------------------------------


class CitationOut(BaseModel):
    """One cited passage; ``index`` is the number of its ``[n]`` marker in the answer text."""

    index: int
    path: str
    title: str
    heading: str | None = Field(description="the heading path, joined by ' > ' (None above the first heading)")
    heading_path: list[str]
    start_line: int
    end_line: int
    start: int = Field(description="offset of the quote in the note file, in UTF-16 code units")
    end: int = Field(description="end offset (exclusive), in UTF-16 code units")
    quote: str
    note_id: str
    chunk_id: str


class RefusalOut(BaseModel):
    code: str
    message: str


class FollowUpOut(BaseModel):
    said: str
    standalone: str
    reason: str
    turn: int


class SunlibOut(BaseModel):
    """What sunlib adds to every answer: the run, the route, and a refusal's reasons."""

    run_id: str
    route: str
    refused: bool
    reason_code: str | None = Field(description="the first refusal's code (e.g. low_gate); None when answered")
    refusal_reason: str | None
    refusals: list[RefusalOut]
    confidence: float
    confidence_level: str
    question: str = Field(description="the question the pipeline ran on (a follow-up made standalone)")
    follow_up: FollowUpOut | None
    unverified_markers: list[int] = Field(description="[n] markers the citation verifier did not accept")
    dropped: list[str] = Field(
        default_factory=list,
        description="sentences the citation verifier took out of the answer (a stream sent them before the check)",
    )
    usage: Literal["estimated", "reported"]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class MessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: MessageOut
    finish_reason: Literal["stop"] = "stop"
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    citations: list[CitationOut]
    sunlib: SunlibOut
    system_fingerprint: str | None = None


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: Literal["stop"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One streamed chunk; only the final one has ``finish_reason``, ``citations``, ``sunlib`` and ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    citations: list[CitationOut] | None = None
    sunlib: SunlibOut | None = None
    system_fingerprint: str | None = None


class ModelOut(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "sunlib"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelOut]


class OpenAIError(BaseModel):
    message: str
    type: str
    code: str | None
    param: str | None = None


class OpenAIErrorBody(BaseModel):
    error: OpenAIError


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return OpenAIErrorBody(error=OpenAIError(message=message, type=type_, code=code, param=param)).model_dump()
