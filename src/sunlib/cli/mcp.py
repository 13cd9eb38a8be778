"""``sunlib mcp``: the MCP server on stdio, for an MCP client that starts it (sunlib.server.mcp)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..config import Settings
from ..errors import UserError, needs_extra
from ..store import LOCAL_OWNER
from .app import app
from .common import VAULT_HELP, err, open_library, require_index


def stdio_principals(settings: Settings, as_: list[str] | None, token: str | None) -> tuple[str, ...]:
    """Whom the server acts as: ``--as`` (public plus those), else the principals ``--token``
    has in ``[server] tokens``, else ``[mcp] principals``, else ``[search] principals``."""
    if as_ and token:
        raise UserError("give --as or --token, not both")
    if token is not None:
        if token not in settings.server.tokens:
            raise UserError("unknown --token: it is not in [server] tokens")
        extra = settings.server.tokens[token]
    elif as_:
        extra = as_
    elif settings.mcp.principals is not None:
        extra = settings.mcp.principals
    else:
        extra = settings.search.principals
    return tuple(dict.fromkeys(["public", *(p.strip() for p in extra if p.strip())]))


@app.command()
def mcp(
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
    as_: Annotated[
        list[str] | None, typer.Option("--as", help="act as this principal besides public (repeat for more)")
    ] = None,
    token: Annotated[str | None, typer.Option(help="act as this [server] token's principals")] = None,
    read_only: Annotated[
        bool | None, typer.Option("--read-only/--writable", help="no note-writing tools (default: [mcp] read_only)")
    ] = None,
    index_first: Annotated[bool, typer.Option("--index/--no-index", help="bring the index up to date first")] = False,
) -> None:
    """Serve the MCP tools (search, ask, notes) on stdin/stdout for an MCP client such as Claude Desktop."""
    with needs_extra("mcp", "sunlib mcp"):
        import anyio

        from ..server.auth import token_owner
        from ..server.jobs import Jobs
        from ..server.mcp import build_server
        from ..server.state import ServerState

    lib = open_library(vault, config)
    principals = stdio_principals(lib.settings, as_, token)
    if index_first:
        err.print(f"indexing {lib.vault} ...")
        lib.index()
    require_index(lib)
    state = ServerState(lib, lib.settings, Jobs(release=lib.release_thread))
    writable = not (lib.settings.mcp.read_only if read_only is None else read_only)
    owner = token_owner(token) if token is not None else LOCAL_OWNER  # whose the runs it saves are
    server = build_server(state, principals, read_only=not writable, owner=owner)
    state.jobs.start()
    try:
        anyio.run(server.run_stdio_async)
    finally:
        state.asks.wait_idle(30.0)
        state.jobs.close()
