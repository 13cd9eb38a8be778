"""Incremental indexing: vault -> notes/chunks/FTS (phase 1), then vectors (phase 2).

Phase 1 makes BM25 search usable as soon as the text is stored. Only added or
changed notes (by hash of the file and its sidecar, or a different chunker) are
re-chunked; a note whose content reappears under a new path keeps its note_id
(a move); notes gone from the vault disappear from every table. Work is
committed in small batches, so an interrupted run leaves a consistent index and
the next run picks up what is left.

Phase 2 embeds chunks that have no vector in the active space. Vectors are
looked up in the embedding cache by (text hash, model) first, so unchanged text
is never embedded twice, even when its note changed around it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..config import IndexSettings, Settings
from ..ingest import NoteError, VaultFile, file_hash, load_note, make_chunker, note_id_for, walk_vault
from ..ingest.chunkers import Chunker
from ..ingest.vault import SKIP_DIRS, sidecar_of
from ..providers import Embedder, create_embedder
from ..store import DerivedVectors, DocumentStore, NoteState, PendingChunk, Space, Store, VectorItem, chunk_tokens

Progress = Callable[[str, int, int], None]
NOTE_BATCH = 50
T = TypeVar("T")
PENDING_PAGE = 2048  # at most this many pending chunks are listed at once
PAGE_BATCHES = 16  # ... and at most this many batches: the list is read again that often, so a note
# saved or a chunk searched for during a long backfill is embedded within minutes, not at the end
WANTED_MAX = 1024


class Wanted:
    """The chunks searches showed while the fast tier was in use (``Library.search``): the backfill
    embeds those still waiting next (``embed_pending(first=...)``). Kept per index in the process
    that searches; a bounded set, the latest search first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, None] = {}

    def add(self, chunk_ids: Iterable[str]) -> None:
        """Add one search's chunks, best first: they go before those of earlier searches."""
        with self._lock:
            for chunk_id in reversed(list(chunk_ids)):
                self._ids.pop(chunk_id, None)
                self._ids[chunk_id] = None
            while len(self._ids) > WANTED_MAX:
                del self._ids[next(iter(self._ids))]

    def drain(self) -> list[str]:
        """Every chunk added since the last drain: the latest search's best first."""
        with self._lock:
            found, self._ids = list(self._ids)[::-1], {}
        return found


@dataclass
class IndexReport:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)  # failed notes whose earlier indexed version was removed
    unchanged: int = 0
    chunks_written: int = 0
    vectors_embedded: int = 0
    vectors_from_cache: int = 0
    vectors_skipped: int = 0  # listed as pending, then deleted, rewritten or embedded elsewhere before their batch
    vectors_pending: int = 0
    fast_vectors: int = 0  # fast-tier vectors written (embedded or from the cache), before the others
    text_seconds: float = 0.0
    fast_seconds: float = 0.0
    embed_seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _noop(phase: str, done: int, total: int) -> None:
    pass


def sync_text(store: DocumentStore, vault: Path, settings: IndexSettings, progress: Progress = _noop) -> IndexReport:
    t0 = time.perf_counter()
    report = IndexReport()
    chunker = make_chunker(settings)
    files, problems = walk_vault(vault)
    report.failed.extend((p.rel_path, p.reason) for p in problems)
    states = store.note_states()
    present = {vf.rel_path for vf in files}
    gone = {path: st for path, st in states.items() if path not in present}
    gone_by_hash = {st.content_hash: st for st in gone.values()}
    taken_ids = {st.note_id for st in states.values()}

    todo: list[tuple[VaultFile, str]] = []
    for vf in files:
        digest = _changed_digest(vf, states.get(vf.rel_path), chunker.fingerprint, settings.max_note_bytes, report)
        if digest is not None:
            todo.append((vf, digest))

    progress("text", 0, len(todo))
    for start in range(0, len(todo), NOTE_BATCH):
        with store.transaction():
            for vf, digest in todo[start : start + NOTE_BATCH]:
                _write_note(
                    store,
                    chunker,
                    settings,
                    vf,
                    digest,
                    states.get(vf.rel_path),
                    gone,
                    gone_by_hash,
                    taken_ids.__contains__,
                    report,
                )
        progress("text", min(start + NOTE_BATCH, len(todo)), len(todo))

    for path in sorted(gone):
        if store.delete_note(path):
            report.deleted.append(path)
    # Fail closed: a note that no longer parses (an unclosed frontmatter, a second acl:), grew past
    # the size limit or cannot be read is not served from its earlier version either, whose ACL
    # and text may be what the edit meant to change.
    failed = sorted({path for path, _ in report.failed if path in states})
    with store.transaction():
        report.withdrawn = [path for path in failed if store.delete_note(path)]
    store.set_meta("vault", str(vault.resolve()))
    store.set_meta("chunker", chunker.fingerprint)
    store.set_meta("text_indexed_at", str(time.time()))
    report.text_seconds = time.perf_counter() - t0
    return report


def _changed_digest(
    vf: VaultFile, previous: NoteState | None, chunker: str, max_bytes: int, report: IndexReport
) -> str | None:
    """The file's hash when it needs (re)indexing; None when it is unchanged, too large or unreadable
    (the last two reported; ``sync_text`` withdraws an older indexed version)."""
    if vf.size > max_bytes:
        report.failed.append(
            (vf.rel_path, f"note is {vf.size:,} bytes; the limit is {max_bytes:,} ([index] max_note_bytes)")
        )
        return None
    try:
        digest = file_hash(vf)
    except NoteError as exc:
        report.failed.append((vf.rel_path, str(exc)))
        return None
    if previous is not None and previous.content_hash == digest and previous.chunker == chunker:
        report.unchanged += 1
        return None
    return digest


def _write_note(
    store: DocumentStore,
    chunker: Chunker,
    settings: IndexSettings,
    vf: VaultFile,
    digest: str,
    previous: NoteState | None,
    gone: dict[str, NoteState],
    gone_by_hash: dict[str, NoteState],
    id_taken: Callable[[str], bool],
    report: IndexReport,
) -> None:
    """Parse, chunk and store one new or changed file, deciding its id: a file whose content
    matches a note gone from another path is that note moved (its id is kept); a changed note
    keeps the id it is indexed under; a new note whose path id is taken gets a fallback id."""
    try:
        note, parsed = load_note(vf, settings.default_acl)
    except NoteError as exc:
        report.failed.append((vf.rel_path, str(exc)))  # sync_text withdraws an older indexed version
        return
    except Exception as exc:  # a bug in loading one note costs that note only, reported
        report.failed.append((vf.rel_path, f"cannot load the note ({type(exc).__name__}: {exc})"))
        return
    moved_from = gone_by_hash.get(digest) if previous is None else None
    if moved_from is not None:
        note = dataclasses.replace(note, note_id=moved_from.note_id)
    elif previous is None:
        if id_taken(note.note_id):  # a note moved away from this path kept the path's id
            note = dataclasses.replace(note, note_id=note_id_for(f"{vf.rel_path}\x1f{digest}"))
    else:
        note = dataclasses.replace(note, note_id=previous.note_id)  # a moved, then edited, note keeps its id
    try:
        chunks = chunker.chunk(note, parsed)
    except Exception as exc:  # a chunker bug costs this note only (reported), never the run
        report.failed.append((vf.rel_path, f"cannot chunk the note ({type(exc).__name__}: {exc})"))
        return
    if moved_from is not None:
        gone_by_hash.pop(digest, None)
        gone.pop(moved_from.path, None)
        report.moved.append((moved_from.path, vf.rel_path))
    elif previous is None:
        report.added.append(vf.rel_path)
    else:
        report.changed.append(vf.rel_path)
    tokens = [chunk_tokens(note.title, c.heading_path, c.text) for c in chunks]
    store.upsert_note(note, chunks, tokens, chunker.fingerprint)
    report.chunks_written += len(chunks)


def space_for(embedder: Embedder, settings: IndexSettings) -> Space:
    return Space(embedder.provider, embedder.model, embedder.dim, make_chunker(settings).fingerprint)


def rescore_space(settings: Settings) -> tuple[Embedder, Space] | None:
    """The second embedder (and its space) of the fusion reranker, when one is configured."""
    provider = settings.answer.rescore_provider
    if not provider:
        return None
    embedding = settings.embedding.model_copy(update={"provider": provider, "model": None, "dimensions": None})
    embedder = create_embedder(embedding)
    return embedder, space_for(embedder, settings.index)


FAST_TIERS = {"e5": "e5-fast"}  # provider -> the fast tier distilled from it


def fast_space(settings: Settings, embedder: Embedder) -> tuple[Embedder, Space] | None:
    """The fast tier's embedder and space (``[embedding] fast_tier``); None when there is none (or
    it would be the provider itself)."""
    name = settings.embedding.fast_tier.strip().lower()
    if name == "auto":
        name = FAST_TIERS.get(embedder.provider, "none")
    if name in ("", "none", "off") or name == embedder.provider:
        return None
    embedding = settings.embedding.model_copy(update={"provider": name, "model": None, "dimensions": None})
    fast = create_embedder(embedding)
    return fast, space_for(fast, settings.index)


def crosslang_provider(settings: Settings, embedder: Embedder) -> str | None:
    """The provider whose space the cross-language route searches; None when the route is off."""
    search = settings.search
    if not search.crosslang:
        return None
    name = search.crosslang_provider.strip().lower()
    if name in ("", "none", "off"):
        return None
    if name == "auto":
        return embedder.crosslang_partner or embedder.provider
    return name


def crosslang_space(settings: Settings, embedder: Embedder, space: Space) -> tuple[Embedder, Space] | None:
    """The embedder and space of the cross-language route: the active ones when its provider is the
    active provider, else a second space that ``sunlib index`` fills beside the first."""
    provider = crosslang_provider(settings, embedder)
    if provider is None:
        return None
    if provider == embedder.provider:
        return embedder, space
    embedding = settings.embedding.model_copy(update={"provider": provider, "model": None, "dimensions": None})
    second = create_embedder(embedding)
    return second, space_for(second, settings.index)


class _Inline(Executor):
    """Runs each task as it is submitted, on the calling thread: one worker, no thread."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as exc:
            done.set_exception(exc)
        return done


def bulk_workers(setting: int | str) -> int:
    """How many batches a bulk embedding run embeds at once: ``setting``, or for "auto" the cores
    that are idle now (those this process may use, less the 1-minute load average), at least 1."""
    if setting != "auto":
        return int(setting)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average here (Windows): one worker, as before
        return 1
    return max(1, min(cores, round(cores - busy)))


def _lower_priority(nice: int) -> Callable[[], None]:
    def start() -> None:
        with contextlib.suppress(AttributeError, OSError):  # Linux: a thread has its own priority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)

    return start


def embed_pending(
    store: Store,
    embedder: Embedder,
    space: Space,
    batch_size: int,
    report: IndexReport,
    progress: Progress = _noop,
    active: bool = True,
    phase: str = "vectors",
    first: Callable[[], Sequence[str]] | None = None,
    workers: int = 1,
    nice: int = 0,
) -> IndexReport:
    """Reconcile the space's vectors with the text, then embed every chunk without a vector
    (cache first), committing per batch. Each vector is written with the stamp of the chunk it
    was computed from, so a chunk another process rewrote meanwhile keeps no stale vector.
    Before each batch goes to the embedder its chunks are looked up again (``still_pending``,
    one lookup per batch): those deleted or rewritten since the pending list was read (a note
    deleted or replaced while its vectors waited) are skipped, never embedded
    (``vectors_skipped``); a rewritten chunk's new version is listed and embedded in its turn.

    ``active=False`` for a second space (the fast tier, vectors for rescoring): it does not become
    the index's space. ``phase``: the name progress reports under. The order is that of
    ``pending``: the notes changed last first; ``first`` (``Wanted.drain``) names chunks to embed
    before those, asked for again at every page. ``workers`` > 1: that many batches are embedded
    at once, on threads at priority ``nice`` (the writes stay on the calling thread, in order)."""
    t0 = time.perf_counter()
    vectors = store.vectors
    vectors.ensure_space(space)
    vectors.reconcile(space)
    total, _ = vectors.count_pending(space)
    done = 0
    progress(phase, 0, total)
    # A vector is refused when another writer rewrote its chunk meanwhile: the new version is
    # pending (with a new stamp) and embedded here too; each version is tried at most once.
    tried: set[tuple[str, int]] = set()
    refused = 0
    pace = Pace(store, space)
    page_size = min(PENDING_PAGE, PAGE_BATCHES * batch_size)
    pool: Executor = _Inline() if workers <= 1 else ThreadPoolExecutor(workers, "sunlib-embed", _lower_priority(nice))
    running: deque[tuple[list[PendingChunk], Future[np.ndarray]]] = deque()  # in the order they were read

    def write_oldest() -> None:
        nonlocal refused, done
        batch, embedding = running.popleft()
        vecs = embedding.result()  # the worker's error, if any, is raised here
        items = [VectorItem(p.chunk_id, p.stamp, p.embed_hash, v) for p, v in zip(batch, vecs, strict=True)]
        refused += len(items) - vectors.upsert(space, items)
        report.vectors_embedded += len(batch)
        done += len(batch)
        pace.tick(len(batch))
        progress(phase, done, total)

    try:
        while True:
            listed = vectors.pending(space, limit=page_size + refused, first=first() if first else ())
            page = [p for p in listed if (p.chunk_id, p.stamp) not in tried]
            if not page:
                break
            page = page[:page_size]
            # chunks written meanwhile (a note saved during a rebuild) raise the total: done <= total
            total = max(total, done + max(len(page), vectors.count_pending(space)[0]))
            tried.update((p.chunk_id, p.stamp) for p in page)
            cached = vectors.cached_vectors(space, [p.embed_hash for p in page])
            hits = [
                VectorItem(p.chunk_id, p.stamp, p.embed_hash, cached[p.embed_hash])
                for p in page
                if p.embed_hash in cached
            ]
            if hits:
                refused += len(hits) - vectors.upsert(space, hits, cache=False)
                report.vectors_from_cache += len(hits)
                done += len(hits)
                progress(phase, done, total)
            misses = [p for p in page if p.embed_hash not in cached]
            for i in range(0, len(misses), batch_size):
                listed_batch = misses[i : i + batch_size]
                # Read again just before the work: a chunk deleted or rewritten since the page was read
                # (its note deleted or replaced meanwhile), or embedded by another process, costs nothing.
                batch = vectors.still_pending(space, listed_batch)
                skipped = len(listed_batch) - len(batch)
                report.vectors_skipped += skipped
                refused += skipped  # in ``tried``: should one still be listed, the page makes room for it
                done += skipped
                if batch:
                    running.append((batch, pool.submit(embedder.embed, [p.embed_text for p in batch])))
                    while len(running) >= workers:
                        write_oldest()
                else:
                    progress(phase, done, total)
            while running:
                write_oldest()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if isinstance(vectors, DerivedVectors):  # an engine with derived data (an HNSW graph) saves it now
        vectors.refresh(space)
    pace.finish()
    report.vectors_pending = vectors.count_pending(space)[0]
    report.embed_seconds = time.perf_counter() - t0
    if active:
        store.set_meta("space", space.name)
    return report


PACE_KEY = "embedding:"  # + space name: the pace of the run embedding that space (``Pace``)
PACE_EVERY = 2.0  # seconds between two writes of it


class Pace:
    """The embedding rate of one run in one space, kept in the index's meta (``embedding:<space>``)
    so that ``sunlib status`` in another process can give the ETA of a backfill."""

    def __init__(self, store: DocumentStore, space: Space) -> None:
        self.store, self.key = store, PACE_KEY + space.name
        self.t0 = self.written = time.time()
        self.embedded = 0

    def tick(self, n: int) -> None:
        self.embedded += n
        now = time.time()
        if now - self.written >= PACE_EVERY:
            self._write(now, running=True)

    def finish(self) -> None:
        if self.embedded:
            self._write(time.time(), running=False)

    def _write(self, now: float, running: bool) -> None:
        self.written = now
        rate = self.embedded / max(now - self.t0, 1e-6)
        value = {"rate": round(rate, 3), "updated": now, "running": running, "pid": os.getpid()}
        self.store.set_meta(self.key, json.dumps(value))


def pace_of(store: DocumentStore, space: Space) -> dict[str, object] | None:
    """What ``Pace`` last wrote for the space, or None."""
    raw = store.get_meta(PACE_KEY + space.name)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def sync_paths(store: DocumentStore, vault: Path, settings: IndexSettings, paths: Iterable[str]) -> IndexReport:
    """Phase 1 for some vault-relative paths only (the notes API's writes): no walk of the vault.

    sync_text's rules, applied to the listed paths: a path whose file is gone (or is not a
    note by walk_vault's rules) leaves the index; a new file whose content hash equals that of
    a listed path that is gone keeps that note's id (a move: list both paths); a new note whose
    path id is taken gets the fallback id. One difference: a changed note keeps the note_id it
    is indexed under, so a note that was moved and then edited stays the same note. Everything
    is one write transaction (the write lock taken as it begins), so other connections see the
    whole update or none of it, and a busy index fails it before anything is written.
    ``text_indexed_at`` is left alone: it dates the last full sync.
    """
    t0 = time.perf_counter()
    report = IndexReport()
    chunker = make_chunker(settings)
    wanted = list(dict.fromkeys(paths))
    found = [vf for vf in (_vault_file(vault, rel) for rel in wanted) if vf is not None]
    present = {vf.rel_path for vf in found}
    with store.transaction():  # BEGIN IMMEDIATE: what is read here is what is written over
        states = store.note_states_of(wanted)
        gone = {path: st for path, st in states.items() if path not in present}
        gone_by_hash = {st.content_hash: st for st in gone.values()}
        for vf in found:
            previous = states.get(vf.rel_path)
            digest = _changed_digest(vf, previous, chunker.fingerprint, settings.max_note_bytes, report)
            if digest is None:
                continue
            _write_note(
                store,
                chunker,
                settings,
                vf,
                digest,
                previous,
                gone,
                gone_by_hash,
                lambda note_id: store.note_by_id(note_id) is not None,
                report,
            )
        for path in sorted(gone):
            if store.delete_note(path):
                report.deleted.append(path)
    report.text_seconds = time.perf_counter() - t0
    return report


def _vault_file(vault: Path, rel: str) -> VaultFile | None:
    """The VaultFile walk_vault would list for ``rel``, or None when it would list none (a
    symbolic link anywhere on the way included: the walk never follows one)."""
    parts = rel.split("/")
    if any(p.startswith(".") or p in SKIP_DIRS for p in parts) or not parts[-1].lower().endswith(".md"):
        return None
    path = vault / rel
    if os.path.realpath(path) != os.path.join(os.path.realpath(vault), *parts):
        return None
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return VaultFile(rel, path, sidecar_of(path), st.st_mtime, st.st_size)
