"""Clients for the tests: the ``sunlib`` command (in this process, or in a subprocess where the
process boundary is what a test is about), synchronous calls into the ASGI app, and the app served
live on a loopback port (``Served``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from click.testing import CliRunner
from rich.console import Console

from sunlib import Library
from sunlib.cli import common, main

_RUNNER = CliRunner()


def sunlib(
    *args: str,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the ``sunlib`` command line on ARGS in this process, with extra environment variables
    (a None value unsets one) for the duration of the run.

    The same entry point as ``python -m sunlib`` (``sunlib.cli.main``: its one-line errors and
    exit codes), with stdin empty (or ``input``, piped) and stdout/stderr captured, minus the
    interpreter start-up. ``timeout`` is accepted for the subprocess client's signature; it is
    not enforced here.
    """
    with _RUNNER.isolation(input=input, env=env) as (stdout, stderr, _), _columns(env), _cwd(cwd):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = stdout.getvalue().decode("utf-8"), stderr.getvalue().decode("utf-8")
    return subprocess.CompletedProcess(["sunlib", *args], code, out, err)


def sunlib_process(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sunlib ARGS`` in a subprocess, as a user would, with extra environment variables."""
    return subprocess.run(
        [sys.executable, "-m", "sunlib", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def ctrl_c_default() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: Ctrl-C acts as a terminal's
    does, even when this run inherited SIGINT ignored (a suite started in the background by a
    shell without job control ignores it, and Python then never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


SCREENSHOTS_ENV = "SUNLIB_SCREENSHOTS"


def screenshot_dir() -> Path:
    """Where the browser test saves its screenshots: ``$SUNLIB_SCREENSHOTS`` when set (``make
    screenshots`` sets docs/screenshots, the pictures the README shows), else a folder under the
    system's temp folder, so that ``make test`` never changes a tracked file."""
    chosen = os.environ.get(SCREENSHOTS_ENV)
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / "sunlib-screenshots"


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"): Python prints it and exits 1
    return 1


@contextlib.contextmanager
def _cwd(cwd: Path | None) -> Iterator[None]:
    if cwd is None:
        yield
    else:
        with contextlib.chdir(cwd):
            yield


@contextlib.contextmanager
def _columns(env: Mapping[str, str | None] | None) -> Iterator[None]:
    """The CLI's rich consoles read COLUMNS when they are created (at import); a subprocess
    would see the COLUMNS given here, so they get its width for this run."""
    columns = (env or {}).get("COLUMNS", os.environ.get("COLUMNS")) or ""
    consoles: tuple[Console, ...] = (common.out, common.err)
    saved = [c._width for c in consoles]
    try:
        if columns.isdigit():
            for c in consoles:
                c.width = int(columns)
        yield
    finally:
        for c, width in zip(consoles, saved, strict=True):
            c._width = width


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


def step(result: Any, name: str) -> Any:
    """The one trace step of ``result`` (an AskResult or SearchResult) named ``name``."""
    (found,) = [s for s in result.trace.steps if s.name == name]
    return found


OPEN_GATE = {
    "writer": "openai",
    "router": "rules",
    "gate_threshold": 0.0,
    "reader_threshold": 0.0,
    "gate_threshold_bm25": 0.0,
}


@contextlib.contextmanager
def llm_libraries(
    vault: Path, base_url: str, notes: Mapping[str, str], **answer: Any
) -> Iterator[Callable[..., Library]]:
    """``make(**sections)`` opens a Library on VAULT plus NOTES (path -> text) with the OpenAI
    writer pointed at the local chat server at BASE_URL and the refusal gate opened (``answer``
    adds to ``OPEN_GATE``); ``sections`` may override ``answer`` and ``llm`` and add any other
    settings section. The first library opened indexes (the hash embedder keeps it fast)."""
    for rel, text in notes.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    libs: list[Library] = []

    def make(**sections: Any) -> Library:
        llm = {"base_url": base_url, "model": "test-model", "timeout_s": 2, "max_retries": 1}
        lib = Library.open(
            vault,
            embedding={"provider": "hash"},
            answer={**OPEN_GATE, **answer, **sections.pop("answer", {})},
            llm={**llm, **sections.pop("llm", {})},
            **sections,
        )
        if not libs:
            lib.index()
        libs.append(lib)
        return lib

    try:
        yield make
    finally:
        for lib in libs:
            lib.close()


class Served:
    """``create_app`` on uvicorn at 127.0.0.1 and a free port, with its lifespan."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


def assert_error(r: httpx.Response, status: int, error: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error", "message"}, body
    assert body["error"] == error, body
    assert isinstance(body["message"], str) and body["message"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    return body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServedStreams:
    """The app alone (no lifespan) on a real uvicorn server (127.0.0.1, free port) in a thread;
    ``finished`` is set each time the app returns from an /api/ask/stream request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.finished = threading.Event()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            self.wrapped, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", interface="asgi3"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def wrapped(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if scope["type"] == "http" and scope["path"] == "/api/ask/stream":
                self.finished.set()

    def __enter__(self) -> ServedStreams:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
