"""/api/conversations: saved conversations, their owner's, under the runs rule.

A conversation is readable only by its owner (the caller that began it: ``auth.owner_for``; an
admin reads every owner's) holding principals that could read every one of its runs; for anyone
else it does not exist (404, never a 403, and it is left out of the list, so no count gives it
away). A conversation is continued with ``conversation_id`` on ``POST /api/ask`` and
``/api/ask/stream``, by its owner only (an admin included: anyone else gets the 404).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from ..store import ConversationTurn
from .auth import principals_for, readable_owner
from .errors import ERROR_RESPONSES
from .schemas import ConversationOut, ConversationsOut

router = APIRouter(prefix="/api/conversations", tags=["conversations"], responses=ERROR_RESPONSES)


@router.get("", response_model=ConversationsOut)
def list_conversations(
    request: Request,
    limit: int = Query(20, ge=1, le=200),
    offset: int = Query(0, ge=0, le=10_000_000),
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str | None = Depends(readable_owner),
) -> dict[str, Any]:
    """Your conversations that you may read, the most recently continued first."""
    state = request.app.state.sunlib
    found = state.library.store.list_conversations(principals, limit, offset, owner=owner)
    return {"conversations": [dataclasses.asdict(c) for c in found], "limit": limit, "offset": offset}


@router.get("/{conversation_id}", response_model=ConversationOut)
def get_conversation(
    conversation_id: str,
    request: Request,
    principals: tuple[str, ...] = Depends(principals_for),
    owner: str | None = Depends(readable_owner),
) -> dict[str, Any]:
    """A conversation's turns in order; 404 when it does not exist, is not yours or one of its runs
    is not yours to read."""
    conv = request.app.state.sunlib.library.conversation(conversation_id, principals, owner=owner)  # NotFound: 404
    return {
        "conversation_id": conv.conversation_id,
        "created_at": conv.created_at,
        "updated_at": conv.updated_at,
        "turns": [turn_json(t) for t in conv.turns],
    }


def turn_json(turn: ConversationTurn) -> dict[str, Any]:
    frame = turn.run.frame
    return {
        "position": turn.position,
        "question": turn.said,
        "standalone": turn.standalone,
        "run_id": turn.run.run_id,
        "created_at": turn.run.created_at,
        "answer": str(frame.get("answer") or ""),
        "refused": bool(frame.get("refused")),
        "refusal_reason": frame.get("refusal_reason"),
        "citations": list(frame.get("citations") or ()),
        "sources": list(frame.get("sources") or ()),
    }
