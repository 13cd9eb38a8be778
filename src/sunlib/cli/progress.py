"""Progress on stderr, fed by the indexer's progress callback: a rich bar on a terminal; otherwise
(under nohup, in a log, in CI) a plain line per phase at most every ``LINE_EVERY`` seconds and when
the phase ends, with its counts, rate and ETA."""

from __future__ import annotations

import time
from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .common import err

LABELS = {"text": "notes -> text index", "fast": "chunks -> fast vectors", "vectors": "chunks -> vectors"}
LINE_EVERY = 10.0  # seconds between two plain lines of one phase


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class ProgressLines:
    """The plain-text progress of each phase: ``vectors: 120/720 (17%), 3.2/s, eta 3m08s``."""

    def __init__(self, every: float = LINE_EVERY) -> None:
        self.every = every
        self._start: dict[str, tuple[float, int]] = {}
        self._last: dict[str, float] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if total == 0:
            return
        first = self._start.setdefault(phase, (now, done))
        if done < total and now - self._last.get(phase, -self.every) < self.every:
            return
        if done >= total and self._last.get(phase) == float("inf"):
            return  # the end of a phase is said once
        self._last[phase] = float("inf") if done >= total else now
        elapsed = now - first[0]
        rate = (done - first[1]) / elapsed if elapsed > 0 else 0.0
        line = f"{LABELS.get(phase, phase)}: {done}/{total} ({100 * done // total}%)"
        if rate > 0:
            line += f", {rate:.1f}/s"
            line += f", eta {_duration((total - done) / rate)}" if done < total else f", {_duration(elapsed)}"
        err.print(line, highlight=False, soft_wrap=True)


class ProgressBars:
    def __init__(self, enabled: bool = True) -> None:
        self._lines = ProgressLines() if enabled and not err.is_terminal else None
        self._progress = Progress(
            TextColumn("{task.description:<22}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=err,
            disable=not enabled or self._lines is not None,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self._lines is not None:
            self._lines(phase, done, total)
            return
        if phase not in self._tasks:
            if total == 0:
                return
            self._tasks[phase] = self._progress.add_task(LABELS.get(phase, phase), total=total)
        self._progress.update(self._tasks[phase], completed=done, total=total)

    def __enter__(self) -> ProgressBars:
        self._progress.__enter__()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.__exit__(t, e, tb)
