"""Judged scores: a chat model grades each answer of a QA run for relevance, completeness and accuracy.

    AnswerGrader.grade(GradeInput) -> Grade

The deterministic metrics of ``evaluate.qa`` say whether the right notes were found and
cited; they cannot say whether the answer is any good. The grader asks an OpenAI-compatible
chat model (the ``ChatModel`` kind, made from ``[llm]``) to score one answer against the
question, the reference answer and the cited evidence, each criterion on 1-5, with the fixed
rubric below (``RUBRIC_VERSION`` names it in every report, so scores of two rubrics are never
compared silently). The reply must be one JSON object validated by ``GradeReply``; it is asked
at temperature 0, and a malformed reply is asked once more (with the validation error), then
the item is recorded as unjudged with the reason. As the answerability judge does, the grader
does not ask for JSON mode (some OpenAI-compatible servers reject ``response_format``) and
reads the first JSON object of the reply.

A refusal needs no model: it is correct exactly when the question is unanswerable, and is
scored 5 on every criterion if so, 1 if not (``method = "refusal"``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import LLMSettings
from ..errors import ProviderError, UnsupportedCapability
from ..providers import ChatMessage, ChatModel, ChatRequest, create_chat_model

RUBRIC_VERSION = "rag-grade-1"
CRITERIA = ("relevance", "completeness", "accuracy")
PASS_MARK = 4  # an answer is "correct" when its accuracy is at least this (the judge's binary verdict)
GRADE_MAX_TOKENS = 160  # three integers and one short reason
MAX_EVIDENCE_CHARS = 1500  # per cited passage: a small local model reads a long prompt slowly
MAX_REASON_CHARS = 300
# the fake test server (tests/harness/llm_server.py) tells grading calls from the others by this opening
RUBRIC = """Grade an answer. You grade the answer a notes assistant gave to a user's question.
You get the question, a reference answer written by a person, the evidence passages the assistant
cited, and the assistant's answer. Score the answer on three criteria, each an integer from 1 to 5:

relevance: 5 the answer addresses exactly what was asked; 3 partly on topic; 1 about something else.
completeness: 5 it contains every point of the reference answer; 3 about half of them; 1 none.
accuracy: 5 every statement agrees with the reference answer and the evidence; 3 a mix of right and
wrong statements; 1 it contradicts the reference answer or states things the evidence does not support.

When the question cannot be answered from the notes (the reference says so), an answer that states
facts anyway scores 1 on accuracy. Judge the meaning, not the wording; the answer may be in another
language than the reference. Use no outside knowledge.

Reply with one JSON object only, nothing before or after it:
{"relevance": <1-5>, "completeness": <1-5>, "accuracy": <1-5>, "reason": "<one short sentence>"}
"""
UNANSWERABLE_REFERENCE = "(The notes do not answer this question; the right response is to say so.)"
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


class GradeReply(BaseModel):
    """The JSON object the rubric asks for."""

    model_config = ConfigDict(extra="ignore")

    relevance: int = Field(ge=1, le=5, strict=True)
    completeness: int = Field(ge=1, le=5, strict=True)
    accuracy: int = Field(ge=1, le=5, strict=True)
    reason: str = ""


@dataclass(frozen=True)
class GradeInput:
    question: str
    reference: str
    answerable: bool
    answer: str
    refused: bool
    evidence: tuple[str, ...] = ()  # the texts of the cited passages, in citation order


@dataclass(frozen=True)
class Grade:
    """One answer's judged scores, or none (``failure`` says why) for an unjudged item."""

    relevance: int | None
    completeness: int | None
    accuracy: int | None
    reason: str
    method: Literal["llm", "refusal"]
    model: str
    attempts: int = 0  # model calls made (0 for a refusal)
    latency_ms: float = 0.0
    failure: str | None = None

    @property
    def judged(self) -> bool:
        return self.accuracy is not None

    @property
    def correct(self) -> bool | None:
        """The binary verdict: accuracy at the pass mark or above (None when unjudged)."""
        return None if self.accuracy is None else self.accuracy >= PASS_MARK

    def to_json(self) -> dict[str, object]:
        return {
            "relevance": self.relevance,
            "completeness": self.completeness,
            "accuracy": self.accuracy,
            "correct": self.correct,
            "reason": self.reason,
            "method": self.method,
            "model": self.model,
            "attempts": self.attempts,
            "latency_ms": self.latency_ms,
            "failure": self.failure,
        }


def parse_grade(text: str) -> GradeReply:
    """The first JSON object of ``text`` that validates; ValueError naming what is wrong otherwise."""
    cleaned = _THINK.sub("", text).strip()
    decoder = json.JSONDecoder()
    problem = "the reply holds no JSON object"
    for start in (m.start() for m in re.finditer(r"\{", cleaned)):
        try:
            data, _ = decoder.raw_decode(cleaned, start)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        try:
            return GradeReply.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "object"
            problem = f"{where}: {first['msg']}"
    raise ValueError(problem if cleaned else "the reply is empty")


def grade_prompt(item: GradeInput) -> str:
    reference = item.reference.strip() or "(none given)"
    if not item.answerable:
        reference = UNANSWERABLE_REFERENCE
    passages = (
        "\n\n".join(f"[Evidence {n}]\n{text[:MAX_EVIDENCE_CHARS]}" for n, text in enumerate(item.evidence, 1))
        or "(the answer cites no evidence)"
    )
    return (
        f"Question:\n{item.question}\n\nReference answer:\n{reference}\n\n"
        f"Cited evidence:\n{passages}\n\nThe assistant's answer:\n{item.answer}"
    )


def refusal_grade(item: GradeInput, model: str) -> Grade:
    """A refusal, scored without a model: right exactly when the question is unanswerable."""
    score = 1 if item.answerable else 5
    reason = "refused an answerable question" if item.answerable else "refused an unanswerable question"
    return Grade(score, score, score, reason, "refusal", model)


class AnswerGrader:
    """Grades answers with one chat model and the fixed rubric (one retry on a malformed reply)."""

    rubric_version = RUBRIC_VERSION

    def __init__(self, chat: ChatModel, max_tokens: int = GRADE_MAX_TOKENS) -> None:
        self.chat = chat
        self.model = chat.model
        self.max_tokens = max_tokens

    def grade(self, item: GradeInput) -> Grade:
        if item.refused:
            return refusal_grade(item, self.model)
        messages: tuple[ChatMessage, ...] = (ChatMessage.system(RUBRIC), ChatMessage.user(grade_prompt(item)))
        started = time.perf_counter()
        failure = ""
        for attempt in (1, 2):
            request = ChatRequest(messages, temperature=0.0, max_tokens=self.max_tokens)
            try:
                reply = self.chat.chat(request)
            except (ProviderError, UnsupportedCapability) as exc:
                failure = f"the judge's call failed: {exc}"
                break  # the provider's own retry policy has already retried transient failures
            try:
                parsed = parse_grade(reply.text)
            except ValueError as exc:
                failure = f"malformed reply ({exc})"
                messages = (
                    *messages,
                    ChatMessage("assistant", reply.text),
                    ChatMessage.user(f"That reply is not valid: {exc}. Reply with the JSON object only."),
                )
                continue
            reason = " ".join(parsed.reason.split())[:MAX_REASON_CHARS]
            ms = round((time.perf_counter() - started) * 1000.0, 1)
            return Grade(parsed.relevance, parsed.completeness, parsed.accuracy, reason, "llm", self.model, attempt, ms)
        ms = round((time.perf_counter() - started) * 1000.0, 1)
        return Grade(None, None, None, "", "llm", self.model, attempt, ms, failure)


def create_grader(provider: str, settings: LLMSettings) -> AnswerGrader:
    """A grader on the chat model ``provider`` (openai, llama-cpp) made from ``settings``."""
    return AnswerGrader(create_chat_model(provider, settings))


def grade_summary(grades: Sequence[Mapping[str, Any] | None]) -> dict[str, float | int | None]:
    """Mean scores over the judged items (``Grade.to_json`` records; None: not graded), the share
    judged correct, and how many stayed unjudged."""
    given = [g for g in grades if g is not None]
    judged = [g for g in given if g["accuracy"] is not None]
    out: dict[str, float | int | None] = {}
    for key in CRITERIA:
        values = [int(g[key]) for g in judged]
        out[f"judge_{key}"] = round(sum(values) / len(values), 4) if values else None
    out["judge_correct_rate"] = round(sum(bool(g["correct"]) for g in judged) / len(judged), 4) if judged else None
    out["judge_unjudged"] = len(given) - len(judged)
    return out


JUDGED_KEYS = ("judge_relevance", "judge_completeness", "judge_accuracy", "judge_correct_rate")


def judged_regressions(current: dict[str, object], baseline: dict[str, object], tolerance: float) -> list[str]:
    """Judged scores that dropped by more than ``tolerance`` as a share of the baseline's value
    (0.05: a mean accuracy of 4.0 may fall to 3.8, not below)."""
    out = []
    for key in JUDGED_KEYS:
        now, then = current.get(key), baseline.get(key)
        if not isinstance(now, int | float) or not isinstance(then, int | float) or then <= 0:
            continue
        drop = (then - now) / then
        if drop > tolerance:
            out.append(f"{key}: {then} -> {now} (worse by {drop:.1%} > {tolerance:.1%})")
    return out
