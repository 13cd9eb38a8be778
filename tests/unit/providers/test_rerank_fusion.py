"""The fusion reranker: a second embedder's stored vectors rescore the fused hits."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sunlib import Library
from sunlib.trace.steps import Step

QUESTION = "How does the structure-aware chunker split long sections?"


def _library(vault: Path, **answer: object) -> Library:
    return Library.open(
        vault,
        embedding={"provider": "hash"},
        answer={
            "reranker": "fusion",
            "rescore_provider": "counting",
            "gate_threshold": 0.0,
            "reader_threshold": 0.0,
            "answerable_threshold": 0.0,
            **answer,
        },
    )


def test_index_stores_the_second_space_without_making_it_active(vault: Path) -> None:
    with _library(vault) as lib:
        lib.index()
        spaces = {s.provider: s for s in lib.store.vectors.spaces()}
        chunks = lib.store.counts().chunks
        assert spaces["hash"].vectors == chunks and spaces["counting"].vectors == chunks
        assert lib.store.get_meta("space") == lib.space.name  # the hash space stays the active one
        assert lib.status().active_space.startswith("hash:")


def test_fused_scores_follow_the_formula(vault: Path) -> None:
    with _library(vault, rescore_weight=0.5) as lib:
        lib.index()
        result = lib.ask(QUESTION, save=False)
        step = next(s for s in result.trace.steps if s.name == Step.RERANK)
        assert step.details["reranker"] == "fusion"
        top = step.details["top"]
        assert all(t["second_cosine"] is not None and t["space"].startswith("counting:") for t in top)
        # recompute one ordering from the stored vectors and the search scores
        hits = lib.search(QUESTION, limit=lib.settings.answer.candidates).hits
        embedder, space = lib.rescore or (None, None)
        assert embedder is not None and space is not None
        vectors = lib.store.vectors.vectors_for(space, [h.chunk_id for h in hits])
        q = embedder.embed_query(QUESTION)
        first = np.array([h.score for h in hits])
        second = np.array([float(vectors[h.chunk_id] @ q) for h in hits])
        z = 0.5 * (first - first.mean()) / first.std() + 0.5 * (second - second.mean()) / second.std()
        expected = [hits[i].chunk_id for i in np.argsort(-z, kind="stable")[:5]]
        assert [t["chunk_id"] for t in top[:5]] == expected
        assert top[0]["score"] == 1.0


def test_missing_second_vectors_keep_the_first_stage_order(vault: Path) -> None:
    with Library.open(vault, embedding={"provider": "hash"}) as plain:
        plain.index()  # no second space
    with _library(vault) as lib:
        result = lib.ask(QUESTION, save=False)
        top = next(s for s in result.trace.steps if s.name == Step.RERANK).details["top"]
        assert all(t["second_cosine"] is None for t in top)
        assert [t["fused_rank"] for t in top] == sorted(t["fused_rank"] for t in top)


def test_needs_a_second_provider(vault: Path) -> None:
    import pytest

    from sunlib.errors import ConfigError

    with Library.open(vault, embedding={"provider": "hash"}, answer={"reranker": "fusion"}) as lib:
        lib.index()
        with pytest.raises(ConfigError, match="rescore_provider"):
            lib.ask(QUESTION)
