"""The Typer application object, shared by the verb modules."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="sunlib",
    help="sunlib: search and ask your Markdown notes, in English and Chinese, with citations.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


@app.callback()
def root() -> None:
    """sunlib: search and ask your Markdown notes, in English and Chinese, with citations."""
    # A callback keeps the verbs a group when one alone is registered (``cli.load_verbs``).
