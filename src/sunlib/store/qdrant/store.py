"""``QdrantStore``: the SQLite DocumentStore composed with a Qdrant LexicalIndex and VectorIndex.

Notes, chunks, runs and meta stay in the SQLite file (the source of truth, as in the embedded
backend, FTS5 rows included: ``sunlib migrate --to sqlite`` then only copies vectors back);
BM25 and KNN run in Qdrant. Writes reach Qdrant after the SQLite transaction that made them
commits: ``upsert_note`` and ``delete_note`` queue their chunks and notes, and the outermost
``transaction()`` (or the call itself, outside one) sends them. A crash in between leaves
Qdrant behind the text, never ahead: such points carry an old stamp, are never returned
(``lexical.current_hits``), and ``reconcile`` (every ``sunlib index``, ``doctor --repair``)
brings both indexes back in step.

For read-only replicas (``replica.QdrantReplica``) it also publishes the note records and the
meta table (``published.py``) with the same rules: after the commit, the meta (and so the write
generation a replica sees) last, and reconciled with the rest.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from qdrant_client import models

from ...contracts import Chunk, Note
from ...errors import StoreBusy
from ..errors import at_boundary
from ..protocols import LexicalIndex, Reconciled, Space, VectorIndex
from ..sqlite import SqliteStore
from .client import Location, Shared, acquire, ensure_collection, release
from .lexical import QdrantLexical
from .published import delete_notes, ensure_published, notes_ledger, write_meta, write_notes
from .runs import ensure_runs
from .source import (
    SqliteView,
    cached_count,
    chunk_sources,
    chunk_stamps,
    meta_rows,
    note_chunk_ids,
    note_ids_at,
    note_sources,
    note_versions,
    token_totals,
)
from .vectors import QdrantVectors

log = logging.getLogger("sunlib.store")
AVGDL_META = "qdrant_avgdl"
DEFAULT_AVGDL = 256.0  # before any chunk is written (Qdrant's own BM25 default); replaced by the first batch's mean


@at_boundary
class QdrantStore(SqliteStore):
    """``QdrantStore(path, location, prefix)``: the SQLite file at ``path``, the collections
    ``<prefix>_chunks`` and ``<prefix>_<space>`` at ``location``. An empty prefix derives one from
    the index file's uuid, so two indexes on one server never share a collection."""

    def __init__(self, path: Path | str, location: Location, prefix: str = "") -> None:
        super().__init__(path, "sqlite-vec")
        try:
            self.shared: Shared = acquire(location)
        except BaseException:
            self.db.close()
            raise
        self.prefix = prefix or "sunlib_" + (self.get_meta("index_uuid", "") or "index").replace("-", "")[:12]
        self._stamp_cache: tuple[int, dict[str, int]] = (-1, {})
        self.qdrant_lexical = QdrantLexical(self.shared, f"{self.prefix}_chunks", self.current_stamps, self.generation)
        self.qdrant_vectors = QdrantVectors(
            self.shared, self.prefix, SqliteView(self.db, self.current_stamps, self.publish_meta)
        )
        self.lexical: LexicalIndex = self.qdrant_lexical
        self.vectors: VectorIndex = self.qdrant_vectors
        ensure_collection(
            self.shared,
            self.qdrant_lexical.collection,
            sparse=models.SparseVectorParams(modifier=models.Modifier.IDF),
            extra_keywords=["terms"],
        )
        ensure_published(self.shared, self.prefix)
        ensure_runs(self.shared, self.prefix)  # the replicas' runs: made here, so replicas do not race to make them
        self._depth = 0
        self._outbox: dict[str, Sequence[str] | None] = {}  # chunk id -> tokens (None: delete it)
        self._notes: set[str] = set()  # note ids written or deleted since the last flush
        self._meta_changed = False
        self._closed = False

    def current_stamps(self) -> dict[str, int]:
        """Every chunk's stamp, read once per write generation."""
        generation = self.generation()
        if self._stamp_cache[0] != generation:
            self._stamp_cache = (generation, chunk_stamps(self.db))
        return self._stamp_cache[1]

    # -- writes: SQLite first, then Qdrant --------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self._depth += 1
        try:
            with super().transaction():
                yield
        except BaseException:
            if self._depth == 1:
                self._outbox.clear()
                self._notes.clear()
            raise
        finally:
            self._depth -= 1
        if self._depth == 0:
            self.flush()

    def upsert_note(
        self, note: Note, chunks: Sequence[Chunk], fts_tokens: Sequence[Sequence[str]], chunker: str
    ) -> None:
        for old in note_chunk_ids(self.db, note.note_id, note.path):
            self._outbox[old] = None
        self._notes.update(note_ids_at(self.db, note.note_id, note.path))
        self._notes.add(note.note_id)
        super().upsert_note(note, chunks, fts_tokens, chunker)
        for chunk, tokens in zip(chunks, fts_tokens, strict=True):
            self._outbox[chunk.chunk_id] = tuple(tokens)
        if self._depth == 0:
            self.flush()

    def delete_note(self, path: str) -> bool:
        row = self.db.conn.execute("SELECT note_id FROM notes WHERE path = ?", (path,)).fetchone()
        old = note_chunk_ids(self.db, str(row[0]), path) if row else []
        deleted = super().delete_note(path)
        for chunk_id in old:
            self._outbox[chunk_id] = None
        if row:
            self._notes.add(str(row[0]))
        if self._depth == 0:
            self.flush()
        return deleted

    def flush(self) -> None:
        """Send the queued chunks to Qdrant: the written ones as they are now in SQLite, the
        replaced and deleted ones removed (with their vectors in every space: SQLite drops a
        rewritten note's vectors too, and they come back from the embedding cache)."""
        if not self._outbox and not self._notes and not self._meta_changed:
            return
        queued, self._outbox = self._outbox, {}
        notes, self._notes = self._notes, set()
        try:
            self._send(queued)
            self._publish_notes(sorted(notes))
            self.publish_meta()
        except StoreBusy as exc:  # the text is committed: the next reconcile sends it (sunlib index)
            log.warning("the Qdrant indexes lag the text until the next `sunlib index`: %s", exc)

    def set_meta(self, key: str, value: str) -> None:
        super().set_meta(key, value)
        self._meta_changed = True
        if self._depth == 0:
            self.flush()

    def publish_meta(self) -> None:
        """Publish the meta table (the write generation last of all, for replicas)."""
        self._meta_changed = False
        write_meta(self.shared, self.prefix, meta_rows(self.db), cached_count(self.db))

    def _publish_notes(self, note_ids: Sequence[str]) -> None:
        """Publish some notes as SQLite holds them now; those it no longer has are removed."""
        found = note_sources(self.db, note_ids)
        write_notes(self.shared, self.prefix, found)
        present = {n.note_id for n in found}
        delete_notes(self.shared, self.prefix, [n for n in note_ids if n not in present])

    def _send(self, queued: dict[str, Sequence[str] | None]) -> None:
        if not queued:
            return
        tokens = {c: t for c, t in queued.items() if t is not None}
        sources = chunk_sources(self.db, list(tokens), tokens=tokens)
        present = {s.chunk_id for s in sources}
        gone = [c for c in queued if c not in present]
        self.qdrant_lexical.delete(gone)
        self.qdrant_lexical.write(sources, self.avgdl())
        for space in self.qdrant_vectors.present():
            self.qdrant_vectors.drop(space, list(queued))
        with self.db.write():
            self.db.bump()

    def avgdl(self) -> float:
        """The collection's fixed mean chunk length (see lexical.py): set once, at the first write."""
        value = self.get_meta(AVGDL_META)
        if value is None:
            rows, tokens = token_totals(self.db)
            self.set_avgdl(tokens / rows if rows and tokens else DEFAULT_AVGDL)
            return self.avgdl()
        return float(value)

    def set_avgdl(self, value: float) -> None:
        with self.db.write():
            self.db.set_meta(AVGDL_META, repr(float(value)))

    # -- consistency ------------------------------------------------------------------------------

    def sync_lexical(self, rewrite: bool = False) -> tuple[int, int]:
        """Bring the chunks collection in step with SQLite: write the chunks it lacks or holds at
        another stamp (all of them with ``rewrite``), delete those SQLite no longer has; the
        published notes likewise, then the meta. Returns (chunks written, chunks deleted)."""
        written, deleted = self._sync_chunks(rewrite)
        self._sync_notes(rewrite)
        self.publish_meta()
        return written, deleted

    def _sync_notes(self, rewrite: bool) -> None:
        versions, held = note_versions(self.db), notes_ledger(self.shared, self.prefix)
        delete_notes(self.shared, self.prefix, [n for n in held if n not in versions])
        todo = list(versions) if rewrite else [n for n, v in versions.items() if held.get(n) != v]
        for start in range(0, len(todo), 2000):
            write_notes(self.shared, self.prefix, note_sources(self.db, todo[start : start + 2000]))

    def _sync_chunks(self, rewrite: bool) -> tuple[int, int]:
        stamps, held = self.current_stamps(), self.qdrant_lexical.ledger()
        gone = [c for c in held if c not in stamps]
        todo = list(stamps) if rewrite else [c for c, s in stamps.items() if held.get(c) != s]
        self.qdrant_lexical.delete(gone)
        avgdl = self.avgdl()
        for start in range(0, len(todo), 2000):
            self.qdrant_lexical.write(chunk_sources(self.db, todo[start : start + 2000]), avgdl)
        if gone or todo:
            with self.db.write():
                self.db.bump()
        return len(todo), len(gone)

    def reconcile(self) -> list[Reconciled]:
        """Reconcile the chunks collection and every space's vectors with the SQLite chunks."""
        self.sync_lexical()
        spaces = [Space(s.provider, s.model, s.dim, s.chunker) for s in self.vectors.spaces()]
        return [self.vectors.reconcile(space) for space in spaces]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            release(self.shared)
        super().close()

    def __enter__(self) -> QdrantStore:
        return self
