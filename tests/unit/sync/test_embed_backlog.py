"""The vectors work of note writes: a deleted or replaced note's chunks are never embedded, the
status counts what really waits, and the work one caller can queue is bounded.

Through the real app (ASGI transport), real files in a copy of the sample vault and real SQLite.
The ``gated`` embedder is the hash embedder registered through the real registry: it records the
passages it embeds and, when told to, stops inside its next batch until the test lets it go, so a
test can act while a vectors job is running, after it has read its list of pending chunks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from fastapi import FastAPI

from sunlib import Library
from sunlib.config import EmbeddingSettings
from sunlib.providers.embedders.hashing import HashEmbedder
from sunlib.providers.registry import Kind, register_embedder
from sunlib.server import create_app
from sunlib.server.jobs import Job
from tests.support.clients import Api

BATCH = 4  # chunks per embedder call
SECTIONS = 40  # chunks of the big note (one per section)


class GatedEmbedder(HashEmbedder):
    """The hash embedder, recording the passages it embeds; with ``hold`` set it stops in its next
    passage batch (``reached``) until ``go`` is set."""

    provider = "paused"
    seen: ClassVar[list[str]] = []
    hold: ClassVar[bool] = False
    reached: ClassVar[threading.Event] = threading.Event()
    go: ClassVar[threading.Event] = threading.Event()

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        if kind == "passage":
            GatedEmbedder.seen.extend(texts)
            if GatedEmbedder.hold:
                GatedEmbedder.hold = False
                GatedEmbedder.reached.set()
                assert GatedEmbedder.go.wait(30), "the test never let the embedder go"
        return super().embed_batch(texts, kind)


@register_embedder("paused")
def _gated(settings: EmbeddingSettings) -> GatedEmbedder:
    return GatedEmbedder(settings.dimensions or 64)


@pytest.fixture(autouse=True)
def _fresh_gate() -> Iterator[None]:
    GatedEmbedder.seen, GatedEmbedder.hold = [], False
    GatedEmbedder.reached, GatedEmbedder.go = threading.Event(), threading.Event()
    yield
    GatedEmbedder.go.set()  # never leave a worker waiting


def big_note(word: str, sections: int = SECTIONS) -> str:
    """A note of ``sections`` chunks, each holding its own ``{word}{i}x`` token."""
    parts = [f"## Part {i}\n\n{word}{i}x is what section {i} of this note is about." for i in range(sections)]
    return "# Big\n\n" + "\n\n".join(parts) + "\n"


def embedded_with(word: str) -> list[str]:
    return [t for t in GatedEmbedder.seen if word in t]


def open_library(vault: Path, **server: Any) -> Library:
    """The sample vault under the gated embedder, every chunk embedded already."""
    lib = Library.open(vault, embedding={"provider": "paused", "batch_size": BATCH}, server=server)
    lib.index()
    GatedEmbedder.seen = []
    return lib


def wait_job(app: FastAPI, job_id: str, timeout: float = 30.0) -> Job:
    job = app.state.sunlib.jobs.get(job_id)
    assert job is not None
    deadline = time.monotonic() + timeout
    while not job.finished:
        assert time.monotonic() < deadline, "the vectors job did not finish"
        time.sleep(0.02)
    return job


def hold_lane(app: FastAPI) -> threading.Event:
    """Keep the index lane busy (a job that waits) until the returned event is set: jobs queue behind it."""
    release, started = threading.Event(), threading.Event()

    def blocked(job: Job) -> None:
        started.set()
        assert release.wait(30)

    app.state.sunlib.jobs.submit("rebuild", (), blocked)
    assert started.wait(10)
    return release


def vectors_status(api: Api) -> tuple[int, int]:
    """(vectors_pending, vectors_total) as /api/index/status reports them."""
    body = api.get("/api/index/status").json()
    return body["vectors_pending"], body["vectors_total"]


def truth(lib: Library) -> int:
    """Chunks that exist and have no vector in the active space, counted from the two tables."""
    chunks = lib.store.counts().chunks
    vectors = {s.name: s.vectors for s in lib.store.vectors.spaces()}.get(lib.space.name, 0)
    return chunks - vectors


@pytest.fixture
def lib(hash_vault: Path) -> Iterator[Library]:
    library = open_library(hash_vault)
    yield library
    library.close()


@pytest.fixture
def app(lib: Library) -> Iterator[FastAPI]:
    application = create_app(lib)
    yield application
    GatedEmbedder.go.set()
    application.state.sunlib.jobs.close()


# -- a note deleted or replaced while its vectors job runs -------------------------------------------


def test_a_note_deleted_while_its_vectors_job_runs_is_not_embedded(app: FastAPI, lib: Library) -> None:
    api = Api(app)
    GatedEmbedder.hold = True
    r = api.post("/api/notes", json={"path": "big.md", "content": big_note("doomed")})
    assert r.status_code == 201, r.text
    note = r.json()
    assert len(note["chunks"]) == SECTIONS and note["vectors_job"]
    assert GatedEmbedder.reached.wait(10)  # the job listed the 40 chunks and embeds the first batch
    assert vectors_status(api)[0] == SECTIONS == truth(lib)
    assert api.request("DELETE", f"/api/notes/{note['note_id']}").status_code == 204
    assert vectors_status(api)[0] == 0 == truth(lib)  # the chunks are gone: nothing waits, whatever the job holds
    GatedEmbedder.go.set()
    job = wait_job(app, note["vectors_job"])
    assert job.status == "done", job.error
    # the batch in the embedder when the note went is the only work done for it
    assert len(embedded_with("doomed")) == BATCH
    assert job.result["vectors_embedded"] == BATCH and job.result["vectors_skipped"] == SECTIONS - BATCH
    assert job.result["vectors_pending"] == 0
    assert vectors_status(api) == (0, lib.store.counts().chunks)


def test_a_note_replaced_while_its_vectors_job_runs_embeds_its_new_text_only(app: FastAPI, lib: Library) -> None:
    api = Api(app)
    GatedEmbedder.hold = True
    note = api.post("/api/notes", json={"path": "big.md", "content": big_note("before")}).json()
    assert GatedEmbedder.reached.wait(10)
    r = api.request("PATCH", f"/api/notes/{note['note_id']}", json={"content": big_note("after")})
    assert r.status_code == 200, r.text
    assert vectors_status(api)[0] == SECTIONS == truth(lib)  # the new version's chunks, not the old ones
    again = r.json()["vectors_job"]
    GatedEmbedder.go.set()
    for job_id in dict.fromkeys([note["vectors_job"], again]):
        assert wait_job(app, job_id).status == "done"
    assert len(embedded_with("before")) == BATCH  # the old text: only the batch already in the embedder
    assert sorted(embedded_with("after")) == sorted(set(embedded_with("after")))  # each new chunk once
    assert len(embedded_with("after")) == SECTIONS
    assert vectors_status(api)[0] == 0 == truth(lib)


def test_queued_vectors_work_of_a_deleted_note_is_dropped(app: FastAPI, lib: Library) -> None:
    api = Api(app)
    release = hold_lane(app)
    note = api.post("/api/notes", json={"path": "big.md", "content": big_note("queued")}).json()
    assert api.request("DELETE", f"/api/notes/{note['note_id']}").status_code == 204
    assert vectors_status(api)[0] == 0
    release.set()
    job = wait_job(app, note["vectors_job"])
    assert job.status == "done" and job.result["vectors_embedded"] == 0
    assert embedded_with("queued") == []


# -- one queued job per caller, and a limit on the chunks it holds -----------------------------------

TOKENS = {"tok-a": ["a"], "tok-b": ["b"]}


@pytest.fixture
def limited(hash_vault: Path) -> Iterator[FastAPI]:
    library = open_library(hash_vault, tokens=TOKENS, max_queued_chunks=SECTIONS)
    application = create_app(library)
    yield application
    application.state.sunlib.jobs.close()
    library.close()


def test_a_callers_writes_share_one_queued_vectors_job(limited: FastAPI) -> None:
    a, b = Api(limited).bearer("tok-a"), Api(limited).bearer("tok-b")
    release = hold_lane(limited)
    first = a.post("/api/notes", json={"path": "a1.md", "content": big_note("aone", 3)}).json()
    second = a.post("/api/notes", json={"path": "a2.md", "content": big_note("atwo", 5)}).json()
    other = b.post("/api/notes", json={"path": "b1.md", "content": big_note("bone", 2)}).json()
    assert first["vectors_job"] == second["vectors_job"] != other["vectors_job"]
    jobs = limited.state.sunlib.jobs
    assert jobs.queued_units("embed", ("public", "a")) == 8 and jobs.queued_units("embed", ("public", "b")) == 2
    release.set()
    job = wait_job(limited, first["vectors_job"])
    assert job.status == "done" and wait_job(limited, other["vectors_job"]).status == "done"
    assert len(embedded_with("aone")) == 3 and len(embedded_with("atwo")) == 5 and len(embedded_with("bone")) == 2
    assert jobs.queued_units("embed", ("public", "a")) == 0


def test_a_caller_with_too_much_queued_work_is_refused_until_it_is_done(limited: FastAPI, hash_vault: Path) -> None:
    a, b = Api(limited).bearer("tok-a"), Api(limited).bearer("tok-b")
    release = hold_lane(limited)
    note = a.post("/api/notes", json={"path": "big.md", "content": big_note("first")}).json()
    assert note["vectors_job"]
    small = {"path": "small.md", "content": "# Small\n\nOne more line.\n"}
    refused = a.post("/api/notes", json=small)
    assert refused.status_code == 429 and refused.json()["error"] == "too_busy", refused.text
    assert "max_queued_chunks" in refused.json()["message"]
    assert not (hash_vault / "small.md").exists()  # refused before anything was written
    patched = a.request("PATCH", f"/api/notes/{note['note_id']}", json={"content": big_note("second")})
    assert patched.status_code == 429
    assert b.post("/api/notes", json={"path": "theirs.md", "content": big_note("theirs", 3)}).status_code == 201
    # deleting is never refused, and deleted work still counts until the job that holds it is done
    assert a.request("DELETE", f"/api/notes/{note['note_id']}").status_code == 204
    assert a.post("/api/notes", json=small).status_code == 429
    release.set()
    assert wait_job(limited, note["vectors_job"]).status == "done"
    assert embedded_with("first") == []
    again = a.post("/api/notes", json=small)
    assert again.status_code == 201, again.text
    assert wait_job(limited, again.json()["vectors_job"]).status == "done"


def test_the_limit_holds_for_concurrent_writes_of_one_caller(limited: FastAPI) -> None:
    a = Api(limited).bearer("tok-a")
    release = hold_lane(limited)
    statuses: list[int] = []

    def write(i: int) -> None:
        r = a.post("/api/notes", json={"path": f"c{i}.md", "content": big_note(f"c{i}w", SECTIONS // 2)})
        statuses.append(r.status_code)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(statuses) == [201, 201, 429, 429, 429, 429]  # 20 + 20 chunks reach the limit of 40
    assert limited.state.sunlib.jobs.queued_units("embed", ("public", "a")) == SECTIONS
    release.set()
