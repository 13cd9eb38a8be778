"""Render a RunTrace for ``--explain`` (the same records feed SSE and the web UI).

Steps are printed in the order they started; a step that ran inside another (a round
of a multi-round run and what it holds) is indented under it."""

from __future__ import annotations

import json

from rich.markup import escape

from ..contracts import RunTrace, StepTrace
from .common import out, to_jsonable

STATUS_MARK = {"ok": "[green]✓[/]", "skipped": "[dim]-[/]", "warning": "[yellow]![/]", "error": "[red]✗[/]"}


def print_trace(trace: RunTrace, saved: bool = True) -> None:
    """The run chain; ``saved=False`` (``ask --no-save``) shows no run id, which nothing could open."""
    name = trace.run_id if saved else "(not saved)"
    out.print(f"\n[bold]run chain[/] {name}  ({trace.total_ms:.1f} ms)")
    _print_steps(trace, None, 0)
    for w in trace.warnings:
        out.print(f" [yellow]![/] {escape(w)}")


def _print_steps(trace: RunTrace, parent: str | None, depth: int) -> None:
    for step in trace.children(parent):
        _print_step(step, "    " * depth)
        _print_steps(trace, step.span_id, depth + 1)


def _print_step(step: StepTrace, pad: str) -> None:
    round_ = f"  [dim](round {step.iteration})[/]" if step.iteration and step.parent_id is None else ""
    out.print(
        f"{pad} {STATUS_MARK.get(step.status, step.status)} [bold]{escape(step.name)}[/]"
        f"  {step.latency_ms:.1f} ms{round_}"
    )
    if step.input_summary:
        out.print(f"{pad}     in : {escape(step.input_summary)}")
    out.print(f"{pad}     out: {escape(step.output_summary)}")
    for key, value in step.details.items():
        if value in (None, [], {}):
            continue
        text = json.dumps(to_jsonable(value), ensure_ascii=False)
        if len(text) > 300:
            text = text[:297] + "..."
        out.print(f"{pad}     [dim]{escape(key)}: {escape(text)}[/]")
