"""The one writer of a benchmark's block in docs/benchmarks.md (shared by the scripts in this folder).

A block lies between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``; a run replaces it whole, or appends
it under ``heading`` (with ``intro``) when the page has no such block yet."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def write_block(name: str, body: str, heading: str, intro: str = "", doc: Path = DOC) -> None:
    """Put ``body`` between the markers of ``name`` in ``doc`` (the markers are added around it)."""
    begin, end = markers(name)
    block = f"{begin}\n{body.strip(chr(10))}\n{end}"
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    if begin in text and end in text.split(begin, 1)[1]:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {heading}\n\n" + (f"{intro}\n\n" if intro else "") + block + "\n"
    doc.write_text(text, encoding="utf-8")
