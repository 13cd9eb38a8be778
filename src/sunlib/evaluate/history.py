"""Eval history: a RAG evaluation kept in the index as a saved run of kind ``eval``.

    save_eval(store, EvalRun, name, principals, owner=) -> run id
    eval_history(store, principals, limit, offset, owner=) -> [RunSummary]
    load_eval(store, run_id, principals, owner=) -> EvalRun | None
    compare(then: EvalRun, now: EvalRun) -> Comparison

An evaluation is stored in the runs table beside the ask runs, so it obeys the same rules: it
is its owner's (who ran it: ``owner``, None to read every owner's as an admin does), and
readable only by principals that hold every principal it was asked as. Those
are the principals every question of the evaluation was asked as, so whoever reads the
evaluation could have read every note its answers touched. The record's ``frame`` holds the
evaluation (metrics, slices, settings, per-question records: ``EvalRun.to_json``), its
``question`` the QA set's name, and its trace is empty (each question's own run chain is a
run of its own, named by ``run_id`` in the per-question records).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..library import Library
from ..store.protocols import LOCAL_OWNER, DocumentStore, RunRecord, RunSummary
from .grading import AnswerGrader
from .qa import run_info, slice_metrics, summarize
from .report import EvalRun, changes

KIND = "eval"


def save_eval(
    store: DocumentStore, run: EvalRun, name: str, principals: Sequence[str], *, owner: str = LOCAL_OWNER
) -> str:
    """Keep ``run`` in the index as ``owner``'s; returns its id (``eval-`` and 12 hex digits)."""
    run_id = f"eval-{uuid.uuid4().hex[:12]}"
    total = sum(float(c.get("latency_ms") or 0.0) for c in run.cases)
    created = time.time()
    record = RunRecord(run_id, KIND, created, tuple(principals), name, False, round(total, 1), run.to_json(), {}, owner)
    store.save_run(record)
    return run_id


def eval_history(
    store: DocumentStore,
    principals: Sequence[str],
    limit: int = 20,
    offset: int = 0,
    *,
    owner: str | None = LOCAL_OWNER,
) -> list[RunSummary]:
    """The evaluations of ``owner`` the principals may read, newest first."""
    return store.list_runs(principals, limit, offset, kind=KIND, owner=owner)


def load_eval(
    store: DocumentStore, run_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER
) -> EvalRun | None:
    """One saved evaluation, or None when there is none by that id of ``owner`` that the principals may read."""
    record = store.get_run(run_id, principals, owner=owner)
    if record is None or record.kind != KIND:
        return None
    return EvalRun.from_json(record.frame)


def keep_benchmark(
    lib: Library,
    rows: Sequence[dict[str, Any]],
    principals: Sequence[str],
    name: str,
    grader: AnswerGrader | None = None,
    *,
    owner: str = LOCAL_OWNER,
) -> str:
    """Save the questions a benchmark job ran (``run_case`` records) as one evaluation of ``owner``; returns its id."""
    run = EvalRun(summarize(rows), slice_metrics(rows), run_info(lib, rows, grader), list(rows))
    return save_eval(lib.store, run, name, principals, owner=owner)


def compare(then: EvalRun, now: EvalRun) -> Comparison:
    """What moved from ``then`` to ``now``: each metric both runs have, and the questions that changed."""
    keys = [k for k, v in now.metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    deltas = {
        k: (then.metrics[k], now.metrics[k], round(now.metrics[k] - then.metrics[k], 4))
        for k in keys
        if isinstance(then.metrics.get(k), int | float)
    }
    better, worse = changes(now, then)
    return Comparison(deltas, tuple(str(n["id"]) for n, _ in better), tuple(str(n["id"]) for n, _ in worse))


@dataclass(frozen=True)
class Comparison:
    deltas: Mapping[str, tuple[float, float, float]]  # metric -> (then, now, now - then)
    better: tuple[str, ...]  # question ids
    worse: tuple[str, ...]
