"""sunlib's own inverted index over row positions in numpy arrays, and its construction: the data
of the postings LexicalIndex (store/postings.py).

A ``Segment`` is CSR by term: a vocabulary sorted by UTF-8 bytes (looked up by binary search,
so opening a saved one reads nothing but what a query touches), ``offsets`` into ``docs`` (row
positions, ascending within a term) and ``tfs`` (each row's count of the term, in the smallest
integer type that holds the largest). ``build`` makes one from (term, row, tf) triples;
``Tokenised`` collects such triples from rows of tokens, a batch at a time.

``top_k`` ranks rows by BM25 over some terms' postings (store/bm25.py's formula, in its order of
float operations): every posting adds its contribution to a score array, term after term. Rows
holding only common terms are most of the rows that match and rarely among the best, so the
k-th best score among the rows of the rarest terms, a lower bound of the k-th best of all, cuts
the rows to sort to a few before the exact top k is taken.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .bm25 import K1


@dataclass(frozen=True)
class Segment:
    """Postings by term (CSR): term i is ``terms[term_offsets[i]:term_offsets[i + 1]]`` (UTF-8,
    sorted by bytes), its postings ``docs[offsets[i]:offsets[i + 1]]`` (row positions, ascending)
    with ``tfs`` aligned."""

    terms: np.ndarray  # uint8
    term_offsets: np.ndarray  # int64
    offsets: np.ndarray  # int64
    docs: np.ndarray  # int32
    tfs: np.ndarray  # uint8, uint16 or int32: the smallest that holds the largest frequency

    @property
    def size(self) -> int:
        return len(self.term_offsets) - 1

    def word(self, i: int) -> bytes:
        return self.terms[self.term_offsets[i] : self.term_offsets[i + 1]].tobytes()

    def slot(self, term: bytes) -> int:
        """The term's index, or -1 (a binary search of the sorted vocabulary)."""
        lo, hi = 0, self.size
        while lo < hi:
            mid = (lo + hi) // 2
            if self.word(mid) < term:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < self.size and self.word(lo) == term else -1

    def postings(self, term: bytes) -> tuple[np.ndarray, np.ndarray]:
        i = self.slot(term)
        if i < 0:
            return _NO_DOCS, _NO_DOCS
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.docs[start:end], self.tfs[start:end]

    def triples(self) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray]:
        """(words, term id per posting, row, tf): what ``build`` takes."""
        words = [self.word(i) for i in range(self.size)]
        ids = np.repeat(np.arange(self.size, dtype=np.int64), np.diff(self.offsets))
        return words, ids, np.asarray(self.docs, dtype=np.int64), np.asarray(self.tfs, dtype=np.int64)


_NO_DOCS = np.zeros(0, dtype=np.int32)


def build(words: Sequence[bytes], ids: np.ndarray, rows: np.ndarray, tfs: np.ndarray) -> Segment:
    """A segment from (term id into ``words``, row, tf) triples, one per (term, row): terms sorted,
    rows ascending within a term, terms without postings left out."""
    by_word = sorted(range(len(words)), key=words.__getitem__)
    rank = np.empty(len(words), dtype=np.int64)
    rank[by_word] = np.arange(len(words))
    ranked = rank[ids]
    counts = np.bincount(ranked, minlength=len(words))
    used = counts > 0
    compact = np.cumsum(used) - 1
    width = int(rows.max(initial=0)) + 1
    order = np.argsort(compact[ranked] * width + rows, kind="stable")
    kept = [words[by_word[j]] for j in np.flatnonzero(used).tolist()]
    lengths = np.fromiter((len(w) for w in kept), dtype=np.int64, count=len(kept))
    return Segment(
        np.frombuffer(b"".join(kept), dtype=np.uint8).copy(),
        np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        np.concatenate([[0], np.cumsum(counts[used])]).astype(np.int64),
        rows[order].astype(np.int32),
        _small(tfs[order]),
    )


def _small(tfs: np.ndarray) -> np.ndarray:
    top = int(tfs.max(initial=0))
    return tfs.astype(np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.int32)


EMPTY = build([], *(np.zeros(0, dtype=np.int64) for _ in range(3)))


class Tokenised:
    """Rows tokenised since the last merge: their (term id, row, tf) triples, term ids into ``words``."""

    def __init__(self) -> None:
        self.words: dict[str, int] = {}
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, first: int, tokens: Sequence[Sequence[str]]) -> None:
        """The rows ``first``, ``first + 1``, ... holding ``tokens`` (a list per row)."""
        words = self.words
        ids = np.fromiter((words.setdefault(t, len(words)) for row in tokens for t in row), dtype=np.int64)
        rows = np.repeat(np.arange(first, first + len(tokens), dtype=np.int64), [len(row) for row in tokens])
        pairs, counts = np.unique((rows << 32) | ids, return_counts=True)
        self.parts.append((pairs & 0xFFFFFFFF, pairs >> 32, counts))

    def triples(self) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray]:
        words = [w.encode() for w in self.words]
        if not self.parts:
            return words, *(np.zeros(0, dtype=np.int64) for _ in range(3))  # type: ignore[return-value]
        ids, rows, tfs = (np.concatenate(column) for column in zip(*self.parts, strict=True))
        return words, ids, rows, tfs


class Term(NamedTuple):
    """One query term: its postings (row positions ascending, frequencies) and its IDF."""

    docs: np.ndarray
    tfs: np.ndarray
    idf: float


def top_k(
    terms: Sequence[Term], norm: np.ndarray, rowids: np.ndarray, shown: np.ndarray | None, limit: int
) -> tuple[np.ndarray, list[float]]:
    """The ``limit`` best rows (score DESC, rowid) among ``shown`` (a boolean mask; None: every
    row) and their scores, ``sum_i idf_i * tf_i * (k1 + 1) / (tf_i + norm[row])`` in term order."""
    scores = np.zeros(len(norm), dtype=np.float64)
    held = []
    for t in terms:
        docs, tfs = (t.docs, t.tfs) if shown is None else (t.docs[shown[t.docs]], t.tfs[shown[t.docs]])
        f = tfs.astype(np.float64)
        scores[docs] += t.idf * ((f * (K1 + 1.0)) / (f + norm[docs]))
        held.append(docs)
    some = _rarest_rows(terms, held, limit)
    if some is None:
        hit = np.flatnonzero(scores)
    else:  # no row scoring under the k-th best of these can be among the best
        hit = np.flatnonzero(scores >= -np.partition(-scores[some], limit - 1)[limit - 1])
    return _best(hit, scores[hit], rowids, limit)


def _rarest_rows(terms: Sequence[Term], held: Sequence[np.ndarray], limit: int) -> np.ndarray | None:
    """At least ``limit`` distinct rows, taken from the highest-IDF terms' rows; None when all the
    rows that match are no more than a few times that (cutting would save nothing)."""
    if limit <= 0 or sum(len(d) for d in held) <= 4 * limit:
        return None
    taken: list[np.ndarray] = []
    for i in sorted(range(len(terms)), key=lambda i: -terms[i].idf):
        taken.append(held[i])
        rows = np.unique(np.concatenate(taken)) if len(taken) > 1 else held[i]
        if len(rows) >= limit:
            return rows
    return None


def _best(rows: np.ndarray, scores: np.ndarray, rowids: np.ndarray, limit: int) -> tuple[np.ndarray, list[float]]:
    """The ``limit`` best of some rows by (score DESC, rowid), with their scores."""
    if len(rows) > limit:  # every row scoring at least the limit-th best score, ties included
        cut = -np.partition(-scores, limit - 1)[limit - 1]
        keep = scores >= cut
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rowids[rows], -scores))[:limit]
    return rows[order], scores[order].tolist()
