"""Protocol-level views of a store for tests above the store (no SQL, no row ids).

Tests of the SQLite backend itself may read its tables; every other test asks the
DocumentStore / VectorIndex protocols through these helpers."""

from __future__ import annotations

import os

from sunlib.store import DocumentStore, Space, Store, embed_text_for


def chunk_ids_by_path(store: DocumentStore) -> dict[str, list[str]]:
    """Every note's chunk ids in reading order, by path."""
    return {path: [c.chunk_id for c in store.chunks_of_note(note_id)] for note_id, path, _ in store.iter_notes()}


def all_chunk_ids(store: DocumentStore) -> set[str]:
    return {cid for ids in chunk_ids_by_path(store).values() for cid in ids}


def chunk_of(store: DocumentStore, path: str, ordinal: int = 0) -> str:
    """The id of one chunk of the note at ``path``."""
    return chunk_ids_by_path(store)[path][ordinal]


def vector_count(store: Store, space: Space) -> int:
    return next((s.vectors for s in store.vectors.spaces() if s.name == space.name), 0)


def embedded_chunk_ids(store: Store, space: Space) -> set[str]:
    """Chunks that have a vector in the space."""
    return set(store.vectors.vectors_for(space, sorted(all_chunk_ids(store))))


def embed_texts(store: DocumentStore) -> set[str]:
    """What the embedders saw (or will see) for every chunk."""
    return {
        embed_text_for(c.title, c.heading_path, c.text)
        for note_id, _, _ in store.iter_notes()
        for c in store.chunks_of_note(note_id)
    }


def paths_with_vectors(store: Store, space: Space) -> set[str]:
    embedded = embedded_chunk_ids(store, space)
    return {path for path, ids in chunk_ids_by_path(store).items() if embedded & set(ids)}


def drop_qdrant_prefix(url: str, prefix: str) -> None:
    """Delete a live server's collections named ``<prefix>_*`` (what a test made there)."""
    from qdrant_client import QdrantClient

    client = QdrantClient(url=url, api_key=os.environ.get("QDRANT_API_KEY") or None, check_compatibility=False)
    try:
        for c in client.get_collections().collections:
            if c.name.startswith(prefix + "_"):
                client.delete_collection(c.name)
    finally:
        client.close()
