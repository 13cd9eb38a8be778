"""``sunlib migrate --to qdrant|sqlite``: copy an index's lexical and vector indexes to the other backend."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from .app import app
from .common import VAULT_HELP, open_library, out, print_json, require_index
from .index import waiting


@app.command()
def migrate(
    to: Annotated[str, typer.Option("--to", help="the backend to copy the index to: qdrant | sqlite")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="a sunlib.toml to use")] = None,
) -> None:
    """Move the index between the SQLite and the Qdrant backend without re-embedding (vectors and
    tokens are copied; the Qdrant location comes from [store] url / path / collection). Then set
    [store] backend to the target."""
    if to not in ("qdrant", "sqlite"):
        raise UserError(f"unknown backend {to!r} for --to; choose one of: qdrant, sqlite")
    from ..store.qdrant.migrate import migrate as run

    with open_library(vault, config) as lib:
        require_index(lib)
        with lib.indexer_lock.held(on_wait=waiting):  # no indexer writes while the copy runs
            report = run(lib.db_path, lib.settings.store, to)
    if as_json:
        print_json(dataclasses.asdict(report))
        return
    out.print(f"migrated to {report.to}: {report.chunks} chunks")
    for space, count in report.vectors.items():
        out.print(f"  {space}: {count} vectors copied")
    out.print(f'now set \\[store] backend = "{report.to}" in sunlib.toml (or SUNLIB_STORE__BACKEND={report.to})')
