"""What the benchmark scripts share: the repository's paths, a free loopback port, and the one writer of a
benchmark's block in docs/benchmarks.md.

A block lies between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``; a run replaces it whole, or appends
it under ``heading`` (with ``intro``) when the page has no such block yet."""

from __future__ import annotations

import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
DOC = ROOT / "docs" / "benchmarks.md"
SAMPLE_VAULT = ROOT / "src" / "sunlib" / "sample_vault"
QA_DIR = ROOT / "src" / "sunlib" / "qa"
TEST_QA = QA_DIR / "sample_vault.jsonl"  # the bundled QA set
CALIBRATION_QA = QA_DIR / "sample_vault_calibration.jsonl"  # the bundled calibration set


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the moment of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
