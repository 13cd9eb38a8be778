"""``[ref:chunk_id]`` markers: how a writer cites, and how note text is kept from faking one.

Surfaces show a citation as a number in brackets (``[1]``). A literal bracketed number in note text
(a footnote, a list of references) or in an LLM's draft would read as one, pointing at another
passage: ``forged_markers`` takes every such look-alike out of an answer before any surface numbers
the real markers, and says which it took."""

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


# code, left as it is ("arr[1]" in backticks or a fenced block), or "[1]", "[12]", "[ 3 ]", a
# footnote reference "[^1]", the full-width "［1］", with the space before it
_NUMBERED = re.compile(r"(```.*?```|`[^`\n]*`)|\s?[\[［]\s*(?:\d{1,3}|\^[^\]\s]{1,20})\s*[\]］]", re.S)


def forged_markers(text: str) -> tuple[str, list[str]]:
    """``text`` without the bracketed numbers that would read as citations (outside code), and the
    ones removed."""
    found: list[str] = []

    def drop(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(1)
        found.append(m.group().strip())
        return ""

    cleaned = _NUMBERED.sub(drop, text)
    return (cleaned, found) if found else (text, [])
