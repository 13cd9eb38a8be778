"""The web UI end to end: a real server on loopback, driven by Debian's chromium through playwright.

Ask (streamed over SSE) gives a cited answer whose citation chips open the note with the cited
span marked and scrolled into view; the run chain shows the eleven steps; an unanswerable question
shows the refusal state with its reason; search results open the note at their span; note text
with HTML and JavaScript in it is shown as text and never runs. Screenshots go to a temp folder, or
to docs/screenshots/ under ``make screenshots`` (``clients.screenshot_dir``).

The sample vault is the session's e5 index (``e5_library``), opened again read-mostly; the
injection test indexes its own tiny vault with the hash embedder, so nothing shared is modified.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from sunlib import Library
from sunlib.server.app import WEB_DIR, create_app
from sunlib.trace.steps import ASK_STEPS, RETRIEVAL_STEPS, Step
from tests.harness.llm_server import ChatServer
from tests.harness.llm_server import Script as LLMScript
from tests.harness.llm_server import sources as llm_sources
from tests.harness.llm_server import start as start_llm
from tests.harness.llm_server import user_message as llm_user_message
from tests.support.browser import CHROMIUM
from tests.support.clients import screenshot_dir

if CHROMIUM is None:
    pytest.skip("chromium is not installed (/usr/bin/chromium): the web UI test needs it", allow_module_level=True)
pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

SCREENSHOTS = screenshot_dir()
STEPS = list(ASK_STEPS)  # the default run chain, from the registry
CITED_Q = "What is the SUNLIB_HOME environment variable used for?"
REFUSED_Q = "Which port does the sunlib web server listen on?"


@contextmanager
def serve(lib: Library, prepare: Callable[[Library], None] | None = None, watch: bool = False) -> Iterator[str]:
    """The real app under uvicorn on a free loopback port, in a background thread; ``prepare`` sees
    the library the app serves before the first request."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(lib, watch=watch)
    if prepare is not None:
        prepare(app.state.sunlib.library)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name="uvicorn-e2e")
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def e5_server(e5_library: Library) -> Iterator[str]:
    lib = Library.open(e5_library.vault, embedding={"provider": "e5"}, index_dir=e5_library.index_dir)
    try:
        with serve(lib) as url:
            yield url
    finally:
        lib.close()


INJECTION = (
    "# Marshmallow <b>notes</b>\n\n"
    "The marshmallow recipe needs gelatin, sugar and vanilla syrup.\n"
    'Payload one: <img src=x onerror="window.__pwned=1"> and payload two: <script>window.__pwned=2</script>\n'
)
PAYLOADS = ('<img src=x onerror="window.__pwned=1">', "<script>window.__pwned=2</script>")


TOMATOES = "Tomatoes need sun and water every day."
OPEN_GATE = {"gate_threshold": 0.0, "reader_threshold": 0.0, "gate_threshold_bm25": 0.0, "answerable_threshold": 0.0}


def tiny_vault(root: Path) -> Path:
    """Two notes: one carrying HTML/JS payloads, one plain."""
    vault = root / "vault"
    (vault / "kitchen").mkdir(parents=True)
    (vault / "kitchen" / "marshmallow.md").write_text(INJECTION, encoding="utf-8")
    (vault / "garden.md").write_text(f"# Garden\n\n{TOMATOES}\n", encoding="utf-8")
    return vault


@pytest.fixture(scope="module")
def injection_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tiny vault with the hash embedder and the extractive writer, the gate open (threshold 0)."""
    vault = tiny_vault(tmp_path_factory.mktemp("web_injection"))
    lib = Library.open(vault, embedding={"provider": "hash"}, answer=OPEN_GATE)
    lib.index()
    try:
        with serve(lib) as url:
            yield url
    finally:
        lib.close()


@pytest.fixture(scope="module")
def llm() -> Iterator[ChatServer]:
    server, stop = start_llm()
    try:
        yield server
    finally:
        stop()


@pytest.fixture(scope="module")
def streaming_server(tmp_path_factory: pytest.TempPathFactory, llm: ChatServer) -> Iterator[str]:
    """The tiny vault answered by a (local, scripted) OpenAI-compatible writer that streams tokens."""
    lib = Library.open(
        tiny_vault(tmp_path_factory.mktemp("web_stream")),
        embedding={"provider": "hash"},
        answer={"writer": "openai", "router": "rules", **OPEN_GATE},
        llm={"base_url": llm.base_url, "model": "test-model", "timeout_s": 10, "max_retries": 0},
    )
    lib.index()
    try:
        with serve(lib) as url:
            yield url
    finally:
        lib.close()


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name))


def ask(page: Any, question: str) -> str:
    """Type the question, press Enter, wait for the final state; returns answered|refused|errored."""
    page.fill("#question", question)
    page.press("#question", "Enter")
    page.wait_for_selector("#answer.answered, #answer.refused, #answer.errored")
    return page.eval_on_selector("#answer", "e => e.className.replace('answer', '').trim()")


def assert_visible_in(page: Any, inner: str, outer: str) -> None:
    """The element's top edge lies inside the scroll box's visible area."""
    box = page.locator(outer).bounding_box()
    mark = page.locator(inner).bounding_box()
    assert box and mark
    assert box["y"] - 1 <= mark["y"] < box["y"] + box["height"], (mark, box)


def norm(text: str) -> str:
    return " ".join(text.split())


def test_cited_answer_opens_the_cited_span_and_shows_the_run_chain(e5_server: str, page: Any) -> None:
    page.goto(e5_server + "/")
    assert page.get_attribute("#answer-text", "aria-live") == "polite"
    assert ask(page, CITED_Q) == "answered", page.inner_text("#answer")
    chips = page.locator("#answer-text .cite-chip")
    assert chips.count() >= 1
    labels = [chips.nth(i).inner_text() for i in range(chips.count())]
    numbers = [int(x.strip("[]")) for x in labels]
    assert numbers[0] == 1 and max(numbers) == len(set(numbers)), labels  # numbered by first appearance
    assert "[ref:" not in page.inner_text("#answer-text")
    assert page.locator("#source-list .source-card").count() >= 1
    # the reader's probability (and its span, highlighted) on the cited source's card
    reader_line = page.locator("#source-list .source-card .reader-line").first
    assert re.fullmatch(r"reader [01](\.\d+)?( · .+)?", norm(reader_line.inner_text()), re.S), reader_line.inner_text()
    shot(page, "answer-with-citations.png")

    # the same question over plain JSON: the citation each chip stands for
    frame = httpx.post(e5_server + "/api/ask", json={"question": CITED_Q}, timeout=60).json()
    citations = {c["chunk_id"]: c for c in frame["citations"]}
    chunk_id = chips.first.get_attribute("data-chunk-id")
    assert chunk_id in citations
    chips.first.click()
    mark = page.wait_for_selector("#viewer-body mark.cited")
    assert norm(citations[chunk_id]["quote"]) in norm(mark.text_content() or "")
    # the whole note is shown (the mark sits inside its text), not only the quote
    note_text = page.locator("#viewer-body pre.note-text").text_content() or ""
    assert len(note_text) > len(mark.text_content() or "") and note_text.lstrip().startswith(("---", "#"))
    assert page.inner_text("#viewer-title") == citations[chunk_id]["title"]
    assert_visible_in(page, "#viewer-body mark.cited", "#viewer-body")
    assert page.locator("#viewer-body .warning, #viewer-body .error").count() == 0
    shot(page, "cited-span.png")

    page.click("#run-chain > summary")
    cards = page.locator("#chain-steps .step-card")
    cards.nth(len(STEPS) - 1).wait_for()
    assert [cards.nth(i).get_attribute("data-step") for i in range(cards.count())] == STEPS
    gate = page.locator(f".step-card[data-step='{Step.SELECT}']")
    gate.locator("summary").first.click()
    assert gate.locator("details").first.get_attribute("open") is not None
    details = gate.locator(".step-body").inner_text()
    for key in ("gate_score", "threshold", "top_cosine", "coverage", "reader", "probability", "span"):
        assert key in details
    summary = page.inner_text("#chain-summary")
    assert "Total latency" in summary and "run_" in summary
    gate.scroll_into_view_if_needed()
    page.evaluate("document.querySelector(\"#run-chain\").scrollIntoView({block: 'start'})")
    shot(page, "run-chain.png")


def test_refusal_is_a_state_with_its_reason(e5_server: str, page: Any) -> None:
    page.goto(e5_server + "/")
    assert ask(page, REFUSED_Q) == "refused", page.inner_text("#answer")
    assert page.is_visible("#refusal")
    assert "gate score" in page.inner_text("#refusal-reason")
    assert page.is_hidden("#answer-error")
    assert page.locator("#answer-text .cite-chip").count() == 0
    assert page.inner_text("#answer-state") == "Refused"
    shot(page, "refusal.png")

    # the saved run reloads from /api/runs with its outcome and its chain
    page.reload()
    page.click("#history > summary")
    page.locator("#run-list button", has_text=REFUSED_Q).first.click()
    page.wait_for_selector("#answer.refused")
    assert "gate score" in page.inner_text("#refusal-reason")
    assert page.locator("#chain-steps .step-card").count() == len(STEPS)


def test_search_result_opens_the_note_at_its_span(e5_server: str, page: Any) -> None:
    page.goto(e5_server + "/#search")
    page.fill("#search-query", "environment variables for the index folder")
    page.select_option("#search-mode", "hybrid")
    page.press("#search-query", "Enter")
    first = page.locator("#search-results .result").first
    first.wait_for()
    assert page.locator("#search-results .result mark.hl").count() >= 1  # query matches highlighted
    first.locator(".result-open").click()
    page.wait_for_selector("#viewer-body mark.cited")
    assert_visible_in(page, "#viewer-body mark.cited", "#viewer-body")
    shot(page, "search.png")

    # a folder filter narrows the results to that folder
    page.fill("#search-folder", "reference")
    page.press("#search-query", "Enter")
    page.wait_for_function("document.querySelector('#search-status').textContent.includes('results')")
    paths = page.locator("#search-results .result .path").all_inner_texts()
    assert paths and all(p.startswith("reference/") for p in paths), paths


def test_answer_streams_in_token_by_token(streaming_server: str, llm: ChatServer, page: Any) -> None:
    def reply(body: dict[str, Any]) -> str:
        (chunk_id,) = [cid for cid, src in llm_sources(llm_user_message(body)).items() if TOMATOES in src["text"]]
        return f"{TOMATOES} [ref:{chunk_id}]"

    release = threading.Event()  # the writer holds its stream after the first delta until this is set
    llm.writer = LLMScript(reply=reply, delta_size=5, after_first_delta=release)
    # every state of the answer text as the page renders it
    page.add_init_script(
        """window.__states = [];
        new MutationObserver(() => {
          const t = document.querySelector('#answer-text');
          if (t) window.__states.push(t.textContent);
        }).observe(document, {subtree: true, childList: true, characterData: true});"""
    )
    page.goto(streaming_server + "/")
    page.fill("#question", "What do tomatoes need?")
    page.click("#ask-btn")
    page.wait_for_function("document.querySelector('#answer-text').textContent.startsWith('Tomat')")
    assert "streaming" in (page.get_attribute("#answer", "class") or "")  # first tokens shown mid-stream
    assert page.get_attribute("#answer", "aria-busy") == "true"
    release.set()
    page.wait_for_selector("#answer.answered")
    assert llm.writer.waited_ok is True
    assert page.inner_text("#answer-text").startswith(TOMATOES)
    assert page.locator("#answer-text .cite-chip:not([disabled])").count() == 1
    states = page.evaluate("window.__states")
    assert not any("[r" in s for s in states), states  # a half-received [ref:…] marker never shows
    page.locator("#answer-text .cite-chip").click()
    assert TOMATOES in (page.wait_for_selector("#viewer-body mark.cited").text_content() or "")


def test_keyboard_tab_order_from_the_question(e5_server: str, page: Any) -> None:
    page.goto(e5_server + "/")
    page.focus("#question")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "ask-btn"
    for tab in page.locator(".tab").all():
        assert tab.evaluate("e => e.tagName") == "BUTTON"


def test_notes_browser_lists_and_opens_notes(e5_server: str, page: Any) -> None:
    if httpx.get(e5_server + "/api/notes", params={"limit": 1}).status_code == 404:
        pytest.skip("GET /api/notes is not implemented yet (src/sunlib/server/routes_notes.py)")
    page.goto(e5_server + "/#notes")
    item = page.locator("#note-list .note-item").first
    item.wait_for()
    assert "of" in page.inner_text("#notes-status")
    page.fill("#notes-folder", "reference")
    page.press("#notes-folder", "Enter")
    page.wait_for_function(
        "[...document.querySelectorAll('#note-list .note-item .path')]"
        ".every(p => p.textContent.startsWith('reference/'))"
    )
    page.locator("#note-list .note-open").first.click()
    page.wait_for_function("document.querySelector('#viewer-body pre.note-text')?.textContent.length > 0")


def test_note_html_and_script_render_as_text(injection_server: str, page: Any) -> None:
    page.goto(injection_server + "/")
    assert ask(page, "What does the marshmallow recipe need?") == "answered", page.inner_text("#answer")
    page.locator("#answer-text .cite-chip").first.click()
    page.wait_for_selector("#viewer-body mark.cited")
    viewer = page.locator("#viewer-body").inner_text()
    for payload in PAYLOADS:
        assert payload in viewer
    assert "<b>notes</b>" in page.inner_text("#viewer-title")  # the title is text too

    page.click(".tab[data-page='search']")
    page.fill("#search-query", "payload marshmallow")
    page.press("#search-query", "Enter")
    page.locator("#search-results .result").first.wait_for()
    time.sleep(0.3)  # an onerror handler would have fired by now
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img, script:not([src])").count() == 0


@pytest.fixture(scope="module")
def nested_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tiny vault asked through the agentic loop: its retrieval, reranking and selection run in rounds."""
    lib = Library.open(
        tiny_vault(tmp_path_factory.mktemp("web_nested")),
        embedding={"provider": "hash"},
        answer={**OPEN_GATE, "mode": "agentic"},
    )
    lib.index()
    try:
        with serve(lib) as url:
            yield url
    finally:
        lib.close()


def test_a_round_nests_in_the_run_chain(nested_server: str, page: Any) -> None:
    top = [Step.ROUTE, Step.AGENT, Step.SUMMARY]
    loop = [Step.REWRITE, Step.PLAN, Step.RETRIEVAL_PLAN, Step.ROUND, Step.CONTEXT, Step.WRITE, Step.VERIFY]
    inside = [*RETRIEVAL_STEPS, Step.RERANK, Step.SELECT]
    agent = f"#chain-steps > .step-card[data-step='{Step.AGENT}'] > ol.step-children > .step-card"
    round_card = f"{agent}[data-step='{Step.ROUND}']"

    def chain() -> tuple[list[str | None], list[str | None], list[str | None]]:
        levels = (
            page.locator("#chain-steps > .step-card"),
            page.locator(agent),
            page.locator(f"{round_card} > ol.step-children > .step-card"),
        )
        return tuple([level.nth(i).get_attribute("data-step") for i in range(level.count())] for level in levels)  # type: ignore[return-value]

    question = "What does the marshmallow recipe need?"
    page.goto(nested_server + "/")
    assert ask(page, question) == "answered", page.inner_text("#answer")  # streamed: the round ends after its steps
    assert chain() == (top, loop, inside)
    assert page.locator("#chain-steps .step-card.pending").count() == 0
    round_out = page.locator(f"{round_card} .step-out").first.text_content() or ""
    assert round_out.startswith("part 1 round 1: covered"), round_out
    assert page.text_content("#chain-count") == f"({len(top) + len(loop) + len(inside)} steps)"

    page.reload()  # the saved run: the round comes before its steps
    page.click("#history > summary")
    page.locator("#run-list button", has_text=question).first.click()
    page.wait_for_selector("#answer.answered")
    assert chain() == (top, loop, inside)


def test_index_status_and_rebuild(injection_server: str, page: Any) -> None:
    page.goto(injection_server + "/#index")
    page.wait_for_selector("#index-status table")
    text = page.inner_text("#index-status")
    assert re.search(r"notes\s+2", text), text
    assert "vectors pending" in text
    page.click("#rebuild-btn")
    page.wait_for_function("document.querySelector('#rebuild-status').textContent.startsWith('Done')")
    assert "2 unchanged" in page.inner_text("#rebuild-status")
    assert page.is_enabled("#rebuild-btn")


@pytest.fixture(scope="module")
def watch_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The tiny vault served with its watcher on (as ``sunlib serve`` runs by default)."""
    vault = tiny_vault(tmp_path_factory.mktemp("web_watch"))
    lib = Library.open(vault, embedding={"provider": "hash"})
    lib.index()
    try:
        with serve(lib, watch=True) as url:
            yield url, vault
    finally:
        lib.close()


def test_index_page_shows_each_file_and_follows_the_vault_live(watch_server: tuple[str, Path], page: Any) -> None:
    url, vault = watch_server
    page.goto(url + "/#index")
    page.wait_for_selector('#files-table tr[data-path="garden.md"]')
    assert "live" in page.inner_text("#files-live")
    (vault / "orchard.md").write_text("# Orchard\n\nApples and pears.\n", encoding="utf-8")
    row = page.wait_for_selector('#files-table tr[data-path="orchard.md"]')  # over SSE, no reload
    page.wait_for_function(
        "document.querySelector('#files-table tr[data-path=\"orchard.md\"] .badge').textContent === 'embedded'"
    )
    assert row is not None
    (vault / "orchard.md").unlink()
    page.wait_for_selector('#files-table tr[data-path="orchard.md"]', state="detached")


def test_ui_is_three_static_files_that_never_build_html_from_data() -> None:
    files = {name: (WEB_DIR / name).read_text(encoding="utf-8") for name in ("index.html", "app.js", "app.css")}
    assert '"/static/app.js"' in files["index.html"] and '"/static/app.css"' in files["index.html"]
    for name, text in files.items():
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text), f"{name} loads something from elsewhere"
        assert "@import" not in text and "@font-face" not in text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in files["app.js"], sink
    for step in Step:  # the step names come from GET /api/steps
        assert f'"{step}"' not in files["app.js"] and f"'{step}'" not in files["app.js"], step


def test_a_streamed_sentence_the_verifier_drops_leaves_the_answer(
    streaming_server: str, llm: ChatServer, page: Any
) -> None:
    invented = "Tomatoes also sing to the moon every night."

    def reply(body: dict[str, Any]) -> str:
        (chunk_id,) = [cid for cid, src in llm_sources(llm_user_message(body)).items() if TOMATOES in src["text"]]
        return f"{TOMATOES} [ref:{chunk_id}] {invented} [ref:{chunk_id}]"

    llm.writer = LLMScript(reply=reply, delta_size=8)
    page.goto(streaming_server + "/")
    assert ask(page, "What do tomatoes need?") == "answered"
    # the draft streamed whole; the verified answer shown at the end holds only what its citation says
    assert norm(page.inner_text("#answer-text")).startswith(norm(TOMATOES))
    assert "moon" not in page.inner_text("#answer-text")
    assert "1 unsupported sentence(s) dropped by the citation verifier" in page.inner_text("#answer-meta")


@contextmanager
def framing_page(target: str) -> Iterator[str]:
    """A page on another origin (its own port) that frames ``target``, as a clickjacking page would."""
    import http.server

    html = f'<!doctype html><title>framer</title><iframe id="f" src="{target}" width="800" height="600"></iframe>'

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


def test_another_origin_cannot_frame_the_ui_or_the_report(injection_server: str, page: Any) -> None:
    """X-Frame-Options and CSP frame-ancestors on every page; the UI's own policy."""
    ui = httpx.get(injection_server + "/")
    assert ui.headers["x-frame-options"] == "SAMEORIGIN"
    assert "frame-ancestors 'self'" in ui.headers["content-security-policy"]
    assert "script-src 'self'" in ui.headers["content-security-policy"]
    api = httpx.get(injection_server + "/api/steps")
    assert api.headers["x-frame-options"] == "SAMEORIGIN"
    context = page.context.browser.new_context()  # the page fixture's context bypasses CSP: not this one
    try:
        guarded = context.new_page()
        errors: list[str] = []
        guarded.on("pageerror", lambda exc: errors.append(str(exc)))
        with framing_page(injection_server + "/") as framer:
            guarded.goto(framer)
            guarded.wait_for_timeout(1500)
            frame = next(f for f in guarded.frames if f is not guarded.main_frame)
            # the blocked frame holds Chromium's error page, never sunlib's UI
            assert frame.query_selector("#question") is None
        guarded.goto(injection_server + "/")  # sunlib's own page runs under its policy
        guarded.fill("#question", "What does the marshmallow recipe need?")
        guarded.click("#ask-btn")
        guarded.wait_for_selector("#answer.answered, #answer.refused", timeout=60_000)
        assert guarded.locator("#answer.answered").count() == 1 and not errors, errors
    finally:
        context.close()
