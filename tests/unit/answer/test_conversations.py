"""Conversations: ``Library.ask(..., conversation_id=...)`` keeps the thread in the index.

The earlier turns come back as the history of the next message (so the follow-up rule runs and
shows in the Route step, as it does for a chat client's history), each saved run becomes the
next turn, and a conversation is readable only by principals that could read every one of its
runs. One private copy of the session's hash index serves the module (each test starts its own
conversations, so they do not see each other's turns).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.errors import NotFound, UserError
from sunlib.server import create_app
from sunlib.trace.steps import Step
from tests.harness.llm_server import ChatServer, sources, user_message
from tests.support.clients import Api, sunlib
from tests.support.paths import SAMPLE_VAULT, place_index
from tests.support.sse import sse

FIRST = "What is the SUNLIB_HOME environment variable used for?"
FOLLOW = "and its default?"
OPS = "When is the rebuild window?"


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, hash_index: Path) -> Iterator[Library]:
    root = tmp_path_factory.mktemp("conversations")
    vault = root / "vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".sunlib"))
    index = place_index(vault, hash_index, home=root / "home")
    # named in the vault's settings, so the CLI finds it from any test's home
    (vault / "sunlib.toml").write_text(f'index_dir = "{index}"\n', encoding="utf-8")
    with Library.open(vault, embedding={"provider": "hash"}, index_dir=index) as library:
        yield library


def route_details(result_steps: tuple[object, ...]) -> dict[str, object]:
    (route,) = [s for s in result_steps if getattr(s, "name", None) == Step.ROUTE]
    return dict(getattr(route, "details", {}))


def test_a_follow_up_in_a_conversation_is_asked_standalone_and_saved_as_its_next_turn(lib: Library) -> None:
    first = lib.ask(FIRST)
    assert first.conversation_id is not None and first.conversation_id.startswith("conv_")
    assert "follow_up" not in route_details(first.trace.steps)  # a first turn: no history, as before
    second = lib.ask(FOLLOW, conversation_id=first.conversation_id)
    assert second.conversation_id == first.conversation_id
    rewrite = route_details(second.trace.steps)["follow_up"]
    assert isinstance(rewrite, dict) and rewrite["said"] == FOLLOW
    assert second.frame.question == rewrite["standalone"] != FOLLOW
    conv = lib.conversation(first.conversation_id)
    assert [(t.position, t.said, t.standalone, t.run.run_id) for t in conv.turns] == [
        (1, FIRST, None, first.run_id),
        (2, FOLLOW, second.frame.question, second.run_id),
    ]
    assert conv.turns[0].run.frame["answer"] == first.frame.answer
    # the same follow-up without the conversation stands alone: no rewrite
    assert "follow_up" not in route_details(lib.ask(FOLLOW, save=False).trace.steps)


def test_an_unknown_conversation_is_not_found(lib: Library) -> None:
    with pytest.raises(NotFound, match="no conversation 'conv_nope'"):
        lib.ask(FOLLOW, conversation_id="conv_nope")


def test_history_and_a_conversation_together_are_refused(lib: Library) -> None:
    from sunlib.contracts import Turn

    cid = lib.ask(FIRST).conversation_id
    with pytest.raises(UserError, match="not both"):
        lib.ask(FOLLOW, conversation_id=cid, history=[Turn("user", FIRST)])


def test_an_unsaved_turn_reads_the_conversation_and_writes_nothing(lib: Library) -> None:
    first = lib.ask(FIRST)
    cid = first.conversation_id
    assert cid is not None
    before = lib.store.list_conversations(("public",), limit=200)
    unsaved = lib.ask(FOLLOW, conversation_id=cid, save=False)
    assert unsaved.conversation_id is None  # nothing stored: no conversation holds this turn
    assert "follow_up" in route_details(unsaved.trace.steps)  # ...but the history was read
    assert [t.run.run_id for t in lib.conversation(cid).turns] == [first.run_id]
    assert lib.store.get_run(unsaved.run_id, ("public",)) is None
    assert lib.ask(FIRST, save=False).conversation_id is None  # no new conversation either
    assert lib.store.list_conversations(("public",), limit=200) == before


def test_a_caller_that_keeps_its_own_conversation_stores_none(lib: Library) -> None:
    from sunlib.contracts import Turn

    before = lib.store.list_conversations(("public",), limit=200)
    kept = lib.ask(FIRST, start_conversation=False)  # /v1 and the MCP tools
    assert kept.conversation_id is None and lib.store.get_run(kept.run_id, ("public",)) is not None
    sent = lib.ask(FOLLOW, history=[Turn("user", FIRST)])  # a chat client's own history
    assert sent.conversation_id is None and "follow_up" in route_details(sent.trace.steps)
    assert lib.store.list_conversations(("public",), limit=200) == before


def test_sunlib_ask_names_its_conversation(lib: Library) -> None:
    r = sunlib("ask", FIRST, "--vault", str(lib.vault), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [t.run.run_id for t in lib.conversation(data["conversation_id"]).turns] == [data["run_id"]]
    r = sunlib("ask", FIRST, "--vault", str(lib.vault))
    assert "follow up with: sunlib chat --conversation conv_" in r.stdout


def test_a_turn_asked_as_more_principals_hides_the_conversation_from_fewer(lib: Library) -> None:
    cid = lib.ask(FIRST).conversation_id
    assert cid is not None
    lib.ask(OPS, principals=["public", "ops"], conversation_id=cid)
    assert len(lib.conversation(cid, ["public", "ops"]).turns) == 2
    with pytest.raises(NotFound):
        lib.conversation(cid, ["public"])
    with pytest.raises(NotFound):  # and so it cannot be continued as public either
        lib.ask(FOLLOW, conversation_id=cid)
    assert cid not in {c.conversation_id for c in lib.store.list_conversations(("public",), limit=200)}


# -- HTTP ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(lib: Library) -> Api:
    return Api(create_app(lib))


def test_ask_returns_a_conversation_that_a_follow_up_continues(api: Api) -> None:
    first = api.post("/api/ask", json={"question": FIRST}).json()
    cid = first["conversation_id"]
    second = api.post("/api/ask", json={"question": FOLLOW, "conversation_id": cid}).json()
    assert second["conversation_id"] == cid and second["question"] != FOLLOW
    (route,) = [s for s in second["trace"]["steps"] if s["name"] == Step.ROUTE]
    assert route["details"]["follow_up"]["standalone"] == second["question"]
    conv = api.get(f"/api/conversations/{cid}").json()
    assert [(t["position"], t["question"], t["standalone"], t["run_id"]) for t in conv["turns"]] == [
        (1, FIRST, None, first["run_id"]),
        (2, FOLLOW, second["question"], second["run_id"]),
    ]
    assert conv["turns"][0]["answer"] == first["answer"] and conv["turns"][0]["citations"] == first["citations"]
    listed = api.get("/api/conversations", params={"limit": 1}).json()
    assert [(c["conversation_id"], c["turns"], c["last_question"]) for c in listed["conversations"]] == [
        (cid, 2, FOLLOW)  # the most recently continued first
    ]
    assert api.get("/api/conversations", params={"limit": 201}).status_code == 422  # bounded


def test_the_stream_takes_and_returns_the_conversation(api: Api) -> None:
    events = sse(api.post("/api/ask/stream", json={"question": FIRST}).text)
    cid = events[-1][1]["conversation_id"]
    events = sse(api.post("/api/ask/stream", json={"question": FOLLOW, "conversation_id": cid}).text)
    assert events[-1][0] == "finish" and events[-1][1]["conversation_id"] == cid
    (route,) = [d for e, d in events if e == "step" and d["name"] == Step.ROUTE]
    assert route["details"]["follow_up"]["said"] == FOLLOW
    assert len(api.get(f"/api/conversations/{cid}").json()["turns"]) == 2


def test_an_unknown_conversation_is_a_404_on_every_route(api: Api) -> None:
    for method, url, body in (
        ("GET", "/api/conversations/conv_nope", None),
        ("POST", "/api/ask", {"question": FOLLOW, "conversation_id": "conv_nope"}),
        ("POST", "/api/ask/stream", {"question": FOLLOW, "conversation_id": "conv_nope"}),
    ):
        r = api.request(method, url, json=body)
        assert r.status_code == 404, (url, r.text)
        assert r.json() == {"error": "not_found", "message": "no conversation 'conv_nope' that you may read"}
    assert api.post("/api/ask", json={"question": FOLLOW, "conversation_id": "../x"}).status_code == 422


# -- sunlib chat -----------------------------------------------------------------------------

CONV_LINE = re.compile(r"conversation (conv_[0-9a-f]+) \(resume with")


def test_chat_keeps_one_conversation_and_quits_on_q(lib: Library) -> None:
    r = sunlib("chat", "--vault", str(lib.vault), input=f"{FIRST}\n\n{FOLLOW}\n:q\n{OPS}\n")
    assert r.returncode == 0, r.stderr
    (cid,) = CONV_LINE.findall(r.stdout)  # printed once, when the first turn saved it
    assert "[1]" in r.stdout and "citations" in r.stdout  # cited like `sunlib ask`
    assert f"asked as: {FOLLOW} (" in r.stdout
    turns = lib.conversation(cid).turns
    assert [t.said for t in turns] == [FIRST, FOLLOW]  # the blank line is skipped; nothing after :q
    resumed = sunlib("chat", "--vault", str(lib.vault), "--conversation", cid, input="what about its default?")
    assert resumed.returncode == 0, resumed.stderr  # ended by end of input
    assert f"resuming conversation {cid}: 2 turn(s)" in resumed.stdout
    assert [t.said for t in lib.conversation(cid).turns] == [FIRST, FOLLOW, "what about its default?"]


def test_chat_with_an_unknown_conversation_is_one_line(lib: Library) -> None:
    r = sunlib("chat", "--vault", str(lib.vault), "--conversation", "conv_nope", input="hello\n")
    assert r.returncode == 1
    assert r.stderr == "error: no conversation 'conv_nope' that you may read\n"


def test_chat_without_saving_keeps_the_turns_in_memory_only(lib: Library) -> None:
    before = lib.store.list_conversations(("public",), limit=200)
    r = sunlib("chat", "--vault", str(lib.vault), "--no-save", input=f"{FIRST}\n{FOLLOW}\n")
    assert r.returncode == 0, r.stderr
    assert f"asked as: {FOLLOW} (" in r.stdout  # the follow-up still had its history
    assert "run not saved" in r.stdout and not CONV_LINE.search(r.stdout)
    assert lib.store.list_conversations(("public",), limit=200) == before


def test_chat_agentic_saves_the_loop_in_the_turn(lib: Library) -> None:
    question = "How does BM25 search differ from dense search?"
    r = sunlib("chat", "--vault", str(lib.vault), "--agentic", input=question)
    assert r.returncode == 0, r.stderr
    (cid,) = CONV_LINE.findall(r.stdout)
    (turn,) = lib.conversation(cid).turns
    assert Step.AGENT in {s["name"] for s in turn.run.trace["steps"]}


def test_chat_streams_a_model_writers_draft_then_prints_the_verified_answer(
    lib: Library, chat_server: ChatServer
) -> None:
    def quote(body: dict[str, Any]) -> str:  # a faithful model: the first source's first line, cited
        cid, source = next(iter(sources(user_message(body)).items()))
        return f"{source['text'].splitlines()[0].strip()} [ref:{cid}]"

    chat_server.writer.reply = quote
    env = {
        "SUNLIB_ANSWER__WRITER": "openai",
        "SUNLIB_ANSWER__GATE_THRESHOLD": "0",
        "SUNLIB_ANSWER__GATE_THRESHOLD_BM25": "0",
        "SUNLIB_ANSWER__ANSWERABLE_THRESHOLD": "0",
        "SUNLIB_ANSWER__ROUTER": "rules",
        "SUNLIB_LLM__BASE_URL": chat_server.base_url,
        "SUNLIB_LLM__MODEL": "test",
        "SUNLIB_LLM__MAX_RETRIES": "0",
    }
    r = sunlib("chat", "--vault", str(lib.vault), "--no-save", input=f"{FIRST}\n", env=env)
    assert r.returncode == 0, r.stderr
    (body,) = chat_server.bodies("writer")
    assert body["stream"] is True  # the draft was asked for as a stream
    draft = quote(body)
    after = r.stdout.partition("answer (streaming, before verification):")[2]
    assert after, r.stdout
    assert draft in after  # the raw draft, markers and all, as it came
    assert "[1]" in after and "citations" in after  # then the verified answer, cited
    quiet = sunlib("chat", "--vault", str(lib.vault), "--no-save", "--no-stream", input=f"{FIRST}\n", env=env)
    assert quiet.returncode == 0 and "before verification" not in quiet.stdout and "[1]" in quiet.stdout
