"""Helpers shared by the HTTP providers (embedders, chat writers): keys, loopback, errors."""

from __future__ import annotations

import ipaddress
import math
import os
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime

import httpx

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
