"""The one registry of trace step names.

Every step a run records is named by a ``Step`` member. ``Step`` is a ``StrEnum``, so
``Step.SELECT == "Selection/Refusal"`` and a saved trace keeps the plain string. The
CLI, the server, the evaluation code, the tests and the web UI (which receives
``describe()`` from ``GET /api/steps``) take the names from here and hold no copies.

``ASK_STEPS`` is the default run chain of a single-shot ask, in order. The answerability
judge's step is in it whether or not the judge is on (skipped, with the reason, when off). ``ROUND`` is a
span that holds one round of a multi-round run (its sub-question, retrievals and
selection nest under it); a single-shot ask has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Step(StrEnum):
    ROUTE = "Intent Router"
    BM25 = "BM25 Retrieval"
    DENSE = "Dense Retrieval"
    DENSE_FAST = "Fast-tier Retrieval"
    CROSSLANG = "Cross-language Retrieval"
    TRANSLATED = "Translated BM25"
    FUSION = "Hybrid Fusion"
    RERANK = "Reranking"
    SELECT = "Selection/Refusal"
    CONTEXT = "Context Builder"
    JUDGE = "Answerability Judge"
    WRITE = "Writer"
    VERIFY = "Citation Verifier"
    SUMMARY = "Run Summary"
    ROUND = "Round"
    AGENT = "Agentic Loop"
    PLAN = "Question Plan"
    REWRITE = "Query Rewrite"
    RETRIEVAL_PLAN = "Retrieval Plan"


ASK_STEPS: tuple[Step, ...] = (
    Step.ROUTE,
    Step.BM25,
    Step.DENSE,
    Step.CROSSLANG,
    Step.TRANSLATED,
    Step.FUSION,
    Step.RERANK,
    Step.SELECT,
    Step.CONTEXT,
    Step.JUDGE,
    Step.WRITE,
    Step.VERIFY,
    Step.SUMMARY,
)
RETRIEVAL_STEPS: tuple[Step, ...] = (Step.BM25, Step.DENSE, Step.CROSSLANG, Step.TRANSLATED, Step.FUSION)
# a retrieval route's name -> its step
ROUTE_STEPS = {
    "bm25": Step.BM25,
    "dense": Step.DENSE,
    "dense-fast": Step.DENSE_FAST,
    "crosslang": Step.CROSSLANG,
    "translated": Step.TRANSLATED,
    "translated-llm": Step.TRANSLATED,
}


@dataclass(frozen=True)
class StepInfo:
    """What a surface needs to show a step: its name, a stable key, and the detail keys shown first."""

    step: Step
    key: str
    description: str
    lead_keys: tuple[str, ...] = ()


_INFO = (
    StepInfo(Step.ROUTE, "route", "direct reply or look up", ("route", "reason", "confidence", "router", "fallback")),
    StepInfo(Step.BM25, "bm25", "BM25 over the visible chunks"),
    StepInfo(Step.DENSE, "dense", "k nearest vectors among the visible chunks"),
    StepInfo(
        Step.DENSE_FAST,
        "dense-fast",
        "k nearest fast-tier vectors among the visible chunks still waiting for their main vector",
        ("space", "main_space"),
    ),
    StepInfo(
        Step.CROSSLANG,
        "crosslang",
        "k nearest vectors among the visible chunks in the other script than the question's",
        ("question_script", "searched_script", "searched_chunks", "space"),
    ),
    StepInfo(
        Step.TRANSLATED,
        "translated",
        "BM25 among the chunks in the other script, with the question translated",
        ("route", "source", "question_script", "searched_script", "translation", "terms"),
    ),
    StepInfo(Step.FUSION, "fusion", "the routes' lists fused into one"),
    StepInfo(Step.RERANK, "rerank", "candidates rescored for selection"),
    StepInfo(
        Step.SELECT,
        "select",
        "evidence kept, and the refusal gate's decision",
        (
            "passed",
            "gate_score",
            "threshold",
            "reader",
            "top_cosine",
            "sentence_cosine",
            "coverage",
            "missing_terms",
            "missing_names",
            "expects",
            "expectation_met",
            "gate_source",
            "reason",
            "refusals",
            "confidence",
            "confidence_level",
        ),
    ),
    StepInfo(
        Step.CONTEXT,
        "context",
        "neighbours of strong seeds, the token budget, the writer's sources",
        ("token_estimate", "soft_limit", "hard_limit", "chars", "dropped_by_budget", "score_stats"),
    ),
    StepInfo(
        Step.JUDGE,
        "judge",
        "an LLM's verdict on whether the evidence answers the question (skipped when the judge is off)",
        ("answerable", "reason", "model", "latency_ms", "failure", "raw", "tokens_in", "tokens_out"),
    ),
    StepInfo(
        Step.WRITE,
        "write",
        "the draft answer",
        ("writer", "model", "tokens_in", "tokens_out", "streamed", "confidence_note", "quoted"),
    ),
    StepInfo(Step.VERIFY, "verify", "each claim checked against the chunks it cites"),
    StepInfo(
        Step.SUMMARY,
        "summary",
        "the run's totals",
        ("total_ms", "tokens_in", "tokens_out", "retrieved", "selected", "citations", "unsupported"),
    ),
    StepInfo(Step.ROUND, "round", "one round of a multi-round run", ("iteration", "question")),
    StepInfo(
        Step.AGENT,
        "agent",
        "the agentic loop: its sub-questions, every transition with its reason, the cap that stopped it",
        ("kind", "rule", "stopped_by", "retrievals", "sub_questions", "transitions", "caps"),
    ),
    StepInfo(
        Step.PLAN,
        "plan",
        "the question's language, type and terms, and its sub-questions (offline rules)",
        ("kind", "rule", "sub_questions", "dropped_by_cap", "language", "terms"),
    ),
    StepInfo(
        Step.REWRITE,
        "rewrite",
        "the agentic loop's forms of the question: standalone, keywords, the other language's variant",
        ("standalone", "keywords", "variant", "variant_note", "follow_up"),
    ),
    StepInfo(
        Step.RETRIEVAL_PLAN,
        "retrieval_plan",
        "per sub-question: its queries, routes, k and the filters the question implies (rules or an LLM plan)",
        ("planner", "fallback", "parts", "inferred"),
    ),
)
INFO: dict[Step, StepInfo] = {i.step: i for i in _INFO}


def describe() -> dict[str, Any]:
    """The JSON description of the steps that ``GET /api/steps`` serves to the web UI."""
    return {
        "steps": [
            {"name": str(i.step), "key": i.key, "description": i.description, "lead_keys": list(i.lead_keys)}
            for i in _INFO
        ],
        "ask": [str(s) for s in ASK_STEPS],
        "summary": str(Step.SUMMARY),
        "round": str(Step.ROUND),
    }
