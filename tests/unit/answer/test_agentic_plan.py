"""The agentic loop's rewrite and plan states (answer/agentic/: rewrite.py, plan_rules.py, plan_stage.py)
on the hash-indexed sample vault: the question's forms, a follow-up made standalone, filters
inferred from the question (and only those the asker can see), a chat model's JSON plan from a
real local server (good, invalid, failing), and the multi-document evaluation (``--mode both``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.answer import AskResult
from sunlib.answer.agentic.loop import TRANSITIONS
from sunlib.answer.agentic.plan_rules import infer_scope
from sunlib.answer.agentic.plan_stage import PLAN_BILINGUAL, PLAN_MARK, parse_plan
from sunlib.answer.agentic.rewrite import keyword_form, other_language
from sunlib.contracts import SearchFilters, StepTrace, Turn
from sunlib.evaluate import evaluate_rag, load_qa
from sunlib.trace.steps import Step
from tests.harness.llm_server import ChatServer, system_message
from tests.support.clients import sunlib

OPEN = {"gate_threshold": 0.0, "reader_threshold": 0.0, "gate_threshold_bm25": 0.0, "answerable_threshold": 0.0}
COMPARISON = "How does the fixed-window chunker differ from the e5 embedding model?"


def _step(result: AskResult, name: str) -> StepTrace:
    (step,) = [s for s in result.trace.steps if s.name == name]
    return step


def _events(result: AskResult) -> list[tuple[str, str]]:
    loop = _step(result, Step.AGENT)
    return [(t["state"], t["event"]) for t in loop.details["transitions"]]


def _selected_paths(lib: Library, result: AskResult) -> list[str]:
    ids = [c for s in result.trace.steps if s.name == Step.SELECT for c in s.details["selected"]]
    return [r.path for r in lib.store.chunks_by_ids(ids)]


def test_keyword_form_and_the_other_language() -> None:
    assert keyword_form("How big are the windows of the fixed-window chunker?") == "windows fixed-window chunker"
    assert keyword_form("What does the `zorblax_mode` option do?") == "`zorblax_mode` option"
    assert keyword_form("top_k 的默认值是多少？") == "top_k 默认值"
    assert keyword_form("如何安装以及如何建立索引？") == "安装 建立索引"
    assert keyword_form("chunker") is None  # nothing to remove
    english = other_language("top_k 的默认值是多少？")
    assert english is not None and english.startswith("top_k") and "default" in english
    chinese = other_language("What is the default value of batch_size?")
    assert chinese is not None and "batch_size" in chinese and "What" not in chinese


def test_rewrite_and_plan_are_states_of_the_loop(hash_library: Library) -> None:
    result = hash_library.with_settings(answer=OPEN).ask(COMPARISON, save=False, agentic=True)
    loop, rewrite, plan = (_step(result, n) for n in (Step.AGENT, Step.REWRITE, Step.RETRIEVAL_PLAN))
    assert rewrite.parent_id == loop.span_id and plan.parent_id == loop.span_id
    assert rewrite.details["keywords"] == "fixed-window chunker differ e5 embedding model"
    assert rewrite.details["variant"] and rewrite.details["variant_note"] == "through CC-CEDICT"  # bilingual vault
    assert plan.details["planner"] == "rules" and plan.details["fallback"] is None
    first = plan.details["parts"][0]
    assert first["queries"][:2] == ["What is fixed-window chunker?", "fixed-window chunker"]
    second = plan.details["parts"][1]["queries"]
    assert second[2:] == [other_language("What is e5 embedding model?")] != [None]  # ... and the Chinese variant
    assert first["routes"] == ["bm25", "dense", "crosslang", "translated"] and first["k"] == 30
    assert _events(result)[:4] == [
        ("analyze", "analyzed"),
        ("rewrite", "rewritten"),
        ("decompose", "split"),
        ("plan", "planned"),
    ]
    for t in loop.details["transitions"]:
        assert TRANSITIONS[(t["state"], t["event"])] == t["next"] and t["reason"]


def test_a_follow_up_is_rewritten_before_the_loop(hash_library: Library) -> None:
    history = (Turn("user", "What does the rrf_k setting control?"), Turn("assistant", "The RRF constant."))
    result = hash_library.with_settings(answer=OPEN).ask(
        "And what is its default?", save=False, history=history, agentic=True
    )
    rewrite = _step(result, Step.REWRITE)
    assert rewrite.details["follow_up"]["said"] == "And what is its default?"
    assert "rrf_k" in rewrite.details["standalone"]
    reasons = [t["reason"] for t in _step(result, Step.AGENT).details["transitions"]]
    assert any(r.startswith("follow-up 'And what is its default?' made standalone") for r in reasons)


def test_a_later_sub_question_gets_what_the_first_is_about(hash_library: Library) -> None:
    question = "What does the rrf_k setting control, and what is its default?"
    result = hash_library.with_settings(answer=OPEN).ask(question, save=False, agentic=True)
    parts = _step(result, Step.RETRIEVAL_PLAN).details["parts"]
    assert [p["question"] for p in parts] == ["What does the rrf_k setting control?", "What is its default (rrf_k)?"]


@pytest.mark.parametrize(
    ("question", "folders", "tags", "script", "heading"),
    [
        ("In the Chinese docs, how is Chinese text split into tokens?", ("zh",), (), None, None),
        ("Which settings are in the reference folder?", ("reference",), (), None, None),
        ("What do the notes tagged acl say about filters?", (), ("acl",), None, None),
        ("Which notes #hybrid explain fusion?", (), ("hybrid",), None, None),
        (
            "What does chapter 2 say about installing?",
            (),
            (),
            None,
            r"^(?:chapter\s*2\b|2(?:[.、:：\s]|$)|第\s*2\s*章)",
        ),
        ("In the section 'Choosing a mode', which mode is best?", (), (), None, "choosing\\ a\\ mode"),
        ("中文文档里怎么安装？", ("zh",), (), None, None),
    ],
)
def test_filters_inferred_from_the_question(
    hash_library: Library, question: str, folders: tuple[str, ...], tags: tuple[str, ...], script: Any, heading: Any
) -> None:
    scope = infer_scope(question, hash_library.store, ("public",), None)
    assert (scope.folders, scope.tags, scope.script, scope.heading) == (folders, tags, script, heading)
    assert len(scope.notes) == 1 and "->" in scope.notes[0]


def test_a_filter_the_asker_cannot_see_or_that_widens_the_search_is_ignored(hash_library: Library) -> None:
    store = hash_library.store
    hidden = infer_scope("What is in the internal folder?", store, ("public",), None)
    assert hidden.folders == () and "no folder internal/ among the visible notes" in hidden.notes[0]
    seen = infer_scope("What is in the internal folder?", store, ("public", "ops", "team"), None)
    assert seen.folders == ("internal",)
    outside = infer_scope("Which settings are in the reference folder?", store, ("public",), SearchFilters(("guide",)))
    assert outside.folders == () and "outside the search's folders" in outside.notes[0]
    assert infer_scope("notes tagged nosuchtag", store, ("public",), None).tags == ()


def test_an_inferred_folder_and_heading_narrow_every_round(hash_library: Library) -> None:
    lib = hash_library.with_settings(answer=OPEN)
    result = lib.ask("In the Chinese docs, how does keyword search treat Chinese text?", save=False, agentic=True)
    plan = _step(result, Step.RETRIEVAL_PLAN)
    assert plan.details["parts"][0]["filters"] == {"folders": ["zh"]}
    assert plan.details["parts"][0]["queries"][0] == "How does keyword search treat Chinese text?"
    paths = _selected_paths(lib, result)
    assert paths and all(p.startswith("zh/") for p in paths)
    result = lib.ask("In the section 'Choosing a mode', which search mode should I use?", save=False, agentic=True)
    ids = [c for s in result.trace.steps if s.name == Step.SELECT for c in s.details["selected"]]
    rows = lib.store.chunks_by_ids(ids)
    assert rows and all("Choosing a mode" in r.heading_path for r in rows)
    assert _step(result, Step.RETRIEVAL_PLAN).details["parts"][0]["k"] == 60  # doubled: hits are narrowed


# -- a chat model's plan -----------------------------------------------------------------------

GOOD_PLAN = {
    "sub_questions": [
        {"question": "How large are the fixed-window chunker's windows?", "queries": ["fixed-window chunker size"]},
        {"question": "What is the e5 embedding model?", "queries": ["e5 model"], "folder": "guide"},
    ]
}


def _planned(lib: Library, server: ChatServer, reply: str) -> AskResult:
    def answer(body: dict[str, Any]) -> str:
        system = system_message(body)
        assert system.startswith(PLAN_MARK)
        # the sample vault holds English and Chinese notes: the model is asked for a translated query
        assert system.endswith(PLAN_BILINGUAL)
        return reply

    server.writer.reply = answer
    llm = {"base_url": server.base_url, "model": "planner-model", "max_retries": 0, "timeout_s": 10}
    return lib.with_settings(answer={**OPEN, "planner": "llm"}, llm=llm).ask(COMPARISON, save=False, agentic=True)


def test_a_valid_llm_plan_is_used(hash_library: Library, chat_server: ChatServer) -> None:
    result = _planned(hash_library, chat_server, "Here is the plan: " + json.dumps(GOOD_PLAN))
    plan = _step(result, Step.RETRIEVAL_PLAN)
    assert plan.status == "ok" and plan.details["planner"] == "llm" and plan.details["model"] == "planner-model"
    parts = plan.details["parts"]
    assert [p["question"] for p in parts] == [p["question"] for p in GOOD_PLAN["sub_questions"]]
    assert parts[0]["queries"][0] == "fixed-window chunker size"  # the model's queries first
    assert parts[1]["filters"] == {"folders": ["guide"]} and parts[0]["filters"] == {}
    rounds = [s for s in result.trace.steps if s.name == Step.ROUND]
    assert rounds[0].details["query"] == "fixed-window chunker size"
    assert ("plan", "planned") in _events(result) and chat_server.attempts("writer") == 1


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("I would search for chunkers.", "the reply holds no JSON object"),
        ('{"sub_questions": [{"question": "x", "queries": ["a"], "colour": "red"}]}', "colour: Extra inputs"),
        ('{"sub_questions": []}', "sub_questions: List should have at least 1 item"),
        ('{"sub_questions": [{"question": "a", "queries": ["   "]}]}', "an empty sub-question or query"),
    ],
)
def test_an_invalid_llm_plan_falls_back_to_the_rules(
    hash_library: Library, chat_server: ChatServer, reply: str, why: str
) -> None:
    result = _planned(hash_library, chat_server, reply)
    plan = _step(result, Step.RETRIEVAL_PLAN)
    assert plan.status == "warning" and plan.details["planner"] == "rules"
    assert plan.details["fallback"].startswith("the LLM plan is invalid") and why in plan.details["fallback"]
    assert [p["question"] for p in plan.details["parts"]] == [
        "What is fixed-window chunker?",
        "What is e5 embedding model?",
    ]
    assert ("plan", "rules_fallback") in _events(result)
    assert not result.frame.refused


def test_a_failing_plan_call_falls_back_to_the_rules(hash_library: Library, chat_server: ChatServer) -> None:
    chat_server.writer.fail(3, 500)
    result = _planned(hash_library, chat_server, json.dumps(GOOD_PLAN))
    plan = _step(result, Step.RETRIEVAL_PLAN)
    assert plan.details["planner"] == "rules" and plan.details["fallback"].startswith("the plan call failed")
    assert len(plan.details["parts"]) == 2 and not result.frame.refused


def test_the_plan_schema_caps_sub_questions() -> None:
    five = {"sub_questions": [{"question": f"q{i}", "queries": []} for i in range(5)]}
    with pytest.raises(ValueError, match="the cap is 4"):
        parse_plan(json.dumps(five), 4)
    assert len(parse_plan(json.dumps(GOOD_PLAN), 4).sub_questions) == 2


# -- evaluation ----------------------------------------------------------------------------------

MULTIDOC = [
    {
        "id": "cmp",
        "lang": "en",
        "type": "comparison",
        "question": COMPARISON,
        "gold_files": ["guide/indexing/chunking.md", "guide/models/embedding-models.md"],
        "gold_phrases": [],
        "parts": [
            {"part": "chunker", "gold_file": "guide/indexing/chunking.md", "gold_phrase": "fixed"},
            {"part": "e5", "gold_file": "guide/models/embedding-models.md", "gold_phrase": "e5"},
        ],
        "answer": "",
    },
    {
        "id": "fu-1",
        "lang": "en",
        "type": "follow_up",
        "question": "What does the rrf_k setting control?",
        "gold_files": ["guide/search/search-modes.md"],
        "gold_phrases": [],
        "parts": [{"part": "rrf_k", "gold_file": "guide/search/search-modes.md", "gold_phrase": "rrf_k"}],
        "answer": "",
    },
    {
        "id": "fu-2",
        "lang": "en",
        "type": "follow_up",
        "follows": "fu-1",
        "question": "And what is its default?",
        "gold_files": ["reference/configuration.md"],
        "gold_phrases": [],
        "parts": [{"part": "default", "gold_file": "reference/configuration.md", "gold_phrase": "rrf_k = 60"}],
        "answer": "",
    },
    {
        "id": "partial",
        "lang": "en",
        "type": "unanswerable",
        "question": "What is top_k, and how much does sunlib cost per month?",
        "gold_files": ["reference/configuration.md"],
        "gold_phrases": ["top_k"],
        "parts": [
            {"part": "top_k", "gold_file": "reference/configuration.md", "gold_phrase": "top_k"},
            {"part": "price", "gold_file": None, "gold_phrase": None},
        ],
        "answer": "",
    },
]


@pytest.fixture
def multidoc_qa(tmp_path: Path) -> Path:
    path = tmp_path / "multidoc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MULTIDOC), encoding="utf-8")
    return path


def test_multi_document_metrics_in_both_modes(hash_library: Library, multidoc_qa: Path) -> None:
    cases = load_qa(multidoc_qa)
    assert cases[2].follows == "fu-1" and cases[3].answerable and not cases[3].parts[1].coverable
    lib = hash_library.with_settings(answer=OPEN)
    single, agentic = (evaluate_rag(lib, cases, agentic=mode) for mode in (False, True))
    rows = {r["id"]: r for r in agentic.cases}
    assert rows["cmp"]["all_gold@10"] is True and rows["cmp"]["part_coverage"] == 1.0
    assert rows["cmp"]["rounds"] == 2 and {r["rounds"] for r in single.cases} == {1}
    assert rows["fu-1"]["all_gold@10"] is None  # one gold file: not a multi-document question
    assert rows["partial"]["parts_total"] == 1  # the uncovered part is not scored
    assert agentic.metrics["all_gold_recall@10"] == 1.0 >= single.metrics["all_gold_recall@10"]
    assert agentic.metrics["rounds"] > single.metrics["rounds"] == 1.0
    assert (single.info["answer_mode"], agentic.info["answer_mode"]) == ("single", "agentic")
    # the follow-up was asked with the question before it as the conversation's history
    run = lib.store.get_run(rows["fu-2"]["run_id"], ("public",))
    assert run is None  # runs are not saved unless asked
    fu = evaluate_rag(lib, cases[1:3], agentic=True, save_runs=True)
    saved = lib.store.get_run(fu.cases[1]["run_id"], ("public",))
    assert saved is not None
    steps = [s for s in saved.trace["steps"] if s["name"] == Step.REWRITE]
    assert steps[0]["details"]["follow_up"]["said"] == "And what is its default?"


def test_eval_rag_mode_both_prints_the_modes_side_by_side(hash_vault: Path, multidoc_qa: Path) -> None:
    common = ("eval", "rag", str(multidoc_qa), "--vault", str(hash_vault), "--provider", "hash", "--no-save")
    r = sunlib(*common, "--mode", "both", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"single", "agentic"}
    for mode, run in data.items():
        assert run["info"]["answer_mode"] == mode and run["questions"] == 4
        assert {"all_gold_recall@10", "part_coverage", "rounds", "latency_ms_p95"} <= set(run)
    text = sunlib(*common, "--mode", "both", env={"COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    header = next(line for line in text.stdout.splitlines() if "single" in line and "agentic" in line)
    assert header.split() == ["single", "agentic", "delta"]
    assert any(line.split()[0] == "all_gold_recall@10" for line in text.stdout.splitlines() if line.strip())
    bad = sunlib(*common, "--mode", "sideways")
    assert bad.returncode != 0 and "unknown --mode 'sideways'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
