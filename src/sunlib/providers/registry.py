"""One registry for providers.

Built-in providers register themselves with the same decorator a plugin would
use. A provider that needs a key and lacks one raises MissingCredentials; no
provider ever falls back to another.
"""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from ..config import AnswerSettings, EmbeddingSettings, Settings
from ..contracts import Draft, Hit, Ranked, WriteRequest
from ..errors import ConfigError
from ..text import TermWeights

Kind = Literal["passage", "query"]


class Embedder(ABC):
    """``embed(texts) -> (N, D)`` float32 rows of unit length; ``embed_query(text) -> (D,)``."""

    provider: str
    model: str
    dim: int

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
        """Called once by the pipeline with the index (a SqliteStore) and the settings.
        Rerankers that read stored vectors keep them; the others need nothing."""

    @abstractmethod
    def rerank(self, question: str, hits: Sequence[Hit], term_weights: TermWeights) -> list[Ranked]: ...


class Writer(ABC):
    """Turns a question and its built context into a draft whose claims carry ``[ref:chunk_id]``."""

    name: str
    model: str = ""
    is_llm: bool = False

    @abstractmethod
    def write(self, request: WriteRequest, on_token: Callable[[str], None] | None = None) -> Draft: ...


Factory = Callable[[EmbeddingSettings], Embedder]
RerankerFactory = Callable[[AnswerSettings], Reranker]
WriterFactory = Callable[[Settings], Writer]
EMBEDDERS: dict[str, Factory] = {}
RERANKERS: dict[str, RerankerFactory] = {}
WRITERS: dict[str, WriterFactory] = {}
_BUILTIN_MODULES = (
    "embedders.hashing",
    "embedders.local",
    "embedders.http",
    "rerankers.lexical",
    "rerankers.cross_encoder",
    "rerankers.fusion",
    "writers.extractive",
    "writers.openai",
    "writers.llama",
)


def register_embedder(name: str) -> Callable[[Factory], Factory]:
    def deco(factory: Factory) -> Factory:
        EMBEDDERS[name] = factory
        return factory

    return deco


def register_reranker(name: str) -> Callable[[RerankerFactory], RerankerFactory]:
    def deco(factory: RerankerFactory) -> RerankerFactory:
        RERANKERS[name] = factory
        return factory

    return deco


def register_writer(name: str) -> Callable[[WriterFactory], WriterFactory]:
    def deco(factory: WriterFactory) -> WriterFactory:
        WRITERS[name] = factory
        return factory

    return deco


def _load_builtins() -> None:
    for mod in _BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{mod}")


def embedder_names() -> list[str]:
    _load_builtins()
    return sorted(EMBEDDERS)


def create_embedder(settings: EmbeddingSettings) -> Embedder:
    _load_builtins()
    factory = EMBEDDERS.get(settings.provider)
    if factory is None:
        raise ConfigError(
            f"unknown embedding provider {settings.provider!r}; choose one of: {', '.join(sorted(EMBEDDERS))}"
        )
    return factory(settings)


class MemoEmbedder(Embedder):
    """An embedder that remembers the vectors of recent texts.

    The refusal gate and the extractive writer embed the same evidence sentences
    within one question, so the second pass costs nothing. Threads share it: the
    memory is guarded by a lock, which is not held while the inner model embeds."""

    def __init__(self, inner: Embedder, size: int = 4096) -> None:
        self.inner = inner
        self.provider, self.model, self.dim = inner.provider, inner.model, inner.dim
        self._seen: OrderedDict[tuple[Kind, str], np.ndarray] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        unique = list(dict.fromkeys(texts))
        with self._lock:
            known = {t: self._seen[(kind, t)] for t in unique if (kind, t) in self._seen}
        todo = [t for t in unique if t not in known]
        if todo:
            for text, vector in zip(todo, self.inner.embed_batch(todo, kind), strict=True):
                known[text] = np.asarray(vector, dtype=np.float32)
        with self._lock:
            for text in unique:
                self._seen[(kind, text)] = known[text]
                self._seen.move_to_end((kind, text))
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
        rows = [known[text] for text in texts]
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)


_SENTENCE_MODELS = threading.Lock()  # two threads asking first at once load the model once


@lru_cache(maxsize=4)
def _cached_sentence_model(provider: str, threads: int) -> Embedder:
    return MemoEmbedder(create_embedder(EmbeddingSettings(provider=provider, threads=threads)))


def _loaded_sentence_model(provider: str, threads: int) -> Embedder:
    with _SENTENCE_MODELS:
        return _cached_sentence_model(provider, threads)


def sentence_model(settings: Settings) -> Callable[[], Embedder] | None:
    """The ``[answer] sentence_model`` as a loader (None for ``none``): loaded once per process, on first use."""
    provider = settings.answer.sentence_model
    if provider == "none":
        return None
    threads = settings.embedding.threads
    return lambda: _loaded_sentence_model(provider, threads)


def reranker_names() -> list[str]:
    _load_builtins()
    return sorted(RERANKERS)


def create_reranker(settings: AnswerSettings) -> Reranker | None:
    """The configured reranker, or None for ``none``."""
    _load_builtins()
    if settings.reranker == "none":
        return None
    factory = RERANKERS.get(settings.reranker)
    if factory is None:
        raise ConfigError(
            f"unknown reranker {settings.reranker!r}; choose one of: none, {', '.join(sorted(RERANKERS))}"
        )
    return factory(settings)


def writer_names() -> list[str]:
    _load_builtins()
    return sorted(WRITERS)


def create_writer(settings: Settings) -> Writer:
    _load_builtins()
    factory = WRITERS.get(settings.answer.writer)
    if factory is None:
        raise ConfigError(f"unknown writer {settings.answer.writer!r}; choose one of: {', '.join(sorted(WRITERS))}")
    return factory(settings)
