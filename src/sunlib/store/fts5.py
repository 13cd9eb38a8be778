"""The SQLite LexicalIndex: FTS5 BM25 over the visible chunks, with statistics of the visible chunks.

A score never depends on text the caller may not see. The BM25 statistics (rows, mean length,
each word's document frequency) are those of the chunks the caller's principals may see (their
ACL set, before search filters narrow it: a filter changes which chunks rank, not how a chunk
scores). When those are all the chunks, FTS5's own ``bm25()`` is that score already and runs
as before; otherwise ``sunlib_bm25`` (an FTS5 auxiliary function) scores each matching row with
``bm25.score`` and the visible statistics (see store/bm25.py and docs/security.md).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import apsw

from .bm25 import idf, score, varint
from .db import Db, chunk_ids_of
from .errors import at_boundary
from .protocols import Visibility

SCORE_FUNCTION = "sunlib_bm25"  # sunlib_bm25(chunks_fts, avgdl, idf_1, ..., idf_n): one row's BM25
STATS_KEPT = 16  # visible-set statistics kept per connection (one per principal set, per write generation)
PHRASE = re.compile(r'"((?:[^"]|"")*)"')


def _row_bm25(api: apsw.FTS5ExtensionApi, *args: Any) -> float:
    """The auxiliary function (args: avgdl, idf_1..idf_n): BM25 of the current row with the
    caller's statistics (bm25.score)."""
    avgdl, idfs = float(args[0]), [float(w) for w in args[1:]]
    freqs = [len(api.phrase_locations(i)[0]) for i in range(len(idfs))]  # one column: "tokens"
    return score(freqs, api.column_size(-1), idfs, avgdl)


def phrases_of(match: str) -> list[str] | None:
    """The quoted phrases of a ``text.fts_query`` expression (``"a" OR "b"``), in order; None for
    any other expression."""
    found = PHRASE.findall(match)
    if not found or " OR ".join(f'"{p}"' for p in found) != match:
        return None
    return [p.replace('""', '"') for p in found]


def scored_sql(visible_table: str, phrases: int) -> str:
    """The lexical route with the caller's statistics; params are [avgdl, idf_1..idf_n, match, limit]."""
    marks = ", ".join("?" * (phrases + 1))
    return (
        f"SELECT rowid, {SCORE_FUNCTION}(chunks_fts, {marks}) AS score FROM chunks_fts WHERE chunks_fts MATCH ?"
        f" AND +rowid IN (SELECT id FROM temp.{visible_table}) ORDER BY score DESC, rowid LIMIT ?"
    )


def bm25_sql(visible_table: str) -> str:
    """The lexical route; params are [match, limit]. ``visible_table`` holds the visible rowids."""
    # The unary + keeps FTS5 from driving the scan by the rowid list (a full-text lookup
    # per visible row: ~300x slower); the visibility filter still applies before LIMIT.
    return (
        "SELECT rowid, -bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
        f" AND +rowid IN (SELECT id FROM temp.{visible_table}) ORDER BY rank LIMIT ?"
    )


@at_boundary
class SqliteLexical:
    def __init__(self, db: Db) -> None:
        self.db = db
        self.db.conn.register_fts5_function(SCORE_FUNCTION, _row_bm25)
        self._stats: OrderedDict[tuple[object, ...], tuple[int, int, bool]] = OrderedDict()

    def bm25(self, match: str, visibility: Visibility, limit: int) -> list[tuple[str, float]]:
        """(chunk_id, score) best first; score is BM25 (higher is better) with the statistics of
        the chunks the principals may see, which is FTS5's ``-bm25()`` when they see every chunk."""
        acl = Visibility.of(visibility.principals)
        rows_seen, tokens_seen, everything = self.visible_stats(acl)
        if everything or visibility.principals == ():
            return self.fts5_bm25(match, visibility, limit)
        return self.visible_bm25(match, visibility, limit, rows_seen, tokens_seen)

    def fts5_bm25(self, match: str, visibility: Visibility, limit: int) -> list[tuple[str, float]]:
        """FTS5's ``bm25()`` (whole-table statistics) over the visible chunks."""
        sql = bm25_sql(self.db.visible_table(visibility))
        rows: list[tuple[Any, ...]] = self.db.conn.execute(sql, [match, limit]).fetchall()
        ids = chunk_ids_of(self.db, [int(r[0]) for r in rows])
        return [(ids[int(r[0])], float(r[1])) for r in rows if int(r[0]) in ids]

    def visible_bm25(
        self, match: str, visibility: Visibility, limit: int, rows_seen: int, tokens_seen: int
    ) -> list[tuple[str, float]]:
        """BM25 with the statistics of the ACL-visible chunks (``rows_seen`` of them, holding
        ``tokens_seen`` tokens), over the chunks ``visibility`` lets through. Each phrase's document
        frequency is counted among the ACL-visible chunks (``doc_freqs``)."""
        phrases = phrases_of(match)
        if phrases is None:
            raise ValueError(f"not a query of quoted words (text.fts_query): {match!r}")
        if rows_seen == 0:
            return []
        _, holding = self.doc_freqs(phrases, Visibility.of(visibility.principals))
        idfs = [idf(rows_seen, holding.get(p, 0)) for p in phrases]
        avgdl = tokens_seen / rows_seen or 1.0  # rows of no tokens match nothing anyway
        sql = scored_sql(self.db.visible_table(visibility), len(phrases))
        rows: list[tuple[Any, ...]] = self.db.conn.execute(sql, [avgdl, *idfs, match, limit]).fetchall()
        ids = chunk_ids_of(self.db, [int(r[0]) for r in rows])
        return [(ids[int(r[0])], float(r[1])) for r in rows if int(r[0]) in ids]

    def visible_stats(self, acl: Visibility) -> tuple[int, int, bool]:
        """(visible chunks, their tokens in the full-text index, whether they are all the chunks)
        for one ACL visibility, kept until the next write."""
        key = (self.db.generation(), *acl.key)
        found = self._stats.get(key)
        if found is not None:
            self._stats.move_to_end(key)
            return found
        table = self.db.visible_table(acl)
        rows_seen = int(self.db.one(f"SELECT count(*) FROM temp.{table}") or 0)
        everything = rows_seen == int(self.db.one("SELECT count(*) FROM chunks") or 0)
        tokens = 0 if everything else self.visible_tokens(acl)  # FTS5's bm25() serves "everything"
        found = self._stats[key] = (rows_seen, tokens, everything)
        while len(self._stats) > STATS_KEPT:
            self._stats.popitem(last=False)
        return found

    def visible_tokens(self, acl: Visibility) -> int:
        """The tokens the full-text index holds for the chunks ``acl`` lets through (FTS5 keeps each
        row's length as a varint in its docsize table)."""
        table = self.db.visible_table(acl)
        sizes = self.db.conn.execute(f"SELECT sz FROM chunks_fts_docsize WHERE id IN (SELECT id FROM temp.{table})")
        return sum(varint(bytes(r[0])) for r in sizes)

    def doc_freqs(self, terms: Sequence[str], visibility: Visibility) -> tuple[int, dict[str, int]]:
        """(chunks the visibility lets through, how many of them contain each term). Counted among
        visible chunks only, so term statistics never tell whether a hidden note has a word."""
        table = self.db.visible_table(visibility)
        total = self.db.one(f"SELECT count(*) FROM temp.{table}")
        found: dict[str, int] = {}
        for term in dict.fromkeys(terms):
            count = self.db.one(
                f"SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ? AND +rowid IN (SELECT id FROM temp.{table})",
                ['"' + term.replace('"', '""') + '"'],
            )
            if count:
                found[term] = int(count)
        return int(total or 0), found
