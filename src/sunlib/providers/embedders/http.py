"""Remote embedders over HTTP. Both need the network and, except on loopback, a key.

* ``openai``: any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint:
  OpenAI itself (``https://api.openai.com/v1``, the default, model
  ``text-embedding-3-small``), DashScope ``text-embedding-v4``
  (``https://dashscope.aliyuncs.com/compatible-mode/v1``), Ollama
  (``http://localhost:11434/v1``), vLLM and the llama.cpp server. The key is read
  from the environment variable named by ``api_key_env`` (default
  ``OPENAI_API_KEY``); a server on a loopback host needs none. ``dimensions`` is
  sent when set (truncatable models); otherwise ``dim`` is learned from the
  first answer (a one-text probe when it is asked for before any embedding).
* ``gemini``: Google's ``gemini-embedding-001`` through
  ``models/{model}:batchEmbedContents`` with the ``x-goog-api-key`` header and
  ``RETRIEVAL_DOCUMENT`` / ``RETRIEVAL_QUERY`` task types. Its vectors are
  truncatable (``dimensions``, 1..3072, default 768); truncated vectors are not
  unit length, which the Embedder's public methods fix. Key from ``api_key_env``
  (default ``GEMINI_API_KEY``, or ``GOOGLE_API_KEY``).

Both share one request loop: one ``httpx.Client``, ``timeout_s`` per request,
and the retry policy of every HTTP provider (``http_common.RetryPolicy``): up to
``max_retries`` retries on connection errors, timeouts, 408, 429 and 500/502/503/504,
with jittered exponential backoff from 0.5 s or the server's ``Retry-After``, any
one wait capped at 20 s. Other answers fail at once. A missing key raises MissingCredentials; no
provider ever falls back to another. The key is sent in a header and never
logged or echoed (it is redacted from any server message we repeat).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from ...config import EmbeddingSettings
from ...errors import ConfigError, MissingCredentials, ProviderError
from ..base import Embedder, Kind
from ..http_common import (
    TRANSIENT_ERRORS,
    Retryable,
    RetryPolicy,
    is_loopback,
    read_key,
    redact,
    retry_after,
    status_failure,
)

OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_MODEL = "text-embedding-3-small"
OPENAI_KEY_ENV = "OPENAI_API_KEY"
OPENAI_MAX_BATCH = 2048
# DashScope's compatible mode takes at most 10 inputs per request for text-embedding-v3/v4.
SMALL_BATCH_HOSTS = {"dashscope.aliyuncs.com": 10, "dashscope-intl.aliyuncs.com": 10}

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
GEMINI_MODEL = "gemini-embedding-001"
GEMINI_KEY_ENV = "GEMINI_API_KEY"
GEMINI_FALLBACK_KEY_ENV = "GOOGLE_API_KEY"
GEMINI_DIM = 768
GEMINI_MAX_DIM = 3072
GEMINI_MAX_BATCH = 100  # batchEmbedContents accepts at most 100 requests

MAX_BACKOFF_S = 20.0  # an embedding call waits at most this long between attempts
PROBE_TEXT = "dimension probe"


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _vector(values: object, where: str) -> list[float]:
    """One embedding as floats; a base64 string (little-endian float32) is decoded too."""
    if isinstance(values, str):
        try:
            return np.frombuffer(base64.b64decode(values, validate=True), dtype="<f4").tolist()
        except (ValueError, TypeError):
            raise ProviderError(f"malformed response: {where} is neither a list of numbers nor base64") from None
    if not isinstance(values, list) or not values:
        raise ProviderError(f"malformed response: {where} is not a non-empty list of numbers")
    if not all(_is_number(x) for x in values):
        raise ProviderError(f"malformed response: {where} holds non-numeric values")
    return values


class HttpEmbedder(Embedder):
    """Shared request loop, batching, validation and lazy ``dim`` for the HTTP providers."""

    provider = "http"
    max_batch = OPENAI_MAX_BATCH

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None,
        dimensions: int | None = None,
        batch_size: int = 16,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.dimensions = dimensions
        self._dim: int | None = dimensions
        self.batch_size = max(1, min(batch_size, self.max_batch))
        self.retry = retry or retry_policy(max_retries=3)
        self._api_key = api_key
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(self._auth_headers(api_key))
        if client is not None:
            client.headers.update(headers)
            self._client = client
        else:
            self._client = httpx.Client(
                timeout=httpx.Timeout(timeout_s), headers=headers, transport=transport, follow_redirects=False
            )

    # -- provider specifics -------------------------------------------------

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def _url(self) -> str:
        raise NotImplementedError

    def _body(self, texts: Sequence[str], kind: Kind) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, payload: Any, n: int) -> list[list[float]]:
        raise NotImplementedError

    # -- dim ----------------------------------------------------------------

    @property
    def dim(self) -> int:
        """Known from settings, else learned from the first answer (probing once if needed)."""
        if self._dim is None:
            self.embed_batch([PROBE_TEXT], "passage")
        assert self._dim is not None
        return self._dim

    @dim.setter
    def dim(self, value: int) -> None:
        self._dim = value

    # -- embedding ----------------------------------------------------------

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        texts = list(texts)
        parts: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            payload = self._post(self._url(), self._body(chunk, kind))
            parts.append(self._to_array(self._parse(payload, len(chunk)), len(chunk)))
        if not parts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return np.concatenate(parts, axis=0)

    def _to_array(self, rows: list[list[float]], n: int) -> np.ndarray:
        if len(rows) != n:
            raise ProviderError(f"malformed response: {len(rows)} embeddings for {n} inputs")
        widths = {len(r) for r in rows}
        if len(widths) != 1:
            raise ProviderError(f"malformed response: embeddings of differing lengths {sorted(widths)}")
        arr = np.asarray(rows, dtype=np.float32).reshape(n, widths.pop())
        if not np.isfinite(arr).all():
            raise ProviderError("malformed response: non-finite values in embeddings")
        width = arr.shape[1]
        if self._dim is None:
            self._dim = width
        elif width != self._dim:
            hint = " (does the server honour 'dimensions'?)" if self.dimensions else ""
            raise ProviderError(f"{self.provider} returned {width}-d vectors, expected {self._dim}{hint}")
        return arr

    # -- HTTP ---------------------------------------------------------------

    def _post(self, url: str, body: dict[str, Any]) -> Any:
        """POST JSON under the retry policy; the parsed JSON answer, or ProviderError."""
        return self.retry.run(lambda: self._post_once(url, body), f"{self.provider} embeddings ({url})")

    def _post_once(self, url: str, body: dict[str, Any]) -> Any:
        try:
            response = self._client.post(url, json=body)
        except httpx.TimeoutException as exc:
            raise Retryable(f"timed out ({type(exc).__name__})") from None
        except TRANSIENT_ERRORS as exc:
            raise Retryable(f"connection failed ({type(exc).__name__}: {redact(str(exc), self._api_key)})") from None
        except httpx.HTTPError as exc:
            raise ProviderError(f"{self.provider} request to {url} failed: {redact(str(exc), self._api_key)}") from None
        status = response.status_code
        if 200 <= status < 300:
            try:
                return response.json()
            except ValueError:
                raise ProviderError(f"malformed response from {self.provider} ({url}): not JSON") from None
        message = status_failure(response, self._api_key)
        if self.retry.retries_status(status):
            raise Retryable(message, retry_after(response))
        raise ProviderError(f"{self.provider} embeddings failed: {message}")

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"


class OpenAIEmbedder(HttpEmbedder):
    """Any OpenAI-compatible ``/embeddings`` endpoint."""

    provider = "openai"

    def __init__(self, *, base_url: str = OPENAI_BASE_URL, model: str = OPENAI_MODEL, **kwargs: Any) -> None:
        host = httpx.URL(base_url).host.lower()
        if host in SMALL_BATCH_HOSTS:
            self.max_batch = SMALL_BATCH_HOSTS[host]
        super().__init__(base_url=base_url, model=model, **kwargs)

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _url(self) -> str:
        return self.base_url if self.base_url.endswith("/embeddings") else f"{self.base_url}/embeddings"

    def _body(self, texts: Sequence[str], kind: Kind) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "input": list(texts), "encoding_format": "float"}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        return body

    def _parse(self, payload: Any, n: int) -> list[list[float]]:
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise ProviderError("malformed response: no 'data' list")
        if len(data) != n:
            raise ProviderError(f"malformed response: {len(data)} embeddings for {n} inputs")
        if not all(isinstance(item, dict) for item in data):
            raise ProviderError("malformed response: 'data' items are not objects")
        indices = [item.get("index") for item in data]
        if all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            if sorted(indices) != list(range(n)):
                raise ProviderError(f"malformed response: indices {sorted(indices)} are not 0..{n - 1}")
            data = sorted(data, key=lambda item: item["index"])
        elif any(i is not None for i in indices):
            raise ProviderError("malformed response: some 'index' fields missing or not integers")
        return [_vector(item.get("embedding"), f"data[{k}].embedding") for k, item in enumerate(data)]


class GeminiEmbedder(HttpEmbedder):
    """Google Gemini ``batchEmbedContents`` (gemini-embedding-001)."""

    provider = "gemini"
    max_batch = GEMINI_MAX_BATCH

    def __init__(
        self,
        *,
        base_url: str = GEMINI_BASE_URL,
        model: str = GEMINI_MODEL,
        dimensions: int | None = None,
        **kwargs: Any,
    ) -> None:
        dims = dimensions or GEMINI_DIM
        if not 1 <= dims <= GEMINI_MAX_DIM:
            raise ConfigError(f"gemini dimensions must be between 1 and {GEMINI_MAX_DIM}, got {dims}")
        model = model.removeprefix("models/")
        super().__init__(base_url=base_url, model=model, dimensions=dims, **kwargs)

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": api_key} if api_key else {}

    def _url(self) -> str:
        return f"{self.base_url}/models/{self.model}:batchEmbedContents"

    def _body(self, texts: Sequence[str], kind: Kind) -> dict[str, Any]:
        task = "RETRIEVAL_QUERY" if kind == "query" else "RETRIEVAL_DOCUMENT"
        return {
            "requests": [
                {
                    "model": f"models/{self.model}",
                    "content": {"parts": [{"text": text}]},
                    "taskType": task,
                    "outputDimensionality": self.dimensions,
                }
                for text in texts
            ]
        }

    def _parse(self, payload: Any, n: int) -> list[list[float]]:
        embeddings = payload.get("embeddings") if isinstance(payload, dict) else None
        if not isinstance(embeddings, list):
            raise ProviderError("malformed response: no 'embeddings' list")
        if len(embeddings) != n:
            raise ProviderError(f"malformed response: {len(embeddings)} embeddings for {n} inputs")
        if not all(isinstance(e, dict) for e in embeddings):
            raise ProviderError("malformed response: 'embeddings' items are not objects")
        return [_vector(e.get("values"), f"embeddings[{k}].values") for k, e in enumerate(embeddings)]


def retry_policy(max_retries: int) -> RetryPolicy:
    return RetryPolicy(max_retries=max_retries, max_backoff_s=MAX_BACKOFF_S)


def _common(settings: EmbeddingSettings) -> dict[str, Any]:
    return {
        "batch_size": settings.batch_size,
        "timeout_s": settings.timeout_s,
        "retry": retry_policy(settings.max_retries),
    }


def create_openai(settings: EmbeddingSettings) -> Embedder:
    base_url = settings.base_url or OPENAI_BASE_URL
    env = settings.api_key_env or OPENAI_KEY_ENV
    key = read_key([env])
    if key is None and not is_loopback(base_url):
        raise MissingCredentials(
            f"the openai embedding provider needs an API key for {base_url}: set the {env} environment "
            "variable (or name another one with embedding.api_key_env)"
        )
    return OpenAIEmbedder(
        base_url=base_url,
        model=settings.model or OPENAI_MODEL,
        api_key=key,
        dimensions=settings.dimensions,
        **_common(settings),
    )


def create_gemini(settings: EmbeddingSettings) -> Embedder:
    env = settings.api_key_env or GEMINI_KEY_ENV
    names = [env, GEMINI_FALLBACK_KEY_ENV] if env == GEMINI_KEY_ENV else [env]
    key = read_key(names)
    if key is None:
        raise MissingCredentials(
            f"the gemini embedding provider needs an API key: set {' or '.join(names)} "
            "(or name another variable with embedding.api_key_env)"
        )
    return GeminiEmbedder(
        base_url=settings.base_url or GEMINI_BASE_URL,
        model=settings.model or GEMINI_MODEL,
        api_key=key,
        dimensions=settings.dimensions,
        **_common(settings),
    )
