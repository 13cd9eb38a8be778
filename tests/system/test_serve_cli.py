"""``sunlib serve`` as a user starts it: a real subprocess, a real socket on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.clients import sunlib
from tests.support.paths import index_of

HASH_ENV = {"SUNLIB_EMBEDDING__PROVIDER": "hash"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def indexed(hash_vault: Path) -> Path:
    r = sunlib("index", str(hash_vault), "--provider", "hash", "--json")
    assert r.returncode == 0, r.stderr
    return hash_vault


class Serving:
    """``sunlib serve`` in a subprocess; ``wait()`` returns once it answers on its port."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sunlib", "serve", "--port", str(self.port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "400", **(env or {})},  # rich wraps long lines at the width
        )

    def wait(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode}: {self.proc.stderr.read()}")
            try:
                httpx.get(f"{self.url}/openapi.json", timeout=2)
                return
            except httpx.TransportError:
                assert time.monotonic() < deadline, "serve did not answer in time"
                time.sleep(0.2)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=5)
            raise AssertionError("serve did not stop on SIGTERM") from None
        return self.proc.returncode, err


@pytest.fixture
def serving() -> Iterator[list[Serving]]:
    started: list[Serving] = []
    yield started
    for s in started:  # whatever a failed test left running
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.communicate(timeout=5)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "testclient", "testserver"])
def test_refuses_a_public_bind_without_tokens(vault: Path, host: str) -> None:
    r = sunlib("serve", "--host", host, "--port", str(free_port()), "--no-index", "--vault", str(vault))
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "without auth" in lines[0] and host in lines[0] and "tokens" in lines[0]
    assert "Traceback" not in r.stderr
    assert not index_of(vault).exists()  # refused before touching the vault's index


def test_serves_the_api_docs_and_stops(indexed: Path, serving: list[Serving]) -> None:
    s = Serving("--no-index", "--vault", str(indexed), env=HASH_ENV)
    serving.append(s)
    s.wait()
    # the first ask of a fresh process loads the bilingual dictionary and the sentence model:
    # seconds when idle, half a minute on a loaded machine
    with httpx.Client(base_url=s.url, timeout=120) as client:
        status = client.get("/api/index/status")
        assert status.status_code == 200, status.text
        info = status.json()
        assert info["vault"] == str(indexed.resolve())
        assert info["counts"]["notes"] == 21 and info["vectors_pending"] == 0
        assert info["active_space"].startswith("hash:")
        found = client.post("/api/search", json={"query": "empty ACL public", "mode": "bm25", "limit": 3})
        assert found.status_code == 200, found.text
        assert found.json()["results"][0]["path"] == "guide/search/filters-and-acl.md"
        answer = client.post("/api/ask", json={"question": "How do I rebuild the index?"})
        assert answer.status_code == 200 and answer.json()["run_id"].startswith("run_")
        page = client.get("/")  # the web UI is written separately: it may not be there yet
        assert page.status_code in (200, 404), page.text
        if page.status_code == 200:
            assert "text/html" in page.headers["content-type"]
        else:
            assert page.json()["error"] == "not_found"
        docs = client.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        assert client.get("/openapi.json").json()["info"]["title"] == "sunlib"
    code, err = s.stop()
    assert code in (0, -signal.SIGTERM), err
    assert f"sunlib serving {indexed.resolve()} at {s.url}/" in " ".join(err.split())  # rich may wrap it
    assert "Traceback" not in err


def test_tokens_from_the_environment(indexed: Path, serving: list[Serving]) -> None:
    env = {**HASH_ENV, "SUNLIB_SERVER__TOKENS": json.dumps({"tok-ops": ["ops"]})}
    s = Serving("--no-index", "--vault", str(indexed), env=env)
    serving.append(s)
    s.wait()
    with httpx.Client(base_url=s.url, timeout=10) as client:
        anonymous = client.get("/api/index/status")
        assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthorized"
        ops = {"Authorization": "Bearer tok-ops"}
        assert client.get("/api/index/status", headers=ops).status_code == 200
        body = {"query": "weekly rebuild window", "mode": "bm25", "limit": 3}
        hits = client.post("/api/search", json=body, headers=ops).json()["results"]
        assert hits[0]["path"] == "internal/ops-runbook.md"  # the token's principal reaches retrieval
    code, err = s.stop()
    assert code in (0, -signal.SIGTERM), err
