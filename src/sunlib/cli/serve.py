"""``sunlib serve``: the HTTP API and the web UI on one vault."""

from __future__ import annotations

import contextlib
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError, needs_extra
from .app import app
from .common import VAULT_HELP, err, open_library, remember_vault


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="address to bind (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default 8765)")] = None,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
    index_first: Annotated[
        bool,
        typer.Option(
            "--index/--no-index",
            help="bring the text and the fast tier up to date first (the rest fills in while serving)",
        ),
    ] = True,
    watch: Annotated[
        bool, typer.Option("--watch/--no-watch", help="re-index notes as their files change (sunlib.sync.watch)")
    ] = True,
) -> None:
    """Serve the REST + SSE API (OpenAPI at /docs) and the web UI. Without tokens: loopback only."""
    with needs_extra("serve", "sunlib serve"):
        import uvicorn  # the server's modules load here, never for the other verbs

        from ..server import create_app
        from ..server.policy import serving
    from ..sync.notes_io import remove_stale_temps

    lib = open_library(vault, config)
    lib = serving(lib.with_settings(server={"host": host, "port": port}))  # before binding: the guard first
    s = lib.settings.server
    replica = lib.settings.store.replica  # read-only: never indexes, never watches (the indexing host does)
    sock = _bind(s.host, s.port)  # before anything is printed: a busy port is one line, nothing else
    with sock:
        remove_stale_temps(lib.vault)
        if replica:
            err.print(f"a read-only replica of the Qdrant collections {lib.settings.store.collection!r}")
        elif index_first:
            err.print(f"indexing {lib.vault} ...")
            report = lib.index(backfill=False)  # text and the fast tier; the rest fills in while serving
            for path, reason in report.failed:  # as `sunlib index` reports them; plain text, no markup
                sys.stderr.write(f"failed: {path}: {' '.join(reason.split())}\n")
        remember_vault(lib.vault)
        url = f"http://{'127.0.0.1' if s.host in ('0.0.0.0', '::') else s.host}:{s.port}/"
        err.print(f"sunlib serving {lib.vault} at {url}  (API docs: {url}docs; Ctrl-C to stop)")
        server_config = uvicorn.Config(
            create_app(lib, watch=watch and not replica), host=s.host, port=s.port, log_level="warning"
        )
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C it stopped on: a normal stop
            uvicorn.Server(server_config).run(sockets=[sock])
        err.print("sunlib stopped")


def _bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound as uvicorn would bind it (SO_REUSEADDR; IPv6 for a host with
    ':'), so that a port in use or a host that is not ours is a UserError and uvicorn never
    logs its own bind error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
