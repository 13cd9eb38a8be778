"""/api/evals: saved evaluations (the Evaluate page), under the runs ACL rule.

    GET /api/evals/qa-sets               the QA sets a benchmark run may use (bundled, and .jsonl in the vault)
    GET /api/evals                       saved evaluations the caller may read, newest first
    GET /api/evals/{id}                  one evaluation: metrics, by_slice, info, cases
    GET /api/evals/{id}/report           its HTML report (?baseline=ID: against an earlier one)
    GET /api/evals/{id}/compare/{other}  JSON: metric deltas and the questions that got better or worse

Evaluations are started with the benchmark API (``POST /api/benchmarks/rag/runs``), which keeps
each finished run here (its ``eval_id``). An evaluation that does not exist and one the caller may
not read answer the same 404.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import Field

from ..evaluate.history import compare, eval_history, load_eval
from ..evaluate.report import EvalRun, rag_report_html
from .auth import is_admin, principals_for, readable_owner
from .errors import ERROR_RESPONSES, ApiError
from .routes_index import BUNDLED_QA
from .schemas import Out

router = APIRouter(prefix="/api/evals", tags=["evaluations"], responses=ERROR_RESPONSES)
MAX_QA_SETS = 200  # .jsonl files listed from the vault


class QASetsOut(Out):
    qa_sets: list[str] = Field(description="names to pass as qa_set to POST /api/benchmarks/rag/runs")


class EvalSummaryOut(Out):
    eval_id: str
    created_at: float
    qa_set: str
    questions: int | None = None
    metrics: dict[str, Any]
    grader: dict[str, Any] | None = None


class EvalsOut(Out):
    evals: list[EvalSummaryOut]


class EvalOut(Out):
    eval_id: str
    metrics: dict[str, Any]
    by_slice: dict[str, Any]
    info: dict[str, Any]
    cases: list[dict[str, Any]]


class CompareOut(Out):
    then: str
    now: str
    deltas: dict[str, dict[str, float]]
    better: list[str]
    worse: list[str]


def vault_qa_sets(vault: Path) -> list[str]:
    """The .jsonl files under the vault (hidden folders skipped), as vault-relative paths."""
    found = []
    for path in sorted(vault.rglob("*.jsonl")):
        rel = path.relative_to(vault)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        found.append(rel.as_posix())
        if len(found) >= MAX_QA_SETS:
            break
    return found


@router.get("/qa-sets", response_model=QASetsOut)
def qa_sets(request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> dict[str, Any]:
    """The bundled sets, and for an admin the vault's (a vault file has no ACL: routes_index._qa_path)."""
    vault = vault_qa_sets(request.app.state.sunlib.library.vault) if is_admin(request, principals) else []
    return {"qa_sets": [*BUNDLED_QA, *vault]}


def _load(request: Request, eval_id: str, principals: tuple[str, ...], owner: str | None) -> EvalRun:
    run = load_eval(request.app.state.sunlib.library.store, eval_id, principals, owner=owner)
    if run is None:  # missing and not yours look the same
        raise ApiError(404, "not_found", f"no evaluation {eval_id!r}")
    return run


@router.get("", response_model=EvalsOut)
def list_evals(
    request: Request,
    limit: int = Query(20, ge=1, le=200),
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str | None = Depends(readable_owner),
) -> dict[str, Any]:
    store = request.app.state.sunlib.library.store
    evals = []
    for summary in eval_history(store, principals, limit, owner=owner):
        run = load_eval(store, summary.run_id, principals, owner=owner)
        if run is None:
            continue
        evals.append(
            {
                "eval_id": summary.run_id,
                "created_at": summary.created_at,
                "qa_set": summary.question,
                "questions": run.metrics.get("questions"),
                "metrics": dict(run.metrics),
                "grader": run.info.get("grader"),
            }
        )
    return {"evals": evals}


@router.get("/{eval_id}", response_model=EvalOut)
def get_eval(
    eval_id: str,
    request: Request,
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str | None = Depends(readable_owner),
) -> dict[str, Any]:
    run = _load(request, eval_id, principals, owner)
    data = run.to_json()
    return {"eval_id": eval_id, "metrics": dict(run.metrics), **{k: data[k] for k in ("by_slice", "info", "cases")}}


HTML_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/html": {"schema": {"type": "string"}}}, "description": "the report page"}
}


@router.get("/{eval_id}/report", response_class=HTMLResponse, responses=HTML_RESPONSE)
def eval_report(
    eval_id: str,
    request: Request,
    baseline: str | None = Query(None, max_length=64, description="an earlier evaluation to compare with"),
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str | None = Depends(readable_owner),
) -> HTMLResponse:
    run = _load(request, eval_id, principals, owner)
    then = _load(request, baseline, principals, owner) if baseline else None
    title = f"sunlib evaluation {eval_id}" + (f" against {baseline}" if baseline else "")
    return HTMLResponse(rag_report_html(run, then, "", title))


@router.get("/{eval_id}/compare/{other}", response_model=CompareOut)
def compare_evals(
    eval_id: str,
    other: str,
    request: Request,
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str | None = Depends(readable_owner),
) -> dict[str, Any]:
    """``eval_id`` is the earlier run, ``other`` the later one."""
    diff = compare(_load(request, eval_id, principals, owner), _load(request, other, principals, owner))
    deltas = {k: {"then": t, "now": n, "delta": d} for k, (t, n, d) in diff.deltas.items()}
    return {"then": eval_id, "now": other, "deltas": deltas, "better": list(diff.better), "worse": list(diff.worse)}
