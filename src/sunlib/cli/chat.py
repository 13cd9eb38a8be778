"""``sunlib chat``: a small REPL that keeps one conversation.

Each message is asked with the conversation's earlier turns (``Library.ask(...,
conversation_id=...)``), so an obvious follow-up ("and its default?") is asked standalone and
the rewrite is printed above its answer. With a model writer the draft streams as it is written
(``--no-stream``: the verified answer only). Each turn is saved into the conversation in the index;
``--conversation ID`` resumes one. With ``--no-save`` nothing is written: the turns of this
session are kept in memory only (a resumed conversation is read, not extended). ``:new`` starts
a new conversation; ``:q`` or end of input (Ctrl-D) quits.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..answer import AskResult
from ..contracts import Turn
from ..errors import NotFound, SunlibError
from ..library import Library
from .app import app
from .ask import TokenPrinter, print_answer
from .common import VAULT_HELP, open_library, out, principals_of, require_index

QUIT = frozenset({":q", ":quit", ":exit"})
NEW = ":new"


@app.command()
def chat(
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", "-c", help="resume this conversation (an id that `sunlib chat` printed)"),
    ] = None,
    writer: Annotated[str | None, typer.Option(help="extractive (offline), openai or llama-cpp")] = None,
    as_: Annotated[list[str] | None, typer.Option("--as", help="ask as these ACL principals (besides public)")] = None,
    agentic: Annotated[
        bool | None,
        typer.Option("--agentic/--single", help="the agentic loop or one shot per message; default: [answer] mode"),
    ] = None,
    save: Annotated[bool, typer.Option(help="save each turn into the conversation in the index")] = True,
    stream: Annotated[bool, typer.Option(help="print each answer as the writer produces it")] = True,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
) -> None:
    """Chat with your notes: one conversation, follow-ups asked standalone, every answer cited.
    Type :q or press Ctrl-D to quit, :new for a new conversation."""
    with open_library(vault, config) as lib:
        require_index(lib)
        lib = lib.with_settings(answer={"writer": writer})
        principals = principals_of(as_)
        session = _Session(lib, principals, agentic, save, conversation, stream)
        if conversation is not None:
            resumed = lib.conversation(conversation, principals)  # NotFound: one line, exit 1
            out.print(f"[dim]resuming conversation {conversation}: {len(resumed.turns)} turn(s)[/]")
            if not save:  # read, never extended: its turns start this session's memory
                from ..answer.conversation import history_of

                session.cid, session.memory = None, list(history_of(resumed))
        for message in _messages():
            if message in QUIT:
                break
            if message == NEW:
                session.restart()
                out.print("[dim]a new conversation[/]")
            elif message:
                session.turn(message)


class _Session:
    """The conversation being kept: its id once saved (or the turns in memory, unsaved)."""

    def __init__(
        self,
        lib: Library,
        principals: list[str] | None,
        agentic: bool | None,
        save: bool,
        cid: str | None,
        stream: bool = True,
    ) -> None:
        self.lib, self.principals, self.agentic, self.save = lib, principals, agentic, save
        self.cid, self.stream = cid, stream
        self.memory: list[Turn] = []  # --no-save: this session's turns, sent as the history

    def restart(self) -> None:
        self.cid, self.memory = None, []

    def turn(self, message: str) -> None:
        printer = TokenPrinter.of(self.lib, self.stream)
        try:
            result = self.lib.ask(
                message,
                principals=self.principals,
                save=self.save,
                agentic=self.agentic,
                history=() if self.cid is not None else tuple(self.memory),
                conversation_id=self.cid,
                on_token=printer,
            )
        except NotFound:
            raise  # the conversation went out of reach: nothing more can be asked in it
        except SunlibError as exc:  # a bad message or a failing provider: say so, keep the conversation
            out.print(f"[red]error[/]: {escape(str(exc))}")
            return
        finally:
            if printer is not None:
                printer.end()
        self._show(message, result)

    def _show(self, message: str, result: AskResult) -> None:
        if result.frame.question != message.strip():
            out.print(f"[dim]asked as: {escape(result.frame.question)}[/]")
        print_answer(result, saved=self.save)
        if result.conversation_id is not None and result.conversation_id != self.cid:
            self.cid = result.conversation_id
            out.print(f"[dim]conversation {self.cid} (resume with: sunlib chat --conversation {self.cid})[/]")
        if not self.save:
            self.memory += [Turn("user", message.strip()), Turn("assistant", result.frame.answer)]


def _messages() -> Iterator[str]:
    """The user's messages, one a line, until end of input; a prompt only at a terminal."""
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = input("you> ") if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            return
        if not interactive and not line:
            return
        yield line.strip()
