"""One registry for providers.

Built-in providers register themselves with the same decorator a plugin would
use. A provider that needs a key and lacks one raises MissingCredentials; no
provider ever falls back to another.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from ..config import EmbeddingSettings
from ..errors import ConfigError

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


Factory = Callable[[EmbeddingSettings], Embedder]
EMBEDDERS: dict[str, Factory] = {}
_BUILTIN_MODULES = ("hashing", "local", "http")


def register_embedder(name: str) -> Callable[[Factory], Factory]:
    def deco(factory: Factory) -> Factory:
        EMBEDDERS[name] = factory
        return factory

    return deco


def _load_builtins() -> None:
    for mod in _BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.embedders.{mod}")


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
