"""The provider interfaces: an embedder, a reranker, a reader and a writer (the chat model is in ``chat/``).

Each is an ABC with one abstract method; a provider is any subclass, built by a factory
that the registry (``registry.py``) finds by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..config import Settings
from ..contracts import BuiltContext, Draft, Hit, Ranked, Reading, ScoredUnit
from ..text import TermWeights, estimate_tokens
from .chat import ChatModel

Kind = Literal["passage", "query"]
# A query vector is computed from at most this many estimated tokens of the query (its start):
# a 4,000-character question cost 4-8 s of e5 (16-26 s in Chinese) against 50 ms for a sentence,
# and a vector of its first 256 tokens ranks as well. BM25 still reads all of it.
QUERY_EMBED_TOKENS = 256


@dataclass(frozen=True)
class WriteRequest:
    question: str
    context: BuiltContext
    term_weights: TermWeights
    confidence_note: str = ""
    max_sentences: int = 3
    units: tuple[ScoredUnit, ...] = ()  # the evidence's answer units, scored, best first
    readings: Mapping[str, Reading] = field(default_factory=dict)  # the reader's, by chunk id


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
        return l2_normalize(self.embed_batch([query_head(text)], "query"))[0]

    def describe(self) -> dict[str, object]:
        return {"provider": self.provider, "model": self.model, "dim": self.dim}


def query_head(text: str, limit: int = QUERY_EMBED_TOKENS) -> str:
    """The start of ``text`` up to ``limit`` estimated tokens (all of it when shorter)."""
    if estimate_tokens(text) <= limit:
        return text
    lo, hi = 0, len(text)  # the longest prefix within the limit (the estimate grows with the prefix)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if estimate_tokens(text[:mid]) <= limit else (lo, mid - 1)
    return text[:lo]


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

    def bind(self, store: Any, settings: Settings, rescore: tuple[Embedder, Any] | None = None) -> None:  # noqa: B027
        """An optional hook, called once by the pipeline with the index (a ``Store``), the settings and
        the library's second embedder with its vector space (``answer.rescore_provider``; None when
        unset). Rerankers that read stored vectors keep them; the others need nothing."""

    @abstractmethod
    def rerank(self, question: str, hits: Sequence[Hit], term_weights: TermWeights) -> list[Ranked]: ...


class Reader(ABC):
    """Reads a question with each passage: ``read`` gives a ``Reading`` per passage (in order);
    ``support`` gives, per (claim, passage) pair, the probability that the passage supports the claim."""

    name: str
    model: str = ""
    threshold: float = 0.5  # the answerability threshold the model was shipped with

    @abstractmethod
    def read(self, question: str, passages: Sequence[str]) -> list[Reading]: ...

    @abstractmethod
    def support(self, pairs: Sequence[tuple[str, str]]) -> list[float]: ...

    def describe(self) -> dict[str, object]:
        return {"reader": self.name, "model": self.model}


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
