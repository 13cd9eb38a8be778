"""Trace spans: nesting, iterations, read-only details, saved traces, and how each surface shows a round."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from sunlib import Library
from sunlib.answer.details import RECORDS, SelectionDetails, SummaryDetails, read
from sunlib.contracts import RunTrace, StepTrace, to_jsonable
from sunlib.server.app import create_app
from sunlib.trace import Tracer, as_details
from sunlib.trace.steps import ASK_STEPS, INFO, RETRIEVAL_STEPS, Step, describe
from tests.support.clients import Api, sunlib
from tests.support.sse import sse

QUESTION = "How are nightly snapshots rotated and checked?"
IN_ROUND = (*RETRIEVAL_STEPS, Step.RERANK, Step.SELECT)
HASH = {"SUNLIB_EMBEDDING__PROVIDER": "hash", "COLUMNS": "200"}


def test_spans_nest_and_inherit_their_rounds_iteration() -> None:
    tracer = Tracer("ask")
    with tracer.step(Step.ROUTE) as step:
        step.done("rag")
    with tracer.step(Step.ROUND, "q", iteration=2) as round_:
        with tracer.step(Step.BM25) as step:
            step.done("3 chunks", top=[1, 2])
        tracer.skipped(Step.DENSE, "not used in this mode")
        round_.done("round 2")
    trace = tracer.finish()
    names = [(s.name, s.span_id, s.parent_id, s.iteration) for s in trace.steps]
    # in the order they started: the round before what it holds
    assert names == [
        (Step.ROUTE, "s1", None, 0),
        (Step.ROUND, "s2", None, 2),
        (Step.BM25, "s3", "s2", 2),
        (Step.DENSE, "s4", "s2", 2),
    ]
    assert [s.name for s in trace.children(None)] == [Step.ROUTE, Step.ROUND]
    assert [s.name for s in trace.children("s2")] == [Step.BM25, Step.DENSE]


def test_details_are_read_only_once_the_step_ends() -> None:
    tracer = Tracer("ask")
    with tracer.step(Step.RERANK) as rec:
        rec.done("ok", top=[1])
    (step,) = tracer.finish().steps
    with pytest.raises(TypeError):
        step.details["top"] = []  # type: ignore[index]  # a read-only mapping
    with pytest.raises(RuntimeError, match="read-only"):
        rec.done("changed later")
    assert step.output_summary == "ok" and step.details["top"] == [1]


def test_a_saved_trace_round_trips(hash_library: Library) -> None:
    result = hash_library.ask(QUESTION)
    saved = hash_library.store.get_run(result.run_id, ["public"])
    assert saved is not None
    again = RunTrace.from_json(saved.trace)
    assert to_jsonable(again) == saved.trace == json.loads(json.dumps(to_jsonable(result.trace)))
    assert again == RunTrace.from_json(to_jsonable(result.trace))
    assert [s.name for s in again.steps] == list(ASK_STEPS)  # the default chain: flat, iteration 0
    assert all(s.parent_id is None and s.iteration == 0 for s in again.steps)
    # a trace saved before spans existed still reads, its steps numbered in order
    before = ("name", "status", "latency_ms", "input_summary", "output_summary", "details")
    old = {**saved.trace, "steps": [{k: s[k] for k in before} for s in saved.trace["steps"]]}
    assert [s.span_id for s in RunTrace.from_json(old).steps] == [f"s{i}" for i in range(1, len(ASK_STEPS) + 1)]


def test_the_step_registry_is_served() -> None:
    data = describe()
    assert data["ask"] == [str(s) for s in ASK_STEPS] and data["summary"] == Step.SUMMARY
    assert {s["name"] for s in data["steps"]} == {str(s) for s in Step}


def _nested_library(vault: Path) -> Library:
    """A library whose ask (and whose served app's ask) takes the agentic loop: its retrieval,
    reranking and selection run in rounds."""
    return Library.open(
        vault,
        embedding={"provider": "hash"},
        answer={
            "mode": "agentic",
            "gate_threshold": 0.0,
            "reader_threshold": 0.0,
            "gate_threshold_bm25": 0.0,
            "answerable_threshold": 0.0,
        },
    )


def test_a_round_nests_on_every_surface(hash_library: Library) -> None:
    with _nested_library(hash_library.vault) as lib:
        app = create_app(lib)
        api = Api(app)
        assert api.get("/api/steps").json() == describe()
        events = sse(api.post("/api/ask/stream", json={"question": QUESTION}).text)
        steps = [StepTrace.from_json(d) for e, d in events if e == "step"]
        finish = events[-1][1]
        saved = api.get(f"/api/runs/{finish['run_id']}").json()

    # SSE: each step as it ends, so the round's steps come before the round; parent_id ties them
    (round_,) = [s for s in steps if s.name == Step.ROUND]
    assert round_.iteration == 1 and round_.details["question"] == QUESTION
    inside = [s for s in steps if s.parent_id == round_.span_id]
    assert [s.name for s in inside] == list(IN_ROUND) and all(s.iteration == 1 for s in inside)
    top = [s.name for s in steps if s.parent_id is None]
    assert top == [Step.ROUTE, Step.AGENT, Step.SUMMARY]
    (agent,) = [s for s in steps if s.name == Step.AGENT]
    assert round_.parent_id == agent.span_id
    loop = [s.name for s in steps if s.parent_id == agent.span_id]
    assert loop == [Step.REWRITE, Step.PLAN, Step.RETRIEVAL_PLAN, Step.ROUND, Step.CONTEXT, Step.WRITE, Step.VERIFY]
    assert not finish["refused"], finish

    # the saved run: the round first, then what it holds
    trace = RunTrace.from_json(saved["trace"])
    assert [s.name for s in trace.children(None)] == top
    assert [s.name for s in trace.children(round_.span_id)] == list(IN_ROUND)
    names = [s.name for s in trace.steps]
    assert names.index(Step.ROUND) < names.index(Step.BM25)

    # the CLI (`runs show` renders the saved trace): each level indented under its parent
    r = sunlib("runs", "show", finish["run_id"], "--vault", str(hash_library.vault), env=HASH)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(re.match(rf"^ {{5}}\S+ {Step.ROUND}  ", line) for line in lines), r.stdout
    for name in IN_ROUND:
        assert any(re.match(rf"^ {{9}}\S+ {re.escape(name)}  ", line) for line in lines), (name, r.stdout)
    for name in (Step.ROUTE, Step.AGENT, Step.SUMMARY):
        assert any(re.match(rf"^ \S+ {re.escape(name)}  ", line) for line in lines), (name, r.stdout)
    assert any(re.match(rf"^ {{5}}\S+ {re.escape(Step.CONTEXT)}  ", line) for line in lines), r.stdout


def _records_round_trip(trace: RunTrace) -> set[str]:
    """Every step with a typed record reads back into it and writes out the same JSON."""
    seen = set()
    for step in trace.steps:
        record = RECORDS.get(Step(step.name)) if step.name in set(Step) else None
        if record is None or step.status == "skipped" or step.status == "error":
            continue
        typed = read(step, record)
        assert as_details(typed) == json.loads(json.dumps(to_jsonable(step.details))), step.name
        seen.add(step.name)
    return seen


def test_the_details_surfaces_read_are_typed_records(hash_library: Library) -> None:
    with _nested_library(hash_library.vault) as lib:  # an open gate: every step runs
        single = lib.ask(QUESTION, save=False, agentic=False)
        looped = lib.ask(QUESTION, save=False)
    refused = hash_library.ask(QUESTION, save=False)
    assert refused.frame.refused and Step.SELECT in _records_round_trip(refused.trace)
    assert not single.frame.refused
    assert _records_round_trip(single.trace) == {
        Step.ROUTE,
        Step.RERANK,
        Step.SELECT,
        Step.CONTEXT,
        Step.WRITE,
        Step.VERIFY,
        Step.SUMMARY,
    }
    assert {Step.AGENT, Step.ROUND} <= _records_round_trip(looped.trace)
    select = next(s for s in single.trace.steps if s.name == Step.SELECT)
    assert read(select, SelectionDetails).selected == tuple(select.details["selected"])


def test_the_uis_lead_keys_are_fields_of_the_steps_records() -> None:
    for step, record in RECORDS.items():
        fields = {f.name: f for f in dataclasses.fields(record)}
        if any(f.metadata.get("flat") for f in fields.values()):
            continue  # a writer's own keys join the record's
        assert set(INFO[step].lead_keys) <= set(fields), step


def test_a_field_an_older_run_lacks_reads_as_none() -> None:
    old = StepTrace("Run Summary", "ok", 1.0, "", "", {"total_ms": 3.0, "tokens_in": 5})
    summary = read(old, SummaryDetails)
    assert summary.total_ms == 3.0 and summary.tokens_in == 5 and summary.trace_saved is None
