"""Embedding providers: one signature, unit vectors, real bundled models (no downloads)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from sunlib.config import EmbeddingSettings
from sunlib.errors import ConfigError
from sunlib.providers import Embedder, create_embedder
from sunlib.providers.registry import embedder_names

LOCAL = ["hash", "e5", "use", "minilm"]
PASSAGES = [
    "The training objective of a large language model is to predict the next token.",
    "Our office plants need watering twice a week in summer.",
    "大语言模型的训练目标是预测下一个词。",
]


@pytest.fixture(scope="module", params=LOCAL)
def embedder(request: pytest.FixtureRequest) -> Embedder:
    return create_embedder(EmbeddingSettings(provider=request.param))


def test_shape_dtype_and_unit_norm(embedder: Embedder) -> None:
    vectors = embedder.embed(PASSAGES)
    assert vectors.shape == (3, embedder.dim) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    q = embedder.embed_query("what does an LLM learn to do?")
    assert q.shape == (embedder.dim,) and q.dtype == np.float32
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert embedder.embed([]).shape == (0, embedder.dim)


def test_same_signature_for_every_provider() -> None:
    names = embedder_names()
    assert set(LOCAL) | {"openai", "gemini"} <= set(names)
    classes = {type(create_embedder(EmbeddingSettings(provider=p))) for p in LOCAL}
    for cls in classes:
        assert inspect.signature(cls.embed) == inspect.signature(Embedder.embed)
        assert inspect.signature(cls.embed_query) == inspect.signature(Embedder.embed_query)


def test_hash_is_deterministic_and_cjk_aware() -> None:
    a = create_embedder(EmbeddingSettings(provider="hash"))
    b = create_embedder(EmbeddingSettings(provider="hash"))
    np.testing.assert_array_equal(a.embed(PASSAGES), b.embed(PASSAGES))
    zh = a.embed(["中文检索", "检索中文", "天气很好"])
    assert zh[0] @ zh[1] > zh[0] @ zh[2]


DISTRACTOR = "LLM log files are rotated daily by the web server."
DOCS = [PASSAGES[0], PASSAGES[1], DISTRACTOR]


def test_e5_understands_paraphrase_where_hash_cannot() -> None:
    """Seed 001's check: two phrasings of one question ("大模型" vs "LLM") reach the same passage."""
    model = create_embedder(EmbeddingSettings(provider="e5"))
    docs = model.embed(DOCS)
    for question in ("大模型的训练目标是什么？", "LLM 的训练目标是什么？"):
        assert int(np.argmax(docs @ model.embed_query(question))) == 0


def test_use_crosses_languages() -> None:
    model = create_embedder(EmbeddingSettings(provider="use"))
    docs = model.embed(DOCS)
    assert int(np.argmax(docs @ model.embed_query("大模型的训练目标是什么？"))) == 0


def test_hash_falls_for_the_shared_token() -> None:
    model = create_embedder(EmbeddingSettings(provider="hash"))
    docs = model.embed(DOCS)
    assert int(np.argmax(docs @ model.embed_query("LLM 的训练目标是什么？"))) == 2


def test_unknown_provider_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"unknown embedding provider 'bert'.*e5.*hash.*use"):
        create_embedder(EmbeddingSettings(provider="bert"))


def test_threads_default_to_one() -> None:
    assert EmbeddingSettings().threads == 1


def test_a_long_query_is_embedded_from_its_start_only() -> None:
    """A 4,000-character query would cost seconds of e5, so its vector is that of its
    first QUERY_EMBED_TOKENS estimated tokens, whatever the embedder (BM25 still reads all of it)."""
    from sunlib.providers.base import QUERY_EMBED_TOKENS, query_head
    from sunlib.providers.embedders.hashing import HashEmbedder
    from sunlib.text import estimate_tokens

    long = "how do I rebuild the index " * 400 + "中文问题" * 500
    head = query_head(long)
    assert long.startswith(head) and estimate_tokens(head) <= QUERY_EMBED_TOKENS < estimate_tokens(
        head + long[len(head) :][:5]
    )
    embedder = HashEmbedder(64)
    assert (embedder.embed_query(long) == embedder.embed_query(head)).all()
    assert query_head("a short question?") == "a short question?"
