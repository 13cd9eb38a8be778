"""The typed surfaces: every route's response schema in /openapi.json, and the store's errors
as each surface shows them (HTTP 507/503 JSON, one CLI line and a non-zero exit).

The store errors come from real routes of the real app and a real verb of the real command
line, each raising the error the store boundary raises; the disk-full test
(tests/system/test_disk_full.py) shows the CLI's line for a disk that really fills up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI

from sunlib import Library
from sunlib.cli.app import app as cli_app
from sunlib.contracts import to_jsonable
from sunlib.errors import StoreBusy, StoreCorrupt, StoreError, StoreFull
from sunlib.server import create_app
from tests.support.clients import Api, sunlib

OPERATIONS = {  # the API's operations today; one added later is checked below like these
    *("POST /api/search", "POST /api/ask", "POST /api/ask/stream", "GET /api/runs", "GET /api/runs/{run_id}"),
    *("GET /api/conversations", "GET /api/conversations/{conversation_id}"),
    *("GET /api/index/status", "POST /api/index/rebuild", "GET /api/index/jobs/{job_id}"),
    *("POST /api/benchmarks/rag/runs", "GET /api/benchmarks/rag/runs/{run_id}"),
    "GET /api/benchmarks/rag/runs/{run_id}/events",
    *("GET /api/notes", "POST /api/notes", "GET /api/notes/{note_id}", "PATCH /api/notes/{note_id}"),
    *("DELETE /api/notes/{note_id}", "POST /api/notes/{note_id}/move"),
}
STORE_ERRORS: dict[str, tuple[type[StoreError], int]] = {
    "full": (StoreFull, 507),
    "busy": (StoreBusy, 503),
    "corrupt": (StoreCorrupt, 503),
}
MESSAGES = {  # as the store boundary words them: what happened and what to do
    "full": "the disk holding the index is full; everything committed before is kept: free some space",
    "busy": "the index is busy: another process held it too long (BusyError); try again",
    "corrupt": "the index file is damaged (CorruptError); run `sunlib doctor` for details",
}


@pytest.fixture
def app(hash_library: Library) -> FastAPI:
    return create_app(hash_library)


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_every_route_declares_its_response_schema(app: FastAPI) -> None:
    schema = Api(app).get("/openapi.json").json()
    components = schema["components"]["schemas"]
    operations = list(_operations(schema))
    assert {f"{method.upper()} {path}" for path, method, _ in operations} >= OPERATIONS
    for path, method, operation in operations:
        where = f"{method.upper()} {path}"
        success = {code: r for code, r in operation["responses"].items() if code.startswith("2")}
        assert len(success) == 1, where
        code, response = next(iter(success.items()))
        if code == "204":  # a delete answers no body
            assert "content" not in response, where
            continue
        if "text/event-stream" in response.get("content", {}):
            assert response["content"]["text/event-stream"]["schema"]["type"] == "object", where
            continue
        if "text/html" in response.get("content", {}):  # an evaluation report: one whole page
            assert response["content"]["text/html"]["schema"]["type"] == "string", where
            continue
        ref = response["content"]["application/json"]["schema"]["$ref"]
        model = components[ref.rsplit("/", 1)[-1]]
        assert model["type"] == "object" and model["properties"] and model["required"], where
        for status in ("503", "507"):
            error = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
            assert error.endswith("/ErrorBody"), (where, status)


def _keys(value: Any) -> Any:
    """The key structure of a JSON value (dict keys, recursively; lists by their first item).
    Key order is left out: a model writes its declared fields first, then the extra ones."""
    if isinstance(value, dict):
        return sorted((k, _keys(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_keys(value[0])] if value else []
    return None


def test_response_models_keep_the_bodies(app: FastAPI, hash_library: Library) -> None:
    """The models check the JSON on its way out; they neither drop nor add keys: the body has
    the keys of the JSON the route builds from the library's own objects."""
    api = Api(app)
    found = api.post("/api/search", json={"query": "empty ACL", "mode": "bm25", "limit": 2}).json()
    direct = hash_library.search("empty ACL", mode="bm25", limit=2).as_json(with_trace=True)
    assert _keys(found) == _keys(direct) and found["results"] == direct["results"]
    assert list(found["results"][0]["routes"]["bm25"]) == ["rank", "score", "contribution"]

    question = "What does an empty ACL mean?"
    asked = api.post("/api/ask", json={"question": question}).json()
    result = hash_library.ask(question)
    assert _keys(asked) == _keys(
        {
            **to_jsonable(result.frame),
            "run_id": result.run_id,
            "conversation_id": result.conversation_id,
            "trace": to_jsonable(result.trace),
        }
    )
    assert asked["answer"] == result.frame.answer
    run = api.get(f"/api/runs/{asked['run_id']}").json()
    assert _keys(run["frame"]) == _keys(to_jsonable(result.frame)) and run["trace"]["steps"]
    note = api.get(f"/api/notes/{found['results'][0]['note_id']}").json()
    assert "vectors_job" not in note and note["chunks"] and note["in_sync"] is True


@pytest.fixture
def raising_app(app: FastAPI) -> FastAPI:
    """The real app with one more route per store error, raising it as the store boundary does."""
    router = APIRouter(prefix="/api/test-store")

    def route(kind: str) -> None:
        error, _ = STORE_ERRORS[kind]

        @router.post(f"/{kind}")
        def fail() -> None:
            raise error(MESSAGES[kind])

    for kind in STORE_ERRORS:
        route(kind)
    app.include_router(router)
    return app


@pytest.mark.parametrize("kind", sorted(STORE_ERRORS))
def test_store_errors_over_http(raising_app: FastAPI, kind: str) -> None:
    error, status = STORE_ERRORS[kind]
    r = Api(raising_app).post(f"/api/test-store/{kind}")
    assert r.status_code == status
    assert r.json() == {"error": error.code, "message": MESSAGES[kind]}
    assert r.headers["content-type"] == "application/json"


@pytest.fixture
def raising_verb() -> Iterator[str]:
    """A hidden verb of the real command line that raises the store error named by its argument."""

    def fail(kind: str) -> None:
        error, _ = STORE_ERRORS[kind]
        raise error(MESSAGES[kind])

    cli_app.command("test-store-error", hidden=True)(fail)
    try:
        yield "test-store-error"
    finally:
        cli_app.registered_commands = [c for c in cli_app.registered_commands if c.callback is not fail]


@pytest.mark.parametrize("kind", sorted(STORE_ERRORS))
def test_store_errors_on_the_cli(raising_verb: str, kind: str) -> None:
    r = sunlib(raising_verb, kind)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"error: {MESSAGES[kind]}"], r.stderr
    assert r.stdout == ""


def test_a_damaged_index_file_is_a_503_json_error_and_one_cli_line(tmp_path: Path) -> None:
    """The whole path: a file that is not a database, opened by the real store, raised as
    StoreCorrupt at its boundary and mapped once per surface."""
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "note.md").write_text("# A note\n\nSome text.\n", encoding="utf-8")
    index = tmp_path / "index"
    index.mkdir()
    (index / "sunlib.db").write_bytes(b"this is not an SQLite database at all " * 200)
    lib = Library.open(vault, embedding={"provider": "hash"}, index_dir=index)
    r = Api(create_app(lib)).get("/api/index/status")
    assert r.status_code == 503, r.text
    assert r.json()["error"] == StoreCorrupt.code and "Traceback" not in r.text
    cli = sunlib("status", "--vault", str(vault), env={"SUNLIB_INDEX_DIR": str(index)})
    assert cli.returncode == 1 and len(cli.stderr.splitlines()) == 1, cli.stderr
    assert cli.stderr.startswith("error: ")
