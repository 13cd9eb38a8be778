"""The store's seams: what every backend offers, and the records that cross the boundary.

Three protocols, one per concern, so a backend can implement one of them alone (a vector
service beside SQLite's text, say):

* ``DocumentStore``: notes, chunks, metadata, tags, ACL, runs, conversations and key-value
  meta. The text is the source of truth; each chunk row carries a generation ``stamp``.
* ``LexicalIndex``: BM25 over chunks, and the document frequencies of terms, under a
  ``Visibility``.
* ``VectorIndex``: one set of vectors per embedding ``Space``: ``upsert``, ``delete``,
  ``knn`` under a ``Visibility``, ``pending`` (chunks without a current vector),
  ``still_pending`` (which of some listed pending chunks are still to embed),
  ``without_vectors`` (which of some chunks have none yet) and ``reconcile`` (drop vectors
  whose chunk is gone or has another stamp).

Everything crosses the boundary keyed by ``chunk_id``; row ids and SQL stay in the
backend. Records are frozen dataclasses. A ``Visibility`` (principals plus filters) is a
value each backend compiles its own way (a TEMP table of visible rows for SQLite, a
boolean mask for the numpy engine) and applies BEFORE ranking, so a closer vector or a
better BM25 score in a note the caller may not see can never take a visible chunk's place.

Consistency without a shared transaction: a vector is written with the stamp of the
chunk it was computed from and refused when that chunk is gone or was rewritten since
(another stamp); ``reconcile`` removes whatever slipped through (a crash, another
backend's partial write), so vectors converge on the text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..contracts import Chunk, Note, SearchFilters
from ..ingest.ids import sha256_hex
from ..text.tokens import SCRIPTS, fts_tokens


@dataclass(frozen=True)
class Visibility:
    """Who is asking (principals) and what they narrowed the search to (filters).

    A chunk is visible when one of its note's ACL principals is among ``principals`` (an
    empty ACL is visible to nobody, and so is an empty set of principals) and the filters
    allow it. Hashable, so backends cache what they compile from it."""

    principals: tuple[str, ...] = ("public",)
    filters: SearchFilters = field(default_factory=SearchFilters)
    # Narrowed by a route, never by a caller: "cjk" keeps the chunks written in CJK characters,
    # "other" the rest (``text.tokens.text_script``: CJK characters at least as many as the other
    # words); the cross-language routes search the script the question is not written in.
    script: str | None = None

    @property
    def key(self) -> tuple[object, ...]:
        """One value per meaning (principals sorted, without repeats): what backends cache on.
        ``principals`` itself keeps the caller's order, as traces show it."""
        return (tuple(sorted(set(self.principals))), self.filters, self.script)

    @classmethod
    def of(cls, principals: Iterable[str], filters: SearchFilters | None = None) -> Visibility:
        return cls(tuple(principals), filters or SearchFilters())

    def allows(self, acl: Iterable[str]) -> bool:
        """Whether a note with this ACL is visible to these principals: one of them is in it (the
        one access rule; the filters narrow a search, not access)."""
        return not set(acl).isdisjoint(self.principals)

    def in_script(self, script: str) -> Visibility:
        """The same principals and filters, narrowed to chunks of one script ("cjk" or "other")."""
        if script not in SCRIPTS:
            raise ValueError(f"unknown script {script!r}; choose one of: {', '.join(SCRIPTS)}")
        return dataclasses.replace(self, script=script)


@dataclass(frozen=True)
class Space:
    """An embedding space: vectors from one model over one chunking."""

    provider: str
    model: str
    dim: int
    chunker: str

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}:{self.dim}:{self.chunker}"

    @property
    def cache_key(self) -> str:
        """The embedding cache's key: chunking does not change a text's vector."""
        return f"{self.provider}:{self.model}:{self.dim}"

    @property
    def vec_table(self) -> str:
        """The SQLite backend's vec0 table of this space (used by that backend and its tests only)."""
        return "vec_" + sha256_hex(self.name)[:12]


@dataclass(frozen=True)
class SpaceInfo:
    name: str
    provider: str
    model: str
    dim: int
    chunker: str
    vectors: int


@dataclass(frozen=True)
class NoteState:
    """What incremental indexing needs to know about an indexed note."""

    note_id: str
    path: str
    content_hash: str
    mtime: float
    chunker: str


@dataclass(frozen=True)
class NoteFile:
    """An indexed note as a file: what the per-file status (watch mode) needs."""

    note_id: str
    path: str
    acl: tuple[str, ...]
    chunk_ids: tuple[str, ...]
    indexed_at: float


@dataclass(frozen=True)
class NoteRecord:
    note_id: str
    path: str
    title: str
    metadata: Mapping[str, Any]
    links: tuple[str, ...]
    content_hash: str
    mtime: float
    acl: tuple[str, ...]
    indexed_at: float  # when this version of the note was stored


@dataclass(frozen=True)
class NoteSummary:
    """One line of a note listing."""

    note_id: str
    path: str
    title: str
    tags: tuple[str, ...]
    metadata: Mapping[str, Any]
    mtime: float


@dataclass(frozen=True)
class ChunkRow:
    """A stored chunk with what citing it needs from its note."""

    chunk_id: str
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
    tags: tuple[str, ...]


@dataclass(frozen=True)
class PendingChunk:
    """A chunk without a current vector in some space: what to embed, and the stamp to write it with."""

    chunk_id: str
    stamp: int
    embed_hash: str
    embed_text: str


@dataclass(frozen=True)
class VectorItem:
    """A vector computed from a chunk as it was at ``stamp``."""

    chunk_id: str
    stamp: int
    embed_hash: str
    vector: np.ndarray


@dataclass(frozen=True)
class Counts:
    notes: int
    chunks: int
    cached_embeddings: int


# The owner of what a caller without a token saves and reads: the local CLI, the Python API, and
# the loopback caller of a server without tokens. A token's callers are "token:" and 16 hex
# digits of the token's sha256 (``server.auth.token_owner``); runs and conversations saved
# before owners existed belong to this owner.
LOCAL_OWNER = "local"


@dataclass(frozen=True)
class RunSummary:
    """One saved run as a list shows it. ``principals`` are those it was asked as: a run is
    readable by whoever holds every one of them, and is its owner (``RunRecord.owner``)."""

    run_id: str
    kind: str
    created_at: float
    principals: tuple[str, ...]
    question: str
    refused: bool
    total_ms: float


@dataclass(frozen=True)
class RunRecord(RunSummary):
    """A saved run whole: its answer frame and its trace, as the JSON documents the ask
    pipeline wrote (``RunTrace.from_json`` reads the trace back)."""

    frame: Mapping[str, Any] = field(default_factory=dict)
    trace: Mapping[str, Any] = field(default_factory=dict)
    owner: str = LOCAL_OWNER  # who asked: only this owner reads it back (an admin reads every owner's)


@dataclass(frozen=True)
class ConversationTurn:
    """One turn of a conversation: its position (1, 2, ...), the message as the user typed it, the
    standalone question the follow-up rule made of it (None: it stood on its own), and its run."""

    position: int
    said: str
    standalone: str | None
    run: RunRecord


@dataclass(frozen=True)
class ConversationSummary:
    """One conversation as a list shows it: when it began, its newest turn, how many turns it has,
    and the first and the newest message."""

    conversation_id: str
    created_at: float
    updated_at: float
    turns: int
    first_question: str
    last_question: str


@dataclass(frozen=True)
class ConversationRecord:
    """A conversation whole: its turns in order. Readable only by its owner (the owner of its first
    turn) holding principals that may read every one of its runs (the runs rule applied to each turn)."""

    conversation_id: str
    created_at: float
    updated_at: float
    turns: tuple[ConversationTurn, ...]


@dataclass(frozen=True)
class Reconciled:
    """What ``reconcile`` did to one space."""

    space: str
    orphans_removed: int  # vectors whose chunk is gone
    stale_removed: int  # vectors computed from an older version of their chunk
    pending: int  # chunks still without a vector


def embed_text_for(title: str, heading_path: Sequence[str], text: str) -> str:
    """What embedders see for a chunk: its note title and heading path, then the text."""
    path = list(heading_path)
    if path and path[0] == title:  # a note's H1 usually is its title: say it once
        path = path[1:]
    context = " / ".join([title, *path]) if title or path else ""
    return f"{context}\n{text}" if context else text


def chunk_tokens(title: str, heading_path: Sequence[str], text: str) -> list[str]:
    """A chunk's full-text tokens: what the indexer writes to FTS5 (``upsert_note``'s
    ``fts_tokens``) and what every derived lexical index (the postings, Qdrant's sparse vectors)
    re-tokenises the stored chunk into, so they can never drift from FTS5."""
    return fts_tokens(embed_text_for(title, heading_path, text))


@runtime_checkable
class DocumentStore(Protocol):
    """Notes and chunks (the source of truth), their ACL, tags and metadata, runs and meta."""

    def get_meta(self, key: str, default: str | None = None) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def generation(self) -> int:
        """Advances on every write; caches of derived data key on it."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """Writes inside commit together, or not at all."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Reads inside see one state of the store, even while another process writes."""
        ...

    def note_states(self) -> dict[str, NoteState]: ...
    def note_states_of(self, paths: Sequence[str]) -> dict[str, NoteState]: ...
    def upsert_note(
        self, note: Note, chunks: Sequence[Chunk], fts_tokens: Sequence[Sequence[str]], chunker: str
    ) -> None: ...
    def delete_note(self, path: str) -> bool: ...
    def note_by_id(self, note_id: str) -> NoteRecord | None: ...
    def iter_notes(self) -> list[tuple[str, str, str]]: ...
    def list_notes(
        self,
        principals: Sequence[str],
        folder: str | None = None,
        tag: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[NoteSummary], int]: ...
    def note_files(
        self, principals: Sequence[str] | None, paths: Sequence[str] | None = None, limit: int = 0, offset: int = 0
    ) -> tuple[list[NoteFile], int]:
        """(indexed notes as files by path, how many match): those the principals may see (None:
        all), optionally only some paths; ``limit`` 0 means all."""
        ...

    def note_paths_under(self, folder: str) -> list[str]:
        """The indexed paths under a vault-relative folder, any depth."""
        ...

    def chunks_of_note(self, note_id: str) -> list[ChunkRow]: ...
    def chunks_by_ids(self, chunk_ids: Sequence[str]) -> list[ChunkRow]: ...
    def neighbours(self, chunk_id: str, radius: int) -> list[ChunkRow]: ...
    def visible_chunk_ids(self, visibility: Visibility) -> list[str]: ...
    def count_visible(self, visibility: Visibility) -> int:
        """How many chunks a visibility lets through."""
        ...

    def filter_visible(self, visibility: Visibility, chunk_ids: Sequence[str]) -> set[str]:
        """The chunk ids among ``chunk_ids`` that a visibility lets through."""
        ...

    def counts(self) -> Counts: ...
    # Runs: the ask pipeline's frame and trace, readable by their owner holding every principal
    # asked as. ``owner``: whose runs to read, None for every owner's (an admin's read).
    def save_run(self, run: RunRecord) -> None: ...
    def list_runs(
        self,
        principals: Sequence[str],
        limit: int = 20,
        offset: int = 0,
        kind: str | None = None,
        *,
        owner: str | None = LOCAL_OWNER,
    ) -> list[RunSummary]: ...
    def get_run(self, run_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER) -> RunRecord | None:
        """The run, or None when it does not exist, is another owner's or the principals may not read it."""
        ...

    # Conversations: ordered saved runs of one owner, readable by that owner when it may read every one.
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
        """Append a saved run as the next turn of a conversation (created by its first turn, owned
        by ``owner``); returns the turn's position (1, 2, ...). ``NotFound``, with nothing written,
        when the conversation is another owner's."""
        ...

    def get_conversation(
        self, conversation_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER
    ) -> ConversationRecord | None:
        """The conversation with its turns, or None when it does not exist, is another owner's or
        one of its runs is not readable by the principals (they all look the same)."""
        ...

    def list_conversations(
        self, principals: Sequence[str], limit: int = 20, offset: int = 0, *, owner: str | None = LOCAL_OWNER
    ) -> list[ConversationSummary]:
        """The conversations of ``owner`` the principals may read, the most recently continued first."""
        ...


@runtime_checkable
class LexicalIndex(Protocol):
    """BM25 over the visible chunks."""

    def bm25(self, match: str, visibility: Visibility, limit: int) -> list[tuple[str, float]]:
        """(chunk_id, score) best first, higher is better; ``match`` is an FTS query (text.fts_query).
        A score depends only on chunks ``visibility.principals`` may see (its statistics are theirs)."""
        ...

    def doc_freqs(self, terms: Sequence[str], visibility: Visibility) -> tuple[int, dict[str, int]]:
        """(visible chunks, how many of them hold each term): never counts a hidden chunk."""
        ...


@runtime_checkable
class VectorIndex(Protocol):
    """Vectors per embedding space, kept in step with the chunks' stamps."""

    def ensure_space(self, space: Space) -> None: ...
    def has_space(self, space: Space) -> bool: ...
    def spaces(self) -> list[SpaceInfo]: ...
    def upsert(self, space: Space, items: Sequence[VectorItem], cache: bool = True) -> int:
        """Store vectors (and, with ``cache``, remember them by embed hash); returns how many were
        written. An item whose chunk is gone or carries another stamp is refused, never stored."""
        ...

    def delete(self, space: Space, chunk_ids: Sequence[str]) -> None: ...
    def knn(self, space: Space, query: np.ndarray, visibility: Visibility, k: int) -> list[tuple[str, float]]:
        """(chunk_id, cosine similarity) best first, among visible chunks only (filtered before ranking)."""
        ...

    def pending(self, space: Space, limit: int | None = None, first: Sequence[str] = ()) -> list[PendingChunk]:
        """Chunks without a current vector: those of ``first`` (chunk ids: the ones a search just
        ranked), then the notes changed last first, each in reading order."""
        ...

    def count_pending(self, space: Space, visibility: Visibility | None = None) -> tuple[int, int]:
        """(chunks without a vector, all chunks), among visible chunks when a visibility is given."""
        ...

    def still_pending(self, space: Space, chunks: Sequence[PendingChunk]) -> list[PendingChunk]:
        """Those of ``chunks`` (as ``pending`` listed them) that still need embedding, in their order:
        the chunk exists with the same stamp and has no current vector in the space. A chunk deleted
        or rewritten since it was listed, or embedded meanwhile, is left out. A few lookups per
        call, whatever the size of the index: what an embedding job asks before each batch."""
        ...

    def fully_embedded(self, space: Space) -> bool: ...
    def without_vectors(self, space: Space, chunk_ids: Sequence[str]) -> set[str]:
        """Those of ``chunk_ids`` that have no vector in the space (an unknown id has none): a
        lookup of these ids only, whatever the size of the index. Says nothing about other chunks."""
        ...

    def vectors_for(self, space: Space, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]: ...
    def cached_vectors(self, space: Space, hashes: Iterable[str]) -> dict[str, np.ndarray]: ...
    def reconcile(self, space: Space) -> Reconciled:
        """Remove vectors whose chunk is gone or was rewritten since; report what is still pending."""
        ...


class Store(DocumentStore, Protocol):
    """A backend as the layers above see it: the documents, with their two indexes beside them."""

    lexical: LexicalIndex
    vectors: VectorIndex
