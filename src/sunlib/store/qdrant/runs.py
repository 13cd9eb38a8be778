"""Runs and conversations in Qdrant: what read-only replicas write, so each reads the others'.

``<prefix>_runs`` holds one point per saved run (its summary fields, its times as exact text
(``points.exact``), and its frame and trace as the JSON text the ask pipeline wrote);
``<prefix>_turns`` one point per conversation turn (the conversation id, the run, what was said,
the standalone question, when). Both are payloads only (``client.UNUSED_VECTOR``).

The reading rules are those of the SQLite store (``documents.RUN_READABLE`` and ``RUN_OWNED``,
``conversations._READABLE``), applied here in Python to what Qdrant returns:

* a run is readable by its owner (``owner`` in its payload; a point saved before owners existed is
  ``LOCAL_OWNER``'s) holding every principal it was asked as;
* a conversation is its first turn's owner's, and readable by that owner holding principals that
  may read every one of its runs; a turn whose run is not stored counts as unreadable, and a hidden
  conversation looks like a missing one (None). A turn is refused before it is written when the
  conversation is another owner's; should two owners' turns still meet under one id (a race of
  replicas), the turns of any other owner than the first turn's are never part of the conversation.

Qdrant has no transaction to take a turn's position under, so a turn is never given one when it
is written: positions are the turns' order (when each was written, then its point id) at every
read, so two replicas appending at once still give two positions, the same for every reader.
Listing runs or conversations scrolls the collection; that is meant for the few thousand runs of
a team server, not for millions.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from qdrant_client import models

from ..conversations import not_yours
from ..protocols import LOCAL_OWNER, ConversationRecord, ConversationSummary, ConversationTurn, RunRecord, RunSummary
from .client import Shared, ensure_collection, retrieve, scroll_all, upsert_points
from .points import POINT_NAMESPACE, exact, is_value

_KEYWORD = models.PayloadSchemaType.KEYWORD
RUN_FIELDS = {"run_id": _KEYWORD, "kind": _KEYWORD}
TURN_FIELDS = {"conversation_id": _KEYWORD, "run_id": _KEYWORD}
_SUMMARY = ["run_id", "kind", "created_at", "principals", "question", "refused", "total_ms", "owner"]


def ensure_runs(shared: Shared, prefix: str) -> tuple[str, str]:
    """The runs and turns collections of a prefix (created unless they exist)."""
    runs, turns = f"{prefix}_runs", f"{prefix}_turns"
    ensure_collection(shared, runs, indexes=RUN_FIELDS)
    ensure_collection(shared, turns, indexes=TURN_FIELDS)
    return runs, turns


def run_point_id(run_id: str) -> str:
    return str(uuid.uuid5(POINT_NAMESPACE, "run:" + run_id))


def readable(asked_as: Iterable[str], principals: Iterable[str]) -> bool:
    """The runs rule: every principal the run was asked as is among the caller's."""
    return set(asked_as) <= set(principals)


def owner_of(payload: Mapping[str, Any]) -> str:
    """Whose run or turn a point is (one saved before owners existed: the local owner's)."""
    return str(payload.get("owner") or LOCAL_OWNER)


def owned(by: str, owner: str | None) -> bool:
    """The owner rule: ``owner`` None (an admin's read) reads every owner's."""
    return owner is None or by == owner


def _summary(p: Mapping[str, Any]) -> RunSummary:
    return RunSummary(
        str(p["run_id"]),
        str(p["kind"]),
        float(p["created_at"]),
        tuple(p.get("principals") or ()),
        str(p["question"]),
        bool(p["refused"]),
        float(p["total_ms"]),
    )


def _record(p: Mapping[str, Any]) -> RunRecord:
    s = _summary(p)
    return RunRecord(
        s.run_id,
        s.kind,
        s.created_at,
        s.principals,
        s.question,
        s.refused,
        s.total_ms,
        frame=json.loads(p["frame"]),
        trace=json.loads(p["trace"]),
        owner=owner_of(p),
    )


def _ordered(turns: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(turns, key=lambda t: (int(t["written"]), str(t["turn_id"])))


class QdrantRuns:
    """The runs and conversations part of a Qdrant-only DocumentStore (``replica.QdrantReplica``)."""

    def __init__(self, shared: Shared, prefix: str) -> None:
        self.shared = shared
        self.runs, self.turns = ensure_runs(shared, prefix)

    # -- runs ----------------------------------------------------------------------------------

    def save_run(self, run: RunRecord) -> None:
        payload = {
            "run_id": run.run_id,
            "kind": run.kind,
            "created_at": exact(run.created_at),
            "principals": sorted(set(run.principals)),
            "question": run.question,
            "refused": bool(run.refused),
            "total_ms": exact(run.total_ms),
            "frame": json.dumps(run.frame, ensure_ascii=False),
            "trace": json.dumps(run.trace, ensure_ascii=False),
            "owner": run.owner,
        }
        point = models.PointStruct(id=run_point_id(run.run_id), vector={}, payload=payload)
        upsert_points(self.shared, self.runs, [point])

    def list_runs(
        self,
        principals: Sequence[str],
        limit: int = 20,
        offset: int = 0,
        kind: str | None = None,
        *,
        owner: str | None = LOCAL_OWNER,
    ) -> list[RunSummary]:
        where = models.Filter(must=[is_value("kind", kind)]) if kind is not None else None
        payloads = [p.payload or {} for p in scroll_all(self.shared, self.runs, _SUMMARY, where)]
        found = [_summary(p) for p in payloads if owned(owner_of(p), owner)]
        mine = sorted((r for r in found if readable(r.principals, principals)), key=lambda r: (-r.created_at, r.run_id))
        return mine[offset : offset + limit]

    def get_run(self, run_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER) -> RunRecord | None:
        found = self._runs([run_id]).get(run_id)
        if found is None or not owned(found.owner, owner) or not readable(found.principals, principals):
            return None
        return found

    def _runs(self, run_ids: Sequence[str], whole: bool = True) -> dict[str, RunRecord]:
        ids = list(dict.fromkeys(run_ids))
        fields: Sequence[str] | bool = True if whole else _SUMMARY
        records = retrieve(self.shared, self.runs, [run_point_id(r) for r in ids], fields)
        out: dict[str, RunRecord] = {}
        for r in records:
            payload = r.payload or {}
            summary = _summary(payload)
            out[summary.run_id] = _record(payload) if whole else RunRecord(**vars(summary), owner=owner_of(payload))
        return out

    # -- conversations -------------------------------------------------------------------------

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
        before = self._turns_of(conversation_id)
        if before and owner_of(before[0]) != owner:
            raise not_yours(conversation_id)  # nothing written
        turn_id = str(uuid.uuid4())
        payload = {
            "turn_id": turn_id,
            "conversation_id": conversation_id,
            "run_id": run_id,
            "said": said,
            "standalone": standalone,
            "at": exact(at),
            "written": time.time_ns(),
            "owner": owner,
        }
        upsert_points(self.shared, self.turns, [models.PointStruct(id=turn_id, vector={}, payload=payload)])
        order = [str(t["turn_id"]) for t in self._turns_of(conversation_id)]
        if turn_id not in order:  # another owner's first turn won a race for this id: ours is in no conversation
            raise not_yours(conversation_id)
        return order.index(turn_id) + 1

    def _turns_of(self, conversation_id: str) -> list[Mapping[str, Any]]:
        """The conversation's turns in order: those of its first turn's owner only."""
        where = models.Filter(must=[is_value("conversation_id", conversation_id)])
        return _own(_ordered(p.payload or {} for p in scroll_all(self.shared, self.turns, True, where)))

    def _all_readable(
        self, turns: Sequence[Mapping[str, Any]], runs: Mapping[str, RunRecord], principals: Sequence[str]
    ) -> bool:
        """Every turn's run is stored and readable by the principals."""
        for t in turns:
            run = runs.get(str(t["run_id"]))
            if run is None or not readable(run.principals, principals):
                return False
        return True

    def get_conversation(
        self, conversation_id: str, principals: Sequence[str], *, owner: str | None = LOCAL_OWNER
    ) -> ConversationRecord | None:
        turns = self._turns_of(conversation_id)
        if not turns or not owned(owner_of(turns[0]), owner):
            return None
        runs = self._runs([str(t["run_id"]) for t in turns])
        if not self._all_readable(turns, runs, principals):
            return None
        out = tuple(
            ConversationTurn(i + 1, str(t["said"]), t.get("standalone"), runs[str(t["run_id"])])
            for i, t in enumerate(turns)
        )
        return ConversationRecord(conversation_id, float(turns[0]["at"]), max(float(t["at"]) for t in turns), out)

    def list_conversations(
        self, principals: Sequence[str], limit: int = 20, offset: int = 0, *, owner: str | None = LOCAL_OWNER
    ) -> list[ConversationSummary]:
        grouped: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for p in scroll_all(self.shared, self.turns, True):
            payload = p.payload or {}
            grouped[str(payload["conversation_id"])].append(payload)
        chosen = {cid: _own(_ordered(turns)) for cid, turns in grouped.items()}
        chosen = {cid: turns for cid, turns in chosen.items() if owned(owner_of(turns[0]), owner)}
        runs = self._runs([str(t["run_id"]) for turns in chosen.values() for t in turns], whole=False)
        out = []
        for conversation_id, ordered in chosen.items():
            if self._all_readable(ordered, runs, principals):
                updated = max(float(t["at"]) for t in ordered)
                first, last = str(ordered[0]["said"]), str(ordered[-1]["said"])
                out.append(
                    ConversationSummary(conversation_id, float(ordered[0]["at"]), updated, len(ordered), first, last)
                )
        out.sort(key=lambda c: (-c.updated_at, c.conversation_id))
        return out[offset : offset + limit]


def _own(ordered: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Of a conversation's turns in order, those of its owner (the first turn's)."""
    if not ordered:
        return []
    first = owner_of(ordered[0])
    return [t for t in ordered if owner_of(t) == first]
