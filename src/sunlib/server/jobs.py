"""The worker service: background jobs (index rebuilds, vectors after note writes, RAG
benchmark runs) with progress that clients can poll or stream.

One ``Jobs`` per app, created with it and closed by its lifespan. Jobs run in lanes:
each lane is one worker thread taking its jobs in order from a bounded queue. The
``index`` lane runs rebuilds and vectors jobs (both write vectors, so one at a time);
the ``benchmark`` lane runs RAG benchmark runs, so a long run never holds up the
vectors of a note just written. A full queue refuses the job and a closed service
refuses every job (503 ``busy``, ``unavailable``). A job submitted with ``coalesce`` joins
a job of its kind and principals that is still queued instead of queueing another (its work
covers both: an embed job embeds every pending chunk), so one caller has at most one such
job waiting; ``units`` counts the work a job was given (chunks, for an embed job) and
``queued_units`` what a caller's unfinished jobs of a kind hold. Only the latest ``history`` finished
jobs are kept, and of each job only its latest ``events`` events (its last event is
always done or failed once it ends). A worker thread never holds a lock of the
server's while it runs a job; the job takes the library's write lock where it writes.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError

LANES = {"rebuild": "index", "embed": "index", "rag_benchmark": "benchmark"}
QUEUE_SIZE = 32  # jobs waiting per lane
HISTORY = 200  # finished jobs kept (for GET .../jobs/{id} and the status page)
EVENTS = 500  # events kept per job; a run of progress events beyond that keeps its latest


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
    units: int = 0  # the work given to it: chunks written for an embed job, summed over the submits it took
    _events: deque[tuple[int, dict[str, Any]]] = field(default_factory=lambda: deque(maxlen=EVENTS), repr=False)
    _seq: int = 0

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

    def record(self, event: str) -> None:
        self._seq += 1
        self._events.append((self._seq, {"event": event, **self.view()}))

    def events_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        """The kept events numbered above ``seq`` (numbers start at 1), oldest first."""
        return [(n, e) for n, e in list(self._events) if n > seq]

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")


Work = Callable[[Job], Any]


class Jobs:
    """Background jobs on one worker thread per lane; see the module docstring."""

    def __init__(
        self,
        release: Callable[[], None] | None = None,
        queue_size: int = QUEUE_SIZE,
        history: int = HISTORY,
    ) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._queues: dict[str, queue.Queue[tuple[Job, Work] | None]] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._closed = False
        self._release = release  # called on a worker thread whose queue ran empty
        self._queue_size, self._history = queue_size, history

    def start(self) -> None:
        """Start every lane's worker (the app's lifespan calls it; ``submit`` starts a lane too)."""
        with self._lock:
            for lane in sorted(set(LANES.values())):
                self._lane(lane)

    def submit(
        self,
        kind: str,
        principals: tuple[str, ...],
        work: Work,
        prefix: str = "job",
        *,
        coalesce: bool = False,
        units: int = 0,
    ) -> Job:
        """Queue a job (``units`` of work), or with ``coalesce`` return the queued job of this kind
        and these principals, if any, with the units added: it has not started, so its work covers
        this submit's too."""
        if kind not in LANES:  # a lane is a thread: kinds are a closed set
            raise ValueError(f"unknown job kind {kind!r}; the kinds are {', '.join(sorted(LANES))}")
        job = Job(f"{prefix}_{uuid.uuid4().hex[:16]}", kind, principals, units=units)
        with self._lock:
            if self._closed:
                raise ApiError(503, "unavailable", "the server is shutting down: no new background jobs")
            if coalesce:
                waiting = self._waiting(kind, principals)
                if waiting is not None:
                    waiting.units += units
                    return waiting
            lane = self._lane(LANES[kind])
            if lane.qsize() >= self._queue_size:
                raise ApiError(503, "busy", f"{self._queue_size} background jobs are already waiting; try again later")
            job.record("queued")
            lane.put((job, work))
            self._jobs[job.job_id] = job
            self._forget_old()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def queued_units(self, kind: str, principals: tuple[str, ...]) -> int:
        """The units of the unfinished (queued or running) jobs of a kind that these principals submitted."""
        owner = frozenset(principals)
        with self._lock:
            mine = [j for j in self._jobs.values() if j.kind == kind and frozenset(j.principals) == owner]
            return sum(j.units for j in mine if not j.finished)

    def recent(self, kind: str, n: int = 5) -> list[Job]:
        with self._lock:
            return [j for j in self._jobs.values() if j.kind == kind][-n:]

    def progress(self, job: Job, phase: str, done: int, total: int) -> None:
        job.phase, job.done, job.total = phase, done, total
        job.record("progress")

    def close(self, timeout: float = 30.0) -> None:
        """Refuse new jobs, let the workers finish what is queued, and wait for them."""
        with self._lock:
            self._closed = True
            threads = list(self._threads.values())
            for q in self._queues.values():
                q.put(None)  # after the queued jobs
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def closing(self) -> bool:
        """True once ``close`` began: a long job may stop at its next step (its work so far is kept)."""
        return self._closed

    def alive(self) -> int:
        """Worker threads running (0 once closed)."""
        with self._lock:
            return sum(t.is_alive() for t in self._threads.values())

    # -- workers -----------------------------------------------------------------------------

    def _lane(self, lane: str) -> queue.Queue[tuple[Job, Work] | None]:
        q = self._queues.get(lane)
        if q is None:
            q = self._queues[lane] = queue.Queue()  # bounded by submit(); close() always finds room
            thread = threading.Thread(target=self._serve, args=(q,), daemon=True, name=f"sunlib-jobs-{lane}")
            self._threads[lane] = thread
            thread.start()
        return q

    def _serve(self, q: queue.Queue[tuple[Job, Work] | None]) -> None:
        """Run the lane's jobs in order; an idle worker holds no connection (``release``)."""
        try:
            while (item := q.get()) is not None:
                self._run(*item)
                if q.empty() and self._release is not None:
                    self._release()
        finally:
            if self._release is not None:
                self._release()

    def _waiting(self, kind: str, principals: tuple[str, ...]) -> Job | None:
        """The queued (not yet running) job of a kind and principals, if any (lock held)."""
        owner = frozenset(principals)
        for j in reversed(self._jobs.values()):
            if j.kind == kind and j.status == "queued" and frozenset(j.principals) == owner:
                return j
        return None

    def _run(self, job: Job, work: Work) -> None:
        with self._lock:  # from here on no submit joins it: its work may have read the index already
            job.status = "running"
            job.record("running")
        try:
            job.result = work(job)
            job.status = "done"
        except Exception as exc:  # reported to the client, never raised into the server
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
        job.finished_at = time.time()
        job.record(job.status)
        with self._lock:
            self._forget_old()

    def _forget_old(self) -> None:
        finished = [job_id for job_id, j in self._jobs.items() if j.finished]
        for job_id in finished[: max(0, len(finished) - self._history)]:
            del self._jobs[job_id]
