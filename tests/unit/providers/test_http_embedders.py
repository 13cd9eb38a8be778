"""HTTP embedders against a real local HTTP server (127.0.0.1 only, no network)."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from sunlib.config import EmbeddingSettings
from sunlib.errors import ConfigError, MissingCredentials, ProviderError
from sunlib.providers.embedders.http import GeminiEmbedder, OpenAIEmbedder, is_loopback
from sunlib.providers.http_common import RetryPolicy
from sunlib.providers.registry import create_embedder, embedder_names

DEFAULT_DIM = 8
GEMINI_KEY = "gm-test-key-123"
KEY_VARS = ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "MY_EMBED_KEY")


def fake_vector(text: str, dim: int) -> list[float]:
    """Deterministic, not unit length, so normalisation is visible."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    return [float(x) for x in rng.normal(size=dim) * 3.0]


def unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


class FakeServer:
    """Knobs set by each test; every request is recorded before it is answered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.fail_first = 0  # answer the first k requests with fail_status
        self.fail_status = 500
        self.retry_after: str | None = None
        self.shuffle = False
        self.sleep_s = 0.0
        self.fixed: tuple[int, bytes] | None = None  # (status, body) for every request
        self.gemini_key = GEMINI_KEY
        self.url = ""

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def gemini_url(self) -> str:
        return f"{self.url}/v1beta"

    @property
    def sizes(self) -> list[int]:
        return [len(r["body"]["input"]) for r in self.requests]

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        body = json.loads(raw) if raw else None
        with self.lock:
            self.requests.append({"path": path, "headers": headers, "body": body})
            n = len(self.requests)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if n <= self.fail_first:
            extra = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return self.fail_status, extra, _err(f"overloaded (call {n})")
        if self.fixed is not None:
            return self.fixed[0], {}, self.fixed[1]
        if path == "/v1/embeddings":
            return self.openai(body)
        if path.startswith("/v1beta/models/") and path.endswith(":batchEmbedContents"):
            return self.gemini(path, headers, body)
        return 404, {}, _err(f"no route {path}")

    def openai(self, body: Any) -> tuple[int, dict[str, str], bytes]:
        if set(body) - {"model", "input", "encoding_format", "dimensions"} or body["encoding_format"] != "float":
            return 400, {}, _err(f"unexpected body {sorted(body)}")
        dim = body.get("dimensions", DEFAULT_DIM)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, dim)} for i, t in enumerate(body["input"])
        ]
        if self.shuffle:
            random.Random(7).shuffle(data)
            data.reverse()  # never the identity, even for two items
        return 200, {}, json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()

    def gemini(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], bytes]:
        if headers.get("x-goog-api-key") != self.gemini_key:
            return 403, {}, _err("API key not valid. Please pass a valid API key.")
        model = path.removeprefix("/v1beta/models/").removesuffix(":batchEmbedContents")
        out = []
        for req in body["requests"]:
            if set(req) != {"model", "content", "taskType", "outputDimensionality"}:
                return 400, {}, _err(f"bad request keys {sorted(req)}")
            if req["model"] != f"models/{model}" or req["taskType"] not in (
                "RETRIEVAL_DOCUMENT",
                "RETRIEVAL_QUERY",
            ):
                return 400, {}, _err("bad model or taskType")
            (part,) = req["content"]["parts"]
            out.append({"values": fake_vector(part["text"], req["outputDimensionality"])})
        return 200, {}, json.dumps({"embeddings": out}).encode()


def _err(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "test_error", "code": None}}).encode()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    state = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, extra, payload = state.answer(self.path, headers, raw)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)


def openai(server: FakeServer, **kw: Any) -> Any:
    return create_embedder(EmbeddingSettings(provider="openai", base_url=server.openai_url, **kw))


def gemini(server: FakeServer, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    return create_embedder(EmbeddingSettings(provider="gemini", base_url=server.gemini_url, **kw))


# -- openai-compatible --------------------------------------------------------


def test_registered() -> None:
    assert {"openai", "gemini"} <= set(embedder_names())


def test_openai_vectors_shape_dtype_norm(server: FakeServer) -> None:
    emb = openai(server, model="nomic-embed-text")
    texts = ["alpha", "beta", "γάμμα", "日本語のテキスト"]
    vecs = emb.embed(texts)
    assert vecs.shape == (4, DEFAULT_DIM)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    for row, text in zip(vecs, texts, strict=True):
        np.testing.assert_allclose(row, unit(fake_vector(text, DEFAULT_DIM)), rtol=1e-5)
    q = emb.embed_query("alpha")
    assert q.shape == (DEFAULT_DIM,) and q.dtype == np.float32
    np.testing.assert_allclose(q, vecs[0], rtol=1e-5)
    assert emb.dim == DEFAULT_DIM
    assert emb.describe() == {"provider": "openai", "model": "nomic-embed-text", "dim": DEFAULT_DIM}
    body = server.requests[0]["body"]
    assert body == {"model": "nomic-embed-text", "input": texts, "encoding_format": "float"}
    assert "authorization" not in server.requests[0]["headers"]  # loopback, no key: none sent


def test_openai_sends_key_and_never_shows_it(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_EMBED_KEY", "sk-secret-xyz")
    emb = openai(server, api_key_env="MY_EMBED_KEY")
    emb.embed(["x"])
    assert server.requests[0]["headers"]["authorization"] == "Bearer sk-secret-xyz"
    assert "sk-secret-xyz" not in repr(emb) + str(emb.describe())
    server.fixed = (401, _err("Incorrect API key provided: sk-secret-xyz"))
    with pytest.raises(ProviderError) as info:
        emb.embed(["y"])
    assert "401" in str(info.value) and "sk-secret-xyz" not in str(info.value)


def test_order_restored_when_server_shuffles(server: FakeServer) -> None:
    server.shuffle = True
    texts = [f"text number {i}" for i in range(9)]
    vecs = openai(server).embed(texts)
    expected = np.stack([unit(fake_vector(t, DEFAULT_DIM)) for t in texts])
    np.testing.assert_allclose(vecs, expected, rtol=1e-5)


def test_batching(server: FakeServer) -> None:
    texts = [f"t{i}" for i in range(7)]
    vecs = openai(server, batch_size=3).embed(texts)
    assert server.sizes == [3, 3, 1]
    assert [r["body"]["input"] for r in server.requests] == [texts[0:3], texts[3:6], texts[6:]]
    np.testing.assert_allclose(vecs[6], unit(fake_vector("t6", DEFAULT_DIM)), rtol=1e-5)


def test_dimensions_passed_through(server: FakeServer) -> None:
    emb = openai(server, model="text-embedding-v4", dimensions=5)
    assert emb.dim == 5 and server.requests == []  # known from settings: no probe
    assert emb.embed([]).shape == (0, 5)
    vecs = emb.embed(["a", "b"])
    assert vecs.shape == (2, 5)
    assert server.requests[0]["body"]["dimensions"] == 5


def test_dim_discovered_by_one_probe(server: FakeServer) -> None:
    emb = openai(server)
    assert emb.dim == DEFAULT_DIM
    assert emb.dim == DEFAULT_DIM
    assert len(server.requests) == 1


def test_server_ignoring_dimensions_is_an_error(server: FakeServer) -> None:
    body = {"data": [{"index": 0, "embedding": [0.1] * 7}]}
    server.fixed = (200, json.dumps(body).encode())
    with pytest.raises(ProviderError, match="7-d vectors, expected 5"):
        openai(server, dimensions=5).embed(["a"])


@pytest.mark.parametrize("status", [500, 503, 429])
def test_retries_then_succeeds(server: FakeServer, status: int) -> None:
    server.fail_first, server.fail_status, server.retry_after = 2, status, "0"
    vecs = openai(server, max_retries=3).embed(["a", "b"])
    assert vecs.shape == (2, DEFAULT_DIM)
    assert len(server.requests) == 3


def test_gives_up_after_max_retries(server: FakeServer) -> None:
    server.fail_first, server.retry_after = 100, "0"
    with pytest.raises(ProviderError) as info:
        openai(server, max_retries=2).embed(["a"])
    assert len(server.requests) == 3
    assert "HTTP 500" in str(info.value) and "overloaded" in str(info.value)


def test_no_retries_when_max_retries_zero(server: FakeServer) -> None:
    server.fail_first, server.fail_status = 100, 429
    with pytest.raises(ProviderError, match="HTTP 429"):
        openai(server, max_retries=0).embed(["a"])
    assert len(server.requests) == 1


def test_exponential_backoff_without_retry_after(server: FakeServer) -> None:
    server.fail_first = 2
    waits: list[float] = []
    policy = RetryPolicy(max_retries=2, backoff_s=0.05, sleep=waits.append, rand=lambda: 0.0)
    emb = OpenAIEmbedder(base_url=server.openai_url, api_key=None, retry=policy)
    emb.embed(["a"])
    assert waits == [0.05, 0.1]
    assert len(server.requests) == 3
    emb.close()


def test_retry_after_is_capped(server: FakeServer) -> None:
    server.fail_first, server.fail_status, server.retry_after = 1, 429, "3600"
    waits: list[float] = []
    policy = RetryPolicy(max_retries=1, max_backoff_s=0.05, sleep=waits.append)
    emb = OpenAIEmbedder(base_url=server.openai_url, api_key=None, retry=policy)
    emb.embed(["a"])
    assert waits == [0.05]
    assert len(server.requests) == 2


def test_settings_give_the_shared_policy(server: FakeServer) -> None:
    emb = openai(server, max_retries=4)
    assert emb.retry == RetryPolicy(max_retries=4, backoff_s=0.5, max_backoff_s=20.0)


def test_client_error_fails_at_once_with_message(server: FakeServer) -> None:
    server.fixed = (400, _err("This model's maximum context length is 8192 tokens"))
    with pytest.raises(ProviderError) as info:
        openai(server, max_retries=3).embed(["a"])
    assert "400" in str(info.value) and "maximum context length" in str(info.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "payload",
    [
        b"<html>not json</html>",
        b'{"object": "list"}',
        b'{"data": "nope"}',
        json.dumps({"data": [{"index": 0, "embedding": [0.1, 0.2]}]}).encode(),  # 1 for 2 inputs
        json.dumps({"data": [{"index": i, "embedding": ["x", "y"]} for i in range(2)]}).encode(),
        json.dumps({"data": [{"index": i, "embedding": ["0.1", "0.2"]} for i in range(2)]}).encode(),
        json.dumps({"data": [{"index": 0, "embedding": [0.1, 0.2]}, {"index": 1, "embedding": [0.1]}]}).encode(),
        json.dumps({"data": [{"index": 0, "embedding": [0.1]}, {"index": 0, "embedding": [0.2]}]}).encode(),
        json.dumps({"data": [{"index": i, "embedding": []} for i in range(2)]}).encode(),
        json.dumps({"data": [{"index": i} for i in range(2)]}).encode(),
    ],
)
def test_malformed_response(server: FakeServer, payload: bytes) -> None:
    server.fixed = (200, payload)
    with pytest.raises(ProviderError, match="malformed"):
        openai(server, max_retries=3).embed(["a", "b"])
    assert len(server.requests) == 1  # a bad answer is not retried


def test_missing_key_for_remote_host_raises_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    # example.invalid never resolves: if anything tried to connect we would get ProviderError, not this.
    with pytest.raises(MissingCredentials, match="OPENAI_API_KEY"):
        create_embedder(EmbeddingSettings(provider="openai", base_url="http://example.invalid/v1"))
    with pytest.raises(MissingCredentials, match="OPENAI_API_KEY"):
        create_embedder(EmbeddingSettings(provider="openai"))  # default: api.openai.com
    monkeypatch.setenv("MY_EMBED_KEY", "")  # empty counts as unset
    with pytest.raises(MissingCredentials, match="MY_EMBED_KEY"):
        create_embedder(
            EmbeddingSettings(provider="openai", base_url="http://example.invalid/v1", api_key_env="MY_EMBED_KEY")
        )


def test_key_present_for_remote_host_constructs_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    emb = create_embedder(EmbeddingSettings(provider="openai", base_url="http://example.invalid/v1", dimensions=3))
    assert emb.provider == "openai" and emb.dim == 3  # no connection made


def test_loopback_detection() -> None:
    for url in (
        "http://127.0.0.1:8080/v1",
        "http://localhost:11434/v1",
        "http://[::1]:8000/v1",
        "http://127.1.2.3",
    ):
        assert is_loopback(url), url
    for url in (
        "https://api.openai.com/v1",
        "http://example.invalid",
        "http://10.0.0.1/v1",
        "http://localhost.evil",
    ):
        assert not is_loopback(url), url


def test_timeout_is_retried_then_fails(server: FakeServer) -> None:
    server.sleep_s = 1.0
    start = time.monotonic()
    with pytest.raises(ProviderError, match="timed out"):
        openai(server, timeout_s=0.2, max_retries=1).embed(["slow"])
    assert len(server.requests) == 2
    assert time.monotonic() - start < 5


def test_unreachable_loopback_port_is_provider_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave the block: connection refused
    policy = RetryPolicy(max_retries=1, backoff_s=0.01)
    emb = OpenAIEmbedder(base_url=f"http://127.0.0.1:{port}/v1", api_key=None, retry=policy)
    with pytest.raises(ProviderError, match="connection failed"):
        emb.embed(["a"])


# -- gemini -------------------------------------------------------------------


def test_gemini_request_shape_and_vectors(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    emb = gemini(server, monkeypatch)
    assert emb.dim == 768 and emb.model == "gemini-embedding-001" and server.requests == []
    docs = emb.embed(["passage one", "passage two"])
    query = emb.embed_query("a question")
    assert docs.shape == (2, 768) and docs.dtype == np.float32 and query.shape == (768,)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(query), 1.0, rtol=1e-5)
    np.testing.assert_allclose(docs[1], unit(fake_vector("passage two", 768)), rtol=1e-5)
    first, second = server.requests
    assert first["path"] == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert first["headers"]["x-goog-api-key"] == GEMINI_KEY
    assert "authorization" not in first["headers"]
    assert [r["taskType"] for r in first["body"]["requests"]] == ["RETRIEVAL_DOCUMENT"] * 2
    assert [r["taskType"] for r in second["body"]["requests"]] == ["RETRIEVAL_QUERY"]
    assert first["body"]["requests"][0] == {
        "model": "models/gemini-embedding-001",
        "content": {"parts": [{"text": "passage one"}]},
        "taskType": "RETRIEVAL_DOCUMENT",
        "outputDimensionality": 768,
    }


def test_gemini_dimensions_and_batching(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    emb = gemini(server, monkeypatch, dimensions=16, batch_size=2, model="models/gemini-embedding-001")
    vecs = emb.embed(["a", "b", "c"])
    assert vecs.shape == (3, 16)
    assert [len(r["body"]["requests"]) for r in server.requests] == [2, 1]
    assert {r["outputDimensionality"] for req in server.requests for r in req["body"]["requests"]} == {16}


def test_gemini_dimensions_out_of_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    with pytest.raises(ConfigError, match="3072"):
        create_embedder(EmbeddingSettings(provider="gemini", dimensions=4000))


def test_gemini_without_key_raises_and_never_falls_back(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # another provider's key must not matter
    with pytest.raises(MissingCredentials, match="GEMINI_API_KEY"):
        create_embedder(EmbeddingSettings(provider="gemini"))
    with pytest.raises(MissingCredentials, match="GEMINI_API_KEY"):  # even pointed at a loopback server
        create_embedder(EmbeddingSettings(provider="gemini", base_url=server.gemini_url))
    with pytest.raises(MissingCredentials, match="MY_EMBED_KEY"):
        create_embedder(EmbeddingSettings(provider="gemini", api_key_env="MY_EMBED_KEY"))
    assert server.requests == []


def test_gemini_accepts_google_api_key(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", GEMINI_KEY)
    emb = create_embedder(EmbeddingSettings(provider="gemini", base_url=server.gemini_url, dimensions=4))
    assert isinstance(emb, GeminiEmbedder)
    assert emb.embed(["x"]).shape == (1, 4)
    # GOOGLE_API_KEY is only a fallback for the default variable name.
    with pytest.raises(MissingCredentials):
        create_embedder(EmbeddingSettings(provider="gemini", api_key_env="MY_EMBED_KEY"))


def test_gemini_bad_key_is_provider_error_without_retry(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "wrong-key")
    emb = create_embedder(EmbeddingSettings(provider="gemini", base_url=server.gemini_url, max_retries=3))
    with pytest.raises(ProviderError) as info:
        emb.embed(["x"])
    assert "403" in str(info.value) and "API key not valid" in str(info.value)
    assert "wrong-key" not in str(info.value)
    assert len(server.requests) == 1


def test_gemini_retries_and_malformed(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.fail_first, server.fail_status, server.retry_after = 1, 503, "0"
    emb = gemini(server, monkeypatch, dimensions=4, max_retries=1)
    assert emb.embed(["x"]).shape == (1, 4)
    server.fixed = (200, json.dumps({"embeddings": [{"values": [1, 2, 3, 4]}]}).encode())
    with pytest.raises(ProviderError, match="malformed"):
        emb.embed(["x", "y"])
    server.fixed = (200, b'{"embedding": {"values": [1, 2, 3, 4]}}')
    with pytest.raises(ProviderError, match="malformed"):
        emb.embed(["x"])
