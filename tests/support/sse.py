"""Parse a server-sent-events body in tests (shared by the API and ACL tests)."""

from __future__ import annotations

import json
from typing import Any


def sse(text: str) -> list[tuple[str, Any]]:
    """(event, data) pairs of an SSE body: blank-line separated blocks of ``event:``/``data:`` lines.
    Comment lines (``: ping``) and blocks without data are ignored; data lines are joined with newlines."""
    out: list[tuple[str, Any]] = []
    for block in text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
        event, data = "message", []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
        if data:
            out.append((event, json.loads("\n".join(data))))
    return out
