"""Judged scores (``sunlib eval rag --judge``), the HTML report (``--report *.html``) and the
baseline comparison, run as a user runs them: the real CLI on a copy of the sample vault with the
session's hash index, the judge being the real local OpenAI-compatible test server.

Two evaluations run once for the module: a first one (saved as the baseline with ``--json``),
then a second one with a judge that grades lower, against that baseline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sunlib import Library
from sunlib.config import LLMSettings
from sunlib.evaluate import regressions
from sunlib.evaluate.grading import RUBRIC_VERSION, AnswerGrader, GradeInput, judged_regressions, parse_grade
from sunlib.evaluate.history import save_eval
from sunlib.evaluate.report import EvalRun
from sunlib.providers.chat.openai import OpenAIChatModel
from sunlib.server import create_app
from tests.harness.llm_server import ChatServer, user_message
from tests.harness.llm_server import start as start_chat_server
from tests.support.clients import Api, sunlib
from tests.support.eval_data import HASH_TOML, TINY, write_beir, write_jsonl
from tests.support.paths import ROOT, place_index
from tests.support.sse import sse

ROOT = ROOT
SAMPLE_VAULT = ROOT / "src" / "sunlib" / "sample_vault"
HOSTILE = "What does <script>alert('x')</script> do in the sunlib notes?"
QA: list[dict[str, Any] | str] = [
    *TINY,
    {"id": "t-en-hostile", "lang": "en", "type": "unanswerable", "question": HOSTILE},
]
GOOD = '{"relevance": 5, "completeness": 4, "accuracy": 5, "reason": "matches the reference"}'
LOW = '{"relevance": 3, "completeness": 2, "accuracy": 2, "reason": "misses the point"}'


def grading_reply(accurate: bool) -> Any:
    """The rrf_k question is never graded (always malformed); the Ctrl-C question gets one malformed
    reply before a valid one; everything else a valid grade."""
    seen: dict[str, int] = {}

    def reply(body: dict[str, Any]) -> str:
        prompt = user_message(body)
        if "rrf_k" in prompt:
            return "I would give it a four."
        if "Ctrl-C" in prompt:
            seen["ctrl"] = seen.get("ctrl", 0) + 1
            if seen["ctrl"] == 1:
                return '{"relevance": 5, "completeness": 9, "accuracy": 5}'  # 9 is out of range
        return GOOD if accurate else LOW

    return reply


@dataclass
class Runs:
    vault: Path
    first: subprocess.CompletedProcess[str]
    second: subprocess.CompletedProcess[str]
    first_html: str
    second_html: str
    server: ChatServer
    baseline: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, hash_index: Path) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("eval_report")
    vault = root / "vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".sunlib"))
    index = place_index(vault, hash_index, home=root / "home")
    # the index is named in the vault's settings: the tests below run the CLI under homes of their own
    (vault / "sunlib.toml").write_text(f'index_dir = "{index}"\n' + HASH_TOML, encoding="utf-8")
    qa = write_jsonl(root / "qa.jsonl", QA)
    server, stop = start_chat_server()
    try:
        with pytest.MonkeyPatch.context() as env:
            for key in [k for k in os.environ if k.startswith("SUNLIB_")]:
                env.delenv(key)
            env.setenv("SUNLIB_HOME", str(root / "home"))
            judge = ("--judge", "--judge-url", server.base_url, "--judge-model", "grader-x", "--json")
            server.grader.reply = grading_reply(accurate=True)
            first = sunlib("eval", "rag", str(qa), "--vault", str(vault), *judge, "--report", str(root / "1.html"))
            baseline = root / "baseline.json"
            baseline.write_text(first.stdout, encoding="utf-8")
            server.grader.reply = grading_reply(accurate=False)
            second = sunlib(
                "eval", "rag", str(qa), "--vault", str(vault), *judge,
                "--baseline", str(baseline), "--report", str(root / "2.html"),
            )  # fmt: skip
        html = [(root / n).read_text(encoding="utf-8") for n in ("1.html", "2.html")]
        yield Runs(vault, first, second, html[0], html[1], server, baseline)
    finally:
        stop()


def cases(r: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in json.loads(r.stdout)["cases"]}


def test_judged_scores_sit_beside_the_metrics(runs: Runs) -> None:
    assert runs.first.returncode == 0, runs.first.stderr
    data = json.loads(runs.first.stdout)
    assert data["info"]["grader"] == {"model": "grader-x", "rubric": RUBRIC_VERSION}
    assert data["recall@5"] is not None and "refusal_rate" in data  # the deterministic metrics stay
    by_id = cases(runs.first)
    answered = [c for c in by_id.values() if not c["refused"]]
    refused = [c for c in by_id.values() if c["refused"]]
    assert answered and refused, [(c["id"], c["refused"]) for c in by_id.values()]
    for c in refused:  # no model call: right exactly when the question is unanswerable
        assert c["grade"]["method"] == "refusal" and c["grade"]["attempts"] == 0
        assert c["grade"]["correct"] is (not c["answerable"])
    prompts = [user_message(b) for b in runs.server.bodies("grader")]
    assert not any(c["question"] in p for c in refused for p in prompts)
    for body in runs.server.bodies("grader"):
        assert body["temperature"] == 0.0 and body["model"] == "grader-x"

    # the hash index answers the three answerable questions and refuses both unanswerable ones
    assert sorted(c["id"] for c in refused) == ["t-en-hostile", "t-en-unans"]
    rrf = by_id["t-en-code"]["grade"]  # malformed twice: unjudged, with the reason, after one retry
    assert rrf["accuracy"] is None and rrf["attempts"] == 2 and "malformed reply" in rrf["failure"]
    assert data["judge_unjudged"] == 1
    ctrl = by_id["t-en-fact"]  # the out-of-range reply is asked again, and the second one counts
    assert ctrl["grade"]["attempts"] == 2 and ctrl["grade"]["accuracy"] == 5
    retry = next(b for b in runs.server.bodies("grader") if "Ctrl-C" in user_message(b) and len(b["messages"]) > 2)
    assert "completeness" in retry["messages"][-1]["content"]
    judged = [c["grade"] for c in by_id.values() if c["grade"]["accuracy"] is not None]
    mean = round(sum(g["accuracy"] for g in judged) / len(judged), 4)
    assert data["judge_accuracy"] == mean


def test_retrieval_layer_figures_come_from_the_trace(runs: Runs) -> None:
    for c in cases(runs.first).values():
        assert c["gate"] is not None and c["gate"]["threshold"] == 0.7, c["id"]
        assert c["rerank_scores"] == sorted(c["rerank_scores"], reverse=True)
        if not c["refused"]:
            assert c["context_chunks"] >= 1 and c["context_chars"] > 0
            assert c["citation_list"], c["id"]


def test_the_report_is_one_offline_page_with_charts_and_escaped_text(runs: Runs) -> None:
    page = runs.first_html
    assert page.startswith("<!doctype html>") and page.count("<html") == 1
    assert re.search(r"<script[^>]+src=", page) is None and "<link" not in page  # nothing to fetch
    assert page.count("plotly.js v") >= 1 and page.count("Plotly.newPlot") >= 4
    assert "Metrics per slice" in page and "threshold 0.7" in page and "Latency per question" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "grader-x" in page and RUBRIC_VERSION in page
    for c in cases(runs.first).values():
        assert f"sunlib runs show {c['run_id']}" in page  # the run chain is saved and named
    some = next(iter(cases(runs.first).values()))
    r = sunlib("runs", "show", some["run_id"], "--vault", str(runs.vault), "--json")
    assert r.returncode == 0 and some["run_id"] in r.stdout, r.stderr
    assert "id='f-lang'" in page and "data-answerable='no'" in page  # the table filters


def test_the_baseline_gates_on_judged_scores_and_the_page_shows_what_changed(runs: Runs) -> None:
    r = runs.second
    assert r.returncode == 1, r.stderr
    assert "regression: judge_accuracy" in r.stderr
    assert "regression: recall@5" not in r.stderr  # same retrieval: no deterministic regression
    page = runs.second_html
    assert "<th>baseline</th><th>delta</th>" in page
    worse = page[page.index("<h2>Got worse") : page.index("<h2>Got better")]
    # the two graded answers fell from 5 to 2; the unjudged one and the refusals did not move
    assert worse.count("class='pair'") == 2 and "t-en-fact: " in worse and "t-zh-code: " in worse
    assert "matches the reference" not in worse and "judged R/C/A: 3 / 2 / 2" in worse
    assert "judged R/C/A: 5 / 4 / 5" in worse  # the baseline's answer, side by side
    assert "Got better (" not in page


def test_the_judge_tolerance_is_relative_to_the_baseline(runs: Runs) -> None:
    now = json.loads(runs.second.stdout)
    base = json.loads(runs.baseline.read_text(encoding="utf-8"))
    # two answers graded 5 then 2, and two refusals scored 5 both times: 5.0 -> 3.5, a 30% drop
    assert (base["judge_accuracy"], now["judge_accuracy"]) == (5.0, 3.5)
    assert judged_regressions(now, base, 0.51) == []
    assert judged_regressions(now, base, 0.31) == ["judge_correct_rate: 1.0 -> 0.5 (worse by 50.0% > 31.0%)"]
    assert judged_regressions(now, base, 0.29) == [
        "judge_accuracy: 5.0 -> 3.5 (worse by 30.0% > 29.0%)",
        "judge_correct_rate: 1.0 -> 0.5 (worse by 50.0% > 29.0%)",
    ]
    assert regressions(now, base, 0.05) == []  # the deterministic gate is unmoved


def test_a_grader_retries_once_then_records_the_item_unjudged(chat_server: ChatServer) -> None:
    model = OpenAIChatModel(LLMSettings(base_url=chat_server.base_url, model="m", stream=False, max_retries=0))
    grader = AnswerGrader(model)
    item = GradeInput("Q?", "ref", True, "an answer", False, ("evidence text",))
    chat_server.grader.reply = "no JSON here"
    grade = grader.grade(item)
    assert (
        grade.accuracy is None
        and grade.attempts == 2
        and grade.failure == ("malformed reply (the reply holds no JSON object)")
    )
    assert chat_server.attempts("grader") == 2
    chat_server.grader.fail(1, 400)
    failed = grader.grade(item)
    assert failed.accuracy is None and "call failed" in (failed.failure or "")
    refused = grader.grade(GradeInput("Q?", "", False, "refused", True))
    assert (refused.accuracy, refused.correct, refused.method) == (5, True, "refusal")
    assert chat_server.attempts("grader") == 3  # the refusal asked nothing


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ('{"relevance": 5, "completeness": 4}', "accuracy: Field required"),
        ('{"relevance": "5", "completeness": 4, "accuracy": 5}', "relevance: Input should be a valid integer"),
        ('{"relevance": 0, "completeness": 4, "accuracy": 5}', "relevance: Input should be greater than or equal"),
        ("", "the reply is empty"),
    ],
)
def test_parse_grade_names_what_is_wrong(reply: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_grade(reply)


def test_parse_grade_reads_the_first_valid_object() -> None:
    text = '<think>hm</think>Sure: ```json\n{"relevance": 4, "completeness": 3, "accuracy": 2, "reason": "x"}\n```'
    assert parse_grade(text).model_dump() == {"relevance": 4, "completeness": 3, "accuracy": 2, "reason": "x"}


def test_eval_retrieval_writes_an_html_report(tmp_path: Path) -> None:
    ds = write_beir(tmp_path / "ds")
    r = sunlib("eval", "retrieval", str(ds), "--mode", "bm25", "--report", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and re.search(r"<script[^>]+src=", page) is None
    assert "nDCG@10 per query" in page and "Latency per query" in page
    assert all(f"<td>{q}</td>" in page for q in ("q1", "q2", "q3", "q4"))


def saved_id(r: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"saved as (eval-[0-9a-f]{12})", r.stderr)
    assert found is not None, r.stderr
    return found.group(1)


def test_saved_evaluations_are_listed_and_compared(runs: Runs, tmp_path: Path) -> None:
    first, second = saved_id(runs.first), saved_id(runs.second)
    r = sunlib("eval", "history", "--vault", str(runs.vault), "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert [e["eval_id"] for e in listed] == [second, first]  # newest first
    assert listed[0]["qa_set"] == "qa.jsonl" and listed[0]["judge_accuracy"] == 3.5
    assert listed[1]["judge_model"] == "grader-x" and listed[1]["questions"] == len(QA)

    out = tmp_path / "cmp.html"
    r = sunlib("eval", "compare", first, second, "--vault", str(runs.vault), "--json", "--report", str(out))
    assert r.returncode == 0, r.stderr
    diff = json.loads(r.stdout)
    assert diff["deltas"]["judge_accuracy"] == {"then": 5.0, "now": 3.5, "delta": -1.5}
    assert diff["deltas"]["recall@5"]["delta"] == 0.0
    assert sorted(diff["worse"]) == ["t-en-fact", "t-zh-code"] and diff["better"] == []
    page = out.read_text(encoding="utf-8")
    assert "Got worse (2)" in page and "judged R/C/A: 5 / 4 / 5" in page and "judged R/C/A: 3 / 2 / 2" in page

    # the ask runs list keeps to ask runs; an evaluation is no ask run to show
    listed_runs = json.loads(sunlib("runs", "list", "--vault", str(runs.vault), "--json", "-n", "100").stdout)
    assert listed_runs and all(x["kind"] == "ask" for x in listed_runs)
    r = sunlib("runs", "show", first, "--vault", str(runs.vault))
    assert r.returncode == 1 and "is an evaluation" in r.stderr


def test_an_evaluation_obeys_the_runs_acl_rule(runs: Runs) -> None:
    with Library.open(runs.vault) as lib:
        secret = save_eval(lib.store, EvalRun({"questions": 1}), "ops.jsonl", ("ops", "public"))
    public = json.loads(sunlib("eval", "history", "--vault", str(runs.vault), "--json").stdout)
    assert secret not in [e["eval_id"] for e in public]
    ops = json.loads(sunlib("eval", "history", "--vault", str(runs.vault), "--as", "ops", "--json").stdout)
    assert ops[0]["eval_id"] == secret and ops[0]["qa_set"] == "ops.jsonl"
    first = saved_id(runs.first)
    for args in ((secret, first), (first, "eval-000000000000")):
        r = sunlib("eval", "compare", *args, "--vault", str(runs.vault))
        assert r.returncode == 1 and "no evaluation" in r.stderr and "Traceback" not in r.stderr
    r = sunlib("eval", "compare", secret, first, "--vault", str(runs.vault), "--as", "ops", "--json")
    assert r.returncode == 0, r.stderr


def test_a_benchmark_run_over_the_api_is_judged_saved_and_linked(runs: Runs) -> None:
    """What the Evaluate page starts: judged scores with the server's [llm] model, the evaluation
    kept with its grader, each question's run chain saved, and no server path in what comes back."""
    runs.server.grader.reply = grading_reply(accurate=True)
    write_jsonl(runs.vault / "qa-api.jsonl", QA)  # a QA set the API may use lies inside the vault
    llm = {"base_url": runs.server.base_url, "model": "grader-x", "timeout_s": 5, "max_retries": 1}
    with Library.open(runs.vault, llm=llm) as lib:
        app = create_app(lib)
        app.state.sunlib.jobs.start()
        try:
            api = Api(app)
            r = api.post("/api/benchmarks/rag/runs", json={"qa_set": "qa-api.jsonl", "judge": True})
            assert r.status_code == 202, r.text
            done = sse(api.get(r.json()["events"]).text)[-1]
            assert done[0] == "done", done
        finally:
            app.state.sunlib.jobs.close()
        report = done[1]["report"]
        assert report["metrics"]["judge_relevance"] is not None and report["metrics"]["judge_unjudged"] == 1
        saved = api.get(f"/api/evals/{report['eval_id']}").json()
        assert saved["info"]["grader"] == {"model": "grader-x", "rubric": RUBRIC_VERSION}
        assert str(runs.vault) not in json.dumps(saved)
        for case in report["cases"]:
            assert api.get(f"/api/runs/{case['run_id']}").status_code == 200
