"""A local GGUF model through llama-cpp-python (optional; not installed by default).

Install with ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DLLAVA_BUILD=OFF"
pip install llama-cpp-python==0.3.36`` (a source build, about 6 minutes on 2 cores),
then set ``[answer] writer = "llama-cpp"`` and ``[llm] gguf_path``. ``n_threads``
defaults to 1: on busy cores more threads made generation collapse. The prompt is
the OpenAI writer's; whatever the model writes, the citation verifier decides what
is supported, and the refusal gate has already decided from retrieval evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...config import LLMSettings, Settings
from ...contracts import Draft, WriteRequest
from ...errors import ConfigError, ProviderError
from ..registry import Writer, register_writer
from .openai import writer_messages


class LlamaCppWriter(Writer):
    name = "llama-cpp"
    is_llm = True

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

    def write(self, request: WriteRequest, on_token: Callable[[str], None] | None = None) -> Draft:
        kwargs: dict[str, Any] = {"temperature": self.settings.temperature, "max_tokens": self.settings.max_tokens}
        messages: Any = writer_messages(request)
        try:
            if on_token is None:
                out: Any = self.llm.create_chat_completion(messages=messages, **kwargs)
                usage = out.get("usage") or {}
                return Draft(
                    out["choices"][0]["message"]["content"] or "",
                    self.model,
                    usage.get("prompt_tokens", 0),
                    usage.get("completion_tokens", 0),
                )
            parts: list[str] = []
            stream: Any = self.llm.create_chat_completion(messages=messages, stream=True, **kwargs)
            for chunk in stream:
                delta = chunk["choices"][0].get("delta", {}).get("content")
                if delta:
                    parts.append(delta)
                    on_token(delta)
            return Draft("".join(parts), self.model, 0, len(parts), streamed=True)
        except (RuntimeError, ValueError) as exc:
            raise ProviderError(f"local model failed: {exc}") from None


@register_writer("llama-cpp")
def _llama(settings: Settings) -> Writer:
    return LlamaCppWriter(settings.llm)
