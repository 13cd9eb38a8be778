"""The answerability judge: after the gate passes, an LLM says whether the evidence answers the question.

    JudgeStage     Question, BuiltContext                    -> Judged         (one step: Judge)

The refusal gate decides from retrieval signals (cosines, term coverage, names, answer
types); it cannot tell that a passage on the right topic lacks the one fact asked for.
The judge can: the chat model gets the question and the same fenced evidence the writer
would get (``writers.llm.evidence_prompt``), in the question's language, and must reply
with one JSON object ``{"answerable": true|false, "reason": "..."}`` (a bare yes or no is
accepted too), at temperature 0 with a small token budget. With ``[answer] judge_context_tokens``
it reads only the best sources (by score) that fit that many estimated tokens, in the
context's order and with their source numbers (``judge_context``): a small local model
reads a long prompt slowly. A "no" refuses the ask with
the code ``llm_unanswerable`` and the judge's reason; a failed call or a reply that is no
verdict leaves the run going on (a warning in the step and the trace), never a crash.
Like the LLM router, it does not ask for JSON mode (some OpenAI-compatible servers reject
``response_format``) and parses the reply leniently.

``[answer] judge``: ``auto`` asks the writer's own chat model when the writer is an LLM;
``llm`` asks one even with the extractive writer (``[answer] judge_provider`` made from
``[llm]``, through the chat registry), so the judge can be measured cheaply; ``off``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from ...config import Settings
from ...contracts import BuiltContext, Refusal
from ...errors import ProviderError, UnsupportedCapability
from ...providers import ChatMessage, ChatModel, ChatRequest, Writer, create_chat_model
from ...providers.writers.llm import FENCE_RULE, evidence_prompt
from ...text import estimate_tokens
from ...trace import Tracer
from ...trace.steps import Step
from ..details import JudgeDetails
from ..gate.refusals import refusal
from .context import render_source
from .stages import Question, Stage

JUDGE_MAX_TOKENS = 96  # the verdict and one short reason; a longer reply is cut, and still parses
MAX_REASON_CHARS = 300

JUDGE_PROMPT = {
    "en": """Answerability check. Decide whether the evidence from the user's notes, in the user message,
answers the user's question. Reply with one JSON object only, nothing before or after it:
{"answerable": true or false, "reason": "<one short sentence>"}

"answerable" is true only when the evidence states the answer to the question (all of it, or its main part).
It is false when the evidence is about something else, only shares words with the question, or lacks the
specific fact, name, number, setting or step the question asks for. Use no outside knowledge.
"""
    + FENCE_RULE["en"].replace("\n   ", "\n"),
    "zh": """可回答性检查。请判断用户消息中来自用户笔记的资料能否回答用户的问题。
只回复一个 JSON 对象，前后不要有任何其他文字：
{"answerable": true 或 false, "reason": "<一句简短的理由>"}

只有当资料明确给出了问题的答案（全部或主要部分）时，answerable 才是 true。
如果资料讲的是别的事情、只是与问题有相同的词语，或者缺少问题所问的具体事实、名称、数字、设置或步骤，
则为 false。不要使用资料以外的知识。
"""
    + FENCE_RULE["zh"],
}

_YES = {"yes", "true", "answerable", "是", "能", "可以", "可回答"}
_NO = {"no", "false", "unanswerable", "not answerable", "否", "不能", "不可以", "无法回答", "不可回答"}
_JSON_FLAG = re.compile(r'"answerable"\s*:\s*(true|false|"[^"]*")', re.IGNORECASE)
_JSON_REASON = re.compile(r'"reason"\s*:\s*"((?:[^"\\]|\\.)*)', re.DOTALL)
# a bare verdict ends the reply or is followed by punctuation or a line break: "No idea" is no "no"
_AFTER = r"(?:\s*$|\s*[.,:;!\-\u2014，。：；！、]\s*|[ \t]*\n\s*)(.*)$"  # the end, punctuation or a line break
_BARE_EN = re.compile(r"^[\"']?(yes|no|true|false)[\"']?" + _AFTER, re.IGNORECASE | re.DOTALL)
_BARE_ZH = re.compile(r"^(不可回答|无法回答|可回答|不可以|不能|可以|能|否|是)" + _AFTER, re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def _truth(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().strip(".。!！").lower()
        if word in _YES:
            return True
        if word in _NO:
            return False
    return None


def _reason(value: Any) -> str:
    return " ".join(str(value or "").split())[:MAX_REASON_CHARS]


def parse_verdict(text: str) -> tuple[bool, str]:
    """(answerable, reason) from a judge's reply; ValueError when it holds no verdict.

    Accepted, in this order: a JSON object with a boolean (or yes/no) ``answerable``, anywhere
    in the reply (code fences and a <think> block are ignored); a JSON object cut short by the
    token limit, when its ``answerable`` came before the cut; a bare yes/no (是/否, 能/不能)
    opening the reply and ending it, or followed by punctuation or a line break (what follows is the
    reason: "No. The notes ..." is a verdict, "No idea" is none)."""
    cleaned = _FENCE.sub("", _THINK.sub("", text).strip()).strip()
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", cleaned)):
        try:
            data, _ = decoder.raw_decode(cleaned, start)
        except ValueError:
            continue
        if isinstance(data, dict) and "answerable" in data:
            verdict = _truth(data["answerable"])
            if verdict is None:
                raise ValueError(f"'answerable' must be true or false, got {data['answerable']!r}")
            return verdict, _reason(data.get("reason"))
    flag = _JSON_FLAG.search(cleaned)
    if flag is not None:  # a JSON object cut short (max_tokens) after its verdict
        word = flag.group(1)
        verdict = _truth(word.strip('"')) if word.startswith('"') else word.lower() == "true"
        if verdict is not None:
            cut = _JSON_REASON.search(cleaned, flag.end())
            return verdict, _reason(cut.group(1) if cut else "")
    bare = _BARE_EN.match(cleaned) or _BARE_ZH.match(cleaned)
    if bare is not None:
        verdict = _truth(bare.group(1))
        if verdict is not None:
            return verdict, _reason(bare.group(2))
    if not cleaned:
        raise ValueError("the reply is empty")
    raise ValueError("the reply holds neither a JSON verdict nor a yes or no")


def judge_context(context: BuiltContext, max_tokens: int | None) -> BuiltContext:
    """The part of ``context`` the judge reads: its best sources by score while they fit ``max_tokens``
    (estimated as the context builder does), at least the best one; in reading order, same fence."""
    if max_tokens is None or context.token_estimate <= max_tokens:
        return context
    keep: set[str] = set()
    used = 0
    for ev in sorted(context.evidence, key=lambda e: -e.score):
        cost = estimate_tokens(ev.text) + 20  # the header line, as build_context counts it
        if keep and used + cost > max_tokens:
            continue
        keep.add(ev.chunk_id)
        used += cost
    evidence = tuple(ev for ev in context.evidence if ev.chunk_id in keep)
    text = "\n\n".join(render_source(ev, context.fence) for ev in evidence)
    return BuiltContext(evidence, text, used, context.fence)


@dataclass(frozen=True)
class Verdict:
    """What the judge said about one question; ``answerable`` is None when there is no verdict
    (``failure`` says why: the call failed, or the reply was no verdict)."""

    answerable: bool | None
    reason: str
    raw: str  # the reply as the model wrote it ("" when the call failed)
    model: str
    latency_ms: float
    lang: str
    tokens_in: int = 0
    tokens_out: int = 0
    failure: str | None = None
    sources: tuple[int, ...] = ()  # the source numbers the judge read


class AnswerabilityJudge:
    """Asks one chat model, once per question, whether the evidence answers it."""

    def __init__(self, chat: ChatModel, context_tokens: int | None = None, max_tokens: int = JUDGE_MAX_TOKENS) -> None:
        self.chat = chat
        self.model = chat.model
        self.context_tokens = context_tokens
        self.max_tokens = max_tokens

    def messages(self, question: str, lang: str, context: BuiltContext) -> tuple[ChatMessage, ...]:
        lang = lang if lang in JUDGE_PROMPT else "en"
        system = JUDGE_PROMPT[lang].replace("{fence}", context.fence)  # the prompt holds JSON braces
        return (ChatMessage.system(system), ChatMessage.user(evidence_prompt(question, context, lang)))

    def judge(self, question: str, lang: str, context: BuiltContext) -> Verdict:
        context = judge_context(context, self.context_tokens)
        request = ChatRequest(self.messages(question, lang, context), temperature=0.0, max_tokens=self.max_tokens)
        read = tuple(ev.source for ev in context.evidence)
        started = time.perf_counter()

        def ms() -> float:
            return round((time.perf_counter() - started) * 1000.0, 1)

        try:
            reply = self.chat.chat(request)
        except (ProviderError, UnsupportedCapability) as exc:
            failure = f"the judge's call failed: {exc}"
            return Verdict(None, "", "", self.model, ms(), lang, failure=failure, sources=read)
        tokens = (reply.prompt_tokens, reply.completion_tokens)
        try:
            answerable, reason = parse_verdict(reply.text)
        except ValueError as exc:
            failure = f"no verdict in the reply: {exc}"
            return Verdict(None, "", reply.text, reply.model, ms(), lang, *tokens, failure, read)
        return Verdict(answerable, reason, reply.text, reply.model, ms(), lang, *tokens, sources=read)


def create_judge(settings: Settings, writer: Writer) -> tuple[AnswerabilityJudge | None, str]:
    """The judge ``[answer] judge`` asks for, or None and why there is none."""
    mode = settings.answer.judge
    if mode == "off":
        return None, "judge off"
    budget = settings.answer.judge_context_tokens
    if writer.chat_model is not None:
        return AnswerabilityJudge(writer.chat_model, budget), ""
    if mode == "auto":
        return None, "judge auto: the writer is no LLM"
    return AnswerabilityJudge(create_chat_model(settings.answer.judge_provider, settings.llm), budget), ""


# -- the stage --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """The judge's verdict, or None when the judge is off (or there was nothing to judge)."""

    verdict: Verdict | None = None

    @property
    def refused(self) -> bool:
        return self.verdict is not None and self.verdict.answerable is False

    def refusal(self) -> Refusal:
        assert self.verdict is not None
        return refusal("llm_unanswerable", reason=self.verdict.reason, model=self.verdict.model)


class JudgeStage(Stage[Judged]):
    """Between the context and the writer: a "no" halts the run with an ``llm_unanswerable`` refusal."""

    steps = (Step.JUDGE,)

    def __init__(self, judge: AnswerabilityJudge | None, off_reason: str = "judge off") -> None:
        self.judge = judge
        self.off_reason = off_reason

    def run(self, q: Question, context: BuiltContext, tracer: Tracer) -> Judged:
        if self.judge is None or not context.evidence:
            return Judged()
        with tracer.step(Step.JUDGE, f"{self.judge.model} on {len(context.evidence)} sources") as step:
            v = self.judge.judge(q.text, q.lang, context)
            record = JudgeDetails(
                v.answerable,
                v.reason,
                v.model,
                v.latency_ms,
                v.failure,
                v.raw,
                v.tokens_in,
                v.tokens_out,
                v.lang,
                tuple(v.sources),
            )
            if v.answerable is None:
                message = f"answerability judge: {v.failure}; the run goes on without its verdict"
                step.done(f"no verdict ({v.failure})", status="warning", record=record)
                tracer.warn(message)
            elif v.answerable:
                step.done("answerable" + (f": {v.reason}" if v.reason else ""), record=record)
            else:
                step.done("not answerable" + (f": {v.reason}" if v.reason else ""), status="warning", record=record)
        return Judged(v)

    def unrecorded(self, step: Step) -> str:
        return self.off_reason if self.judge is None else "no evidence to judge"

    def halt(self, out: Judged) -> str | None:
        return "refused by the answerability judge" if out.refused else None
