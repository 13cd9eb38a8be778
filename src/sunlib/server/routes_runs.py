"""/api/runs: saved runs, readable only by their owner (``auth.owner_for``; an admin reads every
owner's) holding every principal the run was asked as. Anyone else gets the 404 of an unknown id."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from .auth import is_admin, principals_for, readable_owner
from .errors import ERROR_RESPONSES, ApiError
from .schemas import RunOut, RunsOut
from .views import trace_view

router = APIRouter(prefix="/api/runs", tags=["runs"], responses=ERROR_RESPONSES)


@router.get("", response_model=RunsOut)
def list_runs(
    request: Request,
    limit: int = Query(20, ge=1, le=200),
    offset: int = Query(0, ge=0, le=10_000_000),
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str | None = Depends(readable_owner),
) -> dict[str, Any]:
    state = request.app.state.sunlib
    runs = state.library.store.list_runs(principals, limit, offset, kind="ask", owner=owner)  # evaluations: /api/evals
    return {"runs": [dataclasses.asdict(r) for r in runs], "limit": limit, "offset": offset}


@router.get("/{run_id}", response_model=RunOut)
def get_run(
    run_id: str,
    request: Request,
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str | None = Depends(readable_owner),
) -> dict[str, Any]:
    state = request.app.state.sunlib
    run = state.library.store.get_run(run_id, principals, owner=owner)
    if run is None:  # missing and not yours look the same
        raise ApiError(404, "not_found", f"no run {run_id!r}")
    data = dataclasses.asdict(run)
    return {**data, "trace": trace_view(data["trace"], is_admin(request, principals))}
