"""The MCP server (sunlib.server.mcp) driven by the SDK's own client, over both transports:

- stdio: one ``python -m sunlib mcp --read-only`` subprocess on a copy of the sample vault, acting
  as public with the default gate; one client session runs every stdio check (``stdio``);
- streamable HTTP: one live uvicorn server (``create_app``, its lifespan, loopback) with bearer
  tokens for public, team and ops, writable, the gate thresholds at 0 so that asks answer;
  each test opens its own client.

Both vaults are the sample vault with the session's hash index. ACL: internal/ops-runbook.md is
ops only, internal/roadmap-draft.md team or ops, internal/scratch.md nobody.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from sunlib import Library
from sunlib.cli.mcp import stdio_principals
from sunlib.config import Settings
from sunlib.errors import UserError
from sunlib.server import create_app
from sunlib.server.auth import token_owner
from sunlib.server.mcp import MAX_CONTENT_CHARS, READ_TOOLS, WRITE_TOOLS
from tests.support.clients import Api, Served, sunlib
from tests.support.paths import SAMPLE_VAULT, index_of, place_index

TOKENS = {"tok-public": [], "tok-team": ["team"], "tok-ops": ["ops"]}
RUNBOOK, ROADMAP, SCRATCH = "internal/ops-runbook.md", "internal/roadmap-draft.md", "internal/scratch.md"
VISIBLE = {  # which internal notes each token's principals may read
    "tok-public": set(),
    "tok-team": {ROADMAP},
    "tok-ops": {RUNBOOK, ROADMAP},
}
OPS_QUESTION = "How are nightly snapshots rotated and checked?"
# the HTTP server answers (gate thresholds at 0); without the sentence model, which takes seconds to load
OPEN_GATE = {
    "gate_threshold": 0.0,
    "reader_threshold": 0.0,
    "gate_threshold_bm25": 0.0,
    "answerable_threshold": 0.0,
    "sentence_model": "none",
}


def _vault_with_index(root: Path, hash_index: Path) -> Path:
    """A copy of the sample vault in ``root``, with its index under the home ``root / "home"``."""
    vault = root / "vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".sunlib"))
    place_index(vault, hash_index, home=root / "home")
    return vault


def payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return dict(result.structured_content)


def error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    return str(result.content[0].text)


def leaks(data: Any, paths: set[str], ids: set[str]) -> list[str]:
    """The hidden paths and note ids that appear anywhere in ``data``."""
    text = json.dumps(data, ensure_ascii=False)
    return sorted(x for x in paths | ids if x in text)


@pytest.fixture(scope="module")
def ids(hash_index: Path) -> dict[str, str]:
    """path -> note_id of the internal notes (ids come from the shared index)."""
    with Library.open(SAMPLE_VAULT, embedding={"provider": "hash"}, index_dir=hash_index) as lib:
        states = lib.store.note_states_of([RUNBOOK, ROADMAP, SCRATCH])
    return {path: state.note_id for path, state in states.items()}


# -- stdio ---------------------------------------------------------------------------------------


async def _stdio_script(params: StdioServerParameters, ids: dict[str, str]) -> dict[str, Any]:
    """Every stdio call, in one session; the test below checks what came back."""
    out: dict[str, Any] = {}
    async with Client(params, read_timeout_seconds=120) as client:
        out["tools"] = (await client.list_tools()).tools
        out["templates"] = (await client.list_resource_templates()).resource_templates
        out["search"] = await client.call_tool("search", {"query": "nightly snapshot rotation", "limit": 10})
        out["search_bm25"] = await client.call_tool("search", {"query": "PRAGMA integrity_check", "mode": "bm25"})
        out["ask"] = await client.call_tool("ask", {"question": OPS_QUESTION})
        out["runbook"] = await client.call_tool("get_note", {"note": RUNBOOK})
        out["unknown"] = await client.call_tool("get_note", {"note": "internal/no-such-note.md"})
        out["lines"] = await client.call_tool("get_note", {"note": "index.md", "start_line": 2, "end_line": 4})
        out["list"] = await client.call_tool("list_notes", {"limit": 200})
        out["status"] = await client.call_tool("status", {})
        out["create"] = await client.call_tool("create_note", {"path": "new.md", "content": "# New\n"})
        out["bad"] = [
            await client.call_tool("search", {"query": ""}),
            await client.call_tool("search", {"query": "x", "limit": 0}),
            await client.call_tool("search", {"query": "x", "mode": "fuzzy"}),
            await client.call_tool("search", {"query": "x", "filters": {"colour": ["red"]}}),
            await client.call_tool("get_note", {}),
            await client.call_tool("get_note", {"note": "index.md", "start_line": 9999}),
            await client.call_tool("multi_get", {"notes": []}),
        ]
        out["status_after"] = await client.call_tool("status", {})
        index_id = payload(out["lines"])["note_id"]
        out["resource"] = await client.read_resource(f"sunlib://note/{index_id}?start_line=2&end_line=4")
        for path in (RUNBOOK, SCRATCH):
            try:
                await client.read_resource(f"sunlib://note/{ids[path]}")
                out[f"resource {path}"] = "read"
            except MCPError as exc:
                out[f"resource {path}"] = str(exc)
    return out


@pytest.fixture(scope="module")
def stdio(tmp_path_factory: pytest.TempPathFactory, hash_index: Path, ids: dict[str, str]) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mcp_stdio")
    vault = _vault_with_index(root, hash_index)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUNLIB_")}
    env |= {"SUNLIB_HOME": str(root / "home"), "SUNLIB_EMBEDDING__PROVIDER": "hash"}
    # a fresh process: leave out the two parts that take seconds to load (the gate still refuses)
    env |= {"SUNLIB_ANSWER__SENTENCE_MODEL": "none", "SUNLIB_SEARCH__CROSSLANG_DICTIONARY": "false"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "sunlib", "mcp", "--vault", str(vault), "--read-only"], env=env
    )
    return anyio.run(_stdio_script, params, ids)


def test_stdio_lists_the_read_tools_only_when_read_only(stdio: dict[str, Any]) -> None:
    tools = {t.name: t for t in stdio["tools"]}
    assert set(tools) == set(READ_TOOLS)
    assert all(t.description and len(t.description) > 60 for t in tools.values())
    assert tools["search"].input_schema["required"] == ["query"]
    assert tools["search"].input_schema["properties"]["mode"]["description"]
    assert tools["search"].annotations.read_only_hint is True
    assert [t.uri_template for t in stdio["templates"]] == ["sunlib://note/{note_id}{?start_line,end_line}"]
    assert "create_note" in error_text(stdio["create"])  # read-only: the write tool is not there


def test_stdio_runs_as_public(stdio: dict[str, Any], ids: dict[str, str]) -> None:
    hidden_paths, hidden_ids = {RUNBOOK, ROADMAP, SCRATCH}, set(ids.values())
    for key in ("search", "search_bm25", "list", "ask"):
        assert leaks(payload(stdio[key]), hidden_paths, hidden_ids) == [], key
    hits = payload(stdio["search"])["results"]
    assert hits and all(h["citation"]["uri"].startswith(f"sunlib://note/{h['note_id']}?start_line=") for h in hits)
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    # a note public may not read answers like one that does not exist
    assert error_text(stdio["runbook"]).endswith(f"not_found: no note {RUNBOOK!r}")
    assert error_text(stdio["unknown"]).endswith("not_found: no note 'internal/no-such-note.md'")
    listed = payload(stdio["list"])
    assert listed["total"] == len(listed["notes"]) == payload(stdio["status"])["notes"]
    assert not any(n["path"].startswith("internal/") for n in listed["notes"])
    status = payload(stdio["status"])
    assert status["principals"] == ["public"] and status["read_only"] is True
    assert status["tools"] == list(READ_TOOLS)
    for path in (RUNBOOK, SCRATCH):
        assert stdio[f"resource {path}"] != "read" and ids[path] in stdio[f"resource {path}"]


def test_stdio_ask_refuses_with_its_reason(stdio: dict[str, Any]) -> None:
    asked = payload(stdio["ask"])  # the default gate, and the runbook out of reach: a refusal
    assert asked["refused"] is True and asked["citations"] == []
    refusal = asked["refusal"]
    assert refusal["codes"] and refusal["codes"] == [r["code"] for r in refusal["reasons"]]
    assert refusal["reason"] and all(r["message"] in refusal["reason"] for r in refusal["reasons"])
    assert asked["run_id"].startswith("run_")


def test_stdio_reads_lines_and_the_resource(stdio: dict[str, Any]) -> None:
    lines = payload(stdio["lines"])
    text = (SAMPLE_VAULT / "index.md").read_text(encoding="utf-8").split("\n")
    assert lines["content"] == "\n".join(text[1:4])
    assert (lines["start_line"], lines["end_line"], lines["total_lines"]) == (2, 4, len(text))
    contents = stdio["resource"].contents
    assert len(contents) == 1 and contents[0].text == lines["content"]
    assert contents[0].mime_type == "text/markdown"


def test_stdio_bad_arguments_are_tool_errors(stdio: dict[str, Any]) -> None:
    messages = [error_text(r) for r in stdio["bad"]]
    assert all(m.startswith("Error executing tool ") for m in messages)
    assert "query" in messages[0] and "limit" in messages[1] and "mode" in messages[2]
    assert "colour" in messages[3] and "note" in messages[4] and "bad_range" in messages[5]
    assert payload(stdio["status_after"]) == payload(stdio["status"])  # and the server is still there


# -- streamable HTTP -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, hash_index: Path) -> Iterator[tuple[str, Library]]:
    root = tmp_path_factory.mktemp("mcp_http")
    vault = _vault_with_index(root, hash_index)
    lib = Library.open(
        vault,
        index_dir=index_of(vault, root / "home"),
        embedding={"provider": "hash"},
        answer=OPEN_GATE,
        search={"crosslang_dictionary": False},  # seconds to load, and no Chinese question here
        server={"tokens": TOKENS},
    )
    lib.index()
    with Served(create_app(lib)) as url:
        yield url, lib
    lib.close()


@asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


def over_http(url: str, token: str, calls: Callable[[Client], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        async with connect(url, token) as client:
            return await calls(client)

    return anyio.run(run)


def test_http_needs_a_token(served: tuple[str, Library]) -> None:
    url, _ = served
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer nope"}):
        r = httpx.post(f"{url}/mcp", json=hello, headers={"Accept": "application/json", **headers})
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    tools = over_http(url, "tok-public", lambda c: c.list_tools())
    assert {t.name for t in tools.tools} == {*READ_TOOLS, *WRITE_TOOLS}


def test_http_mount_follows_the_config(hash_library: Library) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    # served without its lifespan (an ASGI test transport), the endpoint says it is not running
    idle = Api(create_app(hash_library)).post("/mcp", json=hello)
    assert idle.status_code == 503 and idle.json()["error"] == "unavailable"
    off = Api(create_app(hash_library.with_settings(mcp={"http": False}))).post("/mcp", json=hello)
    assert off.status_code == 404 and off.json()["error"] == "not_found"


def test_http_acl_matrix(served: tuple[str, Library], ids: dict[str, str]) -> None:
    url, lib = served

    async def calls(client: Client) -> dict[str, Any]:
        out = {
            "search": await client.call_tool("search", {"query": "nightly snapshot rotation roadmap", "limit": 50}),
            "bm25": await client.call_tool("search", {"query": "PRAGMA integrity_check", "mode": "bm25"}),
            "ask": await client.call_tool("ask", {"question": OPS_QUESTION}),
            "list": await client.call_tool("list_notes", {"folder": "internal", "limit": 200}),
            "status": await client.call_tool("status", {}),
            "multi": await client.call_tool("multi_get", {"notes": [RUNBOOK, ROADMAP, SCRATCH]}),
        }
        for path in (RUNBOOK, ROADMAP, SCRATCH):
            out[f"get {path}"] = await client.call_tool("get_note", {"note": path})
            out[f"get id {path}"] = await client.call_tool("get_note", {"note": ids[path]})
        return out

    counts = {}
    for token, visible in VISIBLE.items():
        out = over_http(url, token, calls)
        hidden = {RUNBOOK, ROADMAP, SCRATCH} - visible
        hidden_ids = {ids[p] for p in hidden}
        for key in ("search", "bm25", "ask", "list", "status"):
            assert leaks(payload(out[key]), hidden, hidden_ids) == [], (token, key)
        multi = payload(out["multi"])  # its errors echo the paths asked for, and only those
        assert leaks(multi["notes"], hidden, hidden_ids) == [] and len(multi["errors"]) == len(hidden)
        for path in (RUNBOOK, ROADMAP, SCRATCH):
            for key in (f"get {path}", f"get id {path}"):
                if path in visible:
                    assert payload(out[key])["path"] == path
                else:  # asked by path, the answer does not tell the id behind it
                    assert "not_found" in error_text(out[key])
                    assert ids[path] not in error_text(out[f"get {path}"])
        assert {n["path"] for n in payload(out["list"])["notes"]} == visible
        assert {n["path"] for n in payload(out["multi"])["notes"]} == visible
        assert (RUNBOOK in json.dumps(payload(out["bm25"]))) is (RUNBOOK in visible)
        cited = {c["path"] for c in payload(out["ask"])["citations"]}
        assert (RUNBOOK in cited) is (RUNBOOK in visible)
        counts[token] = payload(out["status"])["notes"]
        principals = ("public", *TOKENS[token])
        assert counts[token] == lib.store.list_notes(principals, None, None, 1, 0)[1]
    assert counts["tok-public"] + 2 == counts["tok-ops"] and counts["tok-public"] + 1 == counts["tok-team"]


def test_http_ask_answers_with_citations_to_open(served: tuple[str, Library]) -> None:
    url, _ = served

    async def calls(client: Client) -> tuple[dict[str, Any], list[str]]:
        asked = payload(await client.call_tool("ask", {"question": OPS_QUESTION}))
        texts = []
        for c in asked["citations"]:
            texts.append((await client.read_resource(c["uri"])).contents[0].text)
        return asked, texts

    asked, texts = over_http(url, "tok-ops", calls)
    assert asked["refused"] is False and asked["refusal"] is None and asked["citations"]
    assert all(f"[ref:{c['chunk_id']}]" in asked["answer"] for c in asked["citations"])
    for c, text in zip(asked["citations"], texts, strict=True):
        assert c["path"] == RUNBOOK and c["quote"].split("\n")[0] in text
        assert text.count("\n") == c["end_line"] - c["start_line"]


def test_http_ask_saves_the_run_as_the_tokens_own(served: tuple[str, Library]) -> None:
    """The run an MCP ask saves is its token's (``auth.token_owner``): not the local owner's, nor
    another token's with the same principals' (none here: the team token holds more)."""
    url, lib = served

    async def calls(client: Client) -> dict[str, Any]:
        return payload(await client.call_tool("ask", {"question": OPS_QUESTION}))

    run_id = over_http(url, "tok-ops", calls)["run_id"]
    everyone = ("public", "team", "ops")
    saved = lib.store.get_run(run_id, everyone, owner=token_owner("tok-ops"))
    assert saved is not None and saved.question == OPS_QUESTION
    assert lib.store.get_run(run_id, everyone) is None  # not the local owner's
    assert lib.store.get_run(run_id, everyone, owner=token_owner("tok-team")) is None


def test_http_writes_keep_the_api_rules(served: tuple[str, Library]) -> None:
    url, lib = served
    secret = "---\nacl: [ops]\n---\n# Ops only\n\nzqmcpsecretx\n"
    long_text = "# Long\n" + "".join(f"line {i:05d} {'x' * 40}\n" for i in range(2, 3001))  # 150,000 chars

    async def calls(client: Client) -> dict[str, Any]:
        return {
            "create": await client.call_tool("create_note", {"path": "mcp/a.md", "content": "# A\n\nalpha\n"}),
            "again": await client.call_tool("create_note", {"path": "mcp/a.md", "content": "# A\n"}),
            "escape": await client.call_tool("create_note", {"path": "../outside.md", "content": "# x\n"}),
            "broken": await client.call_tool("create_note", {"path": "mcp/b.md", "content": "---\nacl: 3\n---\n"}),
            "update": await client.call_tool("update_note", {"note": "mcp/a.md", "content": "# A\n\nbeta\n"}),
            "move": await client.call_tool("move_note", {"note": "mcp/a.md", "new_path": "mcp/moved/a.md"}),
            "read": await client.call_tool("get_note", {"note": "mcp/moved/a.md"}),
            "found": await client.call_tool("search", {"query": "beta", "mode": "bm25"}),
            "secret": await client.call_tool("create_note", {"path": "mcp/secret.md", "content": secret}),
            "after": await client.call_tool("get_note", {"note": "mcp/secret.md"}),
            "touch": await client.call_tool("update_note", {"note": RUNBOOK, "content": "# mine now\n"}),
            "long": await client.call_tool("create_note", {"path": "mcp/long.md", "content": long_text}),
            "cut": await client.call_tool("get_note", {"note": "mcp/long.md"}),
            "tail": await client.call_tool("get_note", {"note": "mcp/long.md", "start_line": 2500}),
        }

    out = over_http(url, "tok-public", calls)
    created = payload(out["create"])
    assert created["path"] == "mcp/a.md" and created["uri"] == f"sunlib://note/{created['note_id']}"
    assert "conflict" in error_text(out["again"]) and "bad_path" in error_text(out["escape"])
    assert "invalid_note" in error_text(out["broken"]) and not (lib.vault / "mcp" / "b.md").exists()
    assert not (lib.vault.parent / "outside.md").exists()
    assert payload(out["update"])["note_id"] == created["note_id"]
    moved = payload(out["move"])
    assert moved["note_id"] == created["note_id"] and moved["path"] == "mcp/moved/a.md"
    assert (lib.vault / "mcp/moved/a.md").read_text(encoding="utf-8") == "# A\n\nbeta\n"
    assert not (lib.vault / "mcp/a.md").exists()
    assert payload(out["read"])["content"] == "# A\n\nbeta\n"
    assert "mcp/moved/a.md" in [h["path"] for h in payload(out["found"])["results"]]
    # written with an ACL its writer is not in: written, then out of the writer's sight
    assert payload(out["secret"])["path"] == "mcp/secret.md" and "not_found" in error_text(out["after"])
    assert "not_found" in error_text(out["touch"])
    assert "mine now" not in (lib.vault / RUNBOOK).read_text(encoding="utf-8")
    # a long note is cut for the model's context, and says where to read on
    cut, tail = payload(out["cut"]), payload(out["tail"])
    assert cut["truncated"] is True and len(cut["content"]) == MAX_CONTENT_CHARS and cut["total_lines"] == 3001
    assert cut["end_line"] == 1 + cut["content"].count("\n") < 3001
    assert tail["truncated"] is False and tail["content"].startswith("line 02500 ")
    seen = over_http(url, "tok-ops", lambda c: c.call_tool("get_note", {"note": "mcp/secret.md"}))
    assert "zqmcpsecretx" in payload(seen)["content"]


# -- whom `sunlib mcp` acts as -------------------------------------------------------------------


def test_stdio_principals_from_flags_and_config() -> None:
    base = Settings(server={"tokens": {"tok-ops": ["ops"]}})
    assert stdio_principals(base, None, None) == ("public",)
    assert stdio_principals(base, ["team", "ops"], None) == ("public", "team", "ops")
    assert stdio_principals(base, None, "tok-ops") == ("public", "ops")
    assert stdio_principals(Settings(mcp={"principals": ["hr"]}), None, None) == ("public", "hr")
    assert stdio_principals(Settings(search={"principals": ["public", "team"]}), None, None) == ("public", "team")
    with pytest.raises(UserError, match="not in \\[server\\] tokens"):
        stdio_principals(base, None, "tok-nope")
    with pytest.raises(UserError, match="not both"):
        stdio_principals(base, ["ops"], "tok-ops")


def test_sunlib_mcp_bad_input_is_one_line(vault: Path) -> None:
    unknown = sunlib("mcp", "--vault", str(vault), "--token", "nope")
    assert unknown.returncode == 1 and unknown.stderr.strip().splitlines() == [
        "error: unknown --token: it is not in [server] tokens"
    ]
    unindexed = sunlib("mcp", "--vault", str(vault))
    assert unindexed.returncode == 1 and "has no index yet" in unindexed.stderr
    assert len(unindexed.stderr.strip().splitlines()) == 1 and unindexed.stdout == ""
