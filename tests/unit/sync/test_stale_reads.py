"""Edits made on disk are never served stale, and the per-file status API.

The recipe: while the server runs, ``acl: [ops]`` (and a new word) is added on disk to a public
note. A public-only token must not get that note in search, in ask evidence or in the notes
listing, not even before any watcher has seen the change (the read paths check the files of
the notes they return: sunlib.sync.freshness); and the new word must be found.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sunlib import Library
from sunlib.server import create_app
from sunlib.server.routes_files import feed_event
from sunlib.trace import Tracer
from sunlib.trace.steps import Step
from tests.support.clients import Api

NOTE = "guide/search/search-modes.md"  # public, with frontmatter and a sidecar (no acl in either)
WORD = "zanzibarquux"  # in no note of the sample vault
QUESTION = "When should I pick bm25 mode rather than dense mode?"  # answered from NOTE (with e5)
TOKENS = {"tok-ops": ["ops"], "tok-pub": ["public"]}
PUB = {"Authorization": "Bearer tok-pub"}
OPS = {"Authorization": "Bearer tok-ops"}


def until(check: Callable[[], object], what: str, timeout: float = 15.0) -> object:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)
    return found


def restrict_on_disk(vault: Path) -> None:
    """Add ``acl: [ops]`` to the note's frontmatter and a new word to its text, as an editor would."""
    path = vault / NOTE
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n") and "acl:" not in text.split("---", 2)[1]
    path.write_text(text.replace("---\n", "---\nacl: [ops]\n", 1) + f"\nThe {WORD} is new.\n", encoding="utf-8")


def paths_in_search(api: Any, headers: dict[str, str], query: str, mode: str = "hybrid") -> set[str]:
    r = api.post("/api/search", json={"query": query, "mode": mode, "limit": 20}, headers=headers)
    assert r.status_code == 200, r.text
    return {h["path"] for h in r.json()["results"]}


def paths_in_ask(api: Any, headers: dict[str, str]) -> set[str]:
    r = api.post("/api/ask", json={"question": QUESTION}, headers=headers)
    assert r.status_code == 200, r.text
    frame = r.json()
    return {e["path"] for e in frame["evidence"]} | {s["path"] for s in frame["sources"]}


def paths_listed(api: Any, headers: dict[str, str]) -> set[str]:
    r = api.get("/api/notes", params={"limit": 500}, headers=headers)
    assert r.status_code == 200, r.text
    return {n["path"] for n in r.json()["notes"]}


@pytest.fixture
def tokened(hash_library: Library) -> Library:
    return hash_library.with_settings(server={"tokens": TOKENS})


@pytest.fixture
def e5_copy(e5_library: Library, tmp_path: Path) -> Iterator[Library]:
    """A private copy of the session's e5 library (vault and index files): asks get answered."""
    vault, index = tmp_path / "vault", tmp_path / "index"
    shutil.copytree(e5_library.vault, vault)
    index.mkdir()
    for f in e5_library.index_dir.iterdir():  # the session library is idle: db, -wal, -shm agree
        shutil.copy2(f, index / f.name)
    lib = Library.open(vault, embedding={"provider": "e5"}, index_dir=index, server={"tokens": TOKENS})
    yield lib
    lib.close()


def test_acl_added_on_disk_is_honoured_before_any_watcher_sees_it(e5_copy: Library) -> None:
    tokened = e5_copy
    api = Api(create_app(tokened))  # no lifespan, no watcher: only the read paths' check
    assert NOTE in paths_in_search(api, PUB, "search modes fuse routes")
    assert NOTE in paths_in_ask(api, PUB)
    assert NOTE in paths_listed(api, PUB)

    restrict_on_disk(tokened.vault)
    for mode in ("hybrid", "bm25"):
        assert NOTE not in paths_in_search(api, PUB, "search modes fuse routes", mode)
    assert NOTE not in paths_in_ask(api, PUB)
    assert NOTE not in paths_listed(api, PUB)
    assert api.get(f"/api/notes/{tokened.store.note_states_of([NOTE])[NOTE].note_id}", headers=PUB).status_code == 404
    assert NOTE in paths_in_search(api, OPS, WORD, "bm25")  # the new word, for those who may see it
    assert NOTE in paths_listed(api, OPS)


def test_a_file_gone_or_unreadable_is_withheld(tokened: Library) -> None:
    api = Api(create_app(tokened))
    path = tokened.vault / NOTE
    text = path.read_text(encoding="utf-8")
    path.write_text("---\nacl: [ops\n---\n" + text, encoding="utf-8")  # broken frontmatter: cannot be indexed
    assert NOTE not in paths_in_search(api, PUB, "search modes fuse routes", "bm25")
    assert NOTE not in paths_listed(api, PUB)
    path.unlink()
    assert NOTE not in paths_in_search(api, PUB, "search modes fuse routes", "bm25")
    assert NOTE not in paths_listed(api, PUB)


@pytest.fixture
def live(tokened: Library) -> Iterator[tuple[TestClient, FastAPI]]:
    app = create_app(tokened, watch=True)
    with TestClient(app, base_url="http://127.0.0.1") as client:  # runs the lifespan: the watcher
        yield client, app


def test_with_the_watcher_the_new_word_is_found_and_files_are_acl_filtered(
    live: tuple[TestClient, FastAPI], tokened: Library
) -> None:
    client, app = live
    restrict_on_disk(tokened.vault)  # no read touches the note: the watcher alone must sync it
    until(lambda: NOTE in paths_in_search(client, OPS, WORD, "bm25"), "the new word")

    def files(headers: dict[str, str]) -> dict[str, dict[str, Any]]:
        r = client.get("/api/index/files", params={"limit": 2000}, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["watching"] is True
        return {f["path"]: f for f in r.json()["files"]}

    pub, ops = files(PUB), files(OPS)
    assert NOTE not in pub and "internal/ops-runbook.md" not in pub and "internal/scratch.md" not in pub
    assert "index.md" in pub and pub["index.md"]["state"] in ("indexed", "embedded")
    assert NOTE in ops and "internal/ops-runbook.md" in ops
    until(lambda: files(OPS)[NOTE]["state"] == "embedded", "the note's vectors")
    assert r_total(client, PUB) == len(pub)

    # the live feed: the public token hears that the note went away, the ops token sees its row
    board = app.state.sunlib.board
    _, event = feed_event(app.state.sunlib, ("public",), 0)
    assert event is not None and event["event"] == "files"
    assert event["data"]["gone"] == [NOTE] and "version" not in event["data"]
    assert board.version > 0


def r_total(client: TestClient, headers: dict[str, str]) -> int:
    return int(client.get("/api/index/files", params={"limit": 2000}, headers=headers).json()["total"])


def test_a_search_run_again_after_a_sync_shows_only_its_last_attempt(tokened: Library) -> None:
    path = tokened.vault / NOTE
    before = {c.chunk_id for c in tokened.store.chunks_of_note(tokened.store.note_states_of([NOTE])[NOTE].note_id)}
    path.write_text(path.read_text(encoding="utf-8") + f"\nSearch modes and {WORD}.\n", encoding="utf-8")
    heard: list[str] = []
    tracer = Tracer("search", listener=lambda step: heard.append(step.name))
    result = tokened.search("search modes", mode="bm25", principals=["public"], tracer=tracer)
    assert NOTE in {h.path for h in result.hits}  # re-indexed, then found in its new state
    assert heard == [Step.BM25] and [s.name for s in result.trace.steps] == [Step.BM25]
    after = {c.chunk_id for c in tokened.store.chunks_of_note(tokened.store.note_states_of([NOTE])[NOTE].note_id)}
    shown = {row["chunk_id"] for row in result.trace.steps[0].details["top"]}
    assert before - after and not shown & (before - after), "a chunk of the discarded attempt reached the trace"


def test_a_same_size_rewrite_with_the_old_mtime_put_back_is_seen(tokened: Library) -> None:
    """An in-place rewrite of the same size that adds ``acl: [ops]`` and restores the
    old mtime (``touch -d``) keeps size, inode and mtime; only ctime tells, and it is in the key."""
    import os

    api = Api(create_app(tokened))
    path = tokened.vault / NOTE
    text = path.read_text(encoding="utf-8")
    assert NOTE in paths_in_search(api, PUB, "search modes fuse routes", "bm25")  # its signature is cached
    before = path.stat()
    body = text.split("---\n", 2)[2]
    cut = len("acl: [ops]\n")
    changed = text.replace("---\n", "---\nacl: [ops]\n", 1).replace(body, body[cut:], 1)
    assert len(changed.encode()) == len(text.encode())
    with path.open("r+b") as f:  # in place: the inode stays
        f.write(changed.encode())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (before.st_size, before.st_ino, before.st_mtime_ns)
    assert NOTE not in paths_in_search(api, PUB, "search modes fuse routes", "bm25")


def test_the_files_feed_counts_only_what_the_caller_sees(tokened: Library) -> None:
    """Saves of hidden notes move no counter a public caller can read."""
    app = create_app(tokened)
    state = app.state.sunlib
    board = state.board.version
    hidden = "internal/ops-runbook.md"
    state.board.queue([hidden], {hidden: ("ops",)})  # a save of a note the public may not see
    state.board.settle([hidden], {}, {hidden: ("ops",)})
    after, event = feed_event(state, ("public",), board)
    assert after > board and event is None  # the board moved; the public stream sends nothing
    _, seen = feed_event(state, ("ops",), board)
    assert seen is not None and seen["data"]["files"][0]["path"] == hidden and "version" not in seen["data"]
