"""What a caller may see of the index's status and of background jobs.

The rule is the search rule: nothing a principal may not see reaches it, counts included.
A caller marked admin (``auth.is_admin``) sees everything as recorded. Everyone else sees:

* the index status with counts of the notes, chunks and vectors visible to them, and no
  absolute path (``vault`` and ``index`` are null);
* only the jobs whose principals they hold, with no progress counts for index jobs (a
  rebuild's ``done/total`` counts hidden notes too) and a failure named by its kind only;
* a rebuild's report cut to the notes they may see now: ``added``, ``changed``, ``moved`` and
  ``failed`` entries of notes visible to them in the index, ``unchanged`` and
  ``chunks_written`` counted over those notes, and no ``deleted`` entries, vector counts or
  timings (a deleted note's ACL is gone with it; the others count hidden work too). A note
  that failed before it was ever indexed has no known ACL: only an admin sees it;
* run traces without per-step timings (``latency_ms`` is null): how long BM25 took tells whether a
  word occurs in many hidden chunks. The run's ``total_ms`` stays (a client times the request anyway).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..contracts import to_jsonable
from ..library import Library
from ..store import Space, Visibility
from .errors import relative_paths
from .jobs import Job

INDEX_KINDS = ("rebuild", "embed")  # jobs over the whole index: their counts include hidden notes
WITHHELD = (
    "vectors_embedded",
    "vectors_from_cache",
    "vectors_skipped",
    "vectors_pending",
    "text_seconds",
    "embed_seconds",
)


@dataclass(frozen=True)
class Reader:
    """Who reads a status or a job: their principals, and whether the configuration makes them admin."""

    principals: tuple[str, ...]
    admin: bool

    def may_read(self, job: Job) -> bool:
        return self.admin or set(job.principals) <= set(self.principals)


def scrub(message: str, library: Library) -> str:
    """``message`` with the library's absolute paths made vault-relative (``errors.relative_paths``)."""
    return relative_paths(message, library.vault, library.db_path)


def job_view(job: Job, reader: Reader, library: Library, event: dict[str, Any] | None = None) -> dict[str, Any]:
    """``job.view()`` (or one of its recorded events) as ``reader`` may see it."""
    view = dict(event if event is not None else job.view())
    if view.get("error"):
        view["error"] = scrub(str(view["error"]), library) if reader.admin else _failed_kind(str(view["error"]))
    if not reader.admin and job.kind in INDEX_KINDS:
        view["progress"] = {**view["progress"], "done": None, "total": None}
    return view


def _failed_kind(error: str) -> str:
    kind = error.split(":", 1)[0].strip() or "error"
    return f"the job failed ({kind}); an admin can read the details"


def rebuild_report(result: Any, reader: Reader, library: Library) -> Any:
    """A rebuild's or vectors job's report as ``reader`` may see it (see the module docstring)."""
    if not isinstance(result, dict) or reader.admin:
        return result
    store = library.store
    visible = {s.path for s in store.list_notes(reader.principals, limit=1 << 62)[0]}
    out = dict(result)
    for key in ("added", "changed"):
        out[key] = [p for p in result.get(key, []) if p in visible]
    out["moved"] = [pair for pair in result.get("moved", []) if pair[1] in visible]
    out["failed"] = [pair for pair in result.get("failed", []) if pair[0] in visible]
    out["deleted"] = []
    touched = [*out["added"], *out["changed"], *(new for _, new in out["moved"])]
    states = store.note_states_of(touched)
    out["chunks_written"] = sum(len(store.chunks_of_note(s.note_id)) for s in states.values())
    out["unchanged"] = max(0, len(visible) - len(set(touched)))
    for key in WITHHELD:
        if key in out:
            out[key] = None
    return out


def index_status(library: Library, reader: Reader, jobs: Sequence[Job]) -> dict[str, Any]:
    """``/api/index/status`` for ``reader``."""
    status = library.status().as_dict()
    shown = [job_view(j, reader, library) for j in jobs if reader.may_read(j)]
    if reader.admin:
        return {**status, "jobs": shown}
    store, visibility = library.store, Visibility.of(reader.principals)
    notes = store.list_notes(reader.principals, limit=1)[1]
    pending, total = store.vectors.count_pending(library.space, visibility)
    spaces = []
    for info in store.vectors.spaces():
        space = Space(info.provider, info.model, info.dim, info.chunker)
        waiting, chunks = store.vectors.count_pending(space, visibility)
        spaces.append({**dataclasses.asdict(info), "vectors": chunks - waiting})
    # each space's progress among the visible chunks only; the pace and ETA count every chunk, so they are withheld
    embedding = []
    for role, _, space in library.filled_spaces():
        waiting, chunks = store.vectors.count_pending(space, visibility)
        embedding.append(
            {
                "role": role,
                "space": space.name,
                "embedded": chunks - waiting,
                "total": chunks,
                "pending": waiting,
                "running": None,
                "rate": None,
                "eta_s": None,
            }
        )
    calibration = status["calibration"]
    if isinstance(calibration, dict) and "stored" in calibration:
        calibration = {**calibration, "stored": None}  # figures measured over every note
    return {
        **status,
        "vault": None,
        "index": None,
        "counts": {"notes": notes, "chunks": store.count_visible(visibility)},
        "vectors_pending": pending,
        "vectors_total": total - pending,
        "spaces": spaces,
        "embedding": embedding,
        "calibration": calibration,
        "text_indexed_at": None,  # a hidden write moves it too
        "jobs": shown,
    }


def step_view(step: Any, admin: bool) -> dict[str, Any]:
    """A trace step's JSON (a ``StepTrace`` or its JSON form) as a caller may see it: without timings
    unless ``admin``."""
    data = dict(to_jsonable(step))
    if not admin:
        data["latency_ms"] = None
        details = data.get("details")
        if isinstance(details, dict) and "latency_ms" in details:  # the judge's own timing
            data["details"] = {**details, "latency_ms": None}
    return data


def trace_view(trace: Any, admin: bool) -> dict[str, Any]:
    """A run trace's JSON (a ``RunTrace`` or its JSON form) as a caller may see it (``step_view``)."""
    data = dict(to_jsonable(trace))
    data["steps"] = [step_view(s, admin) for s in data.get("steps") or []]
    return data
