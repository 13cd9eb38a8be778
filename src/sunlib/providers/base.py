"""The provider interfaces: an embedder, a reranker and a writer (the chat model is in ``chat/``).

Each is an ABC with one abstract method; a provider is any subclass, built by a factory
that the registry (``registry.py``) finds by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from ..config import Settings
from ..contracts import Draft, Hit, Ranked, WriteRequest
from ..text import TermWeights
from .chat import ChatModel

Kind = Literal["passage", "query"]


class Embedder(ABC):
    """``embed(texts) -> (N, D)`` float32 rows of unit length; ``embed_query(text) -> (D,)``."""

    provider: str
    model: str
    dim: int
    # The bundled model whose second space the cross-language route searches when
    # ``[search] crosslang_provider = "auto"``; None: this embedder's own space.
    crosslang_partner: str | None = "use"

    @abstractmethod
    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        """Raw vectors for a batch; the public methods normalise them."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(self.embed_batch(texts, "passage"))

    def embed_query(self, text: str) -> np.ndarray:
        return l2_normalize(self.embed_batch([text], "query"))[0]

    def describe(self) -> dict[str, object]:
        return {"provider": self.provider, "model": self.model, "dim": self.dim}


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim == 1:
        v = v[None, :]
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(v / norms, dtype=np.float32)


class Reranker(ABC):
    """Reorders fused hits for one question; scores come back scaled so the best is 1.0."""

    name: str

    def bind(self, store: Any, settings: Settings) -> None:  # noqa: B027 - optional hook
        """Called once by the pipeline with the index (a ``Store``) and the settings.
        Rerankers that read stored vectors keep them; the others need nothing."""

    @abstractmethod
    def rerank(self, question: str, hits: Sequence[Hit], term_weights: TermWeights) -> list[Ranked]: ...


class Writer(ABC):
    """Turns a question and its built context into a draft whose claims carry ``[ref:chunk_id]``.

    ``chat_model`` is the LLM behind the writer (None for a writer that is no LLM, such as
    ``extractive``): the LLM router talks to the same model through it."""

    name: str
    model: str = ""
    chat_model: ChatModel | None = None

    @property
    def is_llm(self) -> bool:
        return self.chat_model is not None

    @abstractmethod
    def write(self, request: WriteRequest, on_token: Callable[[str], None] | None = None) -> Draft: ...
