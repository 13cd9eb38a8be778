"""The agentic loop (answer/agentic/loop.py) on the hash-indexed sample vault: decomposition rules in
English and Chinese, evidence from both notes of a comparison, part-by-part fallback, the caps,
the nested trace, and the single-shot default left as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.answer import AskResult
from sunlib.answer.agentic.decompose import analyze, decompose
from sunlib.answer.agentic.loop import TRANSITIONS
from sunlib.contracts import StepTrace, to_jsonable
from sunlib.server import create_app
from sunlib.text.terms import names
from sunlib.trace.steps import ASK_STEPS, Step
from tests.support.clients import Api, sunlib
from tests.support.sse import sse

OPEN = {"gate_threshold": 0.0, "reader_threshold": 0.0, "gate_threshold_bm25": 0.0, "answerable_threshold": 0.0}
COMPARISON = "How does the fixed-window chunker differ from the e5 embedding model?"
MISSING = "What does the `zorblax_mode` option do?"
FIVE = "What is top_k? What is min_score? What is rrf_k? What is k1? What is expand_radius?"
MULTI_PART = f"How big are the windows of the fixed-window chunker? {MISSING}"

DECOMPOSITIONS: list[tuple[str, str, list[str]]] = [
    ("BM25 vs dense search", "comparison", ["What is BM25?", "What is dense search?"]),
    (
        "What is the difference between bm25 mode and hybrid mode?",
        "comparison",
        ["What is bm25 mode?", "What is hybrid mode?"],
    ),
    (
        "How does the fixed-window chunker differ from the heading chunker?",
        "comparison",
        ["What is fixed-window chunker?", "What is heading chunker?"],
    ),
    ("Please compare e5 with minilm", "comparison", ["What is e5?", "What is minilm?"]),
    (
        "What are the defaults of top_k, min_score and candidates?",
        "enumeration",
        [
            "What are the defaults of top_k?",
            "What are the defaults of min_score?",
            "What are the defaults of candidates?",
        ],
    ),
    (
        "Which chunker is the default, and what is its window size?",
        "multi_part",
        ["Which chunker is the default?", "What is its window size?"],
    ),
    (
        "How big is a chunk? How many candidates does each route return?",
        "multi_part",
        ["How big is a chunk?", "How many candidates does each route return?"],
    ),
    ("What is top_k; what is min_score", "multi_part", ["What is top_k?", "What is min_score?"]),
    (FIVE, "multi_part", ["What is top_k?", "What is min_score?", "What is rrf_k?", "What is k1?"]),
    ("How do I install the minilm model?", "procedure", ["How do I install the minilm model?"]),
    ("bm25 和 dense 的区别", "comparison", ["bm25是什么？", "dense是什么？"]),
    ("BM25 与向量检索有什么不同？", "comparison", ["BM25是什么？", "向量检索是什么？"]),
    ("top_k 和 min_score 的默认值是多少？", "enumeration", ["top_k的默认值是多少？", "min_score的默认值是多少？"]),
    ("如何安装以及如何建立索引？", "multi_part", ["如何安装？", "如何建立索引？"]),
    ("怎么安装；怎么提问", "multi_part", ["怎么安装？", "怎么提问？"]),
    ("请问 top_k 的默认值是多少？", "fact", ["top_k 的默认值是多少？"]),
]


@pytest.mark.parametrize(("question", "kind", "parts"), DECOMPOSITIONS)
def test_decomposition_rules(question: str, kind: str, parts: list[str]) -> None:
    analysis = analyze(question)
    plan = decompose(question, analysis)
    assert analysis.kind == kind
    assert [p.text for p in plan.parts] == parts
    assert len(plan.parts) <= 4
    kept = {n.text for p in plan.parts for n in names(p.text)}
    if len(plan.parts) == len(parts) and plan.dropped == 0:
        assert {n.text for n in names(question)} <= kept | {"Please"}  # names survive; framing words go


def test_the_cap_on_sub_questions_is_reported() -> None:
    plan = decompose(FIVE, analyze(FIVE), cap=3)
    assert len(plan.parts) == 3 and plan.dropped == 2


def _steps(result: AskResult, name: str) -> list[StepTrace]:
    return [s for s in result.trace.steps if s.name == name]


def _cited(result: AskResult) -> set[str]:
    return {c.path for c in result.frame.citations}


def test_a_comparison_gets_evidence_from_both_notes(hash_library: Library) -> None:
    lib = hash_library.with_settings(answer=OPEN)
    single = lib.ask(COMPARISON, save=False)
    agentic = lib.ask(COMPARISON, save=False, agentic=True)
    assert "guide/indexing/chunking.md" in _cited(single)
    assert "guide/models/embedding-models.md" not in _cited(single)  # one retrieval finds one side
    assert {"guide/indexing/chunking.md", "guide/models/embedding-models.md"} <= _cited(agentic)
    assert not agentic.frame.refused and agentic.frame.unsupported == 0
    (loop,) = _steps(agentic, Step.AGENT)
    assert [p["covered"] for p in loop.details["sub_questions"]] == [True, True]
    assert loop.details["stopped_by"] is None
    # every transition is one of the table's, with its reason
    for t in loop.details["transitions"]:
        assert TRANSITIONS[(t["state"], t["event"])] == t["next"] and t["reason"]
    assert loop.details["transitions"][-1]["next"] == "done"


def test_the_trace_nests_rounds_under_the_loop(hash_library: Library) -> None:
    result = hash_library.with_settings(answer=OPEN).ask(COMPARISON, save=False, agentic=True)
    (loop,) = _steps(result, Step.AGENT)
    rounds = _steps(result, Step.ROUND)
    assert [r.iteration for r in rounds] == [1, 2]
    assert all(r.parent_id == loop.span_id for r in rounds)
    assert [r.details["sub_question"] for r in rounds] == [1, 2]
    by_round = {r.span_id: r for r in rounds}
    selects = _steps(result, Step.SELECT)
    assert len(selects) == 2
    for sel in selects:
        assert sel.parent_id in by_round and sel.iteration == by_round[sel.parent_id].iteration
    (plan,) = _steps(result, Step.PLAN)
    assert plan.parent_id == loop.span_id and plan.details["kind"] == "comparison"
    assert _steps(result, Step.SUMMARY)[0].parent_id is None


def test_an_uncovered_part_is_named_and_the_covered_part_answered(hash_library: Library) -> None:
    result = hash_library.with_settings(answer=OPEN).ask(MULTI_PART, save=False, agentic=True)
    frame = result.frame
    assert not frame.refused and frame.unsupported == 0
    assert "guide/indexing/chunking.md" in _cited(result)
    assert f"The notes do not cover this part: {MISSING}" in frame.answer
    assert [(r.code, r.params["part"]) for r in frame.refusals] == [("missing_name", 2)]
    (loop,) = _steps(result, Step.AGENT)
    assert loop.status == "warning"
    assert any(t["next"] == "fallback" for t in loop.details["transitions"])


def test_no_part_covered_is_refused_with_a_reason_per_part(hash_library: Library) -> None:
    question = "What does the `zorblax_mode` option do? What does the `quuxity_level` option do?"
    result = hash_library.with_settings(answer=OPEN).ask(question, save=False, agentic=True)
    assert result.frame.refused
    assert [r.params["part"] for r in result.frame.refusals] == [1, 2]
    assert "zorblax_mode" in (result.frame.refusal_reason or "")
    assert "quuxity_level" in (result.frame.refusal_reason or "")


def test_follow_up_rounds_and_the_caps_stop_the_loop(hash_library: Library) -> None:
    lib = hash_library.with_settings(answer=OPEN)
    # a gap: round 2 asks again with the missing names and terms; round 3 (the gap's query would
    # be the same again) the plan's keyword form; then the rounds cap ends the part
    result = lib.ask(MISSING, save=False, agentic=True)
    rounds = _steps(result, Step.ROUND)
    assert [r.details["part_round"] for r in rounds] == [1, 2, 3]
    assert rounds[1].details["query"] != MISSING and "zorblax_mode" in rounds[1].details["query"]
    assert rounds[2].details["query"] == "`zorblax_mode` option"
    (loop,) = _steps(result, Step.AGENT)
    reasons = [t["reason"] for t in loop.details["transitions"]]
    assert "part 1: rounds cap reached" in reasons
    assert any(r.endswith("from the plan (the next form of the question)") for r in reasons)
    assert loop.details["caps_hit"] == ["rounds cap (3) for part(s) 1"]
    one_round = lib.with_settings(answer={**OPEN, "agentic_rounds": 1}).ask(MISSING, save=False, agentic=True)
    (loop,) = _steps(one_round, Step.AGENT)
    assert len(_steps(one_round, Step.ROUND)) == 1
    assert "part 1: rounds cap reached" in [t["reason"] for t in loop.details["transitions"]]
    # the retrievals cap ends the run before the second part, and the trace and frame say so
    capped = lib.with_settings(answer={**OPEN, "agentic_retrievals": 1}).ask(COMPARISON, save=False, agentic=True)
    (loop,) = _steps(capped, Step.AGENT)
    assert loop.details["stopped_by"] == "retrievals cap (1) reached"
    assert "stopped: retrievals cap (1) reached" in loop.output_summary
    assert len(_steps(capped, Step.ROUND)) == 1
    assert [r.code for r in capped.frame.refusals] == ["not_looked_up"]
    assert capped.frame.unsupported == 0
    budget = lib.with_settings(answer={**OPEN, "agentic_seconds": 1e-9}).ask(COMPARISON, save=False, agentic=True)
    assert _steps(budget, Step.AGENT)[0].details["stopped_by"].startswith("time budget")
    assert budget.frame.refused and not _steps(budget, Step.ROUND)


def _plain(result: AskResult) -> tuple[Any, list[tuple[str, str, str, str]]]:
    steps = [(s.name, s.status, s.input_summary, s.output_summary) for s in result.trace.steps]
    return to_jsonable(result.frame), steps


def test_single_mode_is_the_single_shot_unchanged(hash_library: Library) -> None:
    lib = hash_library.with_settings(answer=OPEN)
    default = lib.ask(COMPARISON, save=False)
    assert lib.settings.answer.mode == "single"
    assert [s.name for s in default.trace.steps] == list(ASK_STEPS)
    assert _plain(lib.ask(COMPARISON, save=False, agentic=False)) == _plain(default)
    auto = lib.with_settings(answer={**OPEN, "mode": "auto"})
    # auto: a fact question takes the single shot, a comparison the loop
    fact = "How big are the windows of the fixed-window chunker?"
    frame, steps = _plain(auto.ask(fact, save=False))
    # ... with the same frame and steps, and one skipped step first that says why
    assert steps[0][:2] == (Step.AGENT, "skipped") and "auto: a fact question" in steps[0][3]
    assert (frame, steps[1:]) == _plain(lib.ask(fact, save=False))
    assert _steps(auto.ask(COMPARISON, save=False), Step.AGENT)
    assert _steps(lib.with_settings(answer={**OPEN, "mode": "agentic"}).ask(fact, save=False), Step.AGENT)


def test_the_api_takes_an_agentic_field(hash_library: Library) -> None:
    api = Api(create_app(hash_library.with_settings(answer=OPEN)))
    r = api.post("/api/ask", json={"question": COMPARISON, "agentic": True})
    assert r.status_code == 200, r.text
    names_ = [s["name"] for s in r.json()["trace"]["steps"]]
    assert Step.AGENT in names_ and names_.count(Step.ROUND) == 2
    single = api.post("/api/ask", json={"question": COMPARISON})
    assert Step.AGENT not in [s["name"] for s in single.json()["trace"]["steps"]]
    stream = api.post("/api/ask/stream", json={"question": COMPARISON, "agentic": True})
    events = sse(stream.text)
    rounds = [data for event, data in events if event == "step" and data["name"] == Step.ROUND]
    assert [r["iteration"] for r in rounds] == [1, 2] and events[-1][0] == "finish"
    bad = api.post("/api/ask", json={"question": COMPARISON, "agentic": "very"})
    assert bad.status_code == 422 and {"error", "message"} <= set(bad.json())


def test_the_cli_takes_agentic(hash_vault: Path, tmp_path: Path) -> None:
    config = tmp_path / "sunlib.toml"
    config.write_text(
        '[embedding]\nprovider = "hash"\n[answer]\ngate_threshold = 0.0\ngate_threshold_bm25 = 0.0\n'
        "reader_threshold = 0.0\nanswerable_threshold = 0.0\n",
        encoding="utf-8",
    )
    common = ("--vault", str(hash_vault), "--config", str(config), "--json", "--explain", "--no-save")
    r = sunlib("ask", COMPARISON, "--agentic", *common)
    assert r.returncode == 0, r.stderr
    steps = [s["name"] for s in json.loads(r.stdout)["trace"]["steps"]]
    assert Step.AGENT in steps and steps.count(Step.ROUND) == 2
    r = sunlib("ask", COMPARISON, "--single", *common)
    assert r.returncode == 0, r.stderr
    assert Step.AGENT not in [s["name"] for s in json.loads(r.stdout)["trace"]["steps"]]
