"""Clients for the tests: the ``sunlib`` command in a subprocess, and synchronous calls into the ASGI app."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx


def sunlib(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sunlib ARGS`` as a user would, with extra environment variables."""
    return subprocess.run(
        [sys.executable, "-m", "sunlib", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


class Api:
    """Synchronous calls into an ASGI app, each on its own event loop, from a chosen client address."""

    def __init__(self, app: Any, host: str = "127.0.0.1", headers: dict[str, str] | None = None) -> None:
        self.app, self.host, self.headers = app, host, headers or {}

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            # an unhandled error comes back as the 500 a real client gets, not as an exception here
            transport = httpx.ASGITransport(app=self.app, client=(self.host, 1234), raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=self.headers) as c:
                return await c.request(method, url, **kwargs)

        return asyncio.run(go())

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def as_(self, headers: dict[str, str], host: str | None = None) -> Api:
        return Api(self.app, host or self.host, headers)

    def bearer(self, token: str | None) -> Api:
        """The same client with ``Authorization: Bearer TOKEN`` (no header for None)."""
        return self.as_({"Authorization": f"Bearer {token}"} if token else {})
