"""Who is asking: bearer tokens map to ACL principals; no tokens means loopback only.

Tokens are compared in constant time (``hmac.compare_digest``) against every configured
token, so the time taken says nothing about how much of a token was right.

Each caller is also an owner: the saved runs and conversations it makes are its own, and only
it reads, lists or continues them (``owner_for``; an admin reads every owner's: ``readable_owner``).
A token's owner is ``token:`` and the first 16 hex digits of the token's sha256
(``token_owner``), the same for every request with that token and never the token itself; two
tokens with the same principals are two owners. The loopback caller of a server without tokens
is ``LOCAL_OWNER``, as the CLI and the Python API are.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass

from fastapi import Depends, Request

from ..store import LOCAL_OWNER
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


@dataclass(frozen=True)
class Caller:
    """Who a request is: the principals it reads as, and the owner of what it saves."""

    principals: tuple[str, ...]
    owner: str


def token_owner(token: str) -> str:
    """The owner a token's callers are: stable, not secret, and no way back to the token."""
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]


def identify(request: Request) -> Caller:
    """The caller of this request, after the cross-site, loopback, Host and token checks."""
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
        return Caller(tuple(dict.fromkeys([PUBLIC, *state.settings.search.principals])), LOCAL_OWNER)
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented:
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <token>")
    match: tuple[str, list[str]] | None = None
    for token, principals in tokens.items():
        if hmac.compare_digest(token.encode(), presented.strip().encode()):
            match = (token, principals)
    if match is None:
        raise ApiError(401, "unauthorized", "unknown token")
    return Caller(tuple(dict.fromkeys([PUBLIC, *match[1]])), token_owner(match[0]))


def principals_for(request: Request) -> tuple[str, ...]:
    """The principals of this request (FastAPI dependency)."""
    caller = identify(request)
    request.state.sunlib_owner = caller.owner  # for owner_for, which depends on this one
    return caller.principals


def owner_for(request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> str:
    """Whose runs and conversations this request saves and continues (FastAPI dependency)."""
    return str(request.state.sunlib_owner)


def readable_owner(request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> str | None:
    """Whose runs and conversations this request reads and lists (FastAPI dependency): its own,
    every owner's (None) for an admin (``is_admin``), as an admin reads every job. The principals
    rule applies to admins too. An admin continues no conversation but its own (``owner_for``)."""
    return None if is_admin(request, principals) else str(request.state.sunlib_owner)
