"""What the chunking invariants are checked against: a vault's notes as loaded, offsets back in code
points, and where sentences end (tests/unit/ingest/test_ingest.py, tests/system/test_fault_injection.py)."""

from __future__ import annotations

from pathlib import Path

from sunlib.contracts import Note
from sunlib.ingest import load_note, walk_vault
from sunlib.ingest.markdown import ParsedMarkdown
from sunlib.text import sentence_spans


def all_notes(vault: Path) -> list[tuple[Note, ParsedMarkdown]]:
    """Every note of ``vault``, loaded and parsed as the indexer does (principals ``public``)."""
    files, _ = walk_vault(vault)
    return [load_note(vf, ["public"]) for vf in files]


def cp_offset(text: str, utf16_offset: int) -> int:
    """Code-point offset of a UTF-16 offset (the inverse of what chunks store)."""
    return len(text.encode("utf-16-le")[: 2 * utf16_offset].decode("utf-16-le"))


def sentence_ends(note: Note, parsed: ParsedMarkdown) -> set[int]:
    """Code-point offsets where a sentence (or a code/table block) ends."""
    ends: set[int] = set()
    for b in parsed.blocks:
        ends.add(b.end)
        if b.kind not in ("code", "table", "html"):
            ends.update(e for _, e in sentence_spans(note.text, b.start, b.end))
    return ends
