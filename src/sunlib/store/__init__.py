"""Storage behind three protocols (DocumentStore, LexicalIndex, VectorIndex) and the SQLite
backend that implements them in one file (FTS5 + sqlite-vec). SQL lives only in this package."""

from .ann import AnnState, DerivedVectors, UsearchVectors
from .connection import connect, versions
from .memory import MatrixCache, NumpyVectors
from .postings import DerivedLexical, PostingsLexical, PostingsState
from .protocols import (
    ChunkRow,
    ConversationRecord,
    ConversationSummary,
    ConversationTurn,
    Counts,
    DocumentStore,
    LexicalIndex,
    NoteFile,
    NoteRecord,
    NoteState,
    NoteSummary,
    PendingChunk,
    Reconciled,
    RunRecord,
    RunSummary,
    Space,
    SpaceInfo,
    Store,
    VectorIndex,
    VectorItem,
    Visibility,
    chunk_tokens,
    embed_text_for,
)
from .sqlite import DENSE_ENGINES, LEXICAL_ENGINES, SqliteStore
from .vectors import SqliteVectors

__all__ = [
    "DENSE_ENGINES",
    "LEXICAL_ENGINES",
    "AnnState",
    "ChunkRow",
    "ConversationRecord",
    "ConversationSummary",
    "ConversationTurn",
    "Counts",
    "DerivedLexical",
    "DerivedVectors",
    "DocumentStore",
    "LexicalIndex",
    "MatrixCache",
    "NoteFile",
    "NoteRecord",
    "NoteState",
    "NoteSummary",
    "NumpyVectors",
    "PendingChunk",
    "PostingsLexical",
    "PostingsState",
    "Reconciled",
    "RunRecord",
    "RunSummary",
    "Space",
    "SpaceInfo",
    "SqliteStore",
    "SqliteVectors",
    "Store",
    "UsearchVectors",
    "VectorIndex",
    "VectorItem",
    "Visibility",
    "chunk_tokens",
    "connect",
    "embed_text_for",
    "versions",
]
