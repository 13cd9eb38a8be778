"""Intent router: does this question need the notes (``rag``) or not (``direct``)?

The rules are deliberately narrow: only greetings, thanks and questions about the
assistant itself go ``direct``; everything else is looked up. A ``direct`` answer
is a fixed reply that states nothing about the user's notes. With an LLM
configured, the LLM router decides from a JSON reply and falls back to the rules,
saying so in the decision's ``fallback``, when the reply is not the JSON asked for or
the call fails. The LLM router asks the writer's own chat model and keeps no state
between questions. It does not ask for JSON mode: some OpenAI-compatible servers
reject ``response_format``, and the reply is parsed leniently instead.
"""

from __future__ import annotations

import json
import re
from typing import Protocol

from ...contracts import RouteDecision
from ...errors import ProviderError
from ...providers import ChatMessage, ChatModel, ChatRequest, Writer
from ...text import language

_GREETING = re.compile(
    r"^\s*(hi|hello|hey|yo|good (morning|afternoon|evening)|thanks?( you)?|thank you( very much)?|thx|bye|goodbye"
    r"|你好|您好|嗨|哈喽|早上好|晚上好|谢谢|多谢|谢了|再见|拜拜)[\s!！.。,，~～]*$",
    re.IGNORECASE,
)
_ABOUT_ME = re.compile(
    r"^\s*(who are you|what are you|what can you do|help|how do i use you"
    r"|你是谁|你能做什么|你会什么|帮助)[\s?？!！.。]*$",
    re.IGNORECASE,
)

DIRECT_REPLY = {
    "en": "Hello! I answer questions from your notes only, and cite the passage behind every sentence. "
    "Ask me something about them.",
    "zh": "你好！我只根据你的笔记回答问题，每句话都会给出出处。请问一个关于笔记的问题吧。",
}

ROUTER_PROMPT = """Classify the user's message for a notes assistant. Reply with JSON only:
{"route": "rag" or "direct", "reason": "<short public reason>", "confidence": <0..1>}
"direct" only for greetings, thanks, or questions about the assistant itself. Anything that could be answered
from the user's notes is "rag". When unsure, answer "rag"."""


def direct_reply(question: str) -> str:
    return DIRECT_REPLY[language(question)]


class Router(Protocol):
    """Decides a question's route; anything about the decision is in the RouteDecision it returns."""

    name: str

    def decide(self, question: str) -> RouteDecision: ...


class RuleRouter:
    name = "rules"

    def decide(self, question: str) -> RouteDecision:
        if _GREETING.match(question):
            return RouteDecision("direct", "a greeting or thanks: nothing to look up", 0.95, self.name)
        if _ABOUT_ME.match(question):
            return RouteDecision("direct", "a question about the assistant itself", 0.9, self.name)
        return RouteDecision("rag", "may be answered from the notes: look it up", 0.8, self.name)


class LLMRouter:
    name = "llm"

    def __init__(self, chat: ChatModel) -> None:
        self.chat = chat
        self.rules = RuleRouter()

    def decide(self, question: str) -> RouteDecision:
        request = ChatRequest((ChatMessage.system(ROUTER_PROMPT), ChatMessage.user(question)))
        try:
            return _parse(self.chat.chat(request).text)
        except (ProviderError, ValueError) as exc:
            rules = self.rules.decide(question)
            return RouteDecision(
                rules.route,
                rules.reason,
                rules.confidence,
                "rules (llm fallback)",
                fallback=f"LLM router failed ({exc}); used the rules",
            )


def create_router(mode: str, writer: Writer) -> Router:
    """``[answer] router``: "rules"; "llm" or "auto" ask the writer's chat model when it has one."""
    if mode in ("llm", "auto") and writer.chat_model is not None:
        return LLMRouter(writer.chat_model)
    return RuleRouter()


def _parse(text: str) -> RouteDecision:
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match is None:
        raise ValueError("reply has no JSON object")
    try:
        data = json.loads(match.group())
    except json.JSONDecodeError:
        raise ValueError("reply is not valid JSON") from None
    route = data.get("route") if isinstance(data, dict) else None
    if route not in ("rag", "direct"):
        raise ValueError(f"route must be 'rag' or 'direct', got {route!r}")
    try:
        confidence = min(1.0, max(0.0, float(data.get("confidence", 0.5))))
    except (TypeError, ValueError):
        confidence = 0.5
    return RouteDecision(route, str(data.get("reason") or "")[:300], confidence, "llm")
