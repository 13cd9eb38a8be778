"""Conversations: ``Library.ask(..., conversation_id=...)`` keeps the thread in the index.

The earlier turns come back as the history of the next message (so the follow-up rule runs and
shows in the Route step, as it does for a chat client's history), each saved run becomes the
next turn, and a conversation is readable only by principals that could read every one of its
runs. One private copy of the session's hash index serves the module (each test starts its own
conversations, so they do not see each other's turns).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunlib import Library
from sunlib.errors import NotFound, UserError
from sunlib.library import DB_NAME
from sunlib.steps import Step

from conftest import SAMPLE_VAULT

FIRST = "What is the SUNLIB_HOME environment variable used for?"
FOLLOW = "and its default?"
OPS = "When is the rebuild window?"


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, hash_index: Path) -> Iterator[Library]:
    vault = tmp_path_factory.mktemp("conversations") / "vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".sunlib"))
    (vault / ".sunlib").mkdir()
    shutil.copyfile(hash_index / DB_NAME, vault / ".sunlib" / DB_NAME)
    with Library.open(vault, embedding={"provider": "hash"}) as library:
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
