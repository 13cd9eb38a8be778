"""What a chunk becomes in Qdrant: its point id, payload, BM25 sparse vector, and the filter a
``Visibility`` compiles to. Pure functions; no client calls.

Filters mirror the SQLite backend's ``visible_sql`` field by field, so both backends let the
same chunks through:

* ACL: ``acl`` holds the note's principals; a ``MatchAny`` of the caller's. An empty ACL
  matches no value and an empty set of principals is "nobody" (``compile_filter`` -> None).
* folders: ``folders`` holds every ancestor folder of the path (ASCII-lowered, as SQLite's
  ``LIKE`` compares), so a folder filter is one ``MatchAny``.
* tags (all of them), note ids (any), since/until (a range on ``mtime``), metadata pairs
  (``meta`` holds ``key=value`` with the value ASCII-lowered: SQLite's ``NOCASE``) and the
  route's script narrowing (``script``, ``text.tokens.text_script``).

BM25 as a sparse vector: each distinct token is a dimension (a 32-bit hash of the token, as
Qdrant's own BM25 does), valued with FTS5's term-frequency part of BM25
(``store.bm25``: ``f * (k1 + 1) / (f + k1 * (1 - b + b * |D| / avgdl))``). The IDF part comes
from Qdrant at query time (``Modifier.IDF``), over the collection or over the caller's ACL
corpus. ``avgdl`` is a fixed parameter of the collection (see ``lexical.py``).
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qdrant_client import models

from ...contracts import SearchFilters
from ...text.tokens import text_script
from .. import bm25 as formula
from ..protocols import Visibility

# Point ids are UUIDs derived from chunk ids (Qdrant takes integers or UUIDs only).
POINT_NAMESPACE = uuid.UUID("5b0f4c3e-9a51-4d0e-8f7e-2b7d1c9e6a10")
# Payload fields every collection carries and indexes: what ``compile_filter`` reads.
FILTER_FIELDS: dict[str, models.PayloadSchemaType] = {
    "acl": models.PayloadSchemaType.KEYWORD,
    "folders": models.PayloadSchemaType.KEYWORD,
    "tags": models.PayloadSchemaType.KEYWORD,
    "note_id": models.PayloadSchemaType.KEYWORD,
    "meta": models.PayloadSchemaType.KEYWORD,
    "script": models.PayloadSchemaType.KEYWORD,
    "mtime": models.PayloadSchemaType.FLOAT,
    "chunk_id": models.PayloadSchemaType.KEYWORD,
}
TERMS_FIELD = "terms"  # the chunk's distinct tokens: document frequencies are counts on it
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """Lower A-Z only: what SQLite's NOCASE and LIKE fold, and nothing else."""
    return text.translate(_ASCII_LOWER)


def point_id(chunk_id: str) -> str:
    return str(uuid.uuid5(POINT_NAMESPACE, chunk_id))


def term_index(term: str) -> int:
    """A token's sparse dimension: the first 4 bytes of its BLAKE2b digest. Two tokens share a
    dimension with probability ~ V^2 / 2^33 for a vocabulary of V (0.1 at 30k tokens)."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "big")


@dataclass(frozen=True)
class ChunkSource:
    """One chunk as the SQLite document store holds it, with its note's filter fields and tokens."""

    chunk_id: str
    stamp: int
    embed_hash: str
    ordinal: int
    heading_path: tuple[str, ...]
    text: str
    start16: int
    end16: int
    start_line: int
    end_line: int
    note_id: str
    path: str
    title: str
    mtime: float
    acl: tuple[str, ...]
    tags: tuple[str, ...]
    meta: tuple[tuple[str, str], ...]
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class NoteSource:
    """One note as the SQLite document store holds it: what a replica reads instead of the file."""

    note_id: str
    path: str
    title: str
    metadata_json: str  # the stored JSON text, kept as is (key order and types)
    links: tuple[str, ...]
    content_hash: str
    mtime: float
    chunker: str
    indexed_at: float
    acl: tuple[str, ...]  # in the order stored
    tags: tuple[str, ...]  # in the order SQLite returns them (its index orders them by tag)
    chunk_ids: tuple[str, ...]  # in reading order


# Payload fields of the notes collection that its reads filter on.
NOTE_FIELDS: dict[str, models.PayloadSchemaType] = {
    "acl": models.PayloadSchemaType.KEYWORD,
    "folders": models.PayloadSchemaType.KEYWORD,
    "tags": models.PayloadSchemaType.KEYWORD,
    "note_id": models.PayloadSchemaType.KEYWORD,
    "path": models.PayloadSchemaType.KEYWORD,
}


def exact(value: float) -> str:
    """A float as payload text that reads back to the same bits. Payload numbers go through the
    engine's JSON, which qdrant-edge parses to the nearest double only approximately (a last-bit
    drift seen on timestamps), so the values a read returns are kept as text; the numbers that
    filters compare (``mtime``) stay numbers."""
    return repr(float(value))


def note_point_id(note_id: str) -> str:
    return str(uuid.uuid5(POINT_NAMESPACE, "note:" + note_id))


def note_payload(note: NoteSource) -> dict[str, Any]:
    return {
        "note_id": note.note_id,
        "path": note.path,
        "title": note.title,
        "metadata": note.metadata_json,
        "links": list(note.links),
        "content_hash": note.content_hash,
        "mtime": note.mtime,
        "mtime_exact": exact(note.mtime),
        "chunker": note.chunker,
        "indexed_at": exact(note.indexed_at),
        "acl": list(note.acl),
        "tags": list(note.tags),
        "chunk_ids": list(note.chunk_ids),
        "folders": folders_of(note.path),
    }


def any_of(key: str, values: Sequence[Any]) -> models.FieldCondition:
    """``key`` holds one of ``values`` (for an array field: one of its elements does)."""
    return _any(key, values)


def is_value(key: str, value: Any) -> models.FieldCondition:
    return _is(key, value)


def folder_condition(folder: str) -> models.FieldCondition:
    """Paths under a folder, any depth, as SQLite's ``LIKE 'folder/%'`` compares (ASCII case folded)."""
    return _any("folders", [ascii_lower(folder.strip("/"))])


def folders_of(path: str) -> list[str]:
    parts = ascii_lower(path).split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def filter_payload(chunk: ChunkSource) -> dict[str, Any]:
    """The fields a Visibility filters on, and the chunk's id and stamp."""
    return {
        "chunk_id": chunk.chunk_id,
        "stamp": chunk.stamp,
        "note_id": chunk.note_id,
        "acl": list(chunk.acl),
        "folders": folders_of(chunk.path),
        "tags": list(chunk.tags),
        "meta": [f"{k}={ascii_lower(v)}" for k, v in chunk.meta],
        "mtime": chunk.mtime,
        "script": text_script(chunk.text),
    }


def chunk_payload(chunk: ChunkSource) -> dict[str, Any]:
    """Everything a query needs to answer from the chunk alone (text, path, headings, UTF-16
    offsets, ACL, metadata), its filter fields and its distinct tokens."""
    return {
        **filter_payload(chunk),
        "embed_hash": chunk.embed_hash,
        "ordinal": chunk.ordinal,
        "heading_path": list(chunk.heading_path),
        "text": chunk.text,
        "start16": chunk.start16,
        "end16": chunk.end16,
        "start_line": chunk.start_line,
        "end_line": chunk.end_line,
        "path": chunk.path,
        "title": chunk.title,
        "length": len(chunk.tokens),
        TERMS_FIELD: sorted(set(chunk.tokens)),
    }


def doc_vector(tokens: Sequence[str], avgdl: float) -> models.SparseVector:
    """The BM25 term-frequency weights of a chunk's tokens (FTS5's k1 and b)."""
    norm = formula.K1 * (1 - formula.B + formula.B * len(tokens) / avgdl)
    weights: dict[int, float] = {}
    for term, f in Counter(tokens).items():
        index = term_index(term)
        weights[index] = weights.get(index, 0.0) + (f * (formula.K1 + 1.0)) / (f + norm)
    return models.SparseVector(indices=list(weights), values=list(weights.values()))


def query_vector(terms: Sequence[str]) -> models.SparseVector:
    """One per query term (a term twice counts twice, as an FTS5 phrase given twice does)."""
    weights: dict[int, float] = {}
    for term in terms:
        index = term_index(term)
        weights[index] = weights.get(index, 0.0) + 1.0
    return models.SparseVector(indices=list(weights), values=list(weights.values()))


def _any(key: str, values: Sequence[Any]) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def _is(key: str, value: Any) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def acl_filter(principals: Sequence[str]) -> models.Filter | None:
    """The chunks some principals may see; None when they are none (nobody sees anything)."""
    if not principals:
        return None
    return models.Filter(must=[_any("acl", sorted(set(principals)))])


def compile_filter(visibility: Visibility) -> models.Filter | None:
    """The payload filter of a Visibility (see the module docstring); None: nothing is visible."""
    acl = acl_filter(visibility.principals)
    if acl is None:
        return None
    must: list[Any] = list(acl.must or [])
    must.extend(_filter_conditions(visibility.filters))
    if visibility.script is not None:
        must.append(_is("script", visibility.script))
    return models.Filter(must=must)


def _filter_conditions(filters: SearchFilters) -> list[Any]:
    out: list[Any] = []
    if filters.folders:
        out.append(_any("folders", [ascii_lower(f.strip("/")) for f in filters.folders]))
    out.extend(_is("tags", tag.lstrip("#").lower()) for tag in filters.tags)
    if filters.note_ids:
        out.append(_any("note_id", list(filters.note_ids)))
    if filters.since is not None or filters.until is not None:
        out.append(models.FieldCondition(key="mtime", range=models.Range(gte=filters.since, lte=filters.until)))
    out.extend(_is("meta", f"{k}={ascii_lower(v)}") for k, v in filters.metadata)
    return out
