"""BM25 as FTS5's ``bm25()`` computes it, from statistics the caller chooses.

FTS5's own ``bm25()`` takes N (rows), avgdl (mean tokens per row) and each phrase's document
frequency from the whole table. A score then depends on text the caller may not see: whether a
hidden note holds a word moves the IDF of that word, which is an exact yes/no answer to "does
some note I cannot read say W?". The functions here are the same formula with the statistics
passed in, so the lexical index can compute them over the chunks the caller may see.

For one row D and the query's phrases q_1..q_n (``fts5_aux.c``, ``fts5Bm25Function``)::

    score(D) = sum_i IDF(q_i) * f(q_i, D) * (k1 + 1) / (f(q_i, D) + k1 * (1 - b + b * |D| / avgdl))
    IDF(q)   = ln((N - n(q) + 0.5) / (n(q) + 0.5)), or 1e-6 where that is not positive

with k1 = 1.2 and b = 0.75 (FTS5's constants), f the phrase's hits in the row, |D| the row's
tokens and n(q) the rows holding q. With the statistics of the whole table the result is FTS5's
``-bm25()`` to float precision (tests/unit/store/test_bm25_visible.py checks it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

K1 = 1.2  # FTS5's term-frequency saturation
B = 0.75  # FTS5's length normalisation
MIN_IDF = 1e-6  # FTS5 floors a non-positive IDF (a phrase in over half the rows) here


def idf(rows: int, holding: int) -> float:
    """FTS5's IDF of a phrase held by ``holding`` of ``rows`` rows."""
    value = math.log((rows - holding + 0.5) / (holding + 0.5))
    return value if value > 0.0 else MIN_IDF


def score(freqs: Sequence[int], length: int, idfs: Sequence[float], avgdl: float) -> float:
    """BM25 of one row (higher is better): ``freqs[i]`` hits of phrase i in a row of ``length`` tokens."""
    norm = K1 * (1 - B + B * length / avgdl)
    total = 0.0
    for w, f in zip(idfs, freqs, strict=True):  # in FTS5's order of operations, for equal floats
        total += w * ((f * (K1 + 1.0)) / (f + norm))
    return total


def varint(blob: bytes) -> int:
    """The first SQLite varint of ``blob`` (FTS5's docsize records: one per column)."""
    value = 0
    for i, byte in enumerate(blob[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value
