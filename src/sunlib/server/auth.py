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
    """Only real loopback: ``localhost``, 127.0.0.0/8 and ::1 (a test framework's made-up client
    name such as ``testclient`` is not one: it would let any name through the Host check)."""
    if host.lower() in ("localhost", "localhost."):
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


def is_admin(request: Request, principals: tuple[str, ...]) -> bool:
    """May this caller see the whole index (absolute paths, every job, unfiltered reports)? Yes for
    a token holding a principal of ``[server] admin_principals``, and for the loopback caller of
    a server without tokens (it reads the index file anyway). ``principals`` is ``principals_for``'s
    answer, so the request has passed its checks."""
    server = request.app.state.sunlib.settings.server
    return not server.tokens or bool(set(principals) & set(server.admin_principals))


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
