"""Serving in parallel: frozen settings, ``Library.with_settings``, a connection per thread,
the worker service, thread-safe shared models, and a search that does not wait for a
writer (a real uvicorn server on a free port, the slow chat server of tests/harness/llm_server.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from sunlib import Library
from sunlib.config import Settings
from sunlib.providers import sentence_model
from sunlib.server import create_app
from sunlib.server.errors import ApiError
from sunlib.server.jobs import Job, Jobs
from sunlib.store.numpy_vectors import NumpyVectors
from sunlib.trace.steps import Step
from tests.harness.llm_server import ChatServer
from tests.support.clients import Served
from tests.support.sse import sse

QUESTION = "How are nightly snapshots rotated and checked?"


def step(result: Any, name: str) -> dict[str, Any]:
    return dict(next(s.details for s in result.trace.steps if s.name == name))


def in_thread(fn: Any) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(60)
    return out[0]


# -- settings and with_settings ------------------------------------------------------------------


def test_settings_are_frozen(hash_library: Library) -> None:
    with pytest.raises(ValidationError):
        hash_library.settings.answer.reranker = "none"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        hash_library.settings.index_dir = None  # type: ignore[misc]
    with pytest.raises(AttributeError):
        hash_library.settings = Settings()  # type: ignore[misc]


def test_with_settings_switches_the_reranker_after_first_use(hash_library: Library) -> None:
    before = hash_library.ask(QUESTION, save=False)
    assert step(before, Step.RERANK)["reranker"] == "lexical"

    plain = hash_library.with_settings(answer={"reranker": "none"})
    assert step(plain.ask(QUESTION, save=False), Step.RERANK)["reranker"] == "none"
    # the fusion reranker reads stored vectors: bound once, it reads on each thread's own connection
    fusion = hash_library.with_settings(answer={"reranker": "fusion", "rescore_provider": "hash"})
    fused = in_thread(lambda: fusion.ask(QUESTION, save=False))
    top = step(fused, Step.RERANK)
    assert top["reranker"] == "fusion" and top["top"][0]["second_cosine"] is not None

    # the first library is left as it was, and the parts that did not change are shared
    assert hash_library.settings.answer.reranker == "lexical"
    assert step(hash_library.ask(QUESTION, save=False), Step.RERANK)["reranker"] == "lexical"
    assert plain.embedder is hash_library.embedder and plain.db_path == hash_library.db_path
    assert plain.write_lock is hash_library.write_lock
    assert plain.asker is not hash_library.asker and plain.asker.reranker is None


def test_with_settings_switches_the_dense_engine_after_first_use(hash_library: Library) -> None:
    query = "empty ACL visible to nobody"
    first = hash_library.search(query, mode="dense", limit=5)
    assert not isinstance(hash_library.store.vectors, NumpyVectors)
    numpy = hash_library.with_settings(search={"dense_engine": "numpy"})
    assert isinstance(numpy.store.vectors, NumpyVectors)
    assert not isinstance(hash_library.store.vectors, NumpyVectors)
    second = numpy.search(query, mode="dense", limit=5)
    assert [h.chunk_id for h in second.hits] == [h.chunk_id for h in first.hits]
    # the numpy engine's matrix is one per index, whichever thread reads: no second load
    loads = numpy.store.vectors.cache.loads
    third = in_thread(lambda: numpy.search(query, mode="dense", limit=5))
    assert [h.chunk_id for h in third.hits] == [h.chunk_id for h in first.hits]
    assert numpy.store.vectors.cache.loads == loads


def test_each_thread_reads_on_its_own_connection(hash_library: Library) -> None:
    mine = hash_library.store
    assert hash_library.store is mine and hash_library.stores.connections() == 1
    theirs = in_thread(lambda: (hash_library.store, hash_library.store))
    assert theirs[0] is theirs[1] and theirs[0] is not mine
    assert hash_library.stores.connections() == 2
    # an ended thread's connection is closed when the next thread opens one
    in_thread(lambda: hash_library.store.counts())
    assert hash_library.stores.connections() == 2
    in_thread(lambda: (hash_library.store.counts(), hash_library.release_thread()))  # a worker that ends
    assert hash_library.stores.connections() == 1
    hash_library.close()  # every connection; the library reopens one on its next use
    assert hash_library.stores.connections() == 0
    assert hash_library.store.counts().notes > 0 and hash_library.stores.connections() == 1


# -- the worker service --------------------------------------------------------------------------


def test_jobs_queue_history_and_events_are_bounded() -> None:
    gate = threading.Event()
    jobs = Jobs(queue_size=2, history=3)

    def blocked(job: Job) -> str:
        gate.wait(30)
        return "ok"

    def chatty(job: Job) -> int:
        for i in range(1000):
            jobs.progress(job, "steps", i + 1, 1000)
        return 1000

    running = jobs.submit("rebuild", (), blocked)
    while running.status != "running":
        time.sleep(0.01)
    queued = [jobs.submit("embed", (), chatty), jobs.submit("rebuild", (), chatty)]  # same lane: waits
    with pytest.raises(ApiError) as full:
        jobs.submit("embed", (), chatty)
    assert full.value.status == 503 and full.value.error == "busy"
    other = jobs.submit("rag_benchmark", (), chatty)  # another lane runs meanwhile
    gate.set()
    jobs.close()
    assert [j.status for j in (running, *queued, other)] == ["done"] * 4
    events = queued[0].events_after(0)
    assert len(events) == 500 and events[-1][1]["event"] == "done"
    assert [n for n, _ in events] == list(range(1003 - 499, 1004))  # the latest, in order
    assert queued[0].events_after(events[-2][0]) == events[-1:]
    kept = [j for kind in ("rebuild", "embed", "rag_benchmark") for j in jobs.recent(kind, 100)]
    assert len(kept) == 3 and running not in kept
    with pytest.raises(ApiError) as closed:
        jobs.submit("rebuild", (), chatty)
    assert closed.value.status == 503 and closed.value.error == "unavailable"
    assert jobs.alive() == 0


# -- shared models -------------------------------------------------------------------------------


def test_the_sentence_model_embeds_from_two_threads_at_once() -> None:
    load = sentence_model(Settings())
    assert load is not None
    texts = [f"Snapshot {i} is kept for {i} days. 快照保留{i}天。" for i in range(60)]
    inner = load().inner  # type: ignore[attr-defined]
    alone = {k: inner.embed_batch(texts[k::2], "passage") for k in range(2)}  # one thread, same batches
    out: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(2)

    def work(k: int) -> None:
        barrier.wait()
        out[k] = load().embed_batch(texts[k::2], "passage")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(np.allclose(out[k], alone[k], atol=1e-6) for k in range(2))


# -- a search beside a writing LLM ---------------------------------------------------------------


@pytest.fixture
def chat(chat_server: ChatServer) -> ChatServer:
    """The local OpenAI-compatible test server (conftest's ``chat_server``)."""
    return chat_server


def test_a_search_returns_while_the_writer_is_still_writing(hash_library: Library, chat: ChatServer) -> None:
    lib = hash_library.with_settings(
        answer={
            "writer": "openai",
            "router": "rules",
            "gate_threshold": 0.0,
            "reader_threshold": 0.0,
            "gate_threshold_bm25": 0.0,
            "answerable_threshold": 0.0,
        },
        llm={"base_url": chat.base_url, "model": "slow", "max_retries": 0, "timeout_s": 30},
    )
    chat.writer.reply = "Snapshots are rotated nightly and checked by a restore test. " * 3
    release = threading.Event()
    chat.writer.after_first_delta = release  # the LLM sends one delta, then holds the rest
    asked = threading.Event()
    answers: list[list[tuple[str, Any]]] = []
    with Served(create_app(lib)) as url, httpx.Client(base_url=url, timeout=30) as client:

        def ask() -> None:  # the streamed ask: its writer streams from the LLM
            with httpx.Client(base_url=url, timeout=30) as own:
                answers.append(sse(own.post("/api/ask/stream", json={"question": QUESTION}).text))
            asked.set()

        asker = threading.Thread(target=ask)
        asker.start()
        deadline = time.monotonic() + 20
        while not chat.of_kind("writer"):  # the ask has reached its writer
            assert time.monotonic() < deadline and asker.is_alive(), "the ask never reached the writer"
            time.sleep(0.01)
        r = client.post("/api/search", json={"query": "snapshot rotation", "limit": 3})
        assert r.status_code == 200 and r.json()["results"], r.text
        assert not asked.is_set() and chat.writer.waited_ok is None, "the search waited for the writer"
        release.set()
        asker.join(30)
    assert asked.is_set() and answers[0][-1][0] == "finish", answers
    assert chat.writer.waited_ok is True  # the writer was released by the test, after the search
    assert "".join(d["delta"] for e, d in answers[0] if e == "token") == chat.writer.reply


def test_create_app_applies_the_serving_policy_itself(hash_library: Library) -> None:
    """An app built from Python gets the guard and the engines `sunlib serve` applies."""
    from sunlib.errors import UserError
    from sunlib.server import create_app

    public = hash_library.with_settings(server={"host": "0.0.0.0"})
    with pytest.raises(UserError, match="without auth"):
        create_app(public)
    guarded = hash_library.with_settings(server={"host": "0.0.0.0", "tokens": {"tok": ["public"]}})
    assert create_app(guarded).state.sunlib.library.settings.search.dense_engine == "numpy"
    assert hash_library.with_settings() is hash_library  # nothing changed: the same library
