"""/v1, the OpenAI-compatible API, as the official ``openai`` client meets it: one live uvicorn
server on loopback over the session's e5 index (real answers and refusals), with bearer tokens.

Each answer is checked against the pipeline's own frame for the same question and principals
(``Library.ask``), so the endpoint is shown to change nothing but the presentation: the
``[ref:...]`` markers numbered, the citations listed under those numbers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from sunlib import Library
from sunlib.answer.conversation import follow_up
from sunlib.contracts import Turn
from sunlib.server import create_app
from sunlib.server.routes_openai import Markers, numbered
from sunlib.text.refs import REF
from sunlib.text.tokens import estimate_tokens
from sunlib.trace.steps import Step
from tests.harness.llm_server import ChatServer, sources, user_message
from tests.support.clients import Api, Served

ANSWERED = "What is the SUNLIB_HOME environment variable used for?"
REFUSED = "Which port does the sunlib web server listen on?"
OPS_ONLY = "When is the weekly rebuild window?"  # answered from the ops runbook, refused without it
TOKENS = {"tok-public": [], "tok-ops": ["ops"]}
# an LLM writer behind an open gate (the hash embedder's scores would refuse everything)
OPEN_GATE = {
    "writer": "openai",
    "router": "rules",
    "gate_threshold": 0.0,
    "reader_threshold": 0.0,
    "gate_threshold_bm25": 0.0,
}
OPEN_GATE |= {"answerable_threshold": 0.0}


@pytest.fixture(scope="module")
def live(e5_library: Library) -> Iterator[tuple[str, Library]]:
    lib = e5_library.with_settings(server={"tokens": TOKENS})
    with Served(create_app(lib)) as url:
        yield url, lib


@pytest.fixture(scope="module")
def url(live: tuple[str, Library]) -> str:
    return live[0]


@pytest.fixture(scope="module")
def lib(live: tuple[str, Library]) -> Library:
    return live[1]


def client(url: str, token: str = "tok-public") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=60)


def ask(url: str, question: str, token: str = "tok-public", **kwargs: Any) -> Any:
    messages = kwargs.pop("messages", [{"role": "user", "content": question}])
    return client(url, token).chat.completions.create(model="sunlib", messages=messages, **kwargs)


def streamed(url: str, question: str, token: str = "tok-public") -> list[Any]:
    return list(ask(url, question, token, stream=True))


def extra(obj: Any, name: str) -> Any:
    """A field sunlib adds to OpenAI's objects (the client keeps unknown fields)."""
    return (obj.model_extra or {})[name]


def utf16_slice(text: str, start: int, end: int) -> str:
    return text.encode("utf-16-le")[2 * start : 2 * end].decode("utf-16-le")


def expected_content(lib: Library, question: str, principals: list[str]) -> str:
    """The pipeline's answer for the same question, markers numbered by first use."""
    order: dict[str, int] = {}
    answer = lib.ask(question, principals=principals, save=False).frame.answer
    return REF.sub(lambda m: f"[{order.setdefault(m.group(1), len(order) + 1)}]", answer)


# -- models, tokens, errors -------------------------------------------------------------------


def test_models_lists_sunlib_and_tokens_are_required(url: str) -> None:
    assert [m.id for m in client(url).models.list()] == ["sunlib"]
    assert client(url).models.retrieve("sunlib").id == "sunlib"
    with pytest.raises(openai.AuthenticationError):
        client(url, "nope").models.list()
    r = httpx.get(f"{url}/v1/models")  # no token at all
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error" and r.json()["error"]["code"] == "unauthorized"


def test_bad_bodies_are_4xx_in_openais_error_shape(url: str) -> None:
    auth = {"Authorization": "Bearer tok-public"}
    user = [{"role": "user", "content": "hi"}]
    cases = [
        ({"model": "sunlib"}, 400, "invalid_request"),  # no messages
        ({"model": "sunlib", "messages": []}, 400, "invalid_request"),
        ({"model": "sunlib", "messages": [{"role": "wizard", "content": "x"}]}, 400, "invalid_request"),
        ({"model": "sunlib", "messages": user, "n": 2}, 400, "invalid_request"),
        ({"model": "sunlib", "messages": user, "temperature": "hot"}, 400, "invalid_request"),
        ({"model": "sunlib", "messages": [*user, {"role": "assistant", "content": "x"}]}, 400, "bad_request"),
        ({"model": "sunlib", "messages": [{"role": "user", "content": "  "}]}, 400, "bad_request"),
        ({"model": "gpt-4o", "messages": user}, 404, "model_not_found"),
    ]
    for payload, status, code in cases:
        r = httpx.post(f"{url}/v1/chat/completions", json=payload, headers=auth)
        assert r.status_code == status, (payload, r.text)
        error = r.json()["error"]
        assert set(error) == {"message", "type", "code", "param"} and error["code"] == code, r.text
        assert error["type"] == "invalid_request_error" and error["message"]
    r = httpx.post(
        f"{url}/v1/chat/completions", content=b"{not json", headers={**auth, "Content-Type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", r.text
    with pytest.raises(openai.BadRequestError):
        ask(url, "x", messages=[{"role": "system", "content": "be brief"}])
    with pytest.raises(openai.NotFoundError):
        client(url).chat.completions.create(model="gpt-4o", messages=user)  # type: ignore[arg-type]
    # the /api rules hold on /v1: a page from another site may not make the browser ask
    r = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "sunlib", "messages": user},
        headers={**auth, "Origin": "http://evil.test"},
    )
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", r.text


def test_a_body_over_the_limit_is_413_in_openais_shape(hash_library: Library) -> None:
    api = Api(create_app(hash_library.with_settings(server={"max_body_bytes": 2048})))
    big = {"model": "sunlib", "messages": [{"role": "user", "content": "index " * 400}]}
    r = api.post("/v1/chat/completions", json=big)  # declares its length
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "code", "param"} and error["code"] == "too_large", r.text
    assert error["type"] == "invalid_request_error" and "2048" in error["message"]
    r = api.post("/api/search", json={"query": "index " * 400})  # /api keeps its own shape
    assert r.status_code == 413 and r.json()["error"] == "too_large", r.text


# -- answers, citations, refusals --------------------------------------------------------------


def test_an_answer_carries_numbered_markers_and_exact_citations(url: str, lib: Library) -> None:
    # unknown and sampling fields are accepted and ignored
    r = ask(url, ANSWERED, temperature=0.2, max_tokens=50, user="u1", extra_body={"logit_bias": {}, "foo": 1})
    (choice,) = r.choices
    content = choice.message.content
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert content == expected_content(lib, ANSWERED, ["public"])  # the pipeline's answer, nothing else
    assert "SUNLIB_HOME" in content and "[ref:" not in content and "[1]" in content
    citations, meta = extra(r, "citations"), extra(r, "sunlib")
    assert meta["refused"] is False and meta["reason_code"] is None and meta["route"] == "rag"
    assert meta["run_id"].startswith("run_") and meta["unverified_markers"] == []
    assert [c["index"] for c in citations] == list(range(1, len(citations) + 1))
    used = [int(n) for n in dict.fromkeys(re.findall(r"\[(\d+)\]", content))]
    assert used == [c["index"] for c in citations]  # numbered in order of first use
    for c in citations:  # the quote is the exact passage at its UTF-16 offsets and lines
        note = (lib.vault / c["path"]).read_text(encoding="utf-8")
        assert utf16_slice(note, c["start"], c["end"]) == c["quote"] and c["quote"].strip()
        assert note.count("\n", 0, note.index(c["quote"])) + 1 == c["start_line"]
        assert c["heading"] == (" > ".join(c["heading_path"]) or None)
    assert any("SUNLIB_HOME" in c["quote"] for c in citations)
    assert r.usage.prompt_tokens == estimate_tokens(ANSWERED) and meta["usage"] == "estimated"
    assert r.usage.completion_tokens == estimate_tokens(content)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_the_stream_carries_the_same_answer_and_ends_with_citations(url: str) -> None:
    whole = ask(url, ANSWERED)
    chunks = streamed(url, ANSWERED)
    assert len({c.id for c in chunks}) == 1 and all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(deltas) > 3  # the extractive writer's one answer arrives in pieces
    assert "".join(deltas) == whole.choices[0].message.content
    *body, last = chunks
    assert [c.choices[0].finish_reason for c in body] == [None] * len(body)
    assert last.choices[0].finish_reason == "stop"
    assert extra(last, "citations") == extra(whole, "citations")
    assert extra(last, "sunlib")["refused"] is False and last.usage.total_tokens > 0
    with httpx.stream(  # on the wire: data-only events, the last one [DONE]
        "POST",
        f"{url}/v1/chat/completions",
        json={"model": "sunlib", "stream": True, "messages": [{"role": "user", "content": REFUSED}]},
        headers={"Authorization": "Bearer tok-public"},
        timeout=60,
    ) as r:
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert r.headers["content-type"].startswith("text/event-stream")
    assert data[-1] == "[DONE]"
    assert json.loads(data[-2])["sunlib"]["reason_code"] == "low_gate"
    first, piece = json.loads(data[0]), json.loads(data[1])
    assert first["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}
    ]
    assert set(piece) == {"id", "object", "created", "model", "choices", "system_fingerprint"}  # no extras yet


def test_a_refusal_is_an_ordinary_message_marked_by_sunlib(url: str, lib: Library) -> None:
    frame = lib.ask(REFUSED, principals=["public"], save=False).frame
    assert frame.refused
    for r in (ask(url, REFUSED), streamed(url, REFUSED)):
        if isinstance(r, list):
            content = "".join(c.choices[0].delta.content or "" for c in r)
            last = r[-1]
        else:
            content, last = r.choices[0].message.content, r
        assert content == frame.answer and content.startswith("I can't answer this from your notes: ")
        assert last.choices[0].finish_reason == "stop"
        meta = extra(last, "sunlib")
        assert meta["refused"] is True and meta["reason_code"] == "low_gate" == frame.refusals[0].code
        assert meta["refusal_reason"] == frame.refusal_reason
        assert meta["refusals"] == [{"code": x.code, "message": x.message} for x in frame.refusals]
        assert extra(last, "citations") == []


def test_a_public_token_never_gets_ops_evidence(url: str, lib: Library) -> None:
    ops = ask(url, OPS_ONLY, "tok-ops")
    assert extra(ops, "sunlib")["refused"] is False
    assert "internal/ops-runbook.md" in {c["path"] for c in extra(ops, "citations")}
    assert ops.choices[0].message.content == expected_content(lib, OPS_ONLY, ["public", "ops"])
    public, chunks = ask(url, OPS_ONLY), streamed(url, OPS_ONLY)
    for text in (public.model_dump_json(), *(c.model_dump_json() for c in chunks)):
        assert "ops-runbook" not in text and "Sunday" not in text and "internal/" not in text
    assert extra(public, "sunlib")["refused"] is True and extra(chunks[-1], "sunlib")["refused"] is True


# -- the conversation -------------------------------------------------------------------------


def route_details(url: str, run_id: str) -> dict[str, Any]:
    """The Intent Router step's details of a saved run."""
    run = httpx.get(f"{url}/api/runs/{run_id}", headers={"Authorization": "Bearer tok-public"}).json()
    (route,) = [s for s in run["trace"]["steps"] if s["name"] == Step.ROUTE]
    return dict(route["details"])


def test_a_follow_up_is_asked_standalone_and_shows_in_the_route_step(url: str, lib: Library) -> None:
    first = ask(url, ANSWERED)
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": ANSWERED},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": [{"type": "text", "text": "and its default?"}]},
    ]
    r = ask(url, "", messages=messages)
    meta = extra(r, "sunlib")
    rewrite = meta["follow_up"]
    assert rewrite["said"] == "and its default?" and rewrite["turn"] == 0
    assert rewrite["standalone"] == meta["question"] == "and its default? (SUNLIB_HOME environment variable)"
    assert route_details(url, meta["run_id"])["follow_up"] == rewrite
    assert "follow_up" not in route_details(url, extra(first, "sunlib")["run_id"])  # a lone question: as before
    # a new question in the same conversation stands on its own: the answer a single question gets
    messages[-1] = {"role": "user", "content": REFUSED}
    again = ask(url, "", messages=messages)
    assert extra(again, "sunlib")["follow_up"] is None
    assert again.choices[0].message.content == lib.ask(REFUSED, principals=["public"], save=False).frame.answer


def test_the_follow_up_rule() -> None:
    known = {"default", "port", "默", "认", "值"}

    def visible(names: Any) -> bool:
        return any(n in known for n in names)

    history = (Turn("user", "备份索引的命令是什么？"), Turn("assistant", "……"))
    zh = follow_up("那默认值呢？", history, visible)
    assert zh is not None and zh.standalone == "那默认值呢？ (备份索引 命令)" and "connective" in zh.reason
    en = follow_up("and its default?", (Turn("user", "What is the SUNLIB_HOME variable for?"),), visible)
    assert en is not None and en.standalone == "and its default? (SUNLIB_HOME variable)"
    unknown = follow_up("what about zyzzyva?", (Turn("user", "Which port does it use?"),), visible)
    assert unknown is not None and "no content term" in unknown.reason
    for standalone in ("Which port does the web server listen on?", "thanks!", "hello"):
        assert follow_up(standalone, history, visible) is None
    assert follow_up("and its default?", (Turn("assistant", "hello"),), visible) is None  # no earlier question


def test_markers_split_across_deltas_are_numbered_once() -> None:
    markers = Markers()
    parts = ["Snapshots rotate nightly. [re", "f:chk_a] They are checked [ref:chk_b][r", "ef: chk_a ]", " done ["]
    text = "".join(markers.feed(p) for p in parts) + markers.flush()
    assert text == "Snapshots rotate nightly. [1] They are checked [2][1] done ["
    assert numbered("".join(parts)) == (text, {"chk_a": 1, "chk_b": 2})


# -- an LLM writer: its own tokens stream through, markers numbered on the way ------------------


def test_an_llm_writers_tokens_stream_with_markers_numbered(hash_library: Library, chat_server: ChatServer) -> None:
    lib = hash_library.with_settings(
        answer=OPEN_GATE, llm={"base_url": chat_server.base_url, "model": "test", "max_retries": 0, "timeout_s": 30}
    )

    def reply(body: dict[str, Any]) -> str:  # quote two sources, each cited by its chunk id
        cited = list(sources(user_message(body)).items())[:2]
        lines = [next(ln for ln in s["text"].split("\n") if len(ln) > 40 and ln[0].isalpha()) for _, s in cited]
        return "\n\n".join(f"{line} [ref:{cid}]" for line, (cid, _) in zip(lines, cited, strict=True))

    chat_server.writer.reply = reply  # streamed 6 characters a delta: markers arrive split
    chat_server.writer.usage = {"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366}
    api = Api(create_app(lib))
    payload = {"model": "sunlib", "messages": [{"role": "user", "content": "How are nightly snapshots rotated?"}]}
    whole = api.post("/v1/chat/completions", json=payload).json()
    r = api.post("/v1/chat/completions", json={**payload, "stream": True})
    data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    content = whole["choices"][0]["message"]["content"]
    deltas = [c["choices"][0]["delta"].get("content") or "" for c in chunks]
    assert "".join(deltas) == content and content.endswith("[2]") and "\n\n" in content
    assert len([d for d in deltas if d]) > 10  # the LLM's own deltas, not one block
    assert all("[ref" not in d and "ref:" not in d for d in deltas)
    final = chunks[-1]
    assert final["sunlib"]["refused"] is False and whole["sunlib"]["refused"] is False
    assert [c["index"] for c in final["citations"]] == [1, 2] and final["citations"] == whole["citations"]
    for usage in (whole["usage"], final["usage"]):
        assert usage["prompt_tokens"] == 321 and usage["completion_tokens"] == 45
    assert final["sunlib"]["usage"] == whole["sunlib"]["usage"] == "reported"


def test_without_tokens_v1_serves_loopback_clients_and_hosts_only(hash_library: Library) -> None:
    api = Api(create_app(hash_library))
    assert api.get("/v1/models").json()["data"][0]["id"] == "sunlib"  # no token needed on loopback
    for r in (
        Api(api.app, host="10.1.2.3").get("/v1/models"),  # another machine
        api.get("/v1/models", headers={"Host": "rebind.example:8765"}),  # DNS rebinding
    ):
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", r.text
    r = api.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text


def test_a_streamed_draft_the_verifier_rejects_is_followed_by_the_refusal(
    hash_library: Library, chat_server: ChatServer
) -> None:
    lib = hash_library.with_settings(
        answer=OPEN_GATE, llm={"base_url": chat_server.base_url, "model": "test", "max_retries": 0, "timeout_s": 30}
    )

    def reply(body: dict[str, Any]) -> str:  # cites a real chunk for a claim it does not make
        cid = next(iter(sources(user_message(body))))
        return f"Zebras migrate across the purple ocean every winter. [ref:{cid}]"

    chat_server.writer.reply = reply
    api = Api(create_app(lib))
    payload = {"model": "sunlib", "messages": [{"role": "user", "content": "How are nightly snapshots rotated?"}]}
    whole = api.post("/v1/chat/completions", json=payload).json()
    assert whole["sunlib"]["reason_code"] == "unsupported_draft" and whole["citations"] == []
    refusal = whole["choices"][0]["message"]["content"]
    assert refusal.startswith("I can't answer this from your notes: ")
    r = api.post("/v1/chat/completions", json={**payload, "stream": True})
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    # what was streamed stays; the refusal follows it, and [1] is marked as not verified
    assert content == f"Zebras migrate across the purple ocean every winter. [1]\n\n{refusal}"
    final = chunks[-1]
    assert final["sunlib"]["refused"] is True and final["sunlib"]["unverified_markers"] == [1]
    assert final["citations"] == [] and final["choices"][0]["finish_reason"] == "stop"


def test_a_sentence_the_verifier_drops_is_left_out_and_named(hash_library: Library, chat_server: ChatServer) -> None:
    lib = hash_library.with_settings(
        answer=OPEN_GATE, llm={"base_url": chat_server.base_url, "model": "test", "max_retries": 0, "timeout_s": 30}
    )
    invented = "Zebras migrate across the purple ocean every winter."

    def reply(body: dict[str, Any]) -> str:  # one quoted sentence, cited; one invented, citing the same chunk
        cid, src = next(iter(sources(user_message(body)).items()))
        return f"{src['text'].split('.')[0].strip()}. [ref:{cid}] {invented} [ref:{cid}]"

    chat_server.writer.reply = reply
    api = Api(create_app(lib))
    payload = {"model": "sunlib", "messages": [{"role": "user", "content": "How are nightly snapshots rotated?"}]}
    whole = api.post("/v1/chat/completions", json=payload).json()
    assert whole["sunlib"]["refused"] is False and whole["sunlib"]["dropped"] == [invented]
    assert "Zebras" not in whole["choices"][0]["message"]["content"] and len(whole["citations"]) == 1
    r = api.post("/v1/chat/completions", json={**payload, "stream": True})
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    # a stream sends the draft as it is written: the final chunk names what the verifier took out
    assert chunks[-1]["sunlib"]["dropped"] == [invented]
