"""The one retry policy of the HTTP providers, against the real local test server.

The server (tests/harness/llm_server.py) fails the next n requests of a kind with a status and
counts every attempt. The waits are recorded by the policy's ``sleep`` (nothing here
depends on how fast the machine is); the embedder and the chat model share the policy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sunlib.config import EmbeddingSettings, LLMSettings
from sunlib.errors import ProviderError
from sunlib.providers import ChatMessage, ChatRequest, create_embedder
from sunlib.providers.chat.openai import OpenAIChatModel
from sunlib.providers.embedders.http import OpenAIEmbedder
from sunlib.providers.http_common import RETRY_STATUSES, RetryPolicy
from tests.harness.llm_server import ChatServer, vector

HELLO = ChatRequest((ChatMessage.user("Say hello."),))


@pytest.fixture
def server(chat_server: ChatServer) -> ChatServer:
    """The local OpenAI-compatible test server (conftest's ``chat_server``)."""
    return chat_server


def recording(waits: list[float], **fields: Any) -> RetryPolicy:
    """A policy that records its waits instead of sleeping, with the jitter draw fixed at 0.5."""
    return RetryPolicy(sleep=waits.append, rand=lambda: 0.5, **fields)


def chat(server: ChatServer, policy: RetryPolicy) -> OpenAIChatModel:
    return OpenAIChatModel(LLMSettings(base_url=server.base_url, model="test-model"), retry=policy)


def embedder(server: ChatServer, policy: RetryPolicy) -> OpenAIEmbedder:
    return OpenAIEmbedder(base_url=server.base_url, api_key=None, retry=policy)


@pytest.mark.parametrize("status", [429, 503])
def test_chat_model_fails_n_times_then_succeeds(server: ChatServer, status: int) -> None:
    server.writer.fail(2, status, retry_after=None)
    server.writer.reply = "Hello."
    waits: list[float] = []
    reply = chat(server, recording(waits, max_retries=3)).chat(HELLO)

    assert reply.text == "Hello."
    assert server.attempts("writer") == 3
    assert waits == [0.5 * 1.125, 1.0 * 1.125]  # 0.5 s doubling, stretched by jitter 0.25 * 0.5


@pytest.mark.parametrize("status", [429, 503])
def test_embedder_fails_n_times_then_succeeds(server: ChatServer, status: int) -> None:
    server.embeddings.fail(2, status, retry_after=None)
    waits: list[float] = []
    vectors = embedder(server, recording(waits, max_retries=3)).embed_batch(["a", "b"], "passage")

    np.testing.assert_allclose(vectors, [vector("a"), vector("b")], rtol=1e-6)
    assert server.attempts("embeddings") == 3
    assert waits == [0.5 * 1.125, 1.0 * 1.125]  # the same policy, the same waits as the chat model


def test_retry_after_is_honoured(server: ChatServer) -> None:
    server.writer.fail(1, 429, retry_after="3")
    server.embeddings.fail(1, 503, retry_after="2")
    waits: list[float] = []
    policy = recording(waits)
    chat(server, policy).chat(HELLO)
    embedder(server, policy).embed_batch(["a"], "passage")

    assert waits == [3.0, 2.0]  # the server's word, not the backoff
    assert (server.attempts("writer"), server.attempts("embeddings")) == (2, 2)


def test_every_wait_is_capped(server: ChatServer) -> None:
    server.writer.fail(2, 503, retry_after="3600")
    waits: list[float] = []
    chat(server, recording(waits, max_backoff_s=0.25)).chat(HELLO)
    assert waits == [0.25, 0.25] and server.attempts("writer") == 3


def test_attempts_are_capped(server: ChatServer) -> None:
    server.writer.fail(100, 503)
    server.embeddings.fail(100, 429)
    waits: list[float] = []
    with pytest.raises(ProviderError, match=r"LLM request failed after 3 attempts: HTTP 503: scripted failure"):
        chat(server, recording(waits, max_retries=2)).chat(HELLO)
    with pytest.raises(ProviderError, match=r"openai embeddings \(.*\) failed after 2 attempts: HTTP 429"):
        embedder(server, recording(waits, max_retries=1)).embed_batch(["a"], "passage")
    assert (server.attempts("writer"), server.attempts("embeddings")) == (3, 2)
    assert waits == [0.0, 0.0, 0.0]  # Retry-After: 0 from the server


def test_total_wait_is_capped(server: ChatServer) -> None:
    server.writer.fail(100, 503, retry_after="5")
    waits: list[float] = []
    with pytest.raises(ProviderError, match=r"after 2 attempts: .* would pass the 8 s retry budget"):
        chat(server, recording(waits, max_retries=5, max_total_s=8.0)).chat(HELLO)
    assert waits == [5.0] and server.attempts("writer") == 2  # a second 5 s wait would make 10 s


@pytest.mark.parametrize("status", [400, 401, 404, 422, 501])
def test_other_statuses_are_not_retried(server: ChatServer, status: int) -> None:
    server.writer.fail(1, status)
    server.embeddings.fail(1, status)
    waits: list[float] = []
    with pytest.raises(ProviderError, match=f"HTTP {status}"):
        chat(server, recording(waits)).chat(HELLO)
    with pytest.raises(ProviderError, match=f"HTTP {status}"):
        embedder(server, recording(waits)).embed_batch(["a"], "passage")
    assert (server.attempts("writer"), server.attempts("embeddings"), waits) == (1, 1, [])


def test_settings_build_the_policy(server: ChatServer) -> None:
    llm = OpenAIChatModel(LLMSettings(base_url=server.base_url, max_retries=4))
    emb = create_embedder(EmbeddingSettings(provider="openai", base_url=server.base_url, max_retries=1))
    assert llm.retry == RetryPolicy(max_retries=4, backoff_s=0.5, max_backoff_s=10.0)
    assert isinstance(emb, OpenAIEmbedder) and emb.retry == RetryPolicy(max_retries=1, max_backoff_s=20.0)


@pytest.mark.parametrize("retry", [0, 1, 2, 5])
@pytest.mark.parametrize("draw", [0.0, 0.5, 0.999])
def test_backoff_doubles_with_bounded_jitter(retry: int, draw: float) -> None:
    policy = RetryPolicy(backoff_s=0.5, max_backoff_s=10.0, jitter=0.25, rand=lambda: draw)
    nominal = 0.5 * 2**retry
    assert policy.wait(retry) == min(10.0, nominal * (1 + 0.25 * draw))
    assert nominal <= policy.wait(retry) or policy.wait(retry) == 10.0
    assert policy.wait(retry, retry_after=1.5) == 1.5


def test_the_retryable_statuses() -> None:
    assert frozenset({408, 429, 500, 502, 503, 504}) == RETRY_STATUSES
