"""/api/notes: list, read, create, update, delete and move notes (written by the notes helper)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/notes", tags=["notes"])
