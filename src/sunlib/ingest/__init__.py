"""Ingest: vault files -> notes (metadata merged) -> blocks -> chunks."""

from .chunkers import FixedChunker, StructureChunker, make_chunker
from .ids import chunk_id_for, note_id_for, utf16_slice
from .markdown import parse_markdown
from .vault import NoteError, Skipped, VaultFile, file_hash, load_note, walk_vault

__all__ = [
    "FixedChunker",
    "NoteError",
    "Skipped",
    "StructureChunker",
    "VaultFile",
    "chunk_id_for",
    "file_hash",
    "load_note",
    "make_chunker",
    "note_id_for",
    "parse_markdown",
    "utf16_slice",
    "walk_vault",
]
