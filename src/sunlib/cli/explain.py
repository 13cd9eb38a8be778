"""Render a RunTrace for ``--explain`` (the same records feed SSE and the web UI)."""

from __future__ import annotations

import json

from rich.markup import escape

from ..contracts import RunTrace
from .common import out, to_jsonable

STATUS_MARK = {"ok": "[green]✓[/]", "skipped": "[dim]-[/]", "warning": "[yellow]![/]", "error": "[red]✗[/]"}


def print_trace(trace: RunTrace) -> None:
    out.print(f"\n[bold]run chain[/] {trace.run_id}  ({trace.total_ms:.1f} ms)")
    for step in trace.steps:
        out.print(
            f" {STATUS_MARK.get(step.status, step.status)} [bold]{escape(step.name)}[/]  {step.latency_ms:.1f} ms"
        )
        if step.input_summary:
            out.print(f"     in : {escape(step.input_summary)}")
        out.print(f"     out: {escape(step.output_summary)}")
        for key, value in step.details.items():
            if value in (None, [], {}):
                continue
            text = json.dumps(to_jsonable(value), ensure_ascii=False)
            if len(text) > 300:
                text = text[:297] + "..."
            out.print(f"     [dim]{escape(key)}: {escape(text)}[/]")
    for w in trace.warnings:
        out.print(f" [yellow]![/] {escape(w)}")
