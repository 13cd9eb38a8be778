"""How a library is served: the engines a long-running server uses, and who it may be bound for.

``create_app`` applies both, so an app built from Python (``create_app(lib)`` under any ASGI
server) gets the same policy and the same guard as ``sunlib serve``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import ServerSettings
from ..errors import UserError
from ..library import Library
from .auth import is_loopback_host


def serving(library: Library) -> Library:
    """``library`` with the server's engines (``server_dense_engine``, ``server_lexical_engine``);
    refuses a non-loopback ``[server] host`` without ``[server] tokens``."""
    s = library.settings.server
    if not s.tokens and not is_loopback_host(s.host):
        raise UserError(
            f"refusing to bind {s.host} without auth: set [server] tokens (bearer token -> principals) "
            "or bind 127.0.0.1"
        )
    return library.with_settings(
        search={
            "dense_engine": server_dense_engine(s, lambda: library.store.counts().chunks),
            "lexical_engine": server_lexical_engine(s, lambda: library.store.counts().chunks),
        },
    )


def server_dense_engine(settings: ServerSettings, chunks: Callable[[], int]) -> str | None:
    """The server's dense engine for an index of ``chunks()`` chunks (counted only when a threshold
    is set): the HNSW graph from ``ann_above_chunks`` on, else the numpy matrix
    (``dense_engine_numpy``), else the configured one."""
    if settings.ann_above_chunks and chunks() >= settings.ann_above_chunks:
        return "usearch"
    return "numpy" if settings.dense_engine_numpy else None


def server_lexical_engine(settings: ServerSettings, chunks: Callable[[], int]) -> str | None:
    """The server's lexical engine for an index of ``chunks()`` chunks (counted only when a
    threshold is set): the postings from ``postings_above_chunks`` on, else the configured one."""
    if settings.postings_above_chunks and chunks() >= settings.postings_above_chunks:
        return "postings"
    return None
