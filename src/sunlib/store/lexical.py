"""The SQLite LexicalIndex: FTS5 BM25 over the visible chunks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .db import Db, chunk_ids_of
from .errors import at_boundary
from .protocols import Visibility


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

    def bm25(self, match: str, visibility: Visibility, limit: int) -> list[tuple[str, float]]:
        """(chunk_id, score) best first; score is FTS5's BM25 negated so that higher is better."""
        sql = bm25_sql(self.db.visible_table(visibility))
        rows: list[tuple[Any, ...]] = self.db.conn.execute(sql, [match, limit]).fetchall()
        ids = chunk_ids_of(self.db, [int(r[0]) for r in rows])
        return [(ids[int(r[0])], float(r[1])) for r in rows if int(r[0]) in ids]

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
