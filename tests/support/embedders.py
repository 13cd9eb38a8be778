"""Test-only embedders, registered through the real registry (never by patching sunlib).

``counting`` wraps the hash embedder and counts what it embeds; ``flaky`` fails after a set number of
batches, to interrupt indexing. Importing this module registers both (tests/conftest.py does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from sunlib.config import EmbeddingSettings
from sunlib.errors import ProviderError
from sunlib.providers.embedders.hashing import HashEmbedder
from sunlib.providers.registry import Kind, register_embedder


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting every text it embeds (class-level, reset per test)."""

    provider = "counting"
    seen: ClassVar[list[str]] = []

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        if kind == "passage":
            CountingEmbedder.seen.extend(texts)
        return super().embed_batch(texts, kind)


class FlakyEmbedder(HashEmbedder):
    """Fails on the (fail_after + 1)-th passage batch: an interrupted embedding run."""

    provider = "flaky"
    fail_after = 1
    batches = 0

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        if kind == "passage":
            FlakyEmbedder.batches += 1
            if FlakyEmbedder.batches > FlakyEmbedder.fail_after:
                raise ProviderError("flaky provider: simulated failure")
        return super().embed_batch(texts, kind)


@register_embedder("counting")
def _counting(settings: EmbeddingSettings) -> CountingEmbedder:
    return CountingEmbedder(settings.dimensions or 64)


@register_embedder("flaky")
def _flaky(settings: EmbeddingSettings) -> FlakyEmbedder:
    return FlakyEmbedder(settings.dimensions or 64)
