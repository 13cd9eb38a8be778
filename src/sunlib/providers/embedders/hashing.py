"""``hash``: a deterministic feature-hashing embedder for tests and smoke runs.

Tokens are the same as the FTS tokens (so it is CJK-aware), each hashed to a
signed bucket. It knows nothing about meaning: use it to test plumbing, never
to judge retrieval quality.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ...config import EmbeddingSettings
from ...text import fts_tokens
from ..base import Embedder, Kind

DEFAULT_DIM = 256


class HashEmbedder(Embedder):
    provider = "hash"
    crosslang_partner = None  # tests and smoke runs never load a model for the cross-language route

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        self.dim = dim
        self.model = f"hash-{dim}"

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for token in fts_tokens(text):
                digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
                h = int.from_bytes(digest, "little")
                out[i, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return out


def create_hash(settings: EmbeddingSettings) -> Embedder:
    return HashEmbedder(settings.dimensions or DEFAULT_DIM)
