"""A chat model for any OpenAI-compatible endpoint: ``POST {base_url}/chat/completions``.

OpenAI, DashScope/Qwen compatible mode, Ollama, vLLM and the llama.cpp server speak it.
With ``stream = true`` (and a token callback) the reply arrives as server-sent ``data:``
lines, and each text delta is passed on as it comes. JSON mode is sent as
``response_format: {"type": "json_object"}`` and tools as ``tools`` (function tools);
tool-call deltas of a stream are put back together. Failures are retried by the shared
policy (``http_common.RetryPolicy``), and only before the first token: a stream cut
midway is an error, never a silently shortened reply. The key comes from the env var
named by ``llm.api_key_env``; a loopback server needs none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from ...config import LLMSettings
from ...errors import MissingCredentials, ProviderError
from ..http_common import (
    TRANSIENT_ERRORS,
    Retryable,
    RetryPolicy,
    is_loopback,
    read_key,
    redact,
    retry_after,
    status_failure,
)
from .base import ChatCapabilities, ChatMessage, ChatModel, ChatReply, ChatRequest, OnToken, ToolCall

MAX_BACKOFF_S = 10.0  # an LLM call waits at most this long between attempts


def retry_policy(settings: LLMSettings) -> RetryPolicy:
    return RetryPolicy(max_retries=settings.max_retries, max_backoff_s=MAX_BACKOFF_S)


class OpenAIChatModel(ChatModel):
    """One OpenAI-compatible chat endpoint: plain and streaming completions, JSON mode, tools."""

    name = "openai"

    def __init__(
        self,
        settings: LLMSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        retry: RetryPolicy | None = None,
        capabilities: ChatCapabilities | None = None,
    ) -> None:
        self.settings = settings
        self.model = settings.model
        self.base_url = settings.base_url.rstrip("/")
        self.retry = retry or retry_policy(settings)
        self.capabilities = capabilities or ChatCapabilities(streaming=settings.stream, json_mode=True, tool_calls=True)
        key = read_key([settings.api_key_env]) if settings.api_key_env else None
        if settings.api_key_env and key is None and not is_loopback(self.base_url):
            raise MissingCredentials(
                f"the LLM at {self.base_url} needs a key: set the environment variable {settings.api_key_env}"
            )
        self._key = key
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(settings.timeout_s), headers=headers, transport=transport, follow_redirects=False
        )

    def _chat(self, request: ChatRequest, on_token: OnToken | None) -> ChatReply:
        body = self._body(request)
        if self.capabilities.streaming and on_token is not None:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            return self.retry.run(lambda: self._stream(body, on_token), "LLM request")
        return self.retry.run(lambda: self._plain(body), "LLM request")

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m) for m in request.messages],
            "temperature": self.settings.temperature if request.temperature is None else request.temperature,
            "max_tokens": self.settings.max_tokens if request.max_tokens is None else request.max_tokens,
        }
        if request.json_mode:
            body["response_format"] = {"type": "json_object"}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if request.tool_choice in ("auto", "none", "required"):
            body["tool_choice"] = request.tool_choice
        elif request.tool_choice:
            body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
        return body

    def _check(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        message = status_failure(response, self._key)
        if self.retry.retries_status(response.status_code):
            raise Retryable(message, retry_after(response))
        raise ProviderError(f"the LLM refused the request: {message}")

    def _plain(self, body: dict[str, Any]) -> ChatReply:
        try:
            response = self._client.post(f"{self.base_url}/chat/completions", json=body)
        except TRANSIENT_ERRORS as exc:
            raise Retryable(f"{type(exc).__name__}: {redact(str(exc), self._key)}") from None
        except httpx.HTTPError as exc:  # e.g. a body that does not decode
            detail = redact(str(exc), self._key)
            raise ProviderError(f"unreadable response from the LLM: {type(exc).__name__}: {detail}") from None
        self._check(response)
        try:
            payload = response.json()
            choice = payload["choices"][0]
            message = choice["message"]
            calls = tuple(_tool_call(c) for c in message.get("tool_calls") or ())
            text = message.get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise ProviderError("malformed response from the LLM: no choices[0].message.content") from None
        if text is None and calls:
            text = ""
        if not isinstance(text, str):
            raise ProviderError("malformed response from the LLM: message content is not text")
        prompt, completion = _usage(payload)
        finish = choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None
        return ChatReply(text, self.model, prompt, completion, False, calls, finish)

    def _stream(self, body: dict[str, Any], on_token: OnToken) -> ChatReply:
        stream = _Stream(on_token)
        try:
            with self._client.stream("POST", f"{self.base_url}/chat/completions", json=body) as response:
                if response.status_code >= 400:
                    response.read()
                self._check(response)
                for data in _sse_data(response.iter_lines()):
                    if data == "[DONE]":
                        stream.finish_reason = stream.finish_reason or "stop"
                        break
                    stream.feed(data)
        except TRANSIENT_ERRORS as exc:
            if stream.parts:  # tokens already went out: retrying would repeat them
                raise ProviderError(
                    f"the LLM stream broke after {len(stream.parts)} deltas: {redact(str(exc), self._key)}"
                ) from None
            raise Retryable(f"{type(exc).__name__}: {redact(str(exc), self._key)}") from None
        except httpx.HTTPError as exc:  # e.g. a body that does not decode
            detail = redact(str(exc), self._key)
            raise ProviderError(f"unreadable stream from the LLM: {type(exc).__name__}: {detail}") from None
        if stream.finish_reason is None:
            raise ProviderError(f"the LLM stream ended without finishing (after {len(stream.parts)} deltas)")
        return stream.reply(self.model)


class _Stream:
    """What one streamed reply has delivered so far (a fresh one per attempt)."""

    def __init__(self, on_token: OnToken) -> None:
        self.on_token = on_token
        self.parts: list[str] = []
        self.usage = (0, 0)
        self.finish_reason: str | None = None
        self.calls: dict[int, dict[str, str]] = {}

    def feed(self, data: str) -> None:
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ProviderError("malformed stream from the LLM: a data line is not JSON") from None
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices") or [], list):
            raise ProviderError("malformed stream from the LLM: a chunk is not a chat completion chunk")
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk)
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or not isinstance(choice.get("delta") or {}, dict):
                raise ProviderError("malformed stream from the LLM: a choice or its delta is not an object")
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.parts.append(text)
                self.on_token(text)
            for call in delta.get("tool_calls") or ():
                self._add_call(call)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _add_call(self, call: Any) -> None:
        """Tool calls stream in pieces: the id and name once, the arguments as text to join."""
        if not isinstance(call, dict) or not isinstance(call.get("index", 0), int):
            raise ProviderError("malformed stream from the LLM: a tool call delta is not an object")
        seen = self.calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
        function = call.get("function") or {}
        if not isinstance(function, dict):
            raise ProviderError("malformed stream from the LLM: a tool call's function is not an object")
        seen["id"] = str(call.get("id") or seen["id"])
        seen["name"] = str(function.get("name") or seen["name"])
        seen["arguments"] += str(function.get("arguments") or "")

    def reply(self, model: str) -> ChatReply:
        calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(self.calls.items()))
        text = "".join(self.parts)
        return ChatReply(text, model, *self.usage, streamed=True, tool_calls=calls, finish_reason=self.finish_reason)


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    return out


def _tool_call(raw: Any) -> ToolCall:
    function = raw["function"]
    arguments = function.get("arguments") or ""
    if not isinstance(arguments, str):  # some servers send the object itself
        arguments = json.dumps(arguments)
    return ToolCall(str(raw.get("id") or ""), str(function["name"]), arguments)


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


def _usage(payload: Any) -> tuple[int, int]:
    """(prompt_tokens, completion_tokens), 0 for what the server did not say."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    values = [usage.get(k) for k in ("prompt_tokens", "completion_tokens")]
    prompt, completion = (v if isinstance(v, int) and not isinstance(v, bool) else 0 for v in values)
    return prompt, completion
