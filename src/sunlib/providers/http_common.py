"""What every HTTP provider (the embedders, the chat model) shares: keys, loopback, errors, retries.

The one retry policy (``RetryPolicy``): a call is tried at most ``max_retries + 1`` times.
A retry follows a timeout, a dropped or refused connection, or a status in
``RETRY_STATUSES``; any other answer, and a malformed success, fails at once. Before
retry ``n`` (0-based) the policy waits the server's ``Retry-After`` when it sent one, else
``backoff_s * 2**n`` stretched by up to ``jitter`` (a random share, so clients that failed
together do not retry together); either wait is capped at ``max_backoff_s``. When the
next wait would take the waits of one call past ``max_total_s``, the call gives up
instead of sleeping.
"""

from __future__ import annotations

import ipaddress
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx

from ..errors import ProviderError

T = TypeVar("T")

# Statuses a retry can cure: request timeout, rate limit, and the transient server failures.
# Other 4xx are the request's own fault, and 501/505 answer the same every time.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Transport failures worth a retry. Others (a bad URL scheme, a proxy refusing us, a body
# that does not decode) would fail the same way again.
TRANSIENT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class Retryable(Exception):
    """A failure the policy may retry; ``retry_after`` is the server's hint in seconds, if any."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryPolicy:
    """How an HTTP provider retries one call (see the module docstring for the rule)."""

    max_retries: int = 2
    backoff_s: float = 0.5  # the first wait; it doubles with every retry
    max_backoff_s: float = 10.0  # cap on any one wait, Retry-After included
    max_total_s: float = 60.0  # cap on all the waits of one call together
    jitter: float = 0.25  # a computed wait is stretched by a random share in [0, jitter)
    statuses: frozenset[int] = RETRY_STATUSES
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    rand: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def retries_status(self, status: int) -> bool:
        return status in self.statuses

    def wait(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first)."""
        if retry_after is not None:
            return min(max(0.0, retry_after), self.max_backoff_s)
        stretched = self.backoff_s * 2**retry * (1.0 + self.jitter * self.rand())
        return min(stretched, self.max_backoff_s)

    def run(self, call: Callable[[], T], what: str) -> T:
        """``call()``, retried while it raises Retryable; ProviderError naming ``what`` when it gives up."""
        waited = 0.0
        attempt = 0
        while True:
            try:
                return call()
            except Retryable as exc:
                attempt += 1
                tries = f"{attempt} attempt{'s' if attempt > 1 else ''}"
                if attempt > self.max_retries:
                    raise ProviderError(f"{what} failed after {tries}: {exc}") from None
                delay = self.wait(attempt - 1, exc.retry_after)
                if waited + delay > self.max_total_s:
                    raise ProviderError(
                        f"{what} failed after {tries}: {exc} (waiting {delay:g} s more would pass the "
                        f"{self.max_total_s:g} s retry budget)"
                    ) from None
                self.sleep(delay)
                waited += delay


LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost"}


def is_loopback(url: str) -> bool:
    """True when the URL's host is this machine (127.0.0.0/8, ::1, localhost)."""
    try:
        host = httpx.URL(url).host
    except Exception:
        return False
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_key(env_names: Sequence[str]) -> str | None:
    for name in env_names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def retry_after(response: httpx.Response) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date), or None."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def redact(text: str, secret: str | None) -> str:
    """``text`` with the key replaced (a server may echo what it was sent; the key never goes further)."""
    return text.replace(secret, "***") if secret else text


def status_failure(response: httpx.Response, secret: str | None) -> str:
    """``HTTP 503: <the server's message>``, the key redacted."""
    return f"HTTP {response.status_code}: {redact(error_message(response), secret)}"


def error_message(response: httpx.Response) -> str:
    """The server's own error message: OpenAI/Gemini ``{"error": {"message"}}`` or a fallback."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        for key in ("error", "message", "detail"):
            if isinstance(body.get(key), str) and body[key]:
                return str(body[key])
    text = response.text.strip()
    return text[:300] if text else response.reason_phrase
