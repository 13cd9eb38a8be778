"""/api/index (status, rebuild jobs) and /api/benchmarks/rag/runs (QA evaluation in the background)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse

from ..evaluate.grading import create_grader
from ..evaluate.history import keep_benchmark
from ..evaluate.qa import load_qa, run_case, summarize
from ..library import Library
from .auth import is_admin, owner_for, principals_for
from .errors import ERROR_RESPONSES, SSE_RESPONSE, ApiError
from .jobs import Job
from .schemas import (
    IndexStatusOut,
    JobResultOut,
    JobStartedOut,
    RagRunBody,
    RagRunOut,
    RagRunStartedOut,
)
from .views import Reader, job_view, rebuild_report, scrub
from .views import index_status as status_for

router = APIRouter(prefix="/api", tags=["index and benchmarks"], responses=ERROR_RESPONSES)


def reader_of(request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> Reader:
    """The caller as a reader of jobs and status (FastAPI dependency)."""
    return Reader(principals, is_admin(request, principals))


def _readable(job: Job | None, reader: Reader, *kinds: str) -> Job:
    if job is None or job.kind not in kinds or not reader.may_read(job):
        raise ApiError(404, "not_found", "no such job")
    return job


@router.get("/index/status", response_model=IndexStatusOut)
def index_status(request: Request, reader: Reader = Depends(reader_of)) -> dict[str, Any]:
    """Counts of what you may see; absolute paths and every principal's jobs for admins only."""
    state = request.app.state.sunlib
    return status_for(state.library, reader, state.jobs.recent("rebuild"))


@router.post("/index/rebuild", status_code=202, response_model=JobStartedOut)
def rebuild(request: Request, principals: tuple[str, ...] = Depends(principals_for)) -> dict[str, Any]:
    """Bring the index up to date with the vault (text, then vectors) as a background job."""
    state = request.app.state.sunlib
    lib: Library = state.library  # the job reads and writes on its worker thread's own connection

    def work(job: Job) -> dict[str, Any]:
        report = lib.index(progress=lambda phase, done, total: state.jobs.progress(job, phase, done, total))
        return report.as_dict()

    job = state.jobs.submit("rebuild", principals, work)
    return {**job.view(), "url": f"/api/index/jobs/{job.job_id}"}


@router.get("/index/jobs/{job_id}", response_model=JobResultOut)
def index_job(job_id: str, request: Request, reader: Reader = Depends(reader_of)) -> dict[str, Any]:
    """The job and its report, cut to the notes you may see (server/views.py)."""
    lib = request.app.state.sunlib.library
    job = _readable(request.app.state.sunlib.jobs.get(job_id), reader, "rebuild", "embed")
    return {**job_view(job, reader, lib), "result": rebuild_report(job.result, reader, lib)}


BUNDLED_QA = ("sample_vault", "sample_vault_calibration")


def _qa_path(name: str, vault: Path, admin: bool) -> tuple[Path, str]:
    """A bundled QA set by name, or (for an admin) a .jsonl file inside the vault, outside hidden
    folders (never elsewhere on the server), with the name errors give it (the set's name, or its
    vault-relative path). A vault file carries no ACL of its own, so only an admin, who may read
    every note, may use one; to anyone else it is as unknown as a file that does not exist."""
    if name in BUNDLED_QA:
        return Path(str(resources.files("sunlib") / "qa" / f"{name}.jsonl")), name
    try:
        path = (vault / name).resolve()
        rel = path.relative_to(vault.resolve())
        usable = (
            admin and path.suffix == ".jsonl" and not any(part.startswith(".") for part in rel.parts) and path.is_file()
        )
    except (ValueError, UnicodeError, OSError):  # outside the vault, NUL bytes, lone surrogates, unreadable
        usable = False
    if not usable:
        raise ApiError(
            400, "bad_request", f"unknown QA set {name!r}: use {' or '.join(BUNDLED_QA)}, or a .jsonl file in the vault"
        )
    return path, path.relative_to(vault.resolve()).as_posix()


@router.post("/benchmarks/rag/runs", status_code=202, response_model=RagRunStartedOut)
def start_rag_run(
    body: RagRunBody,
    request: Request,
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str = Depends(owner_for),
) -> JSONResponse:
    """Queue `eval rag` on a QA set; progress streams from .../events; the report has every case
    and total_cases / successful_cases / failed_cases / failure_rate."""
    state = request.app.state.sunlib
    cases = load_qa(*_qa_path(body.qa_set, state.library.vault, is_admin(request, principals)))[: body.limit]
    lib: Library = state.library

    grader = create_grader(lib.settings.answer.judge_provider, lib.settings.llm) if body.judge else None

    def work(job: Job) -> dict[str, Any]:
        rows, failed = [], []
        for i, case in enumerate(cases, 1):
            try:  # each question's run is saved: the report links to its run chain
                rows.append(run_case(lib, case, principals, grader, save=True, owner=owner))
            except Exception as exc:  # one bad case does not end the run
                failed.append({"id": case.id, "error": scrub(f"{type(exc).__name__}: {exc}", lib)})
            state.jobs.progress(job, "questions", i, len(cases))
        # `sunlib eval history`; the evaluation and its questions' runs are the caller's
        eval_id = keep_benchmark(lib, rows, principals, body.qa_set, grader, owner=owner) if rows else None
        return {
            "eval_id": eval_id,
            "total_cases": len(cases),
            "successful_cases": len(rows),
            "failed_cases": len(failed),
            "failure_rate": round(len(failed) / len(cases), 4) if cases else 0.0,
            "metrics": summarize(rows) if rows else {},
            "cases": rows + failed,
        }

    job = state.jobs.submit("rag_benchmark", principals, work, prefix="bench")
    view = {**job.view(), "run_id": job.job_id, "events": f"/api/benchmarks/rag/runs/{job.job_id}/events"}
    return JSONResponse(view, status_code=202)


@router.get("/benchmarks/rag/runs/{run_id}", response_model=RagRunOut)
def rag_run(run_id: str, request: Request, reader: Reader = Depends(reader_of)) -> dict[str, Any]:
    lib = request.app.state.sunlib.library
    job = _readable(request.app.state.sunlib.jobs.get(run_id), reader, "rag_benchmark")
    return {**job_view(job, reader, lib), "run_id": job.job_id, "report": job.result}


@router.get("/benchmarks/rag/runs/{run_id}/events", response_class=EventSourceResponse, responses=SSE_RESPONSE)
async def rag_run_events(run_id: str, request: Request, reader: Reader = Depends(reader_of)) -> EventSourceResponse:
    """SSE: queued, running, progress..., then done (with the report) or failed."""
    lib = request.app.state.sunlib.library
    job = _readable(request.app.state.sunlib.jobs.get(run_id), reader, "rag_benchmark")

    async def events() -> AsyncIterator[dict[str, str]]:
        sent = 0
        while True:
            for seq, recorded in job.events_after(sent):
                sent = seq
                event = {"event": recorded["event"], **job_view(job, reader, lib, recorded)}
                data = {**event, "report": job.result} if event["event"] == "done" else event
                yield {"event": event["event"], "data": json.dumps(data, ensure_ascii=False)}
                if event["event"] in ("done", "failed"):
                    return
            await asyncio.sleep(0.1)

    return EventSourceResponse(events())
