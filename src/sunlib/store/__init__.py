"""Storage behind three protocols (DocumentStore, LexicalIndex, VectorIndex) and the SQLite
backend that implements them in one file (FTS5 + sqlite-vec). SQL lives only in this package."""

from .ann import AnnState, DerivedVectors, UsearchVectors
from .connection import connect, versions
from .memory import MatrixCache, NumpyVectors
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
    embed_text_for,
)
from .sqlite import DENSE_ENGINES, SqliteStore
from .vectors import SqliteVectors

__all__ = [
    "DENSE_ENGINES",
    "AnnState",
    "ChunkRow",
    "ConversationRecord",
    "ConversationSummary",
    "ConversationTurn",
    "Counts",
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
    "connect",
    "embed_text_for",
    "versions",
]
