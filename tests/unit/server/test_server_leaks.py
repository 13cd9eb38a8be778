"""What job reports, the index status and error messages tell a
caller who may not see everything, and the keep-alive connection after a 500.

Each test is the recipe of one leak, against the real app
over the hash-indexed sample vault; the keep-alive test runs a real uvicorn server.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.server import create_app
from tests.support.clients import Api, ServedStreams, assert_error
from tests.support.sse import sse

TOKENS = {"tok-team": ["team"], "tok-ops": ["ops"], "tok-hr": ["hr"], "tok-admin": ["ops", "hr", "team"]}
ADMINS = ["admin"]
TOKENS_WITH_ADMIN = {**TOKENS, "tok-root": ["admin"]}


@pytest.fixture
def open_lib(hash_library: Library) -> Iterator[Callable[..., Library]]:
    libs: list[Library] = []

    def make(**sections: Any) -> Library:
        lib = Library.open(hash_library.vault, embedding={"provider": "hash"}, **sections)
        libs.append(lib)
        return lib

    yield make
    for lib in libs:
        lib.close()


def poll(api: Api, url: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = api.get(url)
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("done", "failed"):
            return dict(r.json())
        assert time.monotonic() < deadline, r.text
        time.sleep(0.05)


def note(acl: str, body: str) -> str:
    return f"---\nacl: {acl}\n---\n# {body}\n\n{body} text for the rebuild.\n"


# -- rebuild job reports ------------------------------------------------------------------


def test_a_rebuild_report_names_only_notes_the_reader_may_see(open_lib: Callable[..., Library]) -> None:
    lib = open_lib(server={"tokens": TOKENS_WITH_ADMIN, "admin_principals": ADMINS})
    vault = lib.vault
    api = Api(create_app(lib))
    team, root = api.bearer("tok-team"), api.bearer("tok-root")
    (vault / "hr").mkdir()
    (vault / "hr" / "salaries.md").write_text(note("[hr]", "Salaries"), encoding="utf-8")
    (vault / "team-plan.md").write_text(note("[team]", "Team plan"), encoding="utf-8")
    runbook = vault / "internal" / "ops-runbook.md"
    runbook.write_text(runbook.read_text(encoding="utf-8") + "\nA new ops line.\n", encoding="utf-8")
    (vault / "internal" / "scratch.md").unlink()  # acl: [] -- a note nobody may see
    (vault / "ops-broken.md").write_text("---\nacl: [ops\n  secret: : :\n---\n# Broken\n", encoding="utf-8")

    job = poll(team, team.post("/api/index/rebuild").json()["url"])
    assert job["status"] == "done", job
    result = job["result"]
    assert result["added"] == ["team-plan.md"] and result["changed"] == [] and result["deleted"] == []
    assert result["failed"] == [] and result["moved"] == []
    assert job["progress"]["done"] is None and job["progress"]["total"] is None
    assert all(result[k] is None for k in ("vectors_embedded", "vectors_pending", "text_seconds"))
    visible = team.get("/api/notes", params={"limit": 200}).json()["total"]
    assert result["unchanged"] == visible - 1
    assert result["chunks_written"] == len(team.get(f"/api/notes/{_note_id(team, 'team-plan.md')}").json()["chunks"])
    text = json.dumps(job)
    for hidden in ("hr/salaries.md", "ops-runbook", "scratch", "ops-broken", "secret"):
        assert hidden not in text, hidden

    # the admin reads the same job as recorded
    full = poll(root, f"/api/index/jobs/{job['job_id']}")["result"]
    assert sorted(full["added"]) == ["hr/salaries.md", "team-plan.md"]
    assert full["changed"] == ["internal/ops-runbook.md"] and full["deleted"] == ["internal/scratch.md"]
    assert [p for p, _ in full["failed"]] == ["ops-broken.md"]


def _note_id(api: Api, path: str) -> str:
    notes = api.get("/api/notes", params={"limit": 200}).json()["notes"]
    return str(next(n["note_id"] for n in notes if n["path"] == path))


def test_a_failed_job_tells_a_non_admin_its_kind_only(open_lib: Callable[..., Library], tmp_path: Path) -> None:
    lib = open_lib(server={"tokens": TOKENS_WITH_ADMIN, "admin_principals": ADMINS})
    app = create_app(lib)
    jobs = app.state.sunlib.jobs

    def work(job: Any) -> None:
        raise OSError(f"cannot write {lib.db_path} (hidden/secret.md)")

    job = jobs.submit("rebuild", ("public", "team"), work)
    team, root = Api(app).bearer("tok-team"), Api(app).bearer("tok-root")
    seen = poll(team, f"/api/index/jobs/{job.job_id}")
    assert seen["status"] == "failed" and "OSError" in seen["error"]
    assert "secret" not in seen["error"] and str(lib.db_path) not in seen["error"]
    admin = poll(root, f"/api/index/jobs/{job.job_id}")["error"]
    assert "hidden/secret.md" in admin and "<index>/sunlib.db" in admin and str(lib.index_dir) not in admin


# -- index status -------------------------------------------------------------------------


def test_index_status_counts_what_the_caller_may_see(open_lib: Callable[..., Library]) -> None:
    lib = open_lib(server={"tokens": TOKENS_WITH_ADMIN, "admin_principals": ADMINS})
    api = Api(create_app(lib))
    ops, team, root = api.bearer("tok-ops"), api.bearer("tok-team"), api.bearer("tok-root")
    ops_job = poll(ops, ops.post("/api/index/rebuild").json()["url"])

    for who in (ops, team, api.bearer("tok-hr")):
        status = who.get("/api/index/status").json()
        assert status["vault"] is None and status["index"] is None, status
        notes = who.get("/api/notes", params={"limit": 200}).json()["total"]
        assert status["counts"] == {"notes": notes, "chunks": status["vectors_total"] + status["vectors_pending"]}
        assert str(lib.vault) not in json.dumps(status)
        # embedding progress counts the visible chunks too; the pace and ETA (of every chunk) are withheld
        assert status["embedding"] and all(
            e["total"] == status["counts"]["chunks"] and e["rate"] is None and e["eta_s"] is None
            for e in status["embedding"]
        )
    assert api.bearer("tok-hr").get("/api/index/status").json()["counts"]["notes"] < lib.store.counts().notes
    assert [j["job_id"] for j in ops.get("/api/index/status").json()["jobs"]] == [ops_job["job_id"]]
    assert team.get("/api/index/status").json()["jobs"] == []  # another principal's rebuild

    full = root.get("/api/index/status").json()
    assert full["vault"] == str(lib.vault) and full["index"] == str(lib.db_path)
    assert full["counts"]["notes"] == lib.store.counts().notes
    assert [j["job_id"] for j in full["jobs"]] == [ops_job["job_id"]]
    assert poll(root, ops_job and f"/api/index/jobs/{ops_job['job_id']}")["result"]["unchanged"] >= 1


def test_a_hidden_write_does_not_move_a_public_callers_status(open_lib: Callable[..., Library]) -> None:
    lib = open_lib(server={"tokens": TOKENS})
    api = Api(create_app(lib))
    public, ops = api.bearer("tok-team"), api.bearer("tok-ops")
    before = public.get("/api/index/status").json()
    r = ops.post("/api/notes", json={"path": "ops-only.md", "content": note("[ops]", "Ops only " * 40)})
    assert r.status_code == 201, r.text
    if r.json()["vectors_job"]:
        poll(ops, f"/api/index/jobs/{r.json()['vectors_job']}")
    after = public.get("/api/index/status").json()
    assert after == before


# -- server paths in errors ---------------------------------------------------------------


def test_qa_set_errors_name_vault_relative_paths(open_lib: Callable[..., Library]) -> None:
    lib = open_lib()
    api = Api(create_app(lib))
    (lib.vault / "sets").mkdir()
    (lib.vault / "sets" / "bad.jsonl").write_text("{not json\n", encoding="utf-8")
    (lib.vault / "sets" / "empty.jsonl").write_text("\n", encoding="utf-8")
    err = assert_error(api.post("/api/benchmarks/rag/runs", json={"qa_set": "sets/bad.jsonl"}), 400, "bad_dataset")
    assert err["message"].startswith("sets/bad.jsonl:1: not JSON"), err
    err = assert_error(api.post("/api/benchmarks/rag/runs", json={"qa_set": "sets/empty.jsonl"}), 400, "bad_dataset")
    assert err["message"] == "sets/empty.jsonl: no questions", err
    for message in (err["message"],):
        assert str(lib.vault) not in message and str(lib.vault.resolve()) not in message


def test_http_error_messages_never_hold_server_paths(open_lib: Callable[..., Library]) -> None:
    from sunlib.errors import StoreFull
    from sunlib.server.errors import relative_paths

    lib = open_lib()
    app = create_app(lib)

    @app.get("/api/test-disk-error")
    def _disk() -> None:  # a store error naming the index file and a note, as the disk errors do
        raise StoreFull(f"cannot write {lib.db_path} for {lib.vault / 'guide' / 'x.md'}")

    err = assert_error(Api(app).get("/api/test-disk-error"), 507, "store_full")
    assert err["message"] == "cannot write <index>/sunlib.db for guide/x.md", err
    assert relative_paths(f"in {lib.vault}", lib.vault, lib.db_path) == "in ."


# -- a 500 keeps the keep-alive connection -----------------------------------------------


def test_a_500_keeps_the_connection_open(hash_library: Library) -> None:
    app = create_app(hash_library)

    @app.get("/api/test-bug")
    def _bug() -> None:
        raise RuntimeError("a bug")

    with ServedStreams(app) as served:
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        try:
            conn.request("GET", "/api/test-bug")
            r = conn.getresponse()
            body = json.loads(r.read())
            assert r.status == 500 and body == {"error": "internal_error", "message": "internal error (RuntimeError)"}
            assert (r.getheader("connection") or "").lower() != "close"
            sock = conn.sock
            assert sock is not None, "the server closed the connection after the 500"
            conn.request("GET", "/api/index/status")
            r = conn.getresponse()
            assert r.status == 200 and json.loads(r.read())["counts"]["notes"] >= 1
            assert conn.sock is sock  # the same connection served the next request
        finally:
            conn.close()


# -- no row id, and nothing a hidden write moves, in a public caller's trace --------------

VOLATILE = ("ms", "latency", "seconds", "created_at", "run_id", "conversation_id", "trace_saved", "started", "finished")


def _stable(value: Any) -> Any:
    """A trace or frame without timings and run ids: what must not move between two calls."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if not any(word in k for word in VOLATILE)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _ints(value: Any) -> set[int]:
    if isinstance(value, dict):
        return set().union(*(_ints(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_ints(v) for v in value)) if value else set()
    return {value} if isinstance(value, int) and not isinstance(value, bool) else set()


def test_a_hidden_write_moves_nothing_in_a_public_trace(open_lib: Callable[..., Library]) -> None:
    lib = open_lib(server={"tokens": TOKENS})
    api = Api(create_app(lib))
    team, ops = api.bearer("tok-team"), api.bearer("tok-ops")
    question = "When is the weekly rebuild window?"

    def seen() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for mode in ("bm25", "hybrid"):
            r = team.post("/api/search", json={"query": "weekly rebuild window backup", "mode": mode})
            assert r.status_code == 200, r.text
            out[mode] = r.json()
        r = team.post("/api/ask", json={"question": question})
        assert r.status_code == 200, r.text
        saved = team.get(f"/api/runs/{r.json()['run_id']}")
        assert saved.status_code == 200, saved.text
        out["ask"], out["saved"] = r.json(), saved.json()
        return out

    before = seen()
    rowids = {row[0] for row in lib.store.db.conn.execute("SELECT id FROM chunks")}  # type: ignore[attr-defined]
    hidden = "---\nacl: [ops]\n---\n# Weekly rebuild\n\n" + "The weekly rebuild window backup is at night. " * 60
    for i in range(3):
        r = ops.post("/api/notes", json={"path": f"ops-{i}.md", "content": hidden})
        assert r.status_code == 201, r.text
        if r.json()["vectors_job"]:
            poll(ops, f"/api/index/jobs/{r.json()['vectors_job']}")
    after = seen()
    assert _stable(after) == _stable(before)
    # and no chunk row id reached the caller: the only numbers are ranks, counts, offsets and scores
    text = json.dumps(after)
    assert '"rowid"' not in text and '"row_id"' not in text
    big = {n for n in _ints(after) if n > 1000} & rowids
    assert not big, big


# -- per-step timings ---------------------------------------------------------------------


def test_step_timings_reach_admins_only(open_lib: Callable[..., Library]) -> None:
    """How long BM25 took says whether a word fills many hidden chunks: a non-admin's traces carry
    no per-step timing, on every route that returns one; an admin's do."""
    lib = open_lib(server={"tokens": TOKENS_WITH_ADMIN, "admin_principals": ADMINS})
    api = Api(create_app(lib))
    team, root = api.bearer("tok-team"), api.bearer("tok-root")
    question = {"question": "How is the index rebuilt?"}

    def timings(steps: list[dict[str, Any]]) -> list[Any]:
        return [s["latency_ms"] for s in steps]

    for caller, admin in ((team, False), (root, True)):
        searched = caller.post("/api/search", json={"query": "index rebuild"}).json()["trace"]["steps"]
        asked = caller.post("/api/ask", json=question).json()
        events = sse(caller.post("/api/ask/stream", json=question).text)
        streamed = [data for event, data in events if event == "step"]
        run = caller.get(f"/api/runs/{asked['run_id']}").json()["trace"]["steps"]
        for steps in (searched, asked["trace"]["steps"], streamed, run):
            assert steps
            if admin:
                assert all(isinstance(t, float) for t in timings(steps))
            else:
                assert timings(steps) == [None] * len(steps)
        assert isinstance(asked["trace"]["total_ms"], float)  # the whole run's time: a client measures it anyway
