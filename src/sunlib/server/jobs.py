"""Background jobs (index rebuilds, RAG benchmark runs) with progress that clients can poll or stream."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Job:
    job_id: str
    kind: str
    principals: tuple[str, ...]
    status: str = "queued"  # queued | running | done | failed
    phase: str = ""
    done: int = 0
    total: int = 0
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    result: Any = None
    error: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "status": self.status,
            "progress": {"phase": self.phase, "done": self.done, "total": self.total},
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "error": self.error,
        }


class Jobs:
    """Jobs run one at a time per kind on a daemon thread; every change is appended to ``events``."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._turns: dict[str, threading.Lock] = {}  # one job of a kind runs at a time; others wait queued

    def start(self, kind: str, principals: tuple[str, ...], work: Callable[[Job], Any], prefix: str = "job") -> Job:
        job = Job(f"{prefix}_{uuid.uuid4().hex[:16]}", kind, principals)
        with self._lock:
            self._jobs[job.job_id] = job
        job.events.append({"event": "queued", **job.view()})
        threading.Thread(target=self._run, args=(job, work), daemon=True, name=job.job_id).start()
        return job

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def recent(self, kind: str, n: int = 5) -> list[Job]:
        with self._lock:
            return [j for j in self._jobs.values() if j.kind == kind][-n:]

    def progress(self, job: Job, phase: str, done: int, total: int) -> None:
        job.phase, job.done, job.total = phase, done, total
        job.events.append({"event": "progress", **job.view()})

    def _run(self, job: Job, work: Callable[[Job], Any]) -> None:
        with self._lock:
            turn = self._turns.setdefault(job.kind, threading.Lock())
        with turn:
            self._work(job, work)

    def _work(self, job: Job, work: Callable[[Job], Any]) -> None:
        job.status = "running"
        job.events.append({"event": "running", **job.view()})
        try:
            job.result = work(job)
            job.status = "done"
        except Exception as exc:  # reported to the client, never raised into the server
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
        job.finished_at = time.time()
        job.events.append({"event": job.status, **job.view()})
