"""A rich progress bar (on stderr) fed by the indexer's progress callback."""

from __future__ import annotations

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

LABELS = {"text": "notes -> text index", "vectors": "chunks -> vectors"}


class ProgressBars:
    def __init__(self, enabled: bool = True) -> None:
        self._progress = Progress(
            TextColumn("{task.description:<22}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=err,
            disable=not enabled,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
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
