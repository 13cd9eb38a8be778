"""The embedded store: one SQLite file with FTS5 and sqlite-vec, behind the store protocols.

``SqliteStore(path, dense_engine, lexical_engine)`` is the one constructor: a plain, cheap open
of one connection (a reader thread opens its own). It is the ``DocumentStore`` itself and
carries its ``lexical`` index, chosen by name from ``LEXICAL_ENGINES``: ``fts5`` (BM25 inside
SQLite) or ``postings`` (an inverted index of the same tokens in numpy arrays, kept in the
index folder beside the file: store/postings.py); and its ``vectors`` index, chosen from
``DENSE_ENGINES``: ``sqlite-vec`` (KNN inside SQLite), ``numpy`` (the same vectors, searched
in memory) or ``usearch`` / ``usearch-f16`` / ``usearch-i8`` (an HNSW graph derived from the same vectors, kept
in the index folder beside the file: store/usearch.py). SQL lives in this package only:
documents.py, fts5.py, postings.py, sqlite_vec.py, usearch.py (the module of each engine is named after
what it wraps; postings.py and postings_segment.py are sunlib's own inverted index).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from ..errors import ConfigError
from .conversations import SqliteConversations
from .db import Db
from .documents import SqliteDocuments
from .errors import at_boundary
from .fts5 import SqliteLexical
from .numpy_vectors import NumpyVectors
from .postings import PostingsLexical, PostingsState, postings_folder
from .protocols import DocumentStore, LexicalIndex, Reconciled, Space, VectorIndex
from .sqlite_vec import SqliteVectors
from .usearch import AnnState, UsearchVectors


def _sqlite_vec(db: Db, documents: DocumentStore) -> VectorIndex:
    return SqliteVectors(db)


def _numpy(db: Db, documents: DocumentStore) -> VectorIndex:
    return NumpyVectors(SqliteVectors(db), documents, db.identity())


def _usearch(db: Db, documents: DocumentStore) -> VectorIndex:
    return UsearchVectors(db, documents, dtype="f32")


def _usearch_f16(db: Db, documents: DocumentStore) -> VectorIndex:
    return UsearchVectors(db, documents, dtype="f16")


def _usearch_i8(db: Db, documents: DocumentStore) -> VectorIndex:
    return UsearchVectors(db, documents, dtype="i8")


DENSE_ENGINES: dict[str, Callable[[Db, DocumentStore], VectorIndex]] = {
    "sqlite-vec": _sqlite_vec,
    "numpy": _numpy,
    "usearch": _usearch,
    "usearch-f16": _usearch_f16,
    "usearch-i8": _usearch_i8,
}


def _fts5(db: Db, documents: DocumentStore) -> LexicalIndex:
    return SqliteLexical(db)


def _postings(db: Db, documents: DocumentStore) -> LexicalIndex:
    return PostingsLexical(db, documents)


LEXICAL_ENGINES: dict[str, Callable[[Db, DocumentStore], LexicalIndex]] = {"fts5": _fts5, "postings": _postings}


@at_boundary
class SqliteStore(SqliteDocuments, SqliteConversations):
    def __init__(self, path: Path | str, dense_engine: str = "sqlite-vec", lexical_engine: str = "fts5") -> None:
        make = DENSE_ENGINES.get(dense_engine)
        if make is None:
            raise ConfigError(f"unknown dense engine {dense_engine!r}; choose one of: {', '.join(DENSE_ENGINES)}")
        make_lexical = LEXICAL_ENGINES.get(lexical_engine)
        if make_lexical is None:
            choices = ", ".join(LEXICAL_ENGINES)
            raise ConfigError(f"unknown lexical engine {lexical_engine!r}; choose one of: {choices}")
        self.path = Path(path) if str(path) != ":memory:" else path
        super().__init__(Db(path))
        self.dense_engine = dense_engine
        self.lexical_engine = lexical_engine
        self.lexical: LexicalIndex = make_lexical(self.db, self)
        self.vectors: VectorIndex = make(self.db, self)

    @property
    def conn(self) -> apsw.Connection:
        """The raw connection: for this backend's own code and tests, never above the store."""
        return self.db.conn

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reconcile(self) -> list[Reconciled]:
        """Reconcile the vectors of every space with the chunks (``sunlib doctor --repair``)."""
        spaces = [Space(s.provider, s.model, s.dim, s.chunker) for s in self.vectors.spaces()]
        return [self.vectors.reconcile(space) for space in spaces]

    def repair_postings(self) -> None:
        """Rewrite the postings unless their files read back whole and current, when this index
        keeps them (``sunlib doctor --repair``)."""
        postings = self.postings()
        if postings is not None:
            postings.repair()

    def postings(self) -> PostingsLexical | None:
        """The postings engine of this index when it uses one or its files exist (a server that
        switched to it by size keeps them beside a CLI that does not); None otherwise."""
        if isinstance(self.lexical, PostingsLexical):
            return self.lexical
        folder = postings_folder(self.path)
        return PostingsLexical(self.db, self) if folder is not None and folder.is_dir() else None

    def postings_state(self) -> PostingsState | None:
        """The saved postings against the store (``sunlib doctor``); None when the index keeps none."""
        postings = self.postings()
        return postings.state() if postings is not None else None

    def ann_states(self) -> list[AnnState]:
        """The saved HNSW graph of every space, when the dense engine keeps one (``sunlib doctor``)."""
        if not isinstance(self.vectors, UsearchVectors):
            return []
        engine = self.vectors
        return [engine.state(Space(s.provider, s.model, s.dim, s.chunker)) for s in self.vectors.spaces()]

    def integrity_check(self) -> str:
        return str(self.db.one("PRAGMA quick_check") or "unknown")

    def check(self) -> dict[str, Any]:
        """The full consistency check (sunlib.store.check) on this connection; changes nothing."""
        from .check import check_connection

        return check_connection(self.db.conn)
