"""The Qdrant backend (``[store] backend = "qdrant"``, docs/scale-out.md).

``QdrantStore`` is the SQLite DocumentStore composed with ``QdrantLexical`` (BM25 as sparse
vectors with the IDF modifier) and ``QdrantVectors`` (a collection per embedding space), ACL
and filters compiled to payload filters inside both searches (``points.compile_filter``).
It talks to a server (``url``) or to qdrant-client's local mode (``path``).

``QdrantReplica`` (``[store] replica = true``) answers from the collections alone, with no
SQLite file: what the indexing host publishes for it is in ``published.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import ConfigError

if TYPE_CHECKING:
    from ...config import StoreSettings
    from .replica import QdrantReplica
    from .store import QdrantStore

try:
    import qdrant_client  # noqa: F401
except ImportError as exc:  # pragma: no cover - the dependency is pinned
    raise ImportError("the Qdrant backend needs qdrant-client: pip install 'qdrant-client==1.20.0'") from exc

from .client import Location
from .lexical import QdrantLexical
from .replica import QdrantReplica
from .store import QdrantStore
from .vectors import QdrantVectors


def location_for(db_path: Path, settings: StoreSettings) -> Location:
    """The Qdrant location of an index: the server, the configured folder, or the index folder's."""
    if settings.url:
        return Location(url=settings.url, api_key=os.environ.get(settings.api_key_env, ""))
    if settings.path == ":memory:" and settings.local == "qdrant-client":
        return Location(path=":memory:")
    folder = Path(settings.path).expanduser() if settings.path else db_path.parent / "qdrant"
    return Location(path=str(folder.resolve()), engine=settings.local)


def open_qdrant_replica(db_path: Path, settings: StoreSettings) -> QdrantReplica:
    """A read-only replica on the configured collections (the index folder holds no file of it)."""
    try:
        return QdrantReplica(location_for(db_path, settings), settings.collection)
    except (OSError, RuntimeError, ValueError) as exc:
        where = settings.url or settings.path or str(db_path.parent / "qdrant")
        raise ConfigError(f"cannot open the Qdrant replica at {where}: {exc}") from None


def open_qdrant_store(db_path: Path, settings: StoreSettings) -> QdrantStore:
    try:
        return QdrantStore(db_path, location_for(db_path, settings), settings.collection)
    except (OSError, RuntimeError, ValueError) as exc:
        where = settings.url or settings.path or str(db_path.parent / "qdrant")
        raise ConfigError(f"cannot open the Qdrant store at {where}: {exc}") from None


__all__ = [
    "Location",
    "QdrantLexical",
    "QdrantReplica",
    "QdrantStore",
    "QdrantVectors",
    "location_for",
    "open_qdrant_replica",
    "open_qdrant_store",
]
