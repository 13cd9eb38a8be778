"""Storage: one SQLite file (FTS5 + sqlite-vec). SQL lives only in this package."""

from .connection import connect, versions
from .sqlite import ChunkRow, NoteState, PendingChunk, Space, SqliteStore, embed_text_for

__all__ = [
    "ChunkRow",
    "NoteState",
    "PendingChunk",
    "Space",
    "SqliteStore",
    "connect",
    "embed_text_for",
    "versions",
]
