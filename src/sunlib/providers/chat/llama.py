"""A local GGUF model through llama-cpp-python (optional; not installed by default).

Install with ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DLLAVA_BUILD=OFF"
pip install llama-cpp-python==0.3.36`` (a source build, about 6 minutes on 2 cores),
then set ``[answer] writer = "llama-cpp"`` and ``[llm] gguf_path``. ``n_threads``
defaults to 1: on busy cores more threads made generation collapse. It streams
whenever a token callback is given, and JSON mode is llama-cpp's ``response_format``
(a grammar); tool calls need a function-calling chat format, so they are not offered.
A ``Llama`` object is not reentrant: one generation runs at a time per loaded model
(concurrent asks queue on that model's lock, and nothing else waits on it).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ...config import LLMSettings
from ...errors import ConfigError, ProviderError
from .base import ChatCapabilities, ChatModel, ChatReply, ChatRequest, OnToken


class LlamaCppChatModel(ChatModel):
    name = "llama-cpp"
    capabilities = ChatCapabilities(streaming=True, json_mode=True, tool_calls=False)

    def __init__(self, settings: LLMSettings) -> None:
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ConfigError(
                "the llama-cpp writer needs llama-cpp-python: see the README section on local models"
            ) from None
        if settings.gguf_path is None or not Path(settings.gguf_path).expanduser().is_file():
            raise ConfigError(f"llm.gguf_path must name a GGUF file (got {settings.gguf_path})")
        path = Path(settings.gguf_path).expanduser()
        self.settings = settings
        self.model = path.name
        self.llm = Llama(model_path=str(path), n_threads=settings.n_threads, n_ctx=settings.n_ctx, verbose=False)
        self._turn = threading.Lock()

    def _chat(self, request: ChatRequest, on_token: OnToken | None) -> ChatReply:
        with self._turn:
            return self._generate(request, on_token)

    def _generate(self, request: ChatRequest, on_token: OnToken | None) -> ChatReply:
        kwargs: dict[str, Any] = {
            "temperature": self.settings.temperature if request.temperature is None else request.temperature,
            "max_tokens": self.settings.max_tokens if request.max_tokens is None else request.max_tokens,
        }
        if request.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        messages: Any = [{"role": m.role, "content": m.content} for m in request.messages]
        try:
            if on_token is None:
                out: Any = self.llm.create_chat_completion(messages=messages, **kwargs)
                usage = out.get("usage") or {}
                choice = out["choices"][0]
                return ChatReply(
                    choice["message"]["content"] or "",
                    self.model,
                    usage.get("prompt_tokens", 0),
                    usage.get("completion_tokens", 0),
                    finish_reason=choice.get("finish_reason"),
                )
            parts: list[str] = []
            stream: Any = self.llm.create_chat_completion(messages=messages, stream=True, **kwargs)
            for chunk in stream:
                delta = chunk["choices"][0].get("delta", {}).get("content")
                if delta:
                    parts.append(delta)
                    on_token(delta)
            # the stream reports no usage: one delta is about one token
            return ChatReply("".join(parts), self.model, 0, len(parts), streamed=True, finish_reason="stop")
        except (RuntimeError, ValueError) as exc:
            raise ProviderError(f"local model failed: {exc}") from None
