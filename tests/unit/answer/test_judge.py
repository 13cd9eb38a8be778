"""The answerability judge against the real local chat server (tests/harness/llm_server.py).

The judge's calls are told apart from the writer's by their system prompt (the server's
``judge`` script); the hash embedder keeps indexing fast and the refusal gate is opened
(thresholds 0), so every question reaches the judge.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.answer.single.judge import JUDGE_MAX_TOKENS, JUDGE_PROMPT, parse_verdict
from sunlib.errors import ConfigError
from sunlib.evaluate import evaluate_rag, load_qa
from sunlib.server.app import create_app
from sunlib.trace.steps import ASK_STEPS, Step, describe
from tests.harness.llm_server import JUDGE_MARKS, ChatServer, sources, system_message, user_message
from tests.support.clients import Api, llm_libraries, step
from tests.support.sse import sse

QUESTION = "When does the quokka festival in Vellington open?"
QUOKKA_SENTENCE = "The quokka festival in Vellington opens every spring with a lantern parade along the harbour."
QUOKKA_NOTE = f"# Quokka festival\n\n{QUOKKA_SENTENCE}\n\nTickets are sold at the old lighthouse.\n"
ZH_QUESTION = "袋鼠节在哪个月份开幕？"
ZH_SENTENCE = "袋鼠节每年三月在海港开幕，开幕当晚有灯笼游行。"
ZH_NOTE = f"# 袋鼠节\n\n{ZH_SENTENCE}\n\n门票在老灯塔出售。\n"
NO = '{"answerable": false, "reason": "the notes name the festival but not its opening day"}'


@pytest.fixture
def open_lib(vault: Path, chat_server: ChatServer) -> Iterator[Callable[..., Library]]:
    """Library.open on the vault plus two notes, pointed at the test server; indexes once."""
    notes = {"events/quokka.md": QUOKKA_NOTE, "events/袋鼠节.md": ZH_NOTE}
    with llm_libraries(vault, chat_server.base_url, notes) as make:
        yield lambda **answer: make(answer=answer)


def grounded(body: dict[str, Any]) -> str:
    """A faithful writer: the quokka sentence, citing the block that holds it."""
    (cid,) = [c for c, s in sources(user_message(body)).items() if QUOKKA_SENTENCE in s["text"]]
    return f"{QUOKKA_SENTENCE} [ref:{cid}]"


# -- the verdict reaches the answer -----------------------------------------------------------


def test_judge_yes_answers_and_its_verdict_is_a_step(chat_server: ChatServer, open_lib: Callable[..., Library]) -> None:
    chat_server.writer.reply = grounded
    chat_server.judge.usage = {"prompt_tokens": 200, "completion_tokens": 9}
    result = open_lib().ask(QUESTION)

    (body,) = chat_server.bodies("judge")
    assert body["temperature"] == 0.0 and body["max_tokens"] == JUDGE_MAX_TOKENS
    assert "stream" not in body and "response_format" not in body
    system, user = system_message(body), user_message(body)
    assert system.startswith(JUDGE_MARKS[0])
    # the same fenced evidence the writer gets, the fence named in the rules
    (writer_body,) = chat_server.bodies("writer")
    assert sources(user) == sources(user_message(writer_body)) and sources(user)
    fence = next(iter(sources(user).values()))["fence"]
    assert fence in system and user.startswith(f"Question: {QUESTION}\n\nEvidence from the notes:")
    assert result.frame.refused is False and result.frame.answer == grounded(writer_body)
    judge = step(result, Step.JUDGE)
    assert judge.status == "ok" and judge.output_summary == "answerable: the evidence states it"
    assert judge.details["answerable"] is True and judge.details["model"] == "test-model"
    assert json.loads(judge.details["raw"]) == {"answerable": True, "reason": "the evidence states it"}
    assert judge.details["latency_ms"] > 0 and judge.details["failure"] is None
    assert (judge.details["tokens_in"], judge.details["tokens_out"]) == (200, 9)
    assert step(result, Step.SUMMARY).details["tokens_in"] == 200  # the writer's reply reported none
    names = [s.name for s in result.trace.steps]
    assert names == list(ASK_STEPS) and names.index(Step.CONTEXT) + 1 == names.index(Step.JUDGE)
    assert result.trace.warnings == ()


def test_judge_no_refuses_with_its_code_and_reason(chat_server: ChatServer, open_lib: Callable[..., Library]) -> None:
    chat_server.judge.reply = "```json\n" + NO + "\n```"
    result = open_lib().ask(QUESTION)

    frame = result.frame
    assert frame.refused is True and frame.route == "rag"
    (refusal,) = frame.refusals
    assert refusal.code == "llm_unanswerable"
    assert refusal.params == {"reason": "the notes name the festival but not its opening day", "model": "test-model"}
    assert frame.refusal_reason == (
        "the language model judged that the selected passages do not answer the question "
        "(the notes name the festival but not its opening day)"
    )
    assert frame.answer == f"I can't answer this from your notes: {frame.refusal_reason}."
    assert frame.evidence == () and frame.citations == ()
    assert chat_server.bodies("writer") == []  # refused before writing
    judge = step(result, Step.JUDGE)
    assert judge.status == "warning" and judge.details["answerable"] is False
    assert judge.output_summary.startswith("not answerable: the notes name")
    for later in (Step.WRITE, Step.VERIFY):
        assert step(result, later).status == "skipped"
        assert step(result, later).output_summary == "refused by the answerability judge"
    assert step(result, Step.SUMMARY).details["refused"] is True


@pytest.mark.parametrize(
    ("how", "failure"),
    [
        ("garbage", "no verdict in the reply: the reply holds neither a JSON verdict nor a yes or no"),
        ("not a boolean", "no verdict in the reply: 'answerable' must be true or false, got 'maybe'"),
        ("server error", "the judge's call failed"),
        ("malformed body", "the judge's call failed: malformed response from the LLM"),
    ],
)
def test_no_verdict_goes_on_with_a_warning(
    chat_server: ChatServer, open_lib: Callable[..., Library], how: str, failure: str
) -> None:
    chat_server.writer.reply = grounded
    if how == "garbage":
        chat_server.judge.reply = "I think the festival is lovely."
    elif how == "not a boolean":
        chat_server.judge.reply = '{"answerable": "maybe", "reason": "unsure"}'
    elif how == "server error":
        chat_server.judge.fail(5, 503)
    else:
        chat_server.judge.malformed = True
    result = open_lib().ask(QUESTION)

    assert result.frame.refused is False, result.frame.refusal_reason
    assert len(chat_server.bodies("writer")) == 1
    judge = step(result, Step.JUDGE)
    assert judge.status == "warning" and judge.details["answerable"] is None
    assert judge.details["failure"].startswith(failure), judge.details["failure"]
    assert judge.output_summary.startswith("no verdict (")
    (warning,) = result.trace.warnings
    assert warning.startswith("answerability judge: " + failure) and "goes on without its verdict" in warning
    if how == "server error":
        assert chat_server.attempts("judge") == 2  # retried as any LLM call (max_retries=1), then given up
        assert judge.details["raw"] == ""


@pytest.mark.parametrize(
    ("writer", "judge", "why"),
    [("openai", "off", "judge off"), ("extractive", "auto", "judge auto: the writer is no LLM")],
)
def test_judge_off_makes_no_call(
    chat_server: ChatServer, open_lib: Callable[..., Library], writer: str, judge: str, why: str
) -> None:
    chat_server.writer.reply = grounded
    chat_server.judge.reply = NO  # would refuse, were it asked
    lib = open_lib(writer=writer, judge=judge)
    result = lib.ask(QUESTION)

    assert chat_server.bodies("judge") == []
    assert result.frame.refused is False, result.frame.refusal_reason
    skipped = step(result, Step.JUDGE)
    assert skipped.status == "skipped" and skipped.output_summary == why
    assert lib.asker.judge is None
    if writer == "extractive":
        assert chat_server.requests == []


def test_judge_llm_asks_the_configured_chat_model_with_the_offline_writer(
    chat_server: ChatServer, open_lib: Callable[..., Library]
) -> None:
    lib = open_lib(writer="extractive", judge="llm")
    answered = lib.ask(QUESTION)
    chat_server.judge.reply = "No. The passage does not say."
    refused = lib.ask(QUESTION)

    assert [r["kind"] for r in chat_server.requests] == ["judge", "judge"]  # no writer call, no router call
    shown = answered.frame.answer.replace("**", "")  # the reader's span is in bold
    assert answered.frame.refused is False and QUOKKA_SENTENCE.split(" with")[0] in shown
    assert step(answered, Step.WRITE).details["writer"] == "extractive"
    assert refused.frame.refused is True and refused.frame.refusals[0].code == "llm_unanswerable"
    assert refused.frame.refusals[0].params["reason"] == "The passage does not say."


def test_a_chinese_question_gets_the_chinese_prompt(chat_server: ChatServer, open_lib: Callable[..., Library]) -> None:
    chat_server.judge.reply = '{"answerable": false, "reason": "资料没有提到开幕月份"}'
    result = open_lib(writer="extractive", judge="llm").ask(ZH_QUESTION)

    (body,) = chat_server.bodies("judge")
    assert system_message(body).startswith(JUDGE_MARKS[1]) and system_message(body).startswith("可回答性检查。")
    assert user_message(body).startswith(f"问题：{ZH_QUESTION}\n\n笔记中的资料：")
    assert any(ZH_SENTENCE in s["text"] for s in sources(user_message(body)).values())
    assert step(result, Step.JUDGE).details["lang"] == "zh"
    assert result.frame.refused is True
    assert result.frame.refusals[0].params["reason"] == "资料没有提到开幕月份"
    assert result.frame.answer.startswith("无法根据你的笔记回答这个问题：")


def test_the_judge_reads_the_best_sources_within_its_budget(
    chat_server: ChatServer, open_lib: Callable[..., Library]
) -> None:
    chat_server.writer.reply = grounded
    result = open_lib(judge_context_tokens=50).ask(QUESTION)  # room for one source: the best

    (judge_body,) = chat_server.bodies("judge")
    (writer_body,) = chat_server.bodies("writer")
    judged, written = sources(user_message(judge_body)), sources(user_message(writer_body))
    assert len(judged) == 1 < len(written)
    context = step(result, Step.CONTEXT).details["sources"]
    best = max(context, key=lambda s: s["score"])
    assert list(judged) == [best["chunk_id"]] and judged[best["chunk_id"]] == written[best["chunk_id"]]
    assert step(result, Step.JUDGE).details["sources"] == [best["source"]]
    assert f"[Source {best['source']}] chunk_id={best['chunk_id']}" in user_message(judge_body)  # its number kept
    # without a budget it reads the writer's whole context
    chat_server.requests.clear()
    open_lib().ask(QUESTION)
    (judge_body,) = chat_server.bodies("judge")
    assert sources(user_message(judge_body)) == sources(user_message(chat_server.bodies("writer")[0]))


def test_a_gate_refusal_never_reaches_the_judge(chat_server: ChatServer, open_lib: Callable[..., Library]) -> None:
    result = open_lib(gate="score", gate_threshold=1.0, gate_threshold_bm25=1.0).ask(QUESTION)

    assert chat_server.bodies("judge") == [] and result.frame.refused is True
    assert result.frame.refusals[0].code != "llm_unanswerable"
    assert step(result, Step.JUDGE).status == "skipped"
    assert step(result, Step.JUDGE).output_summary == "refused by the gate"


def test_the_stream_and_the_step_registry_show_the_judge(
    chat_server: ChatServer, open_lib: Callable[..., Library]
) -> None:
    chat_server.judge.reply = NO
    api = Api(create_app(open_lib(writer="extractive", judge="llm")))
    steps = api.get("/api/steps").json()
    events = sse(api.post("/api/ask/stream", json={"question": QUESTION}).text)

    assert steps == describe()
    (info,) = [s for s in steps["steps"] if s["name"] == Step.JUDGE]
    assert info["key"] == "judge" and info["lead_keys"][:2] == ["answerable", "reason"]
    assert steps["ask"].index(Step.JUDGE) == steps["ask"].index(Step.CONTEXT) + 1
    names = [d["name"] for e, d in events if e == "step"]
    assert names.index(Step.JUDGE) == names.index(Step.CONTEXT) + 1
    judge = next(d for e, d in events if e == "step" and d["name"] == Step.JUDGE)
    assert judge["status"] == "warning" and judge["details"]["answerable"] is False
    finish = events[-1]
    assert finish[0] == "finish" and finish[1]["refused"] is True
    assert [r["code"] for r in finish[1]["refusals"]] == ["llm_unanswerable"]
    assert "token" not in [e for e, _ in events]


def test_eval_rag_counts_what_the_judge_did(
    chat_server: ChatServer, open_lib: Callable[..., Library], tmp_path: Path
) -> None:
    qa = tmp_path / "qa.jsonl"
    cases = [
        {"id": "q1", "lang": "en", "type": "fact", "question": QUESTION, "gold_files": ["events/quokka.md"],
         "gold_phrases": ["every spring"]},
        {"id": "q2", "lang": "zh", "type": "fact", "question": ZH_QUESTION, "gold_files": ["events/袋鼠节.md"],
         "gold_phrases": ["三月"]},
        {"id": "q3", "lang": "en", "type": "unanswerable", "question": "Who won the otter regatta in 1987?",
         "gold_files": [], "gold_phrases": []},
    ]  # fmt: skip
    qa.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), encoding="utf-8")
    lib = open_lib(writer="extractive", judge="llm", check_names=False, check_answer_type=False)  # all reach it
    chat_server.judge.reply = lambda body: (
        NO if "otter" in user_message(body) or "袋鼠" in user_message(body) else "yes"
    )
    judged = evaluate_rag(lib, load_qa(qa)).metrics
    chat_server.judge.reply = "no idea"
    unsure = evaluate_rag(lib, load_qa(qa)).metrics

    assert (judged["judge_refused"], judged["judge_no_verdict"]) == (2, 0)
    assert judged["refusal_rate"] == 1.0 and judged["false_refusal_rate"] == 0.5
    assert (unsure["judge_refused"], unsure["judge_no_verdict"]) == (0, 3)
    assert unsure["refusal_rate"] == 0.0 and unsure["false_refusal_rate"] == 0.0
    assert len(chat_server.bodies("judge")) == 6


def test_the_settings_are_checked(vault: Path) -> None:
    with pytest.raises(ConfigError, match="judge"):
        Library.open(vault, answer={"judge": "always"})
    lib = Library.open(vault, embedding={"provider": "hash"}, answer={"judge": "llm", "judge_provider": "oracle"})
    with pytest.raises(ConfigError, match=r"unknown chat model 'oracle'; choose one of: .*openai"):
        lib.asker  # noqa: B018  # building the pipeline builds the judge
    lib.close()


def test_the_prompts_are_what_the_test_server_recognises() -> None:
    assert JUDGE_PROMPT["en"].startswith(JUDGE_MARKS[0]) and JUDGE_PROMPT["zh"].startswith(JUDGE_MARKS[1])
    for prompt in JUDGE_PROMPT.values():
        assert prompt.count("{fence}") == 1 and '"answerable"' in prompt


# -- parsing the reply -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ('{"answerable": true, "reason": "it says so"}', (True, "it says so")),
        ('Sure! {"answerable": false, "reason": "not stated"} Hope that helps.', (False, "not stated")),
        ('```json\n{"reason": "a {brace} inside", "answerable": false}\n```', (False, "a {brace} inside")),
        ('<think>hmm {"answerable": true}</think>{"answerable": false, "reason": "no"}', (False, "no")),
        ('{"answerable": "yes", "reason": "ok"}', (True, "ok")),
        (
            '{"answerable": false, "reason": "the evidence is about the otter reg',
            (False, "the evidence is about the otter reg"),
        ),
        ('{"answerable": true', (True, "")),
        ("Yes", (True, "")),
        ('"No"', (False, "")),
        ("No\nThe notes only name the festival.", (False, "The notes only name the festival.")),
        ("no.", (False, "")),
        ("No, the notes do not mention it.", (False, "the notes do not mention it.")),
        ("否。资料没有提到。", (False, "资料没有提到。")),
        ("是", (True, "")),
        ("不能，资料没有写开幕时间", (False, "资料没有写开幕时间")),
    ],
)
def test_replies_that_hold_a_verdict(reply: str, verdict: tuple[bool, str]) -> None:
    assert parse_verdict(reply) == verdict


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "   ",
        "Not sure.",
        "No idea.",
        "yes it is, maybe",
        "能否回答不清楚",
        "Nothing in the notes.",
        "Yesterday it opened.",
        '{"reason": "no flag"}',
        '{"answerable": null}',
        "是否开幕不清楚",
        "The festival opens in spring [ref:chk_1].",
    ],
)
def test_replies_without_a_verdict(reply: str) -> None:
    with pytest.raises(ValueError):
        parse_verdict(reply)
