"""The plan stage: the rules' plan (``answer.agentic.plan_rules``), or a chat model's JSON plan validated first.

    PlanStage   Question, Rewrites, Decomposition -> Plan      (step "Retrieval Plan")

The chat model gets the question and the rules' sub-questions and answers with one JSON
object (``LLMPlan``): at most ``cap`` sub-questions, each with up to three search queries and
optional filters (language, folder, tag, heading). The reply is validated with pydantic; each
filter is then checked against the index as the rules check their own (a folder or tag the
asker cannot see is dropped). A failed call, a reply that is no JSON object, or one that does
not validate, falls back to the rules' plan, and the step records why (``fallback``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...config import Settings
from ...contracts import SearchFilters
from ...errors import ProviderError, UnsupportedCapability
from ...providers import ChatMessage, ChatModel, ChatRequest, Writer, create_chat_model
from ...store import Store
from ...trace import StepRecorder, Tracer
from ...trace.steps import Step
from ..single.stages import Question, Stage
from .decompose import Decomposition, SubQuestion
from .plan_rules import PartPlan, Plan, Scope, infer_scope, merged, part_queries, routes_for, rule_plan, scope_from
from .rewrite import Rewrites

PLAN_MARK = "Plan the retrieval."  # the system prompt opens with it (tests route on it)
PLAN_PROMPT = (
    PLAN_MARK + " Split the user's question into at most {cap} standalone sub-questions that can each be "
    "answered from one place in the user's notes; keep names, code and identifiers exactly as written. "
    "For each give up to 3 short search queries, and a filter only when the question names one "
    '(language "en" or "zh", a folder, a tag, a heading). Reply with one JSON object only: '
    '{{"sub_questions": [{{"question": "...", "queries": ["..."], "language": null, "folder": null, '
    '"tag": null, "heading": null}}]}}. A rule-based split, for reference: {rules}'
)
# in a vault with notes in both languages (the rules' rewrite has an other-language variant): a
# model translates a sub-question far better than the bundled dictionary's word-by-word variant
PLAN_BILINGUAL = (
    " The notes are written in English and in Chinese, and a fact may be in either: make one of each "
    "sub-question's queries a translation into the language the question is not written in."
)


class LLMPart(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str = Field(min_length=1, max_length=300)
    queries: list[str] = Field(default_factory=list, max_length=3)
    language: Literal["en", "zh"] | None = None
    folder: str | None = Field(None, max_length=200)
    tag: str | None = Field(None, max_length=100)
    heading: str | None = Field(None, max_length=200)


class LLMPlan(BaseModel):
    """The JSON a chat model must reply with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sub_questions: list[LLMPart] = Field(min_length=1, max_length=8)


def parse_plan(text: str, cap: int) -> LLMPlan:
    """The validated plan in a reply (ValueError with the reason when there is none)."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match is None:
        raise ValueError("the reply holds no JSON object")
    try:
        data = json.loads(match.group())
    except json.JSONDecodeError as exc:
        raise ValueError(f"the reply is not valid JSON ({exc.msg})") from None
    try:
        plan = LLMPlan.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"the plan does not validate: {where}: {first['msg']}") from None
    if len(plan.sub_questions) > cap:
        raise ValueError(f"the plan has {len(plan.sub_questions)} sub-questions; the cap is {cap}")
    if any(not p.question.strip() or any(not q.strip() for q in p.queries) for p in plan.sub_questions):
        raise ValueError("the plan has an empty sub-question or query")
    return plan


@dataclass(frozen=True)
class PlanIn:
    question: Question
    rewrites: Rewrites
    decomposition: Decomposition


class PlanStage(Stage[Plan]):
    steps = (Step.RETRIEVAL_PLAN,)

    def __init__(self, settings: Settings, store: Store, chat: ChatModel | None) -> None:
        self.settings = settings
        self.store = store
        self.chat = chat

    def run(self, q: Question, rewrites: Rewrites, decomposition: Decomposition, tracer: Tracer) -> Plan:
        inp = PlanIn(q, rewrites, decomposition)
        with tracer.step(Step.RETRIEVAL_PLAN, f"{len(inp.decomposition.parts)} sub-question(s)") as step:
            scope = infer_scope(q.text, self.store, q.principals, q.filters)
            rules = rule_plan(self.settings, inp.decomposition, inp.rewrites, scope, q.filters)
            plan = rules if self.chat is None else self._llm(inp, scope, rules)
            _done(step, plan, scope, self.chat)
        return plan

    def _llm(self, inp: PlanIn, scope: Scope, rules: Plan) -> Plan:
        assert self.chat is not None
        cap = self.settings.answer.agentic_parts
        listed = json.dumps([p.part.text for p in rules.parts], ensure_ascii=False)
        system = PLAN_PROMPT.format(cap=cap, rules=listed) + (PLAN_BILINGUAL if inp.rewrites.variant else "")
        request = ChatRequest(
            (ChatMessage.system(system), ChatMessage.user(inp.question.text)),
            temperature=0.0,
            max_tokens=600,
        )
        try:
            reply = self.chat.chat(request)
            llm = parse_plan(reply.text, cap)
        except (ProviderError, UnsupportedCapability) as exc:
            return _fallback(rules, f"the plan call failed: {exc}")
        except ValueError as exc:
            return _fallback(rules, f"the LLM plan is invalid: {exc}")
        return self._from_llm(inp, llm, scope)

    def _from_llm(self, inp: PlanIn, llm: LLMPlan, scope: Scope) -> Plan:
        q = inp.question
        bilingual = inp.rewrites.variant is not None
        parts = []
        for i, p in enumerate(llm.sub_questions, 1):
            named = scope_from(self.store, q.principals, q.filters, p.language, p.folder, p.tag, p.heading)
            own = named if (named.folders or named.tags or named.narrows()) else scope
            text = p.question.strip()
            queries = tuple(dict.fromkeys([*(x.strip() for x in p.queries), *part_queries(text, own, bilingual)]))
            k = self.settings.answer.candidates * (2 if own.narrows() else 1)
            sub = SubQuestion(i, text, tuple(_names(text)))
            parts.append(
                PartPlan(sub, queries, routes_for(self.settings, bilingual), min(k, 200), merged(q.filters, own), own)
            )
        return Plan(tuple(parts), "llm", "llm", 0)


def _names(text: str) -> list[str]:
    from ...text.terms import names

    return [n.text for n in names(text)]


def _fallback(rules: Plan, why: str) -> Plan:
    return Plan(rules.parts, "rules", rules.rule, rules.dropped, fallback=why)


def _done(step: StepRecorder, plan: Plan, scope: Scope, chat: ChatModel | None) -> None:
    via = plan.planner + (f" (fell back: {plan.fallback})" if plan.fallback else "")
    step.done(
        f"{len(plan.parts)} part(s) planned by {via}",
        status="warning" if plan.fallback else "ok",
        planner=plan.planner,
        model=chat.model if chat is not None else None,
        fallback=plan.fallback,
        inferred=list(scope.notes),
        parts=[_part_details(p) for p in plan.parts],
    )


def _part_details(p: PartPlan) -> dict[str, Any]:
    return {
        "index": p.part.index,
        "question": p.part.text,
        "queries": list(p.queries),
        "routes": list(p.routes),
        "k": p.k,
        "filters": {
            k: list(v) if isinstance(v, tuple) else v for k, v in (p.filters or SearchFilters()).describe().items()
        },
        "script": p.scope.script,
        "heading": p.scope.heading,
    }


def create_planner_model(settings: Settings, writer: Writer) -> ChatModel | None:
    """``[answer] planner``: "rules" -> None; "auto" -> the writer's chat model (an LLM writer);
    "llm" -> that, or the chat model ``[answer] judge_provider`` makes from ``[llm]``."""
    mode = settings.answer.planner
    if mode == "rules":
        return None
    if writer.chat_model is not None:
        return writer.chat_model
    if mode == "auto":
        return None
    return create_chat_model(settings.answer.judge_provider, settings.llm)
