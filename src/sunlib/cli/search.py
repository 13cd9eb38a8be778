"""``sunlib search QUERY``: hybrid, BM25 or dense search with filters, ACL and --explain."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..contracts import SearchResult
from .app import app
from .common import (
    VAULT_HELP,
    FilterOption,
    FolderOption,
    NoteOption,
    SinceOption,
    TagOption,
    UntilOption,
    make_filters,
    open_library,
    out,
    principals_of,
    print_json,
    require_index,
)
from .explain import print_trace


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="what to look for (any text; nothing is query syntax)")],
    mode: Annotated[
        str | None, typer.Option("--mode", "-m", help="bm25, dense or hybrid (default from config)")
    ] = None,
    tag: TagOption = None,
    folder: FolderOption = None,
    note: NoteOption = None,
    filter_: FilterOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    as_: Annotated[
        list[str] | None, typer.Option("--as", help="search as these ACL principals (default: public)")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="results per page")] = 10,
    offset: Annotated[int, typer.Option(help="skip this many results (pagination)")] = 0,
    fusion: Annotated[str | None, typer.Option(help="rrf, zscore or minmax")] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="show every step and each route's ranks and scores")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print results as JSON")] = False,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
) -> None:
    """Search the indexed notes. Every hit carries a citation: path, heading, offsets and lines."""
    with open_library(vault, config) as lib:
        require_index(lib)
        lib = lib.with_settings(search={"fusion": fusion})
        filters = make_filters(folder, tag, note, filter_, since, until)
        principals = principals_of(as_)
        result = lib.search(query, mode=mode, filters=filters, principals=principals, limit=limit, offset=offset)
    if as_json:
        print_json(result.as_json(explain))
        return
    _print_result(result, explain)


def _print_result(result: SearchResult, explain: bool) -> None:
    for w in result.warnings:
        out.print(f"[yellow]note:[/] {escape(w)}")
    if not result.hits:
        out.print(f"no results for {escape(result.query)!r} ({result.mode})")
    for i, hit in enumerate(result.hits, 1):
        c = hit.citation
        heading = " > ".join(hit.heading_path)
        out.print(
            f"[bold]{i}. {escape(hit.title)}[/]  [dim]{escape(hit.path)}:{c.start_line}-{c.end_line}"
            f"{'  § ' + escape(heading) if heading else ''}  score {hit.score:.4f}[/]"
        )
        out.print("   " + _highlighted(hit.snippet, hit.highlights))
        if explain:
            parts = [
                f"{route} rank {r.rank} score {r.score:.4f} +{r.contribution:.4f}"
                if r.rank
                else f"{route} not returned ({r.contribution:+.4f})"
                for route, r in hit.routes.items()
            ]
            out.print(f"   [dim]{escape(' | '.join(parts))}  {hit.chunk_id}[/]")
    if explain:
        print_trace(result.trace)


def _highlighted(snippet: str, spans: tuple[tuple[int, int], ...]) -> str:
    text = " ".join(snippet.split("\n"))
    parts, pos = [], 0
    for s, e in spans:
        parts.append(escape(text[pos:s]))
        parts.append(f"[bold yellow]{escape(text[s:e])}[/]")
        pos = e
    parts.append(escape(text[pos:]))
    return "".join(parts)
