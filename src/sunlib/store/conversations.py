"""Conversations in SQLite: an id, its owner and its turns, each a saved run (``runs``) in order.

A conversation belongs to the caller that began it (``conversations.owner``): only that owner
reads, lists or continues it, and a turn of another owner is refused before anything is written
(an admin reads every owner's, continues none but its own). Which principals may read it is not
stored: it follows from its runs. A conversation is readable by principals that may read every
one of its runs (``RUN_READABLE`` for each turn), so a turn asked as more principals hides the
whole conversation from those who hold fewer, and a missing, a hidden and another owner's
conversation look the same (None). Each read is one SQL statement, so a turn appended meanwhile
can never slip past the check.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import NotFound
from .db import Db
from .documents import RUN_COLUMNS, RUN_READABLE, run_record
from .errors import at_boundary
from .protocols import LOCAL_OWNER, ConversationRecord, ConversationSummary, ConversationTurn

# The conversation is the owner's (param: the owner, NULL for every owner's) and every turn's run
# exists and is readable by the principals (param: JSON array); a turn whose run is gone counts as
# unreadable.
_READABLE = (
    "c.owner = coalesce(?, c.owner) AND NOT EXISTS (SELECT 1 FROM conversation_turns t"
    " LEFT JOIN runs r ON r.run_id = t.run_id"
    f" WHERE t.conversation_id = c.conversation_id AND (r.run_id IS NULL OR NOT {RUN_READABLE}))"
)
_RUN_FIELDS = ", ".join(f"r.{c.strip()}" for c in RUN_COLUMNS.split(","))
_TURNS_SQL = (
    f"SELECT c.created_at, c.updated_at, t.position, t.said, t.standalone, {_RUN_FIELDS}, r.frame, r.trace, r.owner"
    " FROM conversations c JOIN conversation_turns t ON t.conversation_id = c.conversation_id"
    " JOIN runs r ON r.run_id = t.run_id"
    f" WHERE c.conversation_id = ? AND {_READABLE} ORDER BY t.position"
)
_LIST_SQL = (
    "SELECT c.conversation_id, c.created_at, c.updated_at,"
    " (SELECT count(*) FROM conversation_turns t WHERE t.conversation_id = c.conversation_id),"
    " (SELECT said FROM conversation_turns t WHERE t.conversation_id = c.conversation_id"
    "  ORDER BY position LIMIT 1),"
    " (SELECT said FROM conversation_turns t WHERE t.conversation_id = c.conversation_id"
    "  ORDER BY position DESC LIMIT 1)"
    f" FROM conversations c WHERE {_READABLE}"
    " ORDER BY c.updated_at DESC, c.conversation_id LIMIT ? OFFSET ?"
)


def not_yours(conversation_id: str) -> NotFound:
    """What continuing another owner's conversation raises: the words of an unknown one."""
    return NotFound(f"no conversation {conversation_id!r} that you may read")


@at_boundary
class SqliteConversations:
    """The conversation part of the SQLite DocumentStore (mixed into ``SqliteStore``)."""

    db: Db

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
        """Append a saved run as the next turn of a conversation (created by its first turn, as
        ``owner``'s); returns the turn's position. The owner is checked and the position taken
        under the write lock, so two turns sent at once get two positions and a conversation of
        another owner is never touched (``NotFound``, nothing written)."""
        with self.db.write():
            found = self.db.one("SELECT owner FROM conversations WHERE conversation_id = ?", (conversation_id,))
            if found is not None and str(found) != owner:
                raise not_yours(conversation_id)
            self.db.conn.execute(
                "INSERT INTO conversations(conversation_id, created_at, updated_at, owner) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(conversation_id) DO UPDATE SET updated_at = max(updated_at, excluded.updated_at)",
                (conversation_id, at, at, owner),
            )
            position = int(
                self.db.one(
                    "SELECT coalesce(max(position), 0) + 1 FROM conversation_turns WHERE conversation_id = ?",
                    (conversation_id,),
                )
            )
            self.db.conn.execute(
                "INSERT INTO conversation_turns(conversation_id, position, run_id, said, standalone)"
                " VALUES (?, ?, ?, ?, ?)",
                (conversation_id, position, run_id, said, standalone),
            )
        return position

    def get_conversation(
        self, conversation_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER
    ) -> ConversationRecord | None:
        """The conversation with its turns in order, or None when it does not exist, is not
        ``owner``'s (None: any owner's) or one of its runs is not readable by the principals."""
        rows: list[Sequence[Any]] = list(
            self.db.conn.execute(_TURNS_SQL, (conversation_id, owner, json.dumps(list(principals))))
        )
        if not rows:
            return None
        turns = tuple(_turn(r) for r in rows)
        return ConversationRecord(conversation_id, float(rows[0][0]), float(rows[0][1]), turns)

    def list_conversations(
        self, principals: Sequence[str], limit: int = 20, offset: int = 0, *, owner: str | None = LOCAL_OWNER
    ) -> list[ConversationSummary]:
        """The conversations of ``owner`` (None: every owner's) the principals may read, the most
        recently continued first."""
        rows = self.db.conn.execute(_LIST_SQL, (owner, json.dumps(list(principals)), limit, offset))
        return [
            ConversationSummary(str(r[0]), float(r[1]), float(r[2]), int(r[3]), str(r[4] or ""), str(r[5] or ""))
            for r in rows
        ]


def _turn(r: Sequence[Any]) -> ConversationTurn:
    return ConversationTurn(int(r[2]), str(r[3]), None if r[4] is None else str(r[4]), run_record(r[5:]))
