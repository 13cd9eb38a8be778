"""``/mcp``: the MCP server (``server/mcp.py``) over streamable HTTP, behind the API's principals.

``create_app`` adds the route (``mount``); the app's lifespan builds the MCP server and runs the
SDK's session manager (``sessions``), so an app used without its lifespan (an ASGI test
transport) neither imports the SDK nor builds the tools, and answers 503 on ``/mcp``. Every
request passes ``principals_for`` first, the same check as ``/api``; the transport is stateless
(no MCP session carries an identity) and answers JSON.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .auth import identify
from .errors import ApiError, body
from .state import OWNER_KEY, PRINCIPALS_KEY, ServerState


class McpEndpoint:
    """``principals_for`` on every request (JSON ``{error, message}`` with its 401/403 when it
    refuses), then the SDK's transport with the principals in the request's scope."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.manager: Any = None  # the SDK's StreamableHTTPSessionManager while the app runs

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        from mcp.server.transport_security import TransportSecuritySettings

        from .mcp import build_server

        server = build_server(self.state, None, self.state.settings.mcp.read_only)
        # principals_for checks Host and Origin as on /api; the SDK's own check would allow loopback names only
        off = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        server.streamable_http_app(json_response=True, stateless_http=True, transport_security=off)
        async with server.session_manager.run():
            self.manager = server.session_manager
            try:
                yield
            finally:
                self.manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = identify(Request(scope, receive))
            if self.manager is None:
                raise ApiError(503, "unavailable", "the MCP endpoint runs only while the server runs (its lifespan)")
        except ApiError as exc:
            await JSONResponse(body(exc.error, exc.message), status_code=exc.status)(scope, receive, send)
            return
        identity = {PRINCIPALS_KEY: caller.principals, OWNER_KEY: caller.owner}
        await self.manager.handle_request({**scope, **identity}, receive, send)


def mount(app: FastAPI, state: ServerState) -> None:
    """Route ``/mcp`` of ``app`` to the MCP endpoint (served once the lifespan runs ``sessions``)."""
    endpoint = McpEndpoint(state)
    app.state.mcp_endpoint = endpoint
    app.router.routes.append(Route("/mcp", endpoint, include_in_schema=False))


def sessions(app: FastAPI) -> AbstractAsyncContextManager[None]:
    """The MCP endpoint's part of the app's lifespan (nothing when /mcp is not mounted)."""
    endpoint: McpEndpoint | None = getattr(app.state, "mcp_endpoint", None)
    return endpoint.running() if endpoint is not None else nullcontext()
