"""The HTTP API as a client meets it: the real FastAPI app over real index files.

Most tests go through ``httpx.ASGITransport`` (no socket; the client address is
chosen per test, which is how the loopback-only rule is exercised). Client
disconnects need a real socket, so that test runs the app on a uvicorn server on
a free loopback port, with an OpenAI-compatible writer pointed at the scriptable
chat server of tests/harness/llm_server.py. The hash embedder keeps indexing fast; the
session's e5 index is used where real answers and refusals matter.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sunlib import Library
from sunlib.evaluate.qa import load_qa
from sunlib.server import create_app
from sunlib.trace.steps import ASK_STEPS, RETRIEVAL_STEPS, Step
from tests.harness.llm_server import ChatServer
from tests.support.clients import Api, ServedStreams, assert_error, free_port
from tests.support.paths import ROOT
from tests.support.sse import sse

SAMPLE_QA = ROOT / "src" / "sunlib" / "qa" / "sample_vault.jsonl"
ANSWERED = "What is the SUNLIB_HOME environment variable used for?"
REFUSED = "Which port does the sunlib web server listen on?"
TOKENS = {"tok-ops": ["ops"], "tok-team": ["team"]}
OPS = {"Authorization": "Bearer tok-ops"}
TEAM = {"Authorization": "Bearer tok-team"}
RETRIEVAL = (Step.ROUTE, *RETRIEVAL_STEPS, Step.RERANK, Step.SELECT)
ALL_STEPS = ASK_STEPS


# -- helpers ---------------------------------------------------------------------------------


def shape(events: list[tuple[str, Any]]) -> list[str]:
    """Event names with step names spelled out (``step:Writer``) and runs of tokens collapsed to one."""
    names: list[str] = []
    for event, data in events:
        name = f"step:{data['name']}" if event == "step" else event
        if not (name == "token" and names and names[-1] == "token"):
            names.append(name)
    return names


def utf16_slice(text: str, start: int, end: int) -> str:
    return text.encode("utf-16-le")[2 * start : 2 * end].decode("utf-16-le")


@pytest.fixture
def api(hash_library: Library) -> Api:
    return Api(create_app(hash_library))


@pytest.fixture
def open_hash(hash_library: Library) -> Iterator[Callable[..., Library]]:
    """More libraries over the hash-indexed vault, with other settings (same index files)."""
    libs: list[Library] = []

    def make(**sections: Any) -> Library:
        lib = Library.open(hash_library.vault, embedding={"provider": "hash"}, **sections)
        libs.append(lib)
        return lib

    yield make
    for lib in libs:
        lib.close()


@pytest.fixture(scope="module")
def e5_api(e5_library: Library) -> Api:
    return Api(create_app(e5_library))


# -- 1. search ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "steps"),
    [
        ("bm25", [Step.BM25]),
        ("dense", [Step.DENSE]),
        ("hybrid", list(RETRIEVAL_STEPS)),  # the sample vault is bilingual: the cross-language routes run
        (None, list(RETRIEVAL_STEPS)),  # the configured default
    ],
)
def test_search_modes_return_cited_snippets(
    api: Api, hash_library: Library, mode: str | None, steps: list[str]
) -> None:
    body: dict[str, Any] = {"query": "empty ACL public", "limit": 5}
    if mode:
        body["mode"] = mode
    r = api.post("/api/search", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["mode"] == (mode or "hybrid")
    assert data["query"] == "empty ACL public"
    assert [s["name"] for s in data["trace"]["steps"]] == steps
    assert data["run_id"] == data["trace"]["run_id"]
    assert 1 <= len(data["results"]) <= 5
    if mode != "dense":  # the hash embedder's dense ranking means little; BM25 finds the note
        assert data["results"][0]["path"] == "guide/search/filters-and-acl.md"
    for hit in data["results"]:
        assert hit["snippet"].strip("…").strip()
        cit = hit["citation"]
        assert cit["path"] == hit["path"] and cit["chunk_id"] == hit["chunk_id"] and cit["note_id"] == hit["note_id"]
        assert 0 <= cit["start"] < cit["end"] and 1 <= cit["start_line"] <= cit["end_line"]
        span = utf16_slice((hash_library.vault / cit["path"]).read_text(encoding="utf-8"), cit["start"], cit["end"])
        assert hit["snippet"].strip("…")[:40] in span  # the snippet is a window of the cited span
        if mode in ("bm25", "dense"):
            assert set(hit["routes"]) == {mode}
        else:
            assert hit["routes"] and set(hit["routes"]) <= {"bm25", "dense", "crosslang", "translated"}


def test_search_filters_narrow_results(api: Api) -> None:
    def paths(filters: dict[str, Any], query: str = "search index notes") -> list[str]:
        r = api.post("/api/search", json={"query": query, "mode": "bm25", "filters": filters, "limit": 50})
        assert r.status_code == 200, r.text
        return [h["path"] for h in r.json()["results"]]

    everything = paths({})
    assert {p.split("/")[0] for p in everything} >= {"guide", "reference", "getting-started"}
    folder = paths({"folders": ["reference"]})
    assert folder and all(p.startswith("reference/") for p in folder)
    acl = paths({"tags": ["acl"]})
    assert acl and set(acl) == {"guide/search/filters-and-acl.md"}
    both = set(paths({"tags": ["search", "fusion"]}))  # every tag is required
    assert both == {"guide/search/search-modes.md"}
    zh = paths({"metadata": {"language": "zh"}}, "search 检索")
    assert zh and all(p.startswith("zh/") for p in zh)
    doc = set(paths({"metadata": {"document_id": "doc_search_modes"}}))
    assert doc == {"guide/search/search-modes.md"}
    assert paths({"folders": ["no-such-folder"]}) == []
    # no principal but "public" here: the ops runbook is never among the results
    assert not [p for p in paths({}, "rebuild window Sunday backup snapshot") if p.startswith("internal/ops")]


def test_search_paging_is_consistent(api: Api) -> None:
    def ids(limit: int, offset: int) -> list[str]:
        body = {"query": "index search notes", "mode": "bm25", "limit": limit, "offset": offset}
        r = api.post("/api/search", json=body)
        assert r.status_code == 200, r.text
        return [h["chunk_id"] for h in r.json()["results"]]

    whole = ids(8, 0)
    assert len(whole) == 8 and len(set(whole)) == 8
    assert ids(3, 0) + ids(3, 3) + ids(2, 6) == whole
    assert ids(5, 10_000) == []


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"query": 1}, "query"),
        ({"query": ["a"]}, "query"),
        ({"query": "x", "foo": 1}, "foo"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 101}, "limit"),
        ({"query": "x", "limit": "ten"}, "limit"),
        ({"query": "x", "offset": -1}, "offset"),
        ({"query": "x", "mode": "fuzzy"}, "mode"),
        ({"query": "x" * 4001}, "query"),
        ({"query": ""}, "query"),
        ({}, "query"),
        ({"query": "x", "filters": {"bogus": 1}}, "filters.bogus"),
        ({"query": "x", "filters": {"tags": "search"}}, "filters.tags"),
        ({"query": "x", "filters": {"metadata": {"language": ["zh"]}}}, "filters.metadata.language"),
    ],
)
def test_search_rejects_bad_bodies(api: Api, body: dict[str, Any], where: str) -> None:
    err = assert_error(api.post("/api/search", json=body), 422, "invalid_request")
    assert err["message"].startswith(f"{where}: "), err


def test_search_bad_json_and_blank_query(api: Api) -> None:
    err = assert_error(
        api.post("/api/search", content=b'{"query": ', headers={"content-type": "application/json"}),
        422,
        "invalid_request",
    )
    assert "JSON" in err["message"]
    assert_error(
        api.post("/api/search", content=b"[1, 2]", headers={"content-type": "application/json"}), 422, "invalid_request"
    )
    err = assert_error(api.post("/api/search", json={"query": "   "}), 400, "bad_request")
    assert err["message"] == "the query is empty"
    err = assert_error(api.post("/api/ask", json={"question": " \n "}), 400, "bad_request")
    assert err["message"] == "the question is empty"
    assert_error(api.post("/api/ask", json={"question": "x", "mode": "bm25"}), 422, "invalid_request")


# -- 2. ask ------------------------------------------------------------------------------------

FRAME_KEYS = {"question", "answer", "evidence", "citations", "refused", "refusal_reason", "confidence", "route"}


def test_ask_answers_with_citations(e5_api: Api, e5_library: Library) -> None:
    r = e5_api.post("/api/ask", json={"question": ANSWERED})
    assert r.status_code == 200, r.text
    data = r.json()
    assert FRAME_KEYS | {"run_id", "trace"} <= set(data)
    assert data["question"] == ANSWERED and data["route"] == "rag"
    assert data["refused"] is False and data["refusal_reason"] is None
    assert "SUNLIB_HOME" in data["answer"]
    assert 0.0 < data["confidence"] <= 1.0
    evidence = {e["chunk_id"]: e for e in data["evidence"]}
    assert data["citations"] and all(c["chunk_id"] in evidence for c in data["citations"])
    assert any("SUNLIB_HOME" in evidence[c["chunk_id"]]["text"] for c in data["citations"])
    for c in data["citations"]:  # each citation points at real text of its note
        note = (e5_library.vault / c["path"]).read_text(encoding="utf-8")
        assert utf16_slice(note, c["start"], c["end"]).strip()
    assert data["run_id"].startswith("run_") and data["trace"]["run_id"] == data["run_id"]
    assert [s["name"] for s in data["trace"]["steps"]] == list(ALL_STEPS)
    saved = e5_api.get(f"/api/runs/{data['run_id']}")
    assert saved.status_code == 200, saved.text
    assert saved.json()["question"] == ANSWERED and saved.json()["frame"]["answer"] == data["answer"]


def test_ask_refuses_with_reason(e5_api: Api) -> None:
    r = e5_api.post("/api/ask", json={"question": REFUSED})
    assert r.status_code == 200, r.text
    data = r.json()
    assert FRAME_KEYS | {"run_id", "trace"} <= set(data)
    assert data["refused"] is True
    assert "gate score" in data["refusal_reason"]
    assert data["answer"] == f"I can't answer this from your notes: {data['refusal_reason']}."
    assert data["citations"] == [] and data["evidence"] == []
    steps = {s["name"]: s["status"] for s in data["trace"]["steps"]}
    assert list(steps) == list(ALL_STEPS)
    assert steps[Step.SELECT] == "warning"
    assert [steps[n] for n in (Step.CONTEXT, Step.WRITE, Step.VERIFY)] == ["skipped"] * 3


# -- 3. ask/stream -----------------------------------------------------------------------------


def test_stream_answered_event_sequence(e5_api: Api) -> None:
    r = e5_api.post("/api/ask/stream", json={"question": ANSWERED})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.text)
    assert shape(events) == [
        *(f"step:{n}" for n in (*RETRIEVAL, Step.CONTEXT)),
        "context_built",
        f"step:{Step.JUDGE}",
        "token",
        *(f"step:{n}" for n in (Step.WRITE, Step.VERIFY, Step.SUMMARY)),
        "citations",
        "finish",
    ]
    steps = [d for e, d in events if e == "step"]
    judge = next(s for s in steps if s["name"] == Step.JUDGE)  # the offline writer: no judge by default
    assert (judge["status"], judge["output_summary"]) == ("skipped", "judge auto: the writer is no LLM")
    assert all(s["status"] in ("ok", "warning") for s in steps if s is not judge)
    assert all(set(s) >= {"name", "status", "latency_ms", "input_summary", "output_summary", "details"} for s in steps)
    context = next(d for e, d in events if e == "context_built")
    builder = next(s for s in steps if s["name"] == Step.CONTEXT)
    assert context["chunks"] and context["chunks"] == [s["chunk_id"] for s in builder["details"]["sources"]]
    assert context["chars"] > 0 and context["token_estimate"] > 0
    tokens = "".join(d["delta"] for e, d in events if e == "token")
    finish = events[-1][1]
    assert finish["refused"] is False and finish["refusal_reason"] is None and finish["route"] == "rag"
    assert tokens == finish["answer"] and "SUNLIB_HOME" in tokens
    cited = events[-2][1]
    assert cited["citations"] and {c["chunk_id"] for c in cited["citations"]} <= set(context["chunks"])
    run = e5_api.get(f"/api/runs/{finish['run_id']}")
    assert run.status_code == 200, run.text
    saved = run.json()
    assert saved["question"] == ANSWERED and saved["refused"] is False
    assert [s["name"] for s in saved["trace"]["steps"]] == [s["name"] for s in steps]
    assert saved["frame"]["answer"] == finish["answer"]


def test_stream_refused_event_sequence(e5_api: Api) -> None:
    events = sse(e5_api.post("/api/ask/stream", json={"question": REFUSED}).text)
    assert shape(events) == [*(f"step:{n}" for n in ALL_STEPS), "citations", "finish"]
    status = {d["name"]: d["status"] for e, d in events if e == "step"}
    assert [status[n] for n in (Step.CONTEXT, Step.WRITE, Step.VERIFY)] == ["skipped"] * 3
    assert events[-2][1]["citations"] == [] and events[-2][1]["evidence"] == []
    finish = events[-1][1]
    assert finish["refused"] is True and "gate score" in finish["refusal_reason"]
    assert finish["refusals"][0]["code"] == "low_gate"
    assert "; ".join(r["message"] for r in finish["refusals"]) == finish["refusal_reason"]
    run = e5_api.get(f"/api/runs/{finish['run_id']}").json()
    assert run["refused"] is True and run["frame"]["refusal_reason"] == finish["refusal_reason"]


def test_stream_writer_failure_finishes_refused(open_hash: Callable[..., Library]) -> None:
    closed = free_port()  # nothing listens there: every LLM call is refused at once
    lib = open_hash(
        answer={
            "writer": "openai",
            "gate_threshold": 0.0,
            "reader_threshold": 0.0,
            "gate_threshold_bm25": 0.0,
            "answerable_threshold": 0.0,
        },
        llm={"base_url": f"http://127.0.0.1:{closed}/v1", "model": "m", "max_retries": 0, "timeout_s": 1},
    )
    api = Api(create_app(lib))
    question = "How do I rebuild the index?"
    events = sse(api.post("/api/ask/stream", json={"question": question}).text)
    # the LLM router fails too and falls back to the rules (a warning), so does the judge (no verdict,
    # a warning), then the writer fails
    assert shape(events) == [
        *(f"step:{n}" for n in (*RETRIEVAL, Step.CONTEXT)),
        "context_built",
        *(f"step:{n}" for n in (Step.JUDGE, Step.WRITE, Step.VERIFY, Step.SUMMARY)),
        "citations",
        "finish",
    ]
    status = {d["name"]: (d["status"], d["output_summary"]) for e, d in events if e == "step"}
    assert status[Step.ROUTE][0] == "warning"
    assert status[Step.JUDGE][0] == "warning" and status[Step.JUDGE][1].startswith("no verdict (the judge's call")
    assert status[Step.WRITE][0] == "error" and status[Step.WRITE][1].startswith("failed: ")
    assert status[Step.VERIFY] == ("skipped", "the writer failed")
    finish = events[-1][1]
    assert finish["refused"] is True
    assert finish["refusal_reason"].startswith("the writer failed (LLM request failed after 1 attempt")
    assert [r["code"] for r in finish["refusals"]] == ["writer_failed"]
    assert finish["refusals"][0]["message"] == finish["refusal_reason"]
    assert events[-2][1]["citations"] == []
    assert "Traceback" not in json.dumps(events)
    run = api.get(f"/api/runs/{finish['run_id']}").json()
    assert run["refused"] is True and run["question"] == question


def test_stream_blank_question_is_an_error_event(api: Api) -> None:
    r = api.post("/api/ask/stream", json={"question": "   "})
    assert r.status_code == 200
    assert sse(r.text) == [("error", {"error": "bad_request", "message": "the question is empty"})]
    assert api.get("/api/runs").json()["runs"] == []  # nothing was saved
    assert_error(api.post("/api/ask/stream", json={"question": ""}), 422, "invalid_request")


# -- 4. client disconnect ----------------------------------------------------------------------


@pytest.fixture
def chat(chat_server: ChatServer) -> ChatServer:
    """The local OpenAI-compatible test server (conftest's ``chat_server``)."""
    return chat_server


def test_client_disconnect_stops_the_run(open_hash: Callable[..., Library], chat: ChatServer) -> None:
    lib = open_hash(
        answer={
            "writer": "openai",
            "router": "rules",
            "gate_threshold": 0.0,
            "reader_threshold": 0.0,
            "gate_threshold_bm25": 0.0,
            "answerable_threshold": 0.0,
        },
        llm={"base_url": chat.base_url, "model": "slow", "max_retries": 0, "timeout_s": 10},
    )
    app = create_app(lib)
    chat.writer.reply = "The index is rebuilt by running sunlib index again on the vault. " * 4
    with ServedStreams(app) as served, httpx.Client(base_url=served.url, timeout=20) as client:
        # control: read to the end; the run is saved and the tokens are the LLM's deltas
        chat.writer.after_first_delta = None
        r = client.post("/api/ask/stream", json={"question": "How is the index rebuilt? (complete)"})
        events = sse(r.text)
        assert shape(events)[-3:] == [f"step:{Step.SUMMARY}", "citations", "finish"], shape(events)
        assert "".join(d["delta"] for e, d in events if e == "token") == chat.writer.reply
        assert client.get(f"/api/runs/{events[-1][1]['run_id']}").status_code == 200

        # now the LLM holds the rest of its answer after one delta; the client reads one token and leaves
        release = threading.Event()
        chat.writer.after_first_delta = release
        served.finished.clear()
        question = "How is the index rebuilt? (abandoned)"
        seen: list[str] = []
        with client.stream("POST", "/api/ask/stream", json={"question": question}) as stream:
            current = ""
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    current = line[6:].strip()
                    seen.append(current)
                if current == "token" and line.startswith("data:"):
                    break
        assert seen[-1] == "token" and "finish" not in seen
        assert served.finished.wait(10), "the server did not end the response after the client left"
        release.set()  # the LLM goes on streaming: the next delta meets the cancelled run
        assert app.state.sunlib.asks.wait_idle(10), "the run is still going"
        assert chat.writer.waited_ok is True
        assert len(chat.bodies("writer")) == 2  # one writer call per question: no retry after the cancel
        listed = [run["question"] for run in client.get("/api/runs", params={"limit": 200}).json()["runs"]]
        assert "How is the index rebuilt? (complete)" in listed
        assert question not in listed  # the abandoned run was stopped before its summary: never saved


# -- 5. runs and tokens ------------------------------------------------------------------------


def test_runs_are_readable_only_by_their_principals(open_hash: Callable[..., Library]) -> None:
    api = Api(create_app(open_hash(server={"tokens": TOKENS})))
    ops, team = api.as_(OPS), api.as_(TEAM)
    for who in (api, api.as_({"Authorization": "Bearer nope"}), api.as_({"Authorization": "tok-ops"})):
        assert_error(who.get("/api/runs"), 401, "unauthorized")
        assert_error(who.post("/api/ask", json={"question": "x"}), 401, "unauthorized")
        assert_error(who.post("/api/ask/stream", json={"question": "x"}), 401, "unauthorized")
        assert_error(who.post("/api/search", json={"query": "x"}), 401, "unauthorized")

    # the tokens' principals reach retrieval: only ops sees its runbook; team sees the team draft
    def top(who: Api) -> list[str]:
        r = who.post("/api/search", json={"query": "weekly rebuild window backup roadmap", "mode": "bm25"})
        return [h["path"] for h in r.json()["results"]]

    assert "internal/ops-runbook.md" in top(ops) and "internal/roadmap-draft.md" in top(ops)
    assert "internal/ops-runbook.md" not in top(team) and "internal/roadmap-draft.md" in top(team)

    ops_run = ops.post("/api/ask", json={"question": "When is the weekly rebuild window?"}).json()["run_id"]
    team_run = team.post("/api/ask", json={"question": "What is on the roadmap draft?"}).json()["run_id"]
    ops_list = [r["run_id"] for r in ops.get("/api/runs").json()["runs"]]
    team_list = [r["run_id"] for r in team.get("/api/runs").json()["runs"]]
    assert ops_run in ops_list and team_run not in ops_list
    assert team_run in team_list and ops_run not in team_list
    assert ops.get(f"/api/runs/{ops_run}").json()["run_id"] == ops_run
    assert_error(team.get(f"/api/runs/{ops_run}"), 404, "not_found")
    assert_error(ops.get(f"/api/runs/{team_run}"), 404, "not_found")
    assert_error(ops.get("/api/runs/run_0000000000000000"), 404, "not_found")
    assert_error(ops.get("/api/runs", params={"limit": 0}), 422, "invalid_request")
    # tokens work from any address: the loopback rule is for servers without tokens
    assert api.as_(OPS, host="10.0.0.5").get("/api/runs").status_code == 200
    assert_error(api.as_({}, host="10.0.0.5").get("/api/runs"), 401, "unauthorized")


# -- 6. loopback only without tokens -----------------------------------------------------------


@pytest.mark.parametrize("host", ["10.0.0.5", "192.168.1.20", "2001:db8::1", "testclient", "testserver"])
def test_no_tokens_means_loopback_only(api: Api, host: str) -> None:
    remote = Api(api.app, host)
    for method, url, body in [
        ("GET", "/api/index/status", None),
        ("GET", "/api/runs", None),
        ("POST", "/api/search", {"query": "index"}),
        ("POST", "/api/ask", {"question": "index"}),
        ("POST", "/api/ask/stream", {"question": "index"}),
        ("POST", "/api/index/rebuild", None),
        ("POST", "/api/benchmarks/rag/runs", {"qa_set": "sample_vault", "limit": 1}),
    ]:
        assert_error(remote.request(method, url, json=body), 403, "forbidden")
    assert remote.get("/api/runs", headers={"Authorization": "Bearer anything"}).status_code == 403
    # a loopback client naming a foreign Host (a test framework's name included) is refused too
    for name in (host, "testclient", "testserver", "localhost.evil.example"):
        r = Api(api.app).get("/api/runs", headers={"Host": name})
        assert_error(r, 403, "forbidden")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1"])
def test_loopback_clients_are_served(api: Api, host: str) -> None:
    local = Api(api.app, host)
    assert local.get("/api/index/status").status_code == 200
    assert local.post("/api/search", json={"query": "index"}).status_code == 200


# -- 7. index status and rebuild jobs ----------------------------------------------------------


def poll(api: Api, url: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = api.get(url)
        assert r.status_code == 200, r.text
        job = r.json()
        if job["status"] in ("done", "failed"):
            return job
        assert time.monotonic() < deadline, f"job still {job['status']} after {timeout}s: {job}"
        time.sleep(0.1)


def test_index_status_and_rebuild_job(api: Api, hash_library: Library) -> None:
    status = api.get("/api/index/status").json()
    assert status["vault"] == str(hash_library.vault)
    assert status["counts"]["notes"] == 21 and status["vectors_pending"] == 0
    assert status["active_space"].startswith("hash:") and status["jobs"] == []

    (hash_library.vault / "new-note.md").write_text(
        "# Zebra crossings\n\nThe zebrafinch protocol names every zebra crossing in town.\n", encoding="utf-8"
    )
    r = api.post("/api/index/rebuild")
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["job_id"].startswith("job_") and started["kind"] == "rebuild"
    assert started["status"] in ("queued", "running", "done")
    assert started["url"] == f"/api/index/jobs/{started['job_id']}"
    job = poll(api, started["url"])
    assert job["status"] == "done" and job["error"] is None, job
    assert job["finished_at"] >= job["created_at"]
    progress = job["progress"]
    assert progress["phase"] == "vectors" and progress["done"] == progress["total"] >= 1
    result = job["result"]
    assert result["added"] == ["new-note.md"] and result["unchanged"] == 21 and result["failed"] == []
    assert result["vectors_embedded"] >= 1 and result["vectors_pending"] == 0

    after = api.get("/api/index/status").json()
    assert after["counts"]["notes"] == 22 and after["vectors_pending"] == 0
    assert [j["job_id"] for j in after["jobs"]] == [started["job_id"]]
    hits = api.post("/api/search", json={"query": "zebrafinch", "mode": "bm25"}).json()["results"]
    assert [h["path"] for h in hits] == ["new-note.md"]  # the request connection sees the new note

    again = poll(api, api.post("/api/index/rebuild").json()["url"])
    assert again["result"]["added"] == [] and again["result"]["unchanged"] == 22
    assert_error(api.get("/api/index/jobs/job_doesnotexist"), 404, "not_found")


def test_rebuild_jobs_belong_to_their_principals(open_hash: Callable[..., Library]) -> None:
    api = Api(create_app(open_hash(server={"tokens": TOKENS})))
    ops, team = api.as_(OPS), api.as_(TEAM)
    started = ops.post("/api/index/rebuild").json()
    url = f"/api/index/jobs/{started['job_id']}"
    assert poll(ops, url)["status"] == "done"
    assert_error(team.get(url), 404, "not_found")
    assert_error(api.get(url), 401, "unauthorized")
    # a rebuild job is not a benchmark run, nor the other way round
    assert_error(ops.get(f"/api/benchmarks/rag/runs/{started['job_id']}"), 404, "not_found")


# -- 8. RAG benchmark runs ---------------------------------------------------------------------


def test_rag_benchmark_run_streams_progress_and_report(api: Api) -> None:
    r = api.post("/api/benchmarks/rag/runs", json={"qa_set": "sample_vault", "limit": 5})
    assert r.status_code == 202, r.text
    queued = r.json()
    run_id = queued["run_id"]
    assert run_id.startswith("bench_") and queued["job_id"] == run_id and queued["kind"] == "rag_benchmark"
    assert queued["events"] == f"/api/benchmarks/rag/runs/{run_id}/events"

    stream = api.get(queued["events"])
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    events = sse(stream.text)
    assert [e for e, _ in events] == ["queued", "running", *["progress"] * 5, "done"]
    assert [(d["progress"]["done"], d["progress"]["total"]) for e, d in events if e == "progress"] == [
        (i, 5) for i in range(1, 6)
    ]
    assert all(d["job_id"] == run_id for _, d in events)
    report = events[-1][1]["report"]
    assert report["total_cases"] == 5 and report["successful_cases"] == 5
    assert report["failed_cases"] == 0 and report["failure_rate"] == 0.0
    assert [c["id"] for c in report["cases"]] == [c.id for c in load_qa(SAMPLE_QA)[:5]]
    assert all({"question", "refused", "answer", "latency_ms"} <= set(c) for c in report["cases"])
    assert report["metrics"]["questions"] == 5

    got = api.get(f"/api/benchmarks/rag/runs/{run_id}")
    assert got.status_code == 200
    assert got.json()["status"] == "done" and got.json()["report"] == report
    saved = {r["run_id"] for r in api.get("/api/runs").json()["runs"]}  # each question's run chain, for the report
    assert saved == {c["run_id"] for c in report["cases"]} and len(saved) == 5
    assert_error(api.get("/api/benchmarks/rag/runs/bench_nope"), 404, "not_found")
    assert_error(api.get("/api/benchmarks/rag/runs/bench_nope/events"), 404, "not_found")


def test_rag_benchmark_bad_qa_sets(api: Api, tmp_path: Path) -> None:
    err = assert_error(api.post("/api/benchmarks/rag/runs", json={"qa_set": "no-such-set"}), 400, "bad_request")
    assert "no-such-set" in err["message"]
    vault = api.app.state.sunlib.library.vault
    good = {"id": "q1", "type": "fact", "question": "How do I rebuild?", "gold_files": ["x.md"]}
    outside = tmp_path / "elsewhere.jsonl"  # a QA file outside the vault is never read
    outside.write_text(json.dumps(good) + "\n", encoding="utf-8")
    assert_error(api.post("/api/benchmarks/rag/runs", json={"qa_set": str(outside)}), 400, "bad_request")
    assert_error(api.post("/api/benchmarks/rag/runs", json={"qa_set": "../elsewhere.jsonl"}), 400, "bad_request")
    bad = vault / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n{not json\n", encoding="utf-8")
    err = assert_error(api.post("/api/benchmarks/rag/runs", json={"qa_set": "bad.jsonl"}), 400, "bad_dataset")
    assert ":2: not JSON" in err["message"]
    # a file that is no text, or nested past Python's stack, is a 400, not a 500
    (vault / "latin1.jsonl").write_bytes(b'{"id": "q\xe9"}\n')
    err = assert_error(api.post("/api/benchmarks/rag/runs", json={"qa_set": "latin1.jsonl"}), 400, "bad_dataset")
    assert "not UTF-8" in err["message"]
    (vault / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    assert_error(api.post("/api/benchmarks/rag/runs", json={"qa_set": "deep.jsonl"}), 400, "bad_dataset")
    (vault / ".obsidian").mkdir(exist_ok=True)
    (vault / ".obsidian" / "hidden.jsonl").write_text(json.dumps(good) + "\n", encoding="utf-8")
    err = assert_error(
        api.post("/api/benchmarks/rag/runs", json={"qa_set": ".obsidian/hidden.jsonl"}), 400, "bad_request"
    )
    assert "How do I rebuild" not in err["message"]
    assert_error(
        api.post("/api/benchmarks/rag/runs", json={"qa_set": "sample_vault", "limit": 0}), 422, "invalid_request"
    )
    assert api.get("/api/index/status").status_code == 200  # nothing was queued or broken


def test_vault_qa_sets_are_for_admins_only(hash_library: Library) -> None:
    """A QA file in the vault has no ACL of its own (its questions may quote hidden
    notes), so a caller who is no admin neither sees it listed nor may run it: it looks unknown."""
    vault = hash_library.vault
    (vault / "internal" / "ops-qa.jsonl").write_text(
        json.dumps({"id": "q1", "type": "fact", "question": "Secret ops question?", "gold_files": ["x.md"]}) + "\n",
        encoding="utf-8",
    )
    lib = hash_library.with_settings(
        server={"tokens": {"tok-pub": ["public"], "tok-admin": ["admin"]}, "admin_principals": ["admin"]}
    )
    api = Api(create_app(lib))
    pub, admin = {"Authorization": "Bearer tok-pub"}, {"Authorization": "Bearer tok-admin"}
    assert "internal/ops-qa.jsonl" not in api.get("/api/evals/qa-sets", headers=pub).json()["qa_sets"]
    assert "internal/ops-qa.jsonl" in api.get("/api/evals/qa-sets", headers=admin).json()["qa_sets"]
    r = api.post("/api/benchmarks/rag/runs", json={"qa_set": "internal/ops-qa.jsonl"}, headers=pub)
    unknown = api.post("/api/benchmarks/rag/runs", json={"qa_set": "internal/no-such.jsonl"}, headers=pub)
    assert r.status_code == unknown.status_code == 400
    assert r.json()["message"].replace("ops-qa", "X") == unknown.json()["message"].replace("no-such", "X")
    assert "Secret" not in r.text


# -- 9. errors, body limit, CORS ---------------------------------------------------------------


def test_unknown_routes_and_methods_are_json(api: Api) -> None:
    assert_error(api.get("/api/nope"), 404, "not_found")
    assert_error(api.get("/nope/../etc/passwd"), 404, "not_found")
    assert_error(api.get("/api/search"), 405, "method_not_allowed")
    assert_error(api.request("DELETE", "/api/runs"), 405, "method_not_allowed")
    assert_error(api.post("/api/index/status"), 405, "method_not_allowed")


def test_body_over_the_limit_is_413(open_hash: Callable[..., Library]) -> None:
    api = Api(create_app(open_hash(server={"max_body_bytes": 2048})))
    small = api.post("/api/search", json={"query": "index " * 300})  # ~1.8 kB
    assert small.status_code == 200, small.text
    big = {"query": "index " * 400}  # ~2.4 kB: under the query limit, over the body limit
    err = assert_error(api.post("/api/search", json=big), 413, "too_large")
    assert "2048" in err["message"]
    assert_error(api.post("/api/ask", json={"question": "x", "filters": {"tags": ["t" * 40] * 50}}), 413, "too_large")
    lying = api.post(
        "/api/search", content=b"{}", headers={"content-length": "abc", "content-type": "application/json"}
    )
    assert_error(lying, 413, "too_large")


def test_chunked_body_over_the_limit_is_413(open_hash: Callable[..., Library]) -> None:
    api = Api(create_app(open_hash(server={"max_body_bytes": 2048})))
    payload = json.dumps({"query": "index " * 400}).encode()

    async def chunks() -> Any:
        for i in range(0, len(payload), 500):
            yield payload[i : i + 500]

    r = api.post("/api/search", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, 413, "too_large")


def test_unindexed_vault_is_not_an_internal_error(vault: Path) -> None:
    lib = Library.open(vault, embedding={"provider": "hash"})  # what `sunlib serve --no-index` serves
    try:
        api = Api(create_app(lib))
        bm25 = api.post("/api/search", json={"query": "index", "mode": "bm25"})
        assert bm25.status_code == 200 and bm25.json()["results"] == []
        for r in (
            api.post("/api/search", json={"query": "index", "mode": "dense"}),
            api.post("/api/search", json={"query": "index", "mode": "hybrid"}),
            api.post("/api/ask", json={"question": "How do I rebuild the index?"}),
        ):
            assert r.status_code in (200, 503), r.text
            if r.status_code == 503:
                assert_error(r, 503, "index_error")
    finally:
        lib.close()


def test_cors_is_closed_by_default(api: Api) -> None:
    preflight = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    r = api.request("OPTIONS", "/api/search", headers=preflight)
    assert "access-control-allow-origin" not in r.headers
    assert_error(r, 405, "method_not_allowed")
    # a page on another site cannot make the browser ask, search or write for it (CSRF)
    r = api.post("/api/search", json={"query": "index"}, headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    assert_error(r, 403, "forbidden")
    assert_error(api.post("/api/index/rebuild", headers={"Origin": "http://evil.example"}), 403, "forbidden")
    same = api.post("/api/search", json={"query": "index"}, headers={"Origin": "http://127.0.0.1"})
    assert same.status_code == 200  # the UI's own origin
    # DNS rebinding: without tokens only a loopback Host is served
    assert_error(api.get("/api/runs", headers={"Host": "evil.example:8765"}), 403, "forbidden")


def test_cors_opens_for_configured_origins(open_hash: Callable[..., Library]) -> None:
    api = Api(create_app(open_hash(server={"cors_origins": ["http://localhost:5173"]})))
    ok = {"Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST"}
    r = api.request("OPTIONS", "/api/search", headers={**ok, "Access-Control-Request-Headers": "content-type"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "POST" in r.headers["access-control-allow-methods"]
    r = api.post("/api/search", json={"query": "index"}, headers={"Origin": "http://localhost:5173"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:5173"
    other = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    r = api.request("OPTIONS", "/api/search", headers=other)
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    r = api.post("/api/search", json={"query": "index"}, headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


# -- 10. OpenAPI -------------------------------------------------------------------------------


def test_openapi_lists_every_api_path(api: Api) -> None:
    r = api.get("/openapi.json")
    assert r.status_code == 200
    spec = r.json()
    assert spec["info"]["title"] == "sunlib"
    paths = spec["paths"]
    expected = {
        "/api/search": {"post"},
        "/api/ask": {"post"},
        "/api/ask/stream": {"post"},
        "/api/runs": {"get"},
        "/api/runs/{run_id}": {"get"},
        "/api/index/status": {"get"},
        "/api/index/rebuild": {"post"},
        "/api/index/jobs/{job_id}": {"get"},
        "/api/benchmarks/rag/runs": {"post"},
        "/api/benchmarks/rag/runs/{run_id}": {"get"},
        "/api/benchmarks/rag/runs/{run_id}/events": {"get"},
    }
    for path, methods in expected.items():
        assert path in paths, f"{path} missing from OpenAPI"
        assert methods <= set(paths[path]), (path, set(paths[path]))
    assert "SearchBody" in spec["components"]["schemas"] and "AskBody" in spec["components"]["schemas"]
    docs = api.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
