"""Score-fusion rescoring with a second bundled embedder's stored vectors.

`sunlib index` stores a second set of vectors when ``[answer] rescore_provider`` is set
(``minilm`` for English, ``use`` across languages). At question time the question is
embedded with that model too, each candidate's stored vector gives a second cosine,
and the first-stage score and that cosine are fused by z-score:

    final = (1 - w) * z(first-stage score) + w * z(second cosine),   w = rescore_weight

then scaled so the best candidate is 1.0. A candidate without a second vector keeps
only its first-stage part (and the details say so), so a half-embedded index degrades
to the plain ranking instead of reordering on missing data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...config import AnswerSettings, Settings
from ...contracts import Hit, Ranked
from ...errors import ConfigError
from ...text import TermWeights
from ..base import Embedder, Reranker


def _z(values: np.ndarray) -> np.ndarray:
    std = float(values.std())
    return (values - values.mean()) / std if std > 0 else np.zeros_like(values)


class FusionReranker(Reranker):
    name = "fusion"

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.store: Any = None
        self.embedder: Embedder | None = None
        self.space: Any = None

    def bind(self, store: Any, settings: Settings, rescore: tuple[Embedder, Any] | None = None) -> None:
        second = rescore
        if second is None:
            raise ConfigError("the fusion reranker needs answer.rescore_provider (e.g. minilm or use)")
        self.embedder, self.space = second
        self.store = store

    def rerank(self, question: str, hits: Sequence[Hit], term_weights: TermWeights) -> list[Ranked]:
        if not hits:
            return []
        if self.store is None or self.embedder is None:
            raise ConfigError("the fusion reranker was used before being bound to an index")
        vectors = self.store.vectors.vectors_for(self.space, [h.chunk_id for h in hits])
        first = _z(np.array([h.score for h in hits], dtype=np.float64))
        final = first.copy()
        cosines: dict[str, float] = {}
        if vectors:
            query = self.embedder.embed_query(question)
            cosines = {cid: float(np.dot(vec, query)) for cid, vec in vectors.items()}
            have = np.array([h.chunk_id in cosines for h in hits])
            second = np.zeros(len(hits))
            second[have] = _z(np.array([cosines[h.chunk_id] for h in hits if h.chunk_id in cosines]))
            final = np.where(have, (1 - self.weight) * first + self.weight * second, (1 - self.weight) * first)
        lo, hi = float(final.min()), float(final.max())
        scaled = (final - lo) / (hi - lo) if hi > lo else np.ones_like(final)
        ranked = [
            Ranked(
                h,
                float(s),
                {
                    "first_stage_z": round(float(f), 4),
                    "second_cosine": round(cosines[h.chunk_id], 4) if h.chunk_id in cosines else None,
                    "space": self.space.name,
                },
            )
            for h, s, f in zip(hits, scaled, first, strict=True)
        ]
        ranked.sort(key=lambda r: (-r.score, r.hit.chunk_id))
        return ranked


def create_fusion(settings: AnswerSettings) -> Reranker:
    return FusionReranker(settings.rescore_weight)
