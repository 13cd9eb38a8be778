"""One registry per kind of provider, all made from one generic ``Registry``.

=========  ===========================  ======================  =====================
kind       a factory receives           and returns             chosen by
=========  ===========================  ======================  =====================
embedder   ``EmbeddingSettings``        ``Embedder``            ``[embedding] provider``
reranker   ``AnswerSettings``           ``Reranker``            ``[answer] reranker``
reader     ``AnswerSettings``           ``Reader``              ``[answer] reader``
writer     ``Settings``                 ``Writer``              ``[answer] writer``
chat       ``LLMSettings``              ``ChatModel``           the writer (``openai``, ``llama-cpp``)
=========  ===========================  ======================  =====================

A provider is found by name, in this order:

1. ``register(name)`` in this process (a decorator, for tests and notebooks);
2. sunlib's built-ins, ``BUILTINS``: entry points written out here, loaded by the same
   code as the next ones;
3. entry points of installed distributions in the group ``sunlib.providers``
   (``importlib.metadata``), each named ``<kind>.<provider name>`` and pointing at its
   factory, e.g. ``embedder.my-embed = my_embed.provider:create`` (docs/plugins.md).

A factory is imported when its provider is first created, so choosing ``hash`` never
loads a model runtime. A plugin cannot replace a built-in: it is skipped with a warning. So a
built-in is created without reading the installed distributions' entry points (about 15 ms in a
cold CLI); they are read, and a bad plugin warned about, when a name is not a built-in or the
names are listed (``sunlib status``, the error for an unknown name).
An unknown name raises ConfigError listing the valid ones. A provider that needs a key
and lacks one raises MissingCredentials; no provider ever falls back to another.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

import numpy as np

from ..config import AnswerSettings, EmbeddingSettings, LLMSettings, Settings
from ..errors import ConfigError, ProviderError
from .base import Embedder, Kind, Reader, Reranker, Writer, l2_normalize
from .chat import ChatModel

__all__ = ["Embedder", "Kind", "Reader", "Reranker", "Writer", "l2_normalize"]

GROUP = "sunlib.providers"
KINDS = ("embedder", "reranker", "reader", "writer", "chat")

C = TypeVar("C")  # what a factory receives
P = TypeVar("P")  # what it returns
F = TypeVar("F", bound=Callable[..., Any])


def _builtin(kind: str, name: str, target: str) -> EntryPoint:
    """A built-in provider's entry point; ``target`` is relative to this package unless it starts with sunlib."""
    value = target if target.startswith("sunlib.") else f"{__package__}.{target}"
    return EntryPoint(name=f"{kind}.{name}", value=value, group=GROUP)


BUILTINS = (
    _builtin("embedder", "hash", "embedders.hashing:create_hash"),
    _builtin("embedder", "e5", "embedders.local:create_e5"),
    _builtin("embedder", "e5-fast", "embedders.fast:create_fast"),
    _builtin("embedder", "use", "embedders.local:create_use"),
    _builtin("embedder", "minilm", "embedders.local:create_minilm"),
    _builtin("embedder", "openai", "embedders.http:create_openai"),
    _builtin("embedder", "gemini", "embedders.http:create_gemini"),
    _builtin("reranker", "lexical", "rerankers.lexical:create_lexical"),
    _builtin("reranker", "cross-encoder", "rerankers.cross_encoder:create_cross_encoder"),
    _builtin("reranker", "fusion", "rerankers.fusion:create_fusion"),
    _builtin("reader", "sunlib", "readers.onnx:create_bundled"),
    # the extractive writer quotes units scored by the answer stage, so it lives there (named, never imported)
    _builtin("writer", "extractive", "sunlib.answer.single.extractive:create_extractive"),
    _builtin("writer", "openai", "writers.llm:create_openai"),
    _builtin("writer", "llama-cpp", "writers.llm:create_llama"),
    _builtin("chat", "openai", "chat.openai:OpenAIChatModel"),
    _builtin("chat", "llama-cpp", "chat.llama:LlamaCppChatModel"),
)


@dataclass(frozen=True)
class Plugin:
    """An entry point of the group, read: its kind, provider name and distribution."""

    kind: str
    name: str
    origin: str  # "sunlib" for a built-in, else the distribution's name
    entry_point: EntryPoint


def _read(entry_point: EntryPoint, origin: str) -> Plugin | None:
    kind, dot, name = entry_point.name.partition(".")
    if kind not in KINDS or not dot or not name:
        warnings.warn(
            f"ignored the {GROUP} entry point {entry_point.name!r} of {origin}: its name must be "
            f"<kind>.<provider name> with kind one of {', '.join(KINDS)}",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return Plugin(kind, name, origin, entry_point)


@lru_cache(maxsize=1)
def _builtins() -> dict[tuple[str, str], Plugin]:
    found: dict[tuple[str, str], Plugin] = {}
    for ep in BUILTINS:
        plugin = _read(ep, "sunlib")
        assert plugin is not None
        found[(plugin.kind, plugin.name)] = plugin
    return found


@lru_cache(maxsize=8)
def _discover(path: tuple[str, ...]) -> dict[tuple[str, str], Plugin]:
    """Built-ins, then the entry points installed on ``path`` (the cache key: sys.path as it was)."""
    found = dict(_builtins())
    installed = sorted(entry_points(group=GROUP), key=lambda ep: (ep.dist.name if ep.dist else "", ep.name))
    for ep in installed:
        plugin = _read(ep, ep.dist.name if ep.dist else "an unknown distribution")
        if plugin is None:
            continue
        taken = found.get((plugin.kind, plugin.name))
        if taken is not None:
            warnings.warn(
                f"ignored the {plugin.kind} {plugin.name!r} of {plugin.origin}: {taken.origin} provides it already",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        found[(plugin.kind, plugin.name)] = plugin
    return found


def plugins() -> list[Plugin]:
    """Every provider found through entry points (built-ins included), by kind and name."""
    return sorted(_discover(tuple(sys.path)).values(), key=lambda p: (p.kind, p.name))


class Registry(Generic[C, P]):
    """The providers of one kind: names, and a factory per name (see the module docstring)."""

    def __init__(self, kind: str, noun: str, base: type, reserved: Sequence[str] = ()) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown provider kind {kind!r}; choose one of: {', '.join(KINDS)}")
        self.kind = kind
        self.noun = noun  # for messages: "embedding provider", "reranker", ...
        self.base = base  # every provider of the kind is an instance of it
        self.reserved = tuple(reserved)  # names the setting accepts that are no provider ("none")
        self._registered: dict[str, Callable[[C], P]] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: make ``factory`` the provider ``name`` in this process."""

        def deco(factory: F) -> F:
            self._registered[name] = factory
            return factory

        return deco

    def _found(self) -> dict[str, Plugin]:
        return {name: p for (kind, name), p in _discover(tuple(sys.path)).items() if kind == self.kind}

    def names(self) -> list[str]:
        return sorted(set(self._registered) | set(self._found()))

    def origin(self, name: str) -> str:
        """Where ``name`` comes from: "sunlib", a distribution's name, or "this process"."""
        if name in self._registered:
            return "this process"
        return self._plugin(name).origin

    def _plugin(self, name: str) -> Plugin:
        builtin = _builtins().get((self.kind, name))
        if builtin is not None:  # never replaced by a plugin: no need to read every installed distribution
            return builtin
        found = self._found()
        if name not in found:
            choices = [*self.reserved, *self.names()]
            raise ConfigError(f"unknown {self.noun} {name!r}; choose one of: {', '.join(choices)}")
        return found[name]

    def factory(self, name: str) -> Callable[[C], P]:
        if name in self._registered:
            return self._registered[name]
        plugin = self._plugin(name)
        if plugin.origin == "sunlib":
            loaded = plugin.entry_point.load()
        else:
            try:
                loaded = plugin.entry_point.load()
            except Exception as exc:  # a broken plugin is named, never a traceback
                raise ConfigError(
                    f"the {self.noun} {name!r} of {plugin.origin} ({plugin.entry_point.value}) cannot be loaded: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
        if not callable(loaded):
            raise ConfigError(f"the {self.noun} {name!r} of {plugin.origin} is not callable")
        factory: Callable[[C], P] = loaded
        return factory

    def create(self, name: str, config: C) -> P:
        product = self.factory(name)(config)
        if not isinstance(product, self.base):
            raise ProviderError(
                f"the {self.noun} {name!r} of {self.origin(name)} built a {type(product).__name__}, "
                f"not a {self.base.__name__}"
            )
        return product


EMBEDDERS: Registry[EmbeddingSettings, Embedder] = Registry("embedder", "embedding provider", Embedder)
RERANKERS: Registry[AnswerSettings, Reranker] = Registry("reranker", "reranker", Reranker, reserved=("none",))
READERS: Registry[AnswerSettings, Reader] = Registry("reader", "reader", Reader, reserved=("none",))
WRITERS: Registry[Settings, Writer] = Registry("writer", "writer", Writer)
CHAT_MODELS: Registry[LLMSettings, ChatModel] = Registry("chat", "chat model", ChatModel)

register_embedder = EMBEDDERS.register
register_reranker = RERANKERS.register
register_reader = READERS.register
register_writer = WRITERS.register
register_chat_model = CHAT_MODELS.register


def embedder_names() -> list[str]:
    return EMBEDDERS.names()


def create_embedder(settings: EmbeddingSettings) -> Embedder:
    return EMBEDDERS.create(settings.provider, settings)


def reranker_names() -> list[str]:
    return RERANKERS.names()


def create_reranker(settings: AnswerSettings) -> Reranker | None:
    """The configured reranker, or None for ``none``."""
    if settings.reranker == "none":
        return None
    return RERANKERS.create(settings.reranker, settings)


def reader_names() -> list[str]:
    return READERS.names()


_READERS = threading.Lock()


_LOADED_READERS: dict[tuple[object, ...], Reader] = {}


def create_reader(settings: AnswerSettings) -> Reader | None:
    """The configured reader, or None for ``none``. A model is loaded once per process for the same
    reader settings (the pipeline, the agentic loop and the evaluator share it)."""
    if settings.reader == "none":
        return None
    key = (settings.reader, settings.reader_model_dir, settings.reader_threads, settings.reader_windows)
    with _READERS:
        if key not in _LOADED_READERS:
            _LOADED_READERS[key] = READERS.create(settings.reader, settings)
        return _LOADED_READERS[key]


def writer_names() -> list[str]:
    return WRITERS.names()


def create_writer(settings: Settings) -> Writer:
    return WRITERS.create(settings.answer.writer, settings)


def chat_model_names() -> list[str]:
    return CHAT_MODELS.names()


def create_chat_model(name: str, settings: LLMSettings) -> ChatModel:
    return CHAT_MODELS.create(name, settings)


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
