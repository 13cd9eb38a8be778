"""``sunlib index PATH``: bring the index up to date with the vault."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..errors import UserError
from ..library import Library
from ..sync.indexing import IndexReport, Progress
from ..sync.notes_io import remove_stale_temps
from .app import app
from .common import announced, out, print_json, remember_vault
from .progress import ProgressBars


@app.command()
def index(
    path: Annotated[Path, typer.Argument(help="the vault folder to index")],
    no_embed: Annotated[bool, typer.Option("--no-embed", help="only the text index; vectors on a later run")] = False,
    provider: Annotated[
        str | None, typer.Option(help="embedding provider (hash, e5, e5-fast, use, minilm, openai, gemini)")
    ] = None,
    chunker: Annotated[str | None, typer.Option(help="structure (default) or fixed")] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bars")] = False,
    fast_only: Annotated[
        bool,
        typer.Option(
            "--fast-only",
            help="text and the fast tier only: every kind of search works now; the provider's vectors on a later run",
        ),
    ] = False,
    watch: Annotated[
        bool, typer.Option("--watch", help="then keep watching: re-index files as they change, until Ctrl-C")
    ] = False,
) -> None:
    """Index new and changed notes, drop deleted ones, then embed what has no vector yet."""
    lib = announced(Library.open(path, config))
    lib = lib.with_settings(embedding={"provider": provider}, index={"chunker": chunker})
    remove_stale_temps(lib.vault)  # what killed writers left; the walk skips them anyway
    remember_vault(lib.vault)  # before the run: `sunlib status` finds the vault while a first index runs
    calibration: dict[str, Any] | None = None
    with lib, ProgressBars(enabled=not (quiet or as_json)) as bars:
        report = lib.index(
            embed=False if no_embed else None,
            backfill=not fast_only,
            progress=bars if quiet or as_json else ready(lib, bars),
            on_wait=waiting,
        )
        if lib.settings.answer.self_calibrate and not (no_embed or fast_only):
            calibration = _self_calibrate(lib, report, bars)
        status = lib.status().as_dict() if not no_embed else None
    if as_json:
        print_json({"index": str(lib.db_path), **report.as_dict(), "calibration": calibration})
    else:
        _print_report(lib, report, status, no_embed, calibration)
    if watch:
        _watch(lib, embed=not no_embed, as_json=as_json)


def _watch(lib: Library, embed: bool, as_json: bool) -> None:
    """Watch the vault until Ctrl-C: one line (or one JSON object) per applied batch."""
    import json
    import time

    from ..sync.watch import Batch, Watcher

    def line(batch: Batch) -> None:
        if as_json:
            sys.stdout.write(json.dumps({"paths": list(batch.paths), **batch.report.as_dict()}) + "\n")
        else:
            sys.stdout.write(f"{time.strftime('%H:%M:%S')} {batch.line()}\n")
        sys.stdout.flush()

    def inline(vectors: Callable[[], None]) -> None:
        vectors()  # after the batch's text is committed: BM25 already finds it

    lib = lib.with_settings(index={"embed": embed})
    watcher = Watcher(lib, vectors=inline, on_batch=line, catch_up=True)
    sys.stderr.write(f"watching {lib.vault} (Ctrl-C to stop)\n")
    try:
        watcher.run()
    except KeyboardInterrupt:
        pass
    finally:
        lib.close()
    sys.stderr.write("stopped watching\n")


def _print_report(
    lib: Library, report: IndexReport, status: dict[str, Any] | None, no_embed: bool, calibration: dict[str, Any] | None
) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    for label, value in (
        ("added", len(report.added)),
        ("changed", len(report.changed)),
        ("moved", len(report.moved)),
        ("deleted", len(report.deleted)),
        ("unchanged", report.unchanged),
        ("failed", len(report.failed)),
        ("chunks written", report.chunks_written),
        ("fast vectors", report.fast_vectors),
        ("vectors embedded", report.vectors_embedded),
        ("vectors from cache", report.vectors_from_cache),
        ("vectors pending", report.vectors_pending),
    ):
        table.add_row(label, str(value))
    out.print(f"indexed {lib.vault} -> {lib.db_path}")
    out.print(table)
    if status:
        out.print(f"space {status['active_space']}: {status['vectors_total']} vectors")
    withdrawn = set(report.withdrawn)
    for p, reason in report.failed:  # plain text: a file name may look like rich markup
        gone = " (its earlier version is no longer served)" if p in withdrawn else ""
        sys.stderr.write(f"failed: {p}: {' '.join(reason.split())}{gone}\n")
    if no_embed:
        out.print("text index ready (BM25 search works now); run `sunlib index` again to add vectors")
    if calibration is not None and "threshold" in calibration:
        out.print(
            f"self-calibrated {calibration['key']}: threshold {calibration['threshold']:.4f}"
            f" (shipped {calibration['shipped_threshold']:.4f}) on {len(calibration['probe_questions'])} probes"
        )


def ready(lib: Library, bars: Progress) -> Progress:
    """The progress callback, plus one line when the fast tier is complete: search works from then
    on (in this process's later commands and in any other), while the provider's vectors fill in."""
    said = False

    def progress(phase: str, done: int, total: int) -> None:
        nonlocal said
        bars(phase, done, total)
        if phase == "fast" and 0 < total <= done and not said:
            said = True
            fast = lib.fast
            name = fast[0].provider if fast else "fast"
            sys.stderr.write(
                f"search ready: every chunk has its {name} vector; {lib.embedder.provider} vectors fill in next"
                " (stop any time: the next run goes on from there)\n"
            )
            sys.stderr.flush()

    return progress


def waiting(holder: int | None) -> None:
    """The one line a second indexer prints while it waits for the first (sunlib.store.lock)."""
    who = f" (pid {holder})" if holder else ""
    sys.stderr.write(f"waiting: another indexer{who} is writing this index; this run starts when it is done\n")
    sys.stderr.flush()


def _self_calibrate(lib: Library, report: IndexReport, bars: ProgressBars) -> dict[str, Any] | None:
    """``[answer] self_calibrate``: calibrate when the notes changed or no valid calibration exists.
    A vault too small to probe keeps the shipped threshold, with a warning: indexing itself worked."""
    changed = report.added or report.changed or report.moved or report.deleted
    if not changed and lib.calibration().state not in ("uncalibrated", "stale"):
        return None
    try:
        return lib.calibrate(on_probe=lambda n, t: bars("probes", n, t))
    except UserError as exc:
        sys.stderr.write(f"warning: not self-calibrated: {exc}\n")
        return {"error": str(exc)}
