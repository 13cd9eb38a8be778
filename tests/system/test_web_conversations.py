"""The Ask page as a conversation, and an agentic run in the run chain (browser, real server).

Two turns on the page: the first answer moves up into the thread, the follow-up goes with the
conversation's id and shows its standalone rewrite, "New conversation" starts over, and a saved
conversation comes back from "Recent conversations". With the Agentic toggle on, the run chain
nests the rounds (sub-question, query, hits, verdict) under the Agentic Loop span, with its
transitions. The sample vault's session e5 index (``e5_library``), served live as in
test_web_e2e.py; the browser fixtures are in conftest.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sunlib import Library
from sunlib.server.app import create_app
from sunlib.trace.steps import Step
from tests.support.browser import CHROMIUM
from tests.support.clients import Served, screenshot_dir

if CHROMIUM is None:
    pytest.skip("chromium is not installed (/usr/bin/chromium): the web UI test needs it", allow_module_level=True)
pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

FIRST = "What is the SUNLIB_HOME environment variable used for?"
FOLLOW = "and its default?"
COMPARISON = "How does BM25 search differ from dense search?"
DONE = "#answer.answered, #answer.refused, #answer.errored"
SCREENSHOTS = screenshot_dir()  # read at import: conftest's autouse fixture removes SUNLIB_* per test


@pytest.fixture(scope="module")
def url(e5_library: Library) -> Iterator[str]:
    lib = Library.open(e5_library.vault, embedding={"provider": "e5"}, index_dir=e5_library.index_dir)
    try:
        with Served(create_app(lib)) as served:
            yield served
    finally:
        lib.close()


def ask(page: Any, question: str) -> str:
    """Ask from the box and wait for this question's final state: answered|refused|errored."""
    page.fill("#question", question)
    page.press("#question", "Enter")
    page.wait_for_function(
        "q => document.querySelector('#answer-question').textContent === q"
        " && document.querySelector('#answer').getAttribute('aria-busy') === 'false'",
        arg=question,
    )
    page.wait_for_selector(DONE)
    return page.eval_on_selector("#answer", "e => e.className.replace('answer', '').trim()")


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name))


def test_the_thread_keeps_the_turns_and_the_follow_up_shows_its_rewrite(url: str, page: Any) -> None:
    page.goto(url + "/")
    assert ask(page, FIRST) == "answered", page.inner_text("#answer")
    assert page.is_hidden("#thread") and page.input_value("#question") == ""
    status = page.inner_text("#conversation-status")
    (cid,) = re.findall(r"Conversation (conv_[0-9a-f]+)", status)
    assert page.is_visible("#new-conversation")

    assert ask(page, FOLLOW) != "errored", page.inner_text("#answer")
    turns = page.locator("#thread .turn")
    assert turns.count() == 1  # the first turn moved up; the follow-up is the answer below it
    assert turns.first.locator(".turn-question").inner_text() == FIRST
    assert turns.first.locator(".cite-chip").count() >= 1  # still cited
    rewrite = page.inner_text("#answer-standalone")
    assert rewrite.startswith(f"Asked as: {FOLLOW} (") and "SUNLIB_HOME" in rewrite
    saved = httpx.get(f"{url}/api/conversations/{cid}", timeout=30).json()["turns"]
    assert [(t["question"], t["standalone"]) for t in saved] == [
        (FIRST, None),
        (FOLLOW, rewrite.removeprefix("Asked as: ")),
    ]
    assert "2 turn(s)" in page.inner_text("#conversation-status")
    shot(page, "conversation.png")

    # a saved conversation comes back as the thread, and the next question continues it
    page.reload()
    page.click("#conversations > summary")
    page.locator(f"#conversation-list button[data-conversation-id='{cid}']").click()
    page.wait_for_function("document.querySelectorAll('#thread .turn').length === 2")
    assert page.locator("#thread .turn .standalone").inner_text() == rewrite

    page.click("#new-conversation")  # starts over: no thread, no id, a follow-up has no history
    assert page.is_hidden("#thread") and page.is_hidden("#answer")
    assert ask(page, FOLLOW) != "errored"
    assert page.is_hidden("#answer-standalone")
    assert cid not in page.inner_text("#conversation-status")


def test_an_agentic_run_nests_its_rounds_under_the_loop(url: str, page: Any) -> None:
    page.goto(url + "/")
    page.check("#agentic")
    assert ask(page, COMPARISON) != "errored", page.inner_text("#answer")
    page.click("#run-chain > summary")
    top = page.locator("#chain-steps > .step-card")
    names = [top.nth(i).get_attribute("data-step") for i in range(top.count())]
    assert names == [Step.ROUTE, Step.AGENT, Step.SUMMARY], names
    agent = page.locator(f"#chain-steps > .step-card[data-step='{Step.AGENT}']")
    inside = agent.locator(":scope > ol.step-children > .step-card")
    kinds = [inside.nth(i).get_attribute("data-step") for i in range(inside.count())]
    assert kinds[:3] == [Step.REWRITE, Step.PLAN, Step.RETRIEVAL_PLAN], kinds
    assert kinds.count(Step.ROUND) >= 2, kinds  # a comparison: two sub-questions
    first_round = agent.locator(f":scope > ol.step-children > .step-card[data-step='{Step.ROUND}']").first
    caption = first_round.locator(":scope > details > summary .step-caption").inner_text()
    assert re.fullmatch(r"sub-question 1: .+ · \d+ hits · verdict: (covered|gap)", caption), caption
    assert first_round.locator(f":scope > ol.step-children > .step-card[data-step='{Step.SELECT}']").count() == 1
    assert "sub-question(s)" in agent.locator(":scope > details > summary .step-caption").inner_text()

    run_id = page.inner_text("#chain-summary .run-id a")
    (saved,) = [
        s for s in httpx.get(f"{url}/api/runs/{run_id}", timeout=30).json()["trace"]["steps"] if s["name"] == Step.AGENT
    ]
    moves = saved["details"]["transitions"]
    transitions = agent.locator(":scope > details.transitions")
    assert transitions.locator("summary").inner_text() == f"Transitions ({len(moves)})"
    transitions.locator("summary").click()
    assert transitions.locator("li").count() == len(moves)
    assert transitions.locator("li").first.inner_text().startswith(f"{moves[0]['state']} → {moves[0]['next']}")
    agent.scroll_into_view_if_needed()
    shot(page, "agentic-run.png")
