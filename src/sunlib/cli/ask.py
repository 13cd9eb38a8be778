"""``sunlib ask QUESTION``: a cited answer or a refusal with its reason; ``sunlib runs``."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ..answer import AskResult
from ..contracts import AnswerFrame, RunTrace, to_jsonable
from ..errors import UserError
from ..library import Library
from ..text.refs import REF
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

EXIT_REFUSED = 2


class TokenPrinter:
    """An LLM writer's draft printed as it is written, under a line saying it is not verified yet
    (the verified answer is printed after it)."""

    def __init__(self) -> None:
        self.started = False

    @classmethod
    def of(cls, lib: Library, wanted: bool) -> TokenPrinter | None:
        """A printer when streaming is wanted and the writer is a model (the extractive one writes at once)."""
        return cls() if wanted and lib.asker.writer.is_llm else None

    def __call__(self, delta: str) -> None:
        if not self.started:
            out.print("[dim]answer (streaming, before verification):[/]")
            self.started = True
        sys.stdout.write(delta)
        sys.stdout.flush()

    def end(self) -> None:
        if self.started:
            sys.stdout.write("\n\n")


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="your question, in English or Chinese")],
    writer: Annotated[str | None, typer.Option(help="extractive (offline), openai or llama-cpp")] = None,
    mode: Annotated[str | None, typer.Option("--mode", "-m", help="retrieval: bm25, dense or hybrid")] = None,
    tag: TagOption = None,
    folder: FolderOption = None,
    note: NoteOption = None,
    filter_: FilterOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    as_: Annotated[list[str] | None, typer.Option("--as", help="ask as these ACL principals (besides public)")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="show the run chain: every step and its details")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the AnswerFrame and run_id as JSON")] = False,
    stream: Annotated[bool, typer.Option(help="print the answer as the writer produces it")] = True,
    save: Annotated[bool, typer.Option(help="save the run in the index (see `sunlib runs`)")] = True,
    agentic: Annotated[
        bool | None,
        typer.Option(
            "--agentic/--single",
            help="the agentic loop (sub-questions, follow-up rounds) or one shot; default: [answer] mode",
        ),
    ] = None,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
) -> None:
    """Answer from your notes only: every sentence cited, or a refusal that says why. Exit 2 when refused."""
    with open_library(vault, config) as lib:
        require_index(lib)
        lib = lib.with_settings(answer={"writer": writer}, search={"mode": mode})
        filters = make_filters(folder, tag, note, filter_, since, until)
        printer = TokenPrinter.of(lib, stream and not as_json)
        result = lib.ask(
            question, filters=filters, principals=principals_of(as_), on_token=printer, save=save, agentic=agentic
        )
        if printer is not None:
            printer.end()
    if as_json:
        # an unsaved run has no id `sunlib runs show` could find: none is printed
        data: dict[str, Any] = {
            **to_jsonable(result.frame),
            "run_id": result.run_id if save else None,
            "conversation_id": result.conversation_id,
        }
        if explain:
            data["trace"] = to_jsonable(result.trace)
        print_json(data)
    else:
        print_answer(result, saved=save)
        if result.conversation_id is not None:
            out.print(f"[dim]follow up with: sunlib chat --conversation {result.conversation_id}[/]")
        if explain:
            print_trace(result.trace, saved=save)
    if result.frame.refused:
        raise typer.Exit(EXIT_REFUSED)


def print_answer(result: AskResult, saved: bool = True) -> None:
    frame = result.frame
    run = f"run {result.run_id}" if saved else "run not saved (--no-save)"
    if frame.refused:
        out.print(f"[bold yellow]refused[/]: {escape(frame.refusal_reason or '')}")
        out.print(f"[dim]{run}[/]")
        return
    numbers = {c.chunk_id: i for i, c in enumerate(frame.citations, 1)}
    out.print(_numbered(frame, numbers))
    unsupported = [s for s in frame.sentences if not s.supported and not s.dropped]
    if frame.unsupported:
        out.print(f"[yellow]{frame.unsupported} sentence(s) not supported by their citations:[/]")
        for s in unsupported[:5]:
            out.print(f"  [yellow]?[/] {escape(s.text)}")
    if frame.dropped:
        out.print(f"[dim]{frame.dropped} unsupported sentence(s) dropped by the citation verifier:[/]")
        for s in [s for s in frame.sentences if s.dropped][:5]:
            out.print(f"  [dim]- {escape(s.text)}[/]")
    if frame.citations:
        out.print("\n[bold]citations[/]")
    for c in frame.citations:
        heading = " > ".join(c.heading_path)
        out.print(
            f" [{numbers[c.chunk_id]}] {escape(c.title)}  [dim]{escape(c.path)}:{c.start_line}-{c.end_line}"
            f"{'  § ' + escape(heading) if heading else ''}[/]"
        )
        out.print(f"     [dim]“{escape(' '.join(c.quote.split()))}”[/]")  # whole: never cut inside the claim
    out.print(f"[dim]confidence {frame.confidence:.2f} ({frame.confidence_level}) · route {frame.route} · {run}[/]")


_BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")


def _numbered(frame: AnswerFrame, numbers: dict[str, int]) -> str:
    def repl(m: Any) -> str:
        n = numbers.get(m.group(1))
        return f"[{n}]" if n else ""

    text = escape(REF.sub(lambda m: "\x00" + repl(m) + "\x00", frame.answer)).replace("\x00", "")
    return _BOLD.sub(r"[bold]\1[/]", text)  # the reader's span in an extractive answer


runs_app = typer.Typer(help="Saved runs: the answer and run chain of past questions.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def runs_list(
    limit: Annotated[int, typer.Option("--limit", "-n", help="how many, newest first")] = 20,
    offset: Annotated[int, typer.Option(help="skip this many")] = 0,
    as_: Annotated[list[str] | None, typer.Option("--as", help="list as these ACL principals (besides public)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
) -> None:
    """Runs you may read: those asked as principals you also hold, by every owner (this machine's
    own and each server token's: the vault's owner reads the index file anyway)."""
    if not (1 <= limit <= 10_000 and 0 <= offset <= 10_000_000):
        raise UserError("--limit must be 1..10000 and --offset 0..10000000")
    with open_library(vault, config) as lib:
        require_index(lib)
        principals = principals_of(as_) or lib.settings.search.principals
        # evaluations: `sunlib eval history`; owner None: every caller's, as a server's admin sees them
        runs = lib.store.list_runs(principals, limit, offset, kind="ask", owner=None)
    if as_json:
        print_json([dataclasses.asdict(r) for r in runs])
        return
    if not runs:
        out.print("no saved runs")
    from datetime import UTC, datetime

    for r in runs:
        when = datetime.fromtimestamp(r.created_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        state = "[yellow]refused[/]" if r.refused else "[green]answered[/]"
        out.print(f"{r.run_id}  {when}  {state}  {r.total_ms:.0f} ms  {escape(r.question[:70])}")


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="a run id from `sunlib runs list` or `sunlib ask`")],
    as_: Annotated[list[str] | None, typer.Option("--as", help="read as these ACL principals (besides public)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
) -> None:
    """One saved run: its answer and its whole run chain."""
    with open_library(vault, config) as lib:
        require_index(lib)
        principals = principals_of(as_) or lib.settings.search.principals
        run = lib.store.get_run(run_id, principals, owner=None)  # any owner's, as `sunlib runs list` lists
    if run is None:
        raise UserError(f"no run {run_id!r} that you may read")
    if run.kind == "eval":
        raise UserError(f"{run_id!r} is an evaluation: see `sunlib eval history` and `sunlib eval compare`")
    if as_json:
        print_json(dataclasses.asdict(run))
        return
    frame = run.frame
    out.print(f"[bold]{escape(run.question)}[/]")
    if frame.get("refused"):
        out.print(f"[bold yellow]refused[/]: {escape(frame.get('refusal_reason') or '')}")
    else:
        out.print(escape(frame.get("answer", "")))
    print_trace(RunTrace.from_json(run.trace))
