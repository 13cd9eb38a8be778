"""Helpers shared by CLI verbs: finding the library, JSON output, option parsing."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..config import sunlib_home
from ..contracts import SearchFilters, to_jsonable
from ..errors import UserError
from ..library import Library, has_index

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)

VAULT_HELP = "vault folder (default: $SUNLIB_VAULT, the current folder if it has an index, else the last indexed vault)"


def remember_vault(vault: Path) -> None:
    try:
        home = sunlib_home()
        home.mkdir(parents=True, exist_ok=True)
        (home / "default_vault").write_text(str(vault), encoding="utf-8")
    except OSError:
        pass  # remembering is a convenience; --vault always works


def find_vault(vault: Path | None) -> Path:
    if vault is not None:
        return vault
    if os.environ.get("SUNLIB_VAULT"):
        return Path(os.environ["SUNLIB_VAULT"])
    cwd = Path.cwd()
    if has_index(cwd) or (cwd / "sunlib.toml").is_file():
        return cwd
    remembered = sunlib_home() / "default_vault"
    if remembered.is_file():
        return Path(remembered.read_text(encoding="utf-8").strip())
    raise UserError("no vault given: run `sunlib index PATH` first, or pass --vault PATH")


def open_library(vault: Path | None, config: Path | None, **overrides: Any) -> Library:
    return announced(Library.open(find_vault(vault), config, **overrides))


def announced(lib: Library) -> Library:
    """``lib``, once its index move (or a reason it did not move) is told on stderr."""
    if lib.index_note:
        err.print(f"note: {lib.index_note}", markup=False, soft_wrap=True)
    return lib


def require_index(lib: Library) -> None:
    if lib.settings.store.replica:
        return  # a replica's index is the Qdrant collections: opening it says whether they are there
    if not lib.db_path.is_file():
        raise UserError(f"{lib.vault} has no index yet: run `sunlib index {lib.vault}`")


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), ensure_ascii=False, indent=2) + "\n")


def parse_filters(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"--filter expects key=value, got {pair!r}")
        parsed.append((key.strip(), value.strip()))
    return tuple(parsed)


def parse_time(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(f"{option} expects a date like 2026-01-31 or 2026-01-31T12:00, got {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def make_filters(
    folder: list[str] | None,
    tag: list[str] | None,
    note: list[str] | None,
    filter_: list[str] | None,
    since: str | None,
    until: str | None,
) -> SearchFilters:
    return SearchFilters(
        folders=tuple(folder or ()),
        tags=tuple(tag or ()),
        note_ids=tuple(note or ()),
        since=parse_time(since, "--since"),
        until=parse_time(until, "--until"),
        metadata=parse_filters(filter_ or []),
    )


def principals_of(as_: list[str] | None) -> list[str] | None:
    """``--as ops`` means public plus ops; no option means the configured default."""
    return ["public", *as_] if as_ else None


# Filter options shared by `search` and `ask` (see make_filters).
TagOption = Annotated[list[str] | None, typer.Option("--tag", "-t", help="only notes with this tag (repeat: all)")]
FolderOption = Annotated[
    list[str] | None, typer.Option("--folder", "-f", help="only notes under this folder (repeat: any)")
]
NoteOption = Annotated[list[str] | None, typer.Option("--note", help="only this note id (repeat: any)")]
FilterOption = Annotated[list[str] | None, typer.Option("--filter", help="metadata key=value, e.g. chapter=ch02")]
SinceOption = Annotated[str | None, typer.Option(help="only notes modified on/after this date (ISO)")]
UntilOption = Annotated[str | None, typer.Option(help="only notes modified on/before this date (ISO)")]
