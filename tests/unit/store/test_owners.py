"""Runs and conversations belong to the caller that saved them, not to a set of principals.

Red-team finding: ``hrtok`` continued ``pubtok``'s conversation (which then answered 404 to its
owner) and ``teamtok`` read ``pubtok``'s saved questions, because a run was readable by any token
holding its principals. Now each token is an owner (``token:`` + 16 hex digits of its sha256),
the local CLI and Python API and the loopback caller of a server without tokens are the owner
``local``, and another token gets the 404 of an unknown id on every route, sees nothing in its
lists, and cannot add a turn to the conversation. An admin (``[server] admin_principals``) reads
every owner's, still under the principals rule, and continues only its own. Real SQLite files
throughout: the sample vault with a private copy of the session's hash index.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest

from sunlib import Library
from sunlib.errors import NotFound
from sunlib.library import DB_NAME
from sunlib.server import create_app
from sunlib.server.auth import token_owner
from sunlib.store import LOCAL_OWNER, RunRecord, SqliteStore
from sunlib.store.migrations import MIGRATIONS
from tests.support.clients import Api
from tests.support.paths import SAMPLE_VAULT, place_index

FIRST = "What is the SUNLIB_HOME environment variable used for?"
FOLLOW = "and its default?"
OPS = "When is the rebuild window?"
TOKENS = {
    "tok-a": ["ops"],
    "tok-a2": ["ops"],  # the same principals as tok-a: another owner all the same
    "tok-pub": [],
    "tok-team": ["team"],  # holds every principal tok-pub asks as, and more
    "tok-admin": ["admin"],
}
PAIRS = [("tok-a", "tok-a2"), ("tok-pub", "tok-team"), ("tok-team", "tok-pub")]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, hash_index: Path) -> Iterator[Library]:
    root = tmp_path_factory.mktemp("owners")
    vault = root / "vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".sunlib"))
    index = place_index(vault, hash_index, home=root / "home")
    server = {"tokens": TOKENS, "admin_principals": ["admin"]}
    with Library.open(vault, embedding={"provider": "hash"}, server=server, index_dir=index) as library:
        yield library


@pytest.fixture(scope="module")
def api(lib: Library) -> Api:
    return Api(create_app(lib))


def not_found(r: httpx.Response, message: str) -> None:
    """The 404 an unknown id gets, word for word."""
    assert r.status_code == 404, r.text
    assert r.json() == {"error": "not_found", "message": message}


def no_run(run_id: str) -> str:
    return f"no run {run_id!r}"


def no_conversation(cid: str) -> str:
    return f"no conversation {cid!r} that you may read"


def run_ids(who: Api) -> list[str]:
    return [r["run_id"] for r in who.get("/api/runs", params={"limit": 200}).json()["runs"]]


def conversation_ids(who: Api) -> list[str]:
    return [c["conversation_id"] for c in who.get("/api/conversations", params={"limit": 200}).json()["conversations"]]


def ask(who: Api, question: str, cid: str | None = None) -> dict[str, Any]:
    r = who.post("/api/ask", json={"question": question, **({"conversation_id": cid} if cid else {})})
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.parametrize(("owner", "other"), PAIRS)
def test_another_token_cannot_read_list_or_continue_a_conversation(api: Api, owner: str, other: str) -> None:
    a, b = api.bearer(owner), api.bearer(other)
    first = ask(a, FIRST)
    cid, run_id = first["conversation_id"], first["run_id"]
    before = a.get(f"/api/conversations/{cid}").json()
    b_runs, b_conversations = run_ids(b), conversation_ids(b)

    # B: the 404 of an unknown id on every route, and nothing of A's in its lists
    not_found(b.get(f"/api/runs/{run_id}"), no_run(run_id))
    not_found(b.get(f"/api/conversations/{cid}"), no_conversation(cid))
    for url in ("/api/ask", "/api/ask/stream"):
        not_found(b.post(url, json={"question": FOLLOW, "conversation_id": cid}), no_conversation(cid))
    assert run_id not in b_runs and cid not in b_conversations
    # B's attempts wrote nothing: no turn in A's conversation, no run of B's
    assert run_ids(b) == b_runs and conversation_ids(b) == b_conversations
    assert a.get(f"/api/conversations/{cid}").json() == before

    # A still reads, lists and continues it
    assert a.get(f"/api/runs/{run_id}").json()["run_id"] == run_id
    assert run_id in run_ids(a) and cid in conversation_ids(a)
    second = ask(a, FOLLOW, cid)
    assert second["conversation_id"] == cid and second["question"] != FOLLOW  # the follow-up read A's history
    turns = a.get(f"/api/conversations/{cid}").json()["turns"]
    assert [(t["position"], t["run_id"]) for t in turns] == [(1, run_id), (2, second["run_id"])]

    # and the other way round: B's own conversation is B's alone
    mine = ask(b, FIRST)
    not_found(a.get(f"/api/conversations/{mine['conversation_id']}"), no_conversation(mine["conversation_id"]))
    not_found(a.get(f"/api/runs/{mine['run_id']}"), no_run(mine["run_id"]))
    assert b.get(f"/api/conversations/{mine['conversation_id']}").status_code == 200


def test_the_library_refuses_a_turn_of_another_owner_and_changes_nothing(lib: Library) -> None:
    a, b = token_owner("tok-pub"), token_owner("tok-team")
    first = lib.ask(FIRST, principals=["public"], owner=a)
    cid = first.conversation_id
    assert cid is not None
    with pytest.raises(NotFound, match="that you may read"):
        lib.ask(FOLLOW, principals=["public", "team"], conversation_id=cid, owner=b)
    with pytest.raises(NotFound):  # the store refuses it too, before anything is written
        lib.store.add_turn(cid, first.run_id, "hijack", None, 9e9, owner=b)
    conv = lib.conversation(cid, ["public"], owner=a)
    assert [t.run.run_id for t in conv.turns] == [first.run_id] and conv.updated_at < 9e9
    with pytest.raises(NotFound):  # the local owner is an owner like any other
        lib.conversation(cid, ["public"])
    assert [t.run.run_id for t in lib.conversation(cid, ["public"], owner=None).turns] == [first.run_id]


def test_an_admin_reads_every_owners_runs_but_continues_only_its_own(api: Api) -> None:
    pub, admin = api.bearer("tok-pub"), api.bearer("tok-admin")
    first = ask(pub, FIRST)
    cid, run_id = first["conversation_id"], first["run_id"]
    assert admin.get(f"/api/runs/{run_id}").status_code == 200
    assert run_id in run_ids(admin) and cid in conversation_ids(admin)
    conv = admin.get(f"/api/conversations/{cid}").json()
    assert conv == pub.get(f"/api/conversations/{cid}").json()
    not_found(admin.post("/api/ask", json={"question": FOLLOW, "conversation_id": cid}), no_conversation(cid))
    assert pub.get(f"/api/conversations/{cid}").json() == conv  # untouched
    # the principals rule holds for an admin too: a run asked as ops stays hidden from it
    ops_run = ask(api.bearer("tok-a"), OPS)["run_id"]
    not_found(admin.get(f"/api/runs/{ops_run}"), no_run(ops_run))
    assert ops_run not in run_ids(admin)


def test_what_the_local_owner_saved_is_hidden_from_every_token_but_an_admin(lib: Library, api: Api) -> None:
    """The CLI and the Python API save as ``local``, as every run saved before owners existed."""
    local = lib.ask(FIRST)
    cid = local.conversation_id
    assert cid is not None
    for token in ("tok-pub", "tok-team", "tok-a"):
        who = api.bearer(token)
        not_found(who.get(f"/api/runs/{local.run_id}"), no_run(local.run_id))
        not_found(who.get(f"/api/conversations/{cid}"), no_conversation(cid))
        not_found(who.post("/api/ask", json={"question": FOLLOW, "conversation_id": cid}), no_conversation(cid))
    assert api.bearer("tok-admin").get(f"/api/conversations/{cid}").status_code == 200
    assert [t.run.run_id for t in lib.conversation(cid).turns] == [local.run_id]  # unchanged, and still local's
    assert lib.ask(FOLLOW, conversation_id=cid).conversation_id == cid


def test_v1_saves_its_run_as_the_tokens_own(api: Api) -> None:
    body = {"model": "sunlib", "messages": [{"role": "user", "content": FIRST}]}
    r = api.bearer("tok-a").post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    run_id = r.json()["sunlib"]["run_id"]
    assert api.bearer("tok-a").get(f"/api/runs/{run_id}").status_code == 200
    not_found(api.bearer("tok-a2").get(f"/api/runs/{run_id}"), no_run(run_id))


def test_a_tokens_owner_is_stable_and_never_the_token(lib: Library, api: Api) -> None:
    owner = token_owner("tok-a")
    assert owner == token_owner("tok-a") != token_owner("tok-a2")
    assert owner.startswith("token:") and len(owner) == len("token:") + 16 and "tok-a" not in owner
    run_id = ask(api.bearer("tok-a"), FIRST)["run_id"]
    saved = lib.store.get_run(run_id, ("public", "ops"), owner=None)
    assert saved is not None and saved.owner == owner
    shown = api.bearer("tok-a").get(f"/api/runs/{run_id}")
    assert shown.json()["owner"] == owner and "tok-a" not in shown.text  # the owner is shown, never the token
    for name in (DB_NAME, f"{DB_NAME}-wal"):
        path = lib.db_path.parent / name
        if path.exists():
            assert b"tok-a" not in path.read_bytes()  # no token is stored


def test_runs_and_conversations_from_before_owners_are_the_local_owners(tmp_path: Path) -> None:
    """An index of schema 6 (no owners) opened by this sunlib: its rows are kept, as ``local``'s."""
    db = tmp_path / "old.db"
    conn = apsw.Connection(str(db))
    for version, step in enumerate(MIGRATIONS[:6], 1):
        if callable(step):
            step(conn)
        else:
            conn.execute(step)
        conn.execute(f"PRAGMA user_version={version}")
    conn.execute(
        "INSERT INTO runs(run_id, kind, created_at, principals, question, refused, total_ms, frame, trace)"
        """ VALUES ('run_old', 'ask', 1.0, '["public"]', 'old?', 0, 5.0, '{"answer": "a"}', '{}')"""
    )
    conn.execute("INSERT INTO conversations VALUES ('conv_old', 1.0, 1.0)")
    conn.execute("INSERT INTO conversation_turns VALUES ('conv_old', 1, 'run_old', 'old?', NULL)")
    conn.close()
    stranger = token_owner("tok-pub")
    with SqliteStore(db) as store:
        run = store.get_run("run_old", ("public",))
        assert isinstance(run, RunRecord) and run.owner == LOCAL_OWNER and run.frame == {"answer": "a"}
        assert store.get_run("run_old", ("public",), owner=stranger) is None
        assert store.list_runs(("public",), owner=stranger) == []
        assert store.get_conversation("conv_old", ("public",), owner=stranger) is None
        assert store.list_conversations(("public",), owner=stranger) == []
        with pytest.raises(NotFound):
            store.add_turn("conv_old", "run_old", "hijack", None, 2.0, owner=stranger)
        conv = store.get_conversation("conv_old", ("public",))
        assert conv is not None and [t.said for t in conv.turns] == ["old?"]
        assert store.add_turn("conv_old", "run_old", "again", None, 2.0) == 2  # the local owner continues it
