"""Shared fixtures: real SQLite files in tmp dirs, the bundled sample vault, real providers.

Test-only providers are registered through the real registry (never by patching
sunlib), by importing ``tests.support.embedders``: ``counting`` wraps the hash embedder and
counts what it embeds; ``flaky`` fails after a set number of batches, to interrupt indexing.
What tests import (clients, paths, helpers) lives in ``tests.support``, never here.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.library import DB_NAME
from tests.harness.llm_server import ChatServer
from tests.harness.llm_server import start as start_chat_server
from tests.support import xdist_schedule
from tests.support.browser import CHROMIUM, PAGE_TIMEOUT_MS, VIEWPORT
from tests.support.e5_vectors import save_vectors, seed_saved_vectors, waiting_chunks
from tests.support.embedders import CountingEmbedder, FlakyEmbedder
from tests.support.paths import SAMPLE_VAULT, TESTS_DIR, place_index

# -- spreading the run over pytest-xdist workers (tests/support/xdist_schedule.py) ---------------------

_timer: xdist_schedule.UnitTimer | None = None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile``: whole files per worker, the e5 files as one unit, longest first."""
    if config.getvalue("dist") != "loadfile":
        return None
    return xdist_schedule.make_scheduler(config, log, TESTS_DIR)


def pytest_configure(config: pytest.Config) -> None:
    global _timer
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        _timer = xdist_schedule.UnitTimer(TESTS_DIR)  # the controller of an xdist run


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _timer is not None:
        _timer.add(report.nodeid, report.duration)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _timer is not None and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        _timer.store(getattr(session.config, "cache", None))


@pytest.fixture(scope="session", autouse=True)
def _session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fixtures wider than one test run before that test's own home is set (``_isolated_home``):
    they get this one, so they never write the user's home either (indexes live there now)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SUNLIB_HOME", str(tmp_path_factory.mktemp("session_home")))
        yield


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the user's ~/.local/share/sunlib or inherits SUNLIB_* settings."""
    for key in list(os.environ):
        if key.startswith("SUNLIB_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SUNLIB_HOME", str(tmp_path_factory.mktemp("sunlib_home")))
    # one embedding worker, whatever the machine's load: tests read the order things are embedded in
    # (tests/unit/sync/test_index.py's parallel test sets its own)
    monkeypatch.setenv("SUNLIB_EMBEDDING__WORKERS", "1")
    CountingEmbedder.seen = []
    FlakyEmbedder.batches = 0


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    """A private, writable copy of the bundled sample vault."""
    dest = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, dest, ignore=shutil.ignore_patterns(".sunlib"))
    return dest


@pytest.fixture(scope="session")
def hash_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample vault's index under the hash embedder, built once per session (read-only).

    Returns the index folder. Its ``sunlib.db`` is closed (checkpointed, no WAL file left),
    so a copy of the file is a complete index; never open it: copy it.
    """
    root = tmp_path_factory.mktemp("hash_index")
    dest = root / "vault"
    shutil.copytree(SAMPLE_VAULT, dest, ignore=shutil.ignore_patterns(".sunlib"))
    index_dir = root / "index"
    with pytest.MonkeyPatch.context() as env:  # built before any test's _isolated_home: isolate it too
        for key in [k for k in os.environ if k.startswith("SUNLIB_")]:
            env.delenv(key)
        env.setenv("SUNLIB_HOME", str(root / "home"))
        with Library.open(dest, embedding={"provider": "hash"}, index_dir=index_dir) as lib:
            lib.index()
    for leftover in ("-wal", "-shm"):
        assert not (index_dir / f"{DB_NAME}{leftover}").exists(), "the template index was not checkpointed"
    return index_dir


@pytest.fixture
def hash_vault(vault: Path, hash_index: Path) -> Path:
    """``vault`` with its own copy of the session's hash index at its default index folder
    (private and writable): the index ``sunlib index VAULT --provider hash`` writes there. Nothing
    else is done: the vault is not remembered as the default one, as ``sunlib index`` would."""
    place_index(vault, hash_index)
    return vault


@pytest.fixture
def hash_library(hash_vault: Path) -> Iterator[Library]:
    """The sample vault indexed with the deterministic hash embedder: a private, writable
    library (its own vault copy and index file), so a test may change either.

    The index file is a copy of the session's ``hash_index``; ``index()`` then runs as it
    always did, finds the vault as indexed (the copies keep the files' mtimes) and records
    this vault's path, so the library is the one a fresh index of ``vault`` gives.
    """
    lib = Library.open(hash_vault, embedding={"provider": "hash"})
    lib.index()
    yield lib
    lib.close()


@pytest.fixture(scope="session")
def e5_library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    """The sample vault indexed once per session with the bundled e5 model (real embeddings: the
    saved ones, see tests.support.e5_vectors, and the model for any chunk they lack)."""
    root = tmp_path_factory.mktemp("e5")
    dest = root / "vault"
    shutil.copytree(SAMPLE_VAULT, dest, ignore=shutil.ignore_patterns(".sunlib"))
    lib = Library.open(dest, embedding={"provider": "e5"}, index_dir=root / "index")
    lib.index(embed=False)
    waiting = waiting_chunks(lib)
    refresh = os.environ.get("SUNLIB_SAVE_E5_VECTORS") == "1"
    if not refresh:
        seed_saved_vectors(lib)
    lib.index()
    if refresh:
        save_vectors(lib, waiting)
    yield lib
    lib.close()


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A real local OpenAI-compatible server (tests/harness/llm_server.py) on a free port, stopped after the test."""
    state, stop = start_chat_server()
    try:
        yield state
    finally:
        stop()


# -- the browser (tests/system/test_web_e2e.py, tests/system/test_web_conversations.py) ----------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, driven by playwright (never a downloaded browser); one per module."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (/usr/bin/chromium): the web UI test needs it")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; the test fails when the page raised a JavaScript error."""
    # bypass_csp: playwright's wait_for_function evaluates its predicate as a string, which the UI's
    # script-src 'self' refuses; the policy itself is tested in a context of its own (test_web_e2e.py)
    context = browser.new_context(viewport=VIEWPORT, bypass_csp=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.set_default_timeout(PAGE_TIMEOUT_MS)
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
