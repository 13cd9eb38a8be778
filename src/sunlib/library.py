"""A library = a vault folder + its index. The small public Python API.

    from sunlib import Library
    lib = Library.open("~/notes")
    lib.index()
    for hit in lib.search("how do I filter by tag", mode="hybrid").hits:
        print(hit.path, hit.heading_path, hit.score)

Where the index lives: ``index_dir`` from settings if set; otherwise
``<vault>/.sunlib/`` when the vault is writable, else a folder under
``$SUNLIB_HOME/indexes/`` (default ``~/.local/share/sunlib``) named after the vault.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .config import Settings, load_settings
from .contracts import AskResult, SearchFilters, SearchResult
from .errors import UserError
from .indexing import IndexReport, Progress, embed_pending, rescore_space, space_for, sync_text
from .ingest.ids import sha256_hex
from .providers import Embedder, create_embedder
from .retrieve import SearchEngine, SearchRequest
from .store import Space, SqliteStore
from .trace import Listener, Tracer

if TYPE_CHECKING:
    from .answer import Asker

DB_NAME = "sunlib.db"


def _quiet(phase: str, done: int, total: int) -> None:
    pass


def sunlib_home() -> Path:
    return Path(os.environ.get("SUNLIB_HOME") or Path.home() / ".local" / "share" / "sunlib")


def _writable(path: Path) -> bool:
    # os.access alone says yes to root even on a read-only (r-x) folder; honour the mode bits too
    return os.access(path, os.W_OK) and bool(path.stat().st_mode & 0o222)


def default_index_dir(vault: Path) -> Path:
    local = vault / ".sunlib"
    if local.is_dir() and _writable(local):
        return local
    if not local.exists() and _writable(vault):
        return local
    slug = "".join(ch if ch.isalnum() else "-" for ch in vault.name)[:40] or "vault"
    return sunlib_home() / "indexes" / f"{slug}-{sha256_hex(str(vault))[:10]}"


class Library:
    def __init__(self, vault: Path, settings: Settings) -> None:
        self.vault = vault
        self.settings = settings
        self.index_dir = (settings.index_dir or default_index_dir(vault)).expanduser()
        self.db_path = self.index_dir / DB_NAME
        self._store: SqliteStore | None = None
        self._embedder: Embedder | None = None
        self._asker: Asker | None = None
        self._rescore: tuple[Embedder, Space] | Literal[False] | None = None

    @classmethod
    def open(cls, vault: str | Path, config: str | Path | None = None, **overrides: Any) -> Library:
        root = Path(vault).expanduser()
        if not root.is_dir():
            raise UserError(f"vault folder not found: {root}")
        root = root.resolve()
        settings = load_settings(root, Path(config) if config else None, **overrides)
        return cls(root, settings)

    # -- parts ---------------------------------------------------------------------------

    @property
    def store(self) -> SqliteStore:
        if self._store is None:
            try:
                self.index_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"cannot create the index folder {self.index_dir}: {exc.strerror or exc}") from None
            self._store = SqliteStore(self.db_path, self.settings.search.dense_engine)
        return self._store

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = create_embedder(self.settings.embedding)
        return self._embedder

    @property
    def space(self) -> Space:
        return space_for(self.embedder, self.settings.index)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- verbs ---------------------------------------------------------------------------

    def index(self, embed: bool | None = None, progress: Progress | None = None) -> IndexReport:
        """Bring the index up to date with the vault: text first, then (optionally) vectors."""
        report = sync_text(self.store, self.vault, self.settings.index, progress or _quiet)
        if self.settings.index.embed if embed is None else embed:
            self.embed(report, progress)
        else:
            report.vectors_pending = self.store.vectors.count_pending(self.space)[0]
        return report

    def embed(self, report: IndexReport | None = None, progress: Progress | None = None) -> IndexReport:
        """Embed every chunk without a vector: the active space, then the fusion reranker's, if any."""
        report = report or IndexReport()
        batch = self.settings.embedding.batch_size
        embed_pending(self.store, self.embedder, self.space, batch, report, progress or _quiet)
        if self._rescore is None:
            self._rescore = rescore_space(self.settings) or False
        if self._rescore:  # vectors for the fusion reranker, in their own space
            embedder, space = self._rescore
            embed_pending(self.store, embedder, space, batch, report, progress or _quiet, active=False)
        return report

    def search(
        self,
        query: str,
        mode: str | None = None,
        filters: SearchFilters | None = None,
        principals: Sequence[str] | None = None,
        limit: int = 10,
        offset: int = 0,
        tracer: Tracer | None = None,
    ) -> SearchResult:
        mode = mode or self.settings.search.mode
        needs_vectors = mode in ("dense", "hybrid")
        engine = SearchEngine(
            self.store,
            self.settings.search,
            self.space if needs_vectors else None,
            self.embedder.embed_query if needs_vectors else None,
        )
        request = SearchRequest(
            query=query,
            mode=mode,
            filters=filters or SearchFilters(),
            principals=tuple(principals if principals is not None else self.settings.search.principals),
            limit=limit,
            offset=offset,
        )
        return engine.search(request, tracer)

    @property
    def asker(self) -> Asker:
        """The ask pipeline (writer, reranker and router created once)."""
        if self._asker is None:
            from .answer import build_asker

            self._asker = build_asker(self)
        return self._asker

    def ask(
        self,
        question: str,
        filters: SearchFilters | None = None,
        principals: Sequence[str] | None = None,
        listener: Listener | None = None,
        on_token: Callable[[str], None] | None = None,
        save: bool | None = None,
    ) -> AskResult:
        """A cited answer or a refusal with its reason; the run is saved in the index."""
        return self.asker.ask(question, filters, principals, listener, on_token, save)

    def status(self) -> dict[str, Any]:
        store = self.store
        active = self.space
        pending, total = store.vectors.count_pending(active)
        return {
            "vault": str(self.vault),
            "index": str(self.db_path),
            "counts": dataclasses.asdict(store.counts()),
            "chunker": store.get_meta("chunker"),
            "active_space": active.name,
            "vectors_pending": pending,
            "vectors_total": total - pending,
            "spaces": [dataclasses.asdict(s) for s in store.vectors.spaces()],
            "text_indexed_at": store.get_meta("text_indexed_at"),
        }
