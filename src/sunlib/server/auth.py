"""Who is asking: bearer tokens map to ACL principals; no tokens means loopback only.

Tokens are compared in constant time (``hmac.compare_digest``) against every configured
token, so the time taken says nothing about how much of a token was right.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import Request

from .errors import ApiError

PUBLIC = "public"


def is_loopback_host(host: str) -> bool:
    if host in ("localhost", "localhost.", "testclient"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(value: str) -> str:
    """The host of a Host header or an Origin URL, without scheme, port or IPv6 brackets."""
    value = value.split("://", 1)[-1].split("/", 1)[0]
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def principals_for(request: Request) -> tuple[str, ...]:
    """The principals of this request (FastAPI dependency)."""
    state = request.app.state.sunlib
    tokens: dict[str, list[str]] = state.settings.server.tokens
    header = request.headers.get("authorization", "")
    origin = request.headers.get("origin")
    same_site = origin is not None and origin.split("://", 1)[-1] == request.headers.get("host")
    if (
        request.method not in ("GET", "HEAD")
        and origin
        and not same_site
        and origin not in state.settings.server.cors_origins
    ):  # a page from another site may not make the browser write, ask or rebuild for it
        raise ApiError(403, "forbidden", "cross-site request refused")
    if not tokens:
        client = request.client.host if request.client else ""
        if not is_loopback_host(client):
            raise ApiError(403, "forbidden", "this server has no tokens configured and answers loopback clients only")
        if not is_loopback_host(_host_name(request.headers.get("host", ""))):
            # DNS rebinding: a hostile name resolving to 127.0.0.1 must not reach the notes
            raise ApiError(403, "forbidden", "without tokens only a loopback Host (127.0.0.1, localhost) is served")
        return tuple(dict.fromkeys([PUBLIC, *state.settings.search.principals]))
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented:
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <token>")
    match: list[str] | None = None
    for token, principals in tokens.items():
        if hmac.compare_digest(token.encode(), presented.strip().encode()):
            match = principals
    if match is None:
        raise ApiError(401, "unauthorized", "unknown token")
    return tuple(dict.fromkeys([PUBLIC, *match]))
