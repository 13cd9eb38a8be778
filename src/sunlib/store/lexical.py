"""The SQLite LexicalIndex: FTS5 BM25 over the visible chunks, with statistics of the visible chunks.

A score never depends on text the caller may not see. The BM25 statistics (rows, mean length,
each word's document frequency) are those of the chunks the caller's principals may see (their
ACL set, before search filters narrow it: a filter changes which chunks rank, not how a chunk
scores). When those are all the chunks, FTS5's own ``bm25()`` is that score already and runs
as before; otherwise ``sunlib_tf`` (an FTS5 auxiliary function) hands each matching row's
phrase hits and length to ``bm25.score`` (see store/bm25.py and docs/security.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import apsw

from . import bm25 as formula
from .db import Db, chunk_ids_of
from .errors import at_boundary
from .protocols import Visibility

TF_FUNCTION = "sunlib_tf"  # (row length, hits of phrase 1, hits of phrase 2, ...) as a space-separated text
STATS_KEPT = 16  # visible-set statistics kept per connection (one per principal set, per write generation)


def _row_tf(api: apsw.FTS5ExtensionApi, *args: apsw.SQLiteValue) -> str:
    """The auxiliary function: the row's length in tokens and each query phrase's hits in it."""
    hits = (sum(len(col) for col in api.phrase_locations(i)) for i in range(api.phrase_count))
    return " ".join(map(str, (api.column_size(-1), *hits)))


def tf_sql(stats_table: str, visible_table: str) -> str:
    """Every row matching the query among the caller's ACL-visible chunks (``stats_table``): rowid,
    ``sunlib_tf`` and whether the filters let it through (``visible_table``); params are [match]."""
    return (
        f"SELECT rowid, {TF_FUNCTION}(chunks_fts), +rowid IN (SELECT id FROM temp.{visible_table})"
        f" FROM chunks_fts WHERE chunks_fts MATCH ? AND +rowid IN (SELECT id FROM temp.{stats_table})"
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
        self.db.conn.register_fts5_function(TF_FUNCTION, _row_tf)
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
        ``tokens_seen`` tokens), over the chunks ``visibility`` lets through."""
        if rows_seen == 0:
            return []
        stats = self.db.visible_table(Visibility.of(visibility.principals))
        sql = tf_sql(stats, self.db.visible_table(visibility))
        matched = [
            (int(r[0]), [int(x) for x in str(r[1]).split()], bool(r[2])) for r in self.db.conn.execute(sql, [match])
        ]
        if not matched:
            return []
        phrases = len(matched[0][1]) - 1
        idfs = [formula.idf(rows_seen, sum(1 for _, tf, _ in matched if tf[i + 1])) for i in range(phrases)]
        avgdl = tokens_seen / rows_seen
        scored = [(formula.score(tf[1:], tf[0], idfs, avgdl), rowid) for rowid, tf, shown in matched if shown]
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        ids = chunk_ids_of(self.db, [rowid for _, rowid in scored[:limit]])
        return [(ids[rowid], s) for s, rowid in scored[:limit] if rowid in ids]

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
        tokens = 0
        if not everything:  # FTS5's bm25() is the answer then: no need to add the lengths up
            sizes = self.db.conn.execute(f"SELECT sz FROM chunks_fts_docsize WHERE id IN (SELECT id FROM temp.{table})")
            tokens = sum(formula.varint(bytes(r[0])) for r in sizes)
        found = self._stats[key] = (rows_seen, tokens, everything)
        while len(self._stats) > STATS_KEPT:
            self._stats.popitem(last=False)
        return found

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
