"""``[ref:chunk_id]`` markers: how a writer cites, and how note text is kept from faking one."""

from __future__ import annotations

import re

REF = re.compile(r"\[ref:\s*([A-Za-z0-9_\-]{1,64})\s*\]")
_REF_OPEN = re.compile(r"\[(\s*)ref(\s*):", re.IGNORECASE)
DEFUSED = "[ref\u2060:"  # a word joiner after "ref": reads the same, never parses as a marker


def defuse_refs(text: str) -> str:
    """Note text with every ``[ref:`` look-alike made inert."""
    return _REF_OPEN.sub(DEFUSED, text)


_REF_WITH_SPACE = re.compile(r"\s*" + REF.pattern)


def strip_refs(text: str) -> str:
    """The text without its markers (and the space before each), on one line."""
    return " ".join(_REF_WITH_SPACE.sub("", text).split())
