"""The postings LexicalIndex: BM25 from an inverted index of sunlib's own tokens held in numpy arrays.

FTS5's any-term ``MATCH ... ORDER BY rank`` scores every row holding any query word one at a
time and sorts them (34 / 150 ms p50 / p95 at 1M chunks). This engine keeps the same tokens as
an inverted index by term (CSR: a sorted vocabulary, ``offsets``, ``docs`` row positions and
``tfs``) plus, per row, its chunk rowid, its length in tokens and its chunk ``stamp``, and
scores a query with vectorised gathers: per phrase, the rows holding it get
``idf * tf * (k1 + 1) / (tf + norm[row])`` added to a score array, and the top k are taken by
``argpartition``. The formula and the order of its float operations are store/bm25.py's, so
the scores are ``SqliteLexical``'s (FTS5's ``bm25()`` when the caller sees every chunk) to
float precision, in the same order (ties by rowid, as ``ORDER BY score DESC, rowid``).

Scores depend only on chunks the caller may see (docs/security.md): the statistics (rows, mean
length, each phrase's document frequency) are those of the chunks ``Visibility.of(principals)``
lets through, and the ranking is over the chunks the whole visibility (ACL, filters, script)
lets through; both are boolean masks over row positions built from ``Db.visible_table`` and
cached per write generation. A query other than quoted single tokens (``text.fts_query``'s
form) is passed to ``SqliteLexical``.

The tokens are ``protocols.chunk_tokens`` of the stored chunk, the function the indexer
writes FTS5's rows with (FTS5 is contentless: its tokens cannot be read back), so the two
indexes hold the same tokens; ``verify`` checks every row's length against FTS5's own count.

Kept in the index folder (``sunlib.postings/`` beside ``sunlib.db``, store/derived.py: atomic
saves, CRC-32 checked on load, arrays mapped read-only so a one-shot command opens them without
reading them into memory). When the store's write generation moves, the postings are caught up
by difference in one read transaction: rows whose (rowid, stamp) pair they lack are tokenised
into an in-memory delta (SQLite may reuse a rowid after a delete: the stamp tells them apart),
rows gone are masked out. Base and delta are merged and saved when the unsaved share passes
``SAVE_SHARE`` or on ``refresh()`` (the indexer calls it after the text phase). A missing,
foreign (another ``index_uuid``) or damaged save is rebuilt from SQLite. One copy per index file
is shared by every connection of the process (``POSTINGS``).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .bm25 import K1, B, idf, varint
from .db import Db, batches, chunk_ids_of
from .derived import DerivedFiles, Registry, array_writer, derived_folder, open_array
from .fts5 import SqliteLexical, phrases_of
from .postings_segment import EMPTY, Segment, Term, Tokenised, build, top_k
from .protocols import DocumentStore, Visibility, chunk_tokens

FORMAT = 1  # the files below; a save of another format is rebuilt
SAVE_SHARE = 0.05  # a query merges and saves when this share of the rows changed since the save
MASKS_KEPT = 32  # visibility masks kept per index (one per principal set and filters)
NORMS_KEPT = 8  # length normalisations kept per index (one per mean length: per principal set)
TOKENISE_BATCH = 5_000  # chunks read and tokenised at a time
ARRAYS = ("terms", "term_offsets", "offsets", "docs", "tfs", "rowids", "lengths", "stamps")
_TOKEN = re.compile(r"[^\W_]+")  # what ``text.fts_tokens`` makes: letters and digits, one FTS5 token
_ROWS_SQL = "SELECT c.id, c.stamp, c.heading_path, c.text, n.title FROM chunks c JOIN notes n ON n.id = c.note_rowid"


@dataclass(frozen=True)
class PostingsState:
    """What ``sunlib doctor`` says about the saved postings."""

    state: str  # "fresh", "behind", "missing", "damaged" or "foreign"
    detail: str
    rows: int  # in the save (0 when there is none)
    generation: int  # the write generation the save was caught up to (its chunks may be current still)


@runtime_checkable
class DerivedLexical(Protocol):
    """A lexical engine holding derived data that the indexer brings up to date after writing."""

    def refresh(self) -> None: ...


# -- what queries read ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Mask:
    rows: np.ndarray  # bool over row positions: visible and live
    count: int
    tokens: int  # the visible rows' tokens (the BM25 mean length's numerator)


@dataclass(frozen=True, eq=False)
class _View:
    """One state of the postings (replaced whole by a catch-up, never changed): the merged base,
    the delta of rows tokenised since, and every row position's rowid, length, stamp and liveness."""

    base: Segment
    delta: Segment
    rowids: np.ndarray  # int64 per position
    lengths: np.ndarray  # int32 per position: tokens, as FTS5 counts them
    stamps: np.ndarray  # int64 per position: the chunk's stamp when it was tokenised
    alive: np.ndarray  # bool per position: the chunk still holds this (rowid, stamp)
    by_rowid: np.ndarray = field(init=False)  # live rowids, sorted
    at_rowid: np.ndarray = field(init=False)  # ... and their positions
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)
    masks: OrderedDict[tuple[object, ...], _Mask] = field(default_factory=OrderedDict, compare=False)
    norms: OrderedDict[float, np.ndarray] = field(default_factory=OrderedDict, compare=False)

    def __post_init__(self) -> None:
        live = np.flatnonzero(self.alive)
        at = live[np.argsort(self.rowids[live], kind="stable")]
        object.__setattr__(self, "at_rowid", at)
        object.__setattr__(self, "by_rowid", self.rowids[at])

    @property
    def live(self) -> int:
        return len(self.at_rowid)

    @property
    def dead(self) -> int:
        return len(self.rowids) - self.live

    def positions(self, rowids: np.ndarray) -> np.ndarray:
        """The positions of those rowids this view holds live."""
        i = np.searchsorted(self.by_rowid, rowids)
        inside = i < len(self.by_rowid)
        found = inside.copy()
        found[inside] = self.by_rowid[i[inside]] == rowids[inside]
        return np.asarray(self.at_rowid[i[found]])

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """(row positions, frequencies) of a term, base then delta (dead rows included)."""
        word = term.encode()
        docs, tfs = self.base.postings(word)
        more, more_tfs = self.delta.postings(word)
        if len(more):
            return np.concatenate([docs, more]), np.concatenate([tfs.astype(np.int32), more_tfs.astype(np.int32)])
        return docs, tfs

    def mask(self, db: Db, visibility: Visibility) -> _Mask:
        """The rows a visibility lets through, cached with this view: a write that changes who may
        see a chunk (its note's ACL, tags, metadata or mtime) rewrites the chunk with a new stamp,
        so it makes a new view."""
        key = visibility.key
        with self.lock:
            found = self.masks.get(key)
            if found is not None:
                self.masks.move_to_end(key)
                return found
        table = db.visible_table(visibility)
        visible = np.fromiter((r[0] for r in db.conn.execute(f"SELECT id FROM temp.{table}")), dtype=np.int64)
        rows = np.zeros(len(self.rowids), dtype=bool)
        rows[self.positions(visible)] = True
        found = _Mask(rows, int(rows.sum()), int(self.lengths[rows].sum(dtype=np.int64)))
        with self.lock:
            self.masks[key] = found
            while len(self.masks) > MASKS_KEPT:
                self.masks.popitem(last=False)
        return found

    def norm(self, avgdl: float) -> np.ndarray:
        """Each row's ``k1 * (1 - b + b * |D| / avgdl)``, as bm25.score computes it."""
        with self.lock:
            found = self.norms.get(avgdl)
            if found is None:
                found = K1 * (1 - B + B * self.lengths.astype(np.float64) / avgdl)
                self.norms[avgdl] = found
                while len(self.norms) > NORMS_KEPT:
                    self.norms.popitem(last=False)
            return found


def _view(base: Segment, rowids: np.ndarray, lengths: np.ndarray, stamps: np.ndarray) -> _View:
    return _View(base, EMPTY, rowids, lengths, stamps, np.ones(len(rowids), dtype=bool))


class _Postings:
    """The postings of one index file in memory (shared by the process's connections to it)."""

    def __init__(self, view: _View, generation: int, saved: bool) -> None:
        self.view = view
        self.generation = generation
        self.chunks: list[int] | None = None  # the chunks' fingerprint at ``generation`` (``_fingerprint``)
        self.saved = saved  # the files hold this base (caught up since by the delta)
        self.unsaved = 0  # rows added or masked out since the save
        self.tokenised = 0  # rows tokenised by this process (a rebuild tokenises every row)
        self.pending = Tokenised()  # the delta's triples
        self.token: str | None = None  # the save the files held when this base was loaded or saved
        self.lock = threading.RLock()


POSTINGS: Registry[_Postings] = Registry()  # by index file identity


# -- the engine ----------------------------------------------------------------------------------


class PostingsLexical:
    """A LexicalIndex answering BM25 from the postings; anything else goes to FTS5 (``SqliteLexical``)."""

    def __init__(self, db: Db, documents: DocumentStore) -> None:
        self.db = db
        self.documents = documents
        self.fts5 = SqliteLexical(db)
        folder = derived_folder(db.path, "postings")
        self.files = DerivedFiles(folder, "postings", checksums=True) if folder is not None else None

    # -- reads ---------------------------------------------------------------------------------

    def bm25(self, match: str, visibility: Visibility, limit: int) -> list[tuple[str, float]]:
        """(chunk_id, score) best first: SqliteLexical.bm25's answer (see the module docstring)."""
        phrases = phrases_of(match)
        if phrases is None or not all(_single_token(p) for p in phrases):
            return self.fts5.bm25(match, visibility, limit)
        if limit <= 0 or not visibility.principals:
            return []
        view = self.postings().view
        acl = view.mask(self.db, Visibility.of(visibility.principals))
        shown = view.mask(self.db, visibility) if visibility.key != Visibility.of(visibility.principals).key else acl
        if acl.count == 0 or shown.count == 0:
            return []
        top, scores = _ranked(view, phrases, acl, shown, limit)
        ids = chunk_ids_of(self.db, view.rowids[top].tolist())
        return [(ids[row], score) for row, score in zip(view.rowids[top].tolist(), scores, strict=True) if row in ids]

    def doc_freqs(self, terms: Sequence[str], visibility: Visibility) -> tuple[int, dict[str, int]]:
        """(chunks the visibility lets through, how many of them contain each term): visible chunks only."""
        if not all(_single_token(t) for t in terms):
            return self.fts5.doc_freqs(terms, visibility)
        if not visibility.principals:
            return 0, {}
        view = self.postings().view
        shown = view.mask(self.db, visibility)
        found: dict[str, int] = {}
        for term in dict.fromkeys(terms):
            count = int(np.count_nonzero(shown.rows[view.postings(term)[0]]))
            if count:
                found[term] = count
        return shown.count, found

    # -- the postings --------------------------------------------------------------------------

    def postings(self, save: bool = False) -> _Postings:
        """The postings caught up to the store's write generation (opened, or rebuilt, once per
        process); ``save`` merges and writes them when the files are not current."""

        def bring_up(held: _Postings) -> None:
            changed = self._catch_up(held)
            replaced = save and self._saved_token() != held.token  # the files are gone or another save's
            if not held.saved or replaced or held.unsaved > (0 if save else SAVE_SHARE * max(held.view.live, 1)):
                self._merge(held)
                self._save(held)
            elif changed:
                held.view = _delta(held.view, held.pending)

        return POSTINGS.current((self.db.identity(),), self.documents.generation(), self._open, bring_up, save)

    def refresh(self) -> None:
        """Catch the postings up with the chunks and save them unless the files hold them already
        (after the indexer's text phase)."""
        self.postings(save=True)

    def repair(self) -> None:
        """``refresh``, then write the postings again unless the files read back whole and current
        (``sunlib doctor --repair``: a damaged file under an intact stamp is rewritten too)."""
        held = self.postings(save=True)
        if self.state().state != "fresh":
            with held.lock:
                self._merge(held)
                self._save(held)

    def _saved_token(self) -> str | None:
        saved = self.files.read() if self.files is not None else None
        return saved.token if saved is not None else None

    def _open(self) -> _Postings:
        """The saved postings when they belong to this index, else empty ones (rebuilt next)."""
        found = self._load()
        if found is None:
            empty = np.zeros(0, dtype=np.int64)
            return _Postings(_view(EMPTY, empty, empty.astype(np.int32), empty), -1, saved=False)
        view, fields, token = found
        held = _Postings(view, int(fields["generation"]), saved=True)
        held.token, held.chunks = token, list(fields["chunks"])
        return held

    def _load(self) -> tuple[_View, dict[str, Any], str] | None:
        saved = self.files.load() if self.files is not None else None
        if saved is None or not self._belongs(saved.fields) or set(saved.paths) != {f"{n}.npy" for n in ARRAYS}:
            return None
        arrays = {name: open_array(saved.paths[f"{name}.npy"]) for name in ARRAYS}
        if any(a is None for a in arrays.values()) or not _consistent(arrays, saved.fields):  # type: ignore[arg-type]
            return None
        a: dict[str, np.ndarray] = arrays  # type: ignore[assignment]
        base = Segment(a["terms"], a["term_offsets"], a["offsets"], a["docs"], a["tfs"])
        return _view(base, a["rowids"], a["lengths"], a["stamps"]), dict(saved.fields), saved.token

    def _belongs(self, fields: dict[str, Any] | Any) -> bool:
        """Whether a stamp is of this format and index (its fields the ones ``_save`` writes)."""
        chunks, generation = fields.get("chunks"), fields.get("generation")
        well_formed = isinstance(generation, int) and isinstance(chunks, list) and len(chunks) == 2
        return bool(well_formed and fields.get("format") == FORMAT and fields.get("index_uuid") == self._uuid())

    def _uuid(self) -> str:
        return self.db.get_meta("index_uuid") or ""

    def _catch_up(self, held: _Postings) -> bool:
        """Apply what the chunks changed since the postings were caught up, in one read transaction
        (so the generation they record is the one their rows are from); False when nothing had.
        The new rows wait in ``held.pending`` (for a merge, or the next delta segment)."""
        with self.db.snapshot():
            generation = self.documents.generation()
            if generation == held.generation:
                return False
            chunks = self._fingerprint()
            if chunks == held.chunks:  # another write (vectors, runs): the same chunks
                held.generation = generation
                return False
            pairs = np.array(self.db.conn.execute("SELECT id, stamp FROM chunks ORDER BY id").fetchall(), np.int64)
            rowids, stamps = pairs.reshape(-1, 2).T
            view = held.view
            common, ia, ib = np.intersect1d(view.by_rowid, rowids, assume_unique=True, return_indices=True)
            same = view.stamps[view.at_rowid[ia]] == stamps[ib]
            alive = np.zeros(len(view.rowids), dtype=bool)
            alive[view.at_rowid[ia[same]]] = True
            new = np.setdiff1d(rowids, common[same], assume_unique=True)
            added = self._tokenise(held, len(view.rowids), new)
        held.view = _View(
            view.base,
            view.delta,
            np.concatenate([view.rowids, added[0]]),
            np.concatenate([view.lengths, added[1]]),
            np.concatenate([view.stamps, added[2]]),
            np.concatenate([alive, np.ones(len(added[0]), dtype=bool)]),
        )
        held.generation, held.chunks = generation, chunks
        held.unsaved += len(new) + view.live - int(same.sum())
        return True

    def _tokenise(self, held: _Postings, first: int, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tokenise the chunks of some rowids (all of them for a rebuild: one scan) into the pending
        delta, as row positions ``first``, ``first + 1``, ...; returns their (rowids, lengths, stamps)."""
        found: list[tuple[int, int, int]] = []
        for rows in self._rows(rowids, everything=first == 0 and held.view.live == 0):
            tokens = [chunk_tokens(r[4], _heading(r[2]), r[3]) for r in rows]
            held.pending.add(first + len(found), tokens)
            found.extend((int(r[0]), len(t), int(r[1])) for r, t in zip(rows, tokens, strict=True))
        held.tokenised += len(found)
        out = np.array(found, dtype=np.int64).reshape(-1, 3).T
        return out[0].copy(), out[1].astype(np.int32), out[2].copy()

    def _rows(self, rowids: np.ndarray, everything: bool) -> Iterable[list[Any]]:
        """(rowid, stamp, heading_path, text, title) of chunks by rowid, in batches."""
        if everything:
            rows: list[Any] = []
            for row in self.db.conn.execute(_ROWS_SQL + " ORDER BY c.id"):
                rows.append(row)
                if len(rows) == TOKENISE_BATCH:
                    yield rows
                    rows = []
            yield rows
            return
        for batch in batches(rowids.tolist(), TOKENISE_BATCH // 10):
            marks = ",".join("?" * len(batch))
            yield self.db.conn.execute(_ROWS_SQL + f" WHERE c.id IN ({marks}) ORDER BY c.id", batch).fetchall()

    def _merge(self, held: _Postings) -> None:
        """Fold the delta into a new base of the live rows, by rowid (positions 0, 1, ...)."""
        view = held.view
        if view.dead == 0 and not held.pending.parts and view.delta.size == 0:
            return
        base_words, base_ids, base_rows, base_tfs = view.base.triples()
        words, ids, rows, tfs = held.pending.triples()
        known = {w: i for i, w in enumerate(base_words)}
        extra = [w for w in words if w not in known]
        known.update((w, len(base_words) + i) for i, w in enumerate(extra))
        remap = np.array([known[w] for w in words], dtype=np.int64)
        ids = np.concatenate([base_ids, remap[ids] if len(ids) else ids])
        rows = np.concatenate([base_rows, rows])
        tfs = np.concatenate([base_tfs, tfs])
        keep = view.alive[rows]
        compact = np.empty(len(view.rowids), dtype=np.int64)
        compact[view.at_rowid] = np.arange(view.live)
        base = build(base_words + extra, ids[keep], compact[rows[keep]], tfs[keep])
        at = view.at_rowid
        held.view = _view(base, view.rowids[at], view.lengths[at], view.stamps[at])
        held.pending = Tokenised()

    def _save(self, held: _Postings) -> None:
        if self.files is None:  # an in-memory database keeps its postings in memory
            held.saved, held.unsaved = True, 0
            return
        base, view = held.view.base, held.view
        arrays = {
            "terms": base.terms,
            "term_offsets": base.term_offsets,
            "offsets": base.offsets,
            "docs": base.docs,
            "tfs": base.tfs,
            "rowids": view.rowids,
            "lengths": view.lengths,
            "stamps": view.stamps,
        }
        fields = {
            "format": FORMAT,
            "index_uuid": self._uuid(),
            "generation": held.generation,
            "chunks": held.chunks,
            "rows": view.live,
            "terms": base.size,
            "postings": len(base.docs),
        }
        saved = self.files.save(fields, {f"{name}.npy": array_writer(a) for name, a in arrays.items()})
        held.saved, held.unsaved, held.token = True, 0, saved.token

    # -- derived data --------------------------------------------------------------------------

    def state(self) -> PostingsState:
        """The saved postings against the store (``sunlib doctor``)."""
        saved = self.files.read() if self.files is not None else None
        if saved is None and self.files is not None and self.files.stamp_path.exists():
            return PostingsState("damaged", "the stamp is unreadable: rebuilt from the chunks", 0, -1)
        if saved is None:
            return PostingsState("missing", "built on the next search or `sunlib doctor --repair`", 0, -1)
        rows = int(saved.fields.get("rows", 0))
        if not self._belongs(saved.fields):
            return PostingsState("foreign", "built for another index or format: rebuilt", rows, -1)
        if self._load() is None:
            return PostingsState("damaged", "unreadable: rebuilt from the chunks", 0, -1)
        generation = int(saved.fields["generation"])
        if saved.fields.get("chunks") != self._fingerprint():
            detail = f"at write generation {generation} of {self.documents.generation()}: caught up on open"
            return PostingsState("behind", detail, rows, generation)
        return PostingsState("fresh", str(self.files.stamp_path if self.files else ""), rows, generation)

    def _fingerprint(self) -> list[int]:
        """(chunks, their highest stamp): it changes whenever the set of (rowid, stamp) pairs does,
        since a chunk is written with a stamp above every earlier one and a delete lowers the count."""
        row = self.db.conn.execute("SELECT count(*), coalesce(max(stamp), -1) FROM chunks").fetchone()
        assert row is not None  # an aggregate always yields a row
        return [int(row[0]), int(row[1])]

    def verify(self) -> list[str]:
        """Problems of the saved postings against SQLite (tests and the kill trials): they must be
        current and equal a fresh build from the chunks, and each row's length FTS5's count."""
        found = self._load()
        if found is None:
            return [f"no usable postings files ({self.state().state})"]
        view, fields, _ = found
        problems = []
        fresh = _Postings(_view(EMPTY, *(np.zeros(0, dtype=t) for t in (np.int64, np.int32, np.int64))), -1, False)
        self._catch_up(fresh)
        self._merge(fresh)
        if fields.get("chunks") != fresh.chunks:
            problems.append(f"postings of chunks {fields.get('chunks')}, store of {fresh.chunks} (count, top stamp)")
        for name in ARRAYS:
            got, want = _array(view, name), _array(fresh.view, name)
            if not np.array_equal(got, want):
                problems.append(f"postings array {name} differs from a build from the chunks")
        sizes = {int(r[0]): bytes(r[1]) for r in self.db.conn.execute("SELECT id, sz FROM chunks_fts_docsize")}
        fts5 = np.array([varint(sizes.get(int(r), b"\0")) for r in view.rowids], dtype=np.int64)
        if not np.array_equal(fts5, view.lengths):
            problems.append("postings row lengths differ from FTS5's")
        return problems


def _array(view: _View, name: str) -> np.ndarray:
    return np.asarray(getattr(view.base, name) if hasattr(view.base, name) else getattr(view, name))


def _heading(raw: str) -> list[str]:
    return list(json.loads(raw))


def _single_token(phrase: str) -> bool:
    """Whether FTS5 reads a phrase as the one token the postings hold (``text.fts_tokens``'s)."""
    return bool(_TOKEN.fullmatch(phrase)) and phrase == phrase.lower()


def _delta(view: _View, pending: Tokenised) -> _View:
    """The view with its delta segment rebuilt from the pending triples."""
    delta = build(*pending.triples()) if pending.parts else EMPTY
    return _View(view.base, delta, view.rowids, view.lengths, view.stamps, view.alive)


def _consistent(a: dict[str, np.ndarray], fields: dict[str, Any] | Any) -> bool:
    """Whether loaded arrays have the shapes and bounds their stamp and each other say."""
    try:
        rows, terms, postings = int(fields["rows"]), int(fields["terms"]), int(fields["postings"])
    except (KeyError, TypeError, ValueError):
        return False
    shapes = {
        "term_offsets": terms + 1,
        "offsets": terms + 1,
        "docs": postings,
        "tfs": postings,
        "rowids": rows,
        "lengths": rows,
        "stamps": rows,
        "terms": int(a["term_offsets"][-1]) if a["term_offsets"].shape == (terms + 1,) else -1,
    }
    if any(a[name].ndim != 1 or len(a[name]) != n for name, n in shapes.items()):
        return False
    offsets_ok = all(
        o[0] == 0 and o[-1] == end and bool(np.all(np.diff(o) >= 0))
        for o, end in ((a["offsets"], postings), (a["term_offsets"], len(a["terms"])))
    )
    in_range = postings == 0 or (int(a["docs"].min()) >= 0 and int(a["docs"].max()) < rows)
    return offsets_ok and in_range and bool(np.all(np.diff(a["rowids"]) > 0))


def _ranked(
    view: _View, phrases: Sequence[str], acl: _Mask, shown: _Mask, limit: int
) -> tuple[np.ndarray, list[float]]:
    """The top ``limit`` row positions among ``shown`` (score DESC, rowid) and their scores: BM25
    with the statistics of the ``acl`` rows (postings_segment.top_k), each phrase's postings in query order."""
    avgdl = acl.tokens / acl.count or 1.0  # rows of no tokens match nothing anyway
    everything = shown.count == len(view.rowids)  # every row visible and live: no mask to apply
    rows = None if everything else shown.rows
    return top_k(_terms(view, phrases, acl), view.norm(avgdl), view.rowids, rows, limit)


def _terms(view: _View, phrases: Sequence[str], acl: _Mask) -> list[Term]:
    """The phrases held by some row, in query order, with their IDF among the ``acl`` rows."""
    terms = []
    for phrase in phrases:
        docs, tfs = view.postings(phrase)
        if len(docs):
            holding = len(docs) if acl.count == len(view.rowids) else int(np.count_nonzero(acl.rows[docs]))
            terms.append(Term(docs, tfs, idf(acl.count, holding)))
    return terms


def postings_folder(db_path: Path | str) -> Path | None:
    """The postings directory of an index file: ``sunlib.postings`` beside ``sunlib.db``."""
    return derived_folder(db_path, "postings")
