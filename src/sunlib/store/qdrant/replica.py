"""``QdrantReplica``: a read-only store that answers from the Qdrant collections alone.

The indexing host (a ``QdrantStore``, the one writer) keeps in Qdrant everything a query reads:
the chunk points (``<prefix>_chunks``: text, path, title, headings, offsets, line range, ACL,
tags, metadata, stamp, BM25 weights), a collection per embedding space, the note records
(``<prefix>_notes``) and its meta table (``<prefix>_meta``: the write generation, the spaces,
the calibrations; ``published.py``). A replica opens that cluster with no SQLite file:

* searches are the same ``QdrantLexical`` and ``QdrantVectors`` as on the indexing host, the
  ACL and the filters inside both (``points.compile_filter``), so nothing hidden is returned,
  counted or scored; the chunks collection is the replica's source of the chunks' stamps;
* note and chunk reads are payload reads, filtered by the same ACL rule as SQLite's;
* the write generation is the published one: every cache here keys on it, so a replica sees the
  indexer's writes without reopening;
* runs and conversations, which replicas write, live in ``<prefix>_runs`` and ``<prefix>_turns``
  (``runs.py``), so a run saved through one replica is read through another;
* note writes, vector writes, meta writes, reconcile and indexing raise ``StoreReadOnly``.

What the collections hold is what a replica answers from: a write in flight on the indexing
host (the chunk points written, the note or the meta not yet) can be seen half done for that
moment; the next published generation, and the indexer's reconcile after a crash, end it. A
change the indexer committed to SQLite but could not send (a crash, Qdrant not answering) is not
seen here, an ACL change included, until that reconcile: the indexing host filters such points
out by their stamps against SQLite, a replica has only the collections to compare with.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np
from qdrant_client import models

from ...contracts import Chunk, Note
from ...errors import ConfigError, StoreReadOnly
from ..db import batches
from ..protocols import (
    LOCAL_OWNER,
    ChunkRow,
    ConversationRecord,
    ConversationSummary,
    Counts,
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
    VectorIndex,
    VectorItem,
    Visibility,
    embed_text_for,
)
from .client import Location, Shared, acquire, count, release, retrieve, scroll_all
from .lexical import QdrantLexical
from .points import acl_filter, any_of, compile_filter, folder_condition, is_value, note_point_id, point_id
from .published import PublishedMeta, meta_collection, notes_collection, read_meta
from .runs import QdrantRuns
from .source import SPACES_META, spaces_of
from .vectors import QdrantVectors

READ_ONLY = (
    "this is a read-only replica ([store] replica = true): notes are written and indexed on the indexing host"
    " only (run `sunlib index` there)"
)
_CHUNK_ROW = [
    "chunk_id",
    "ordinal",
    "heading_path",
    "text",
    "start16",
    "end16",
    "start_line",
    "end_line",
    "note_id",
    "path",
    "title",
    "tags",
]


def read_only(what: str) -> NoReturn:
    raise StoreReadOnly(f"{what}: {READ_ONLY}")


def _row(p: Mapping[str, Any]) -> ChunkRow:
    return ChunkRow(
        str(p["chunk_id"]),
        int(p["ordinal"]),
        tuple(p.get("heading_path") or ()),
        str(p["text"]),
        int(p["start16"]),
        int(p["end16"]),
        int(p["start_line"]),
        int(p["end_line"]),
        str(p["note_id"]),
        str(p["path"]),
        str(p["title"]),
        tuple(p.get("tags") or ()),
    )


def _where(*conditions: Any) -> models.Filter:
    return models.Filter(must=list(conditions))


class ReplicaView:
    """The chunks as ``QdrantVectors`` sees them on a replica: read from the collections; writes refused."""

    def __init__(self, replica: QdrantReplica) -> None:
        self.replica = replica

    def generation(self) -> int:
        return self.replica.generation()

    def stamps(self) -> Mapping[str, int]:
        return self.replica.current_stamps()

    def chunk_order(self) -> list[tuple[str, int]]:
        return [(c, s) for c, s, _ in self.replica.chunk_order()]

    def visible_ids(self, visibility: Visibility) -> list[str]:
        return self.replica.visible_chunk_ids(visibility)

    def pending_chunks(self, chunk_ids: Sequence[str]) -> list[PendingChunk]:
        found = self.replica.chunk_payloads(chunk_ids)
        return [
            PendingChunk(
                c, int(p["stamp"]), str(p["embed_hash"]), embed_text_for(p["title"], p["heading_path"], p["text"])
            )
            for c in chunk_ids
            if (p := found.get(c)) is not None
        ]

    def filter_payloads(self, chunk_ids: Sequence[str]) -> dict[str, tuple[int, dict[str, Any]]]:
        read_only("vectors cannot be written here")

    def spaces(self) -> list[Space]:
        return spaces_of(self.replica.get_meta(SPACES_META, "[]"))

    def register_space(self, space: Space) -> None:
        read_only("an embedding space cannot be added here")

    def advance(self) -> None:
        read_only("vectors cannot be written here")

    def cache(self, space: Space, items: Sequence[VectorItem]) -> None:
        read_only("vectors cannot be written here")

    def cached(self, space: Space, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        return {}  # the embedding cache stays on the indexing host


class QdrantReplica:
    """``QdrantReplica(location, prefix)``: the collections ``<prefix>_*`` at ``location``, read-only
    (but for runs and conversations). Raises ConfigError when nothing was published under
    ``prefix`` (the indexing host has not indexed, or another prefix was named)."""

    read_only = True

    def __init__(self, location: Location, prefix: str) -> None:
        if not prefix:
            raise ConfigError("a replica needs the indexing host's collection prefix ([store] collection)")
        self.location, self.prefix = location, prefix
        self.shared: Shared = acquire(location)
        self._closed = False
        try:
            self.chunks = f"{prefix}_chunks"
            with self.shared.call() as client:
                published = client.collection_exists(meta_collection(prefix)) and client.collection_exists(self.chunks)
            if not published or read_meta(self.shared, prefix) is None:
                where = location.url or location.path
                raise ConfigError(
                    f"nothing is published under the collection prefix {prefix!r} at {where}: index the vault on the"
                    ' indexing host (backend = "qdrant", the same [store] collection) first'
                )
            self.runs = QdrantRuns(self.shared, prefix)
        except BaseException:
            self.close()
            raise
        self._pinned: list[PublishedMeta] = []
        self._stamps: tuple[int, dict[str, int]] = (-1, {})
        self.qdrant_lexical = QdrantLexical(self.shared, self.chunks, self.current_stamps, self.generation)
        self.qdrant_vectors = QdrantVectors(self.shared, prefix, ReplicaView(self))
        self.lexical: LexicalIndex = self.qdrant_lexical
        self.vectors: VectorIndex = self.qdrant_vectors

    # -- meta, generation, snapshots -------------------------------------------------------------

    def published(self) -> PublishedMeta:
        """The indexing host's meta as last published (pinned inside ``snapshot()``)."""
        if self._pinned:
            return self._pinned[-1]
        return read_meta(self.shared, self.prefix) or PublishedMeta()

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        return self.published().meta.get(key, default)

    def set_meta(self, key: str, value: str) -> None:
        read_only(f"the index setting {key!r} cannot be changed here")

    def generation(self) -> int:
        return self.published().generation

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Nothing to commit together: what a replica writes (a run, a turn) is one point each."""
        yield

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one published generation (the caches key on it). Qdrant has no
        cross-collection snapshot: an indexer write landing meanwhile can still be seen."""
        self._pinned.append(self.published())
        try:
            yield
        finally:
            self._pinned.pop()

    # -- notes -----------------------------------------------------------------------------------

    def _notes(self, where: models.Filter | None, fields: Sequence[str] | bool) -> list[Mapping[str, Any]]:
        return [p.payload or {} for p in scroll_all(self.shared, notes_collection(self.prefix), fields, where)]

    def note_states(self) -> dict[str, NoteState]:
        return {s.path: s for s in map(_state, self._notes(None, _STATE))}

    def note_states_of(self, paths: Sequence[str]) -> dict[str, NoteState]:
        out: dict[str, NoteState] = {}
        for batch in batches(list(dict.fromkeys(paths))):
            out.update((s.path, s) for s in map(_state, self._notes(_where(any_of("path", batch)), _STATE)))
        return out

    def upsert_note(
        self, note: Note, chunks: Sequence[Chunk], fts_tokens: Sequence[Sequence[str]], chunker: str
    ) -> None:
        read_only(f"the note {note.path} cannot be written here")

    def delete_note(self, path: str) -> bool:
        read_only(f"the note {path} cannot be deleted here")

    def note_by_id(self, note_id: str) -> NoteRecord | None:
        found = retrieve(self.shared, notes_collection(self.prefix), [note_point_id(note_id)])
        if not found:
            return None
        p = found[0].payload or {}
        return NoteRecord(
            str(p["note_id"]),
            str(p["path"]),
            str(p["title"]),
            _json(p["metadata"]),
            tuple(p.get("links") or ()),
            str(p["content_hash"]),
            float(p["mtime_exact"]),
            tuple(p.get("acl") or ()),
            float(p["indexed_at"]),
        )

    def iter_notes(self) -> list[tuple[str, str, str]]:
        rows = [
            (str(p["note_id"]), str(p["path"]), str(p["title"]))
            for p in self._notes(None, ["note_id", "path", "title"])
        ]
        return sorted(rows, key=lambda r: r[1])

    def list_notes(
        self,
        principals: Sequence[str],
        folder: str | None = None,
        tag: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[NoteSummary], int]:
        """The rule of SQLite's ``list_notes``: one of the note's ACL principals is among them (an
        empty ACL is visible to nobody), optionally under a folder and carrying a tag."""
        acl = acl_filter(principals)
        if acl is None:
            return [], 0
        must: list[Any] = list(acl.must or [])
        if (folder or "").strip("/"):
            must.append(folder_condition(folder or ""))
        if tag:
            must.append(is_value("tags", tag.lstrip("#").lower()))
        found = sorted(
            self._notes(_where(*must), ["note_id", "path", "title", "metadata", "mtime_exact"]), key=_by_path
        )
        notes = []
        for p in found[offset : offset + limit]:
            meta = _json(p["metadata"])
            tags = meta.get("tags", []) if isinstance(meta, dict) else []
            notes.append(
                NoteSummary(
                    str(p["note_id"]), str(p["path"]), str(p["title"]), tuple(tags), meta, float(p["mtime_exact"])
                )
            )
        return notes, len(found)

    def note_files(
        self, principals: Sequence[str] | None, paths: Sequence[str] | None = None, limit: int = 0, offset: int = 0
    ) -> tuple[list[NoteFile], int]:
        must: list[Any] = []
        if principals is not None:
            acl = acl_filter(principals)
            if acl is None:
                return [], 0
            must.extend(acl.must or [])
        fields = ["note_id", "path", "indexed_at", "acl", "chunk_ids"]
        if paths is None:
            found = self._notes(_where(*must) if must else None, fields)
        else:
            found = [
                p
                for batch in batches(list(dict.fromkeys(paths)))
                for p in self._notes(_where(*must, any_of("path", batch)), fields)
            ]
        found.sort(key=_by_path)
        page = found[offset : offset + limit] if limit else found
        files = [
            NoteFile(
                str(p["note_id"]),
                str(p["path"]),
                tuple(sorted(p.get("acl") or ())),
                tuple(p.get("chunk_ids") or ()),
                float(p["indexed_at"]),
            )
            for p in page
        ]
        return files, len(found)

    def note_paths_under(self, folder: str) -> list[str]:
        prefix = folder.strip("/")
        if not prefix:
            return [p for _, p, _ in self.iter_notes()]
        found = self._notes(_where(folder_condition(prefix)), ["path"])  # ASCII case folded: narrow exactly below
        return sorted(str(p["path"]) for p in found if str(p["path"]).startswith(prefix + "/"))

    # -- chunks ----------------------------------------------------------------------------------

    def chunk_payloads(self, chunk_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """chunk id -> its point's payload (unknown ids left out)."""
        out: dict[str, Mapping[str, Any]] = {}
        for batch in batches(list(dict.fromkeys(chunk_ids))):
            for r in retrieve(
                self.shared, self.chunks, [point_id(c) for c in batch], [*_CHUNK_ROW, "stamp", "embed_hash"]
            ):
                payload = r.payload or {}
                out[str(payload["chunk_id"])] = payload
        return out

    def _chunk_rows(self, where: models.Filter | None) -> list[Mapping[str, Any]]:
        return [p.payload or {} for p in scroll_all(self.shared, self.chunks, _CHUNK_ROW, where)]

    def chunks_of_note(self, note_id: str) -> list[ChunkRow]:
        found = self._chunk_rows(_where(is_value("note_id", note_id)))
        return [_row(p) for p in sorted(found, key=lambda p: int(p["ordinal"]))]

    def chunks_by_ids(self, chunk_ids: Sequence[str]) -> list[ChunkRow]:
        found = self.chunk_payloads(chunk_ids)
        return [_row(found[c]) for c in chunk_ids if c in found]

    def neighbours(self, chunk_id: str, radius: int) -> list[ChunkRow]:
        """Chunks of the same note within ``radius`` ordinals of this one (itself excluded)."""
        seed = self.chunk_payloads([chunk_id]).get(chunk_id)
        if seed is None:
            return []
        at = int(seed["ordinal"])
        return [
            r
            for r in self.chunks_of_note(str(seed["note_id"]))
            if r.chunk_id != chunk_id and abs(r.ordinal - at) <= radius
        ]

    def chunk_order(self, where: models.Filter | None = None) -> list[tuple[str, int, int]]:
        """(chunk_id, stamp, ordinal) of the chunks in the order SQLite wrote them: each note's
        write has its own stamp, and its chunks follow in reading order."""
        found = [p.payload or {} for p in scroll_all(self.shared, self.chunks, ["chunk_id", "stamp", "ordinal"], where)]
        rows = [(str(p["chunk_id"]), int(p["stamp"]), int(p["ordinal"])) for p in found]
        return sorted(rows, key=lambda r: (r[1], r[2]))

    def current_stamps(self) -> dict[str, int]:
        """Every chunk's stamp, as the chunks collection holds it, read once per published generation."""
        generation = self.generation()
        if self._stamps[0] != generation:
            self._stamps = (generation, self.qdrant_lexical.ledger())
        return self._stamps[1]

    def visible_chunk_ids(self, visibility: Visibility) -> list[str]:
        where = compile_filter(visibility)
        return [] if where is None else [c for c, _, _ in self.chunk_order(where)]

    def count_visible(self, visibility: Visibility) -> int:
        where = compile_filter(visibility)
        return 0 if where is None else count(self.shared, self.chunks, where)

    def filter_visible(self, visibility: Visibility, chunk_ids: Sequence[str]) -> set[str]:
        where = compile_filter(visibility)
        if where is None:
            return set()
        found: set[str] = set()
        for batch in batches(list(dict.fromkeys(chunk_ids))):
            narrowed = _where(*(where.must or []), any_of("chunk_id", batch))
            found.update(
                str((p.payload or {})["chunk_id"]) for p in scroll_all(self.shared, self.chunks, ["chunk_id"], narrowed)
            )
        return found

    def counts(self) -> Counts:
        return Counts(
            count(self.shared, notes_collection(self.prefix)),
            count(self.shared, self.chunks),
            self.published().cached_embeddings,
        )

    # -- runs and conversations (replicas write these) -------------------------------------------

    def save_run(self, run: RunRecord) -> None:
        self.runs.save_run(run)

    def list_runs(
        self,
        principals: Sequence[str],
        limit: int = 20,
        offset: int = 0,
        kind: str | None = None,
        *,
        owner: str | None = LOCAL_OWNER,
    ) -> list[RunSummary]:
        return self.runs.list_runs(principals, limit, offset, kind, owner=owner)

    def get_run(self, run_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER) -> RunRecord | None:
        return self.runs.get_run(run_id, principals, owner=owner)

    def add_turn(
        self,
        conversation_id: str,
        run_id: str,
        said: str,
        standalone: str | None,
        at: float,
        *,
        owner: str = LOCAL_OWNER,
    ) -> int:
        return self.runs.add_turn(conversation_id, run_id, said, standalone, at, owner=owner)

    def get_conversation(
        self, conversation_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER
    ) -> ConversationRecord | None:
        return self.runs.get_conversation(conversation_id, principals, owner=owner)

    def list_conversations(
        self, principals: Sequence[str], limit: int = 20, offset: int = 0, *, owner: str | None = LOCAL_OWNER
    ) -> list[ConversationSummary]:
        return self.runs.list_conversations(principals, limit, offset, owner=owner)

    # -- what the indexing host does, and what doctor asks -----------------------------------------

    def reconcile(self) -> list[Reconciled]:
        read_only("reconcile runs on the indexing host")

    def repair_postings(self) -> None:
        read_only("repairs run on the indexing host")

    def ann_states(self) -> list[Any]:
        return []  # no HNSW graph files: Qdrant keeps its own

    def postings_state(self) -> None:
        return None  # no postings: BM25 runs in Qdrant

    def state(self) -> dict[str, Any]:
        """What a replica can check (``sunlib doctor``): the collections present and their points,
        the published generation, the spaces and their vectors."""
        names = [
            self.chunks,
            notes_collection(self.prefix),
            meta_collection(self.prefix),
            self.runs.runs,
            self.runs.turns,
        ]
        names += [self.qdrant_vectors.collection(s) for s in self.qdrant_vectors.view.spaces()]
        collections: dict[str, int | None] = {}
        for name in names:
            with self.shared.call() as client:
                present = client.collection_exists(name)
            collections[name] = count(self.shared, name) if present else None
        published = self.published()
        return {
            "prefix": self.prefix,
            "location": self.location.url or self.location.path,
            "generation": published.generation,
            "index_uuid": published.meta.get("index_uuid", ""),
            "collections": collections,
            "spaces": {s.name: s.vectors for s in self.vectors.spaces()},
        }

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            release(self.shared)

    def __enter__(self) -> QdrantReplica:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_STATE = ["note_id", "path", "content_hash", "mtime_exact", "chunker"]


def _state(p: Mapping[str, Any]) -> NoteState:
    return NoteState(
        str(p["note_id"]), str(p["path"]), str(p["content_hash"]), float(p["mtime_exact"]), str(p["chunker"])
    )


def _by_path(p: Mapping[str, Any]) -> str:
    return str(p["path"])


def _json(text: Any) -> Any:
    return json.loads(text)
