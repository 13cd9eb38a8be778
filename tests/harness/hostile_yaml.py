"""Time ``load_note`` on hostile frontmatter (alias bombs, deep nesting).

    python -m tests.harness.hostile_yaml

Prints each note's size, the time to load (or refuse) it, and the reason. docs/reliability.md
reports the figures. tests/unit/ingest/test_hostile_notes.py builds its notes with the same recipes.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

from sunlib.ingest import NoteError, load_note
from sunlib.ingest.vault import VaultFile


def alias_bomb(depth: int) -> str:
    """Nine aliases wide and ``depth`` levels deep: 9**depth strings once expanded."""
    names = "abcdefghijklmnop"[:depth]
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in itertools.pairwise(names)]
    return "---\n" + "\n".join(lines) + "\n---\n# Bomb\n"


def nested(depth: int) -> str:
    return "---\na: " + "[" * depth + "]" * depth + "\n---\n# Deep\n"


CASES = {
    "alias bomb, 7 deep": alias_bomb(7),
    "alias bomb, 9 deep": alias_bomb(9),
    "nesting, 3000 deep": nested(3000),
    "nesting, 900 deep": nested(900),
}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CASES.items():
            path = Path(tmp) / "note.md"
            path.write_text(text, "utf-8")
            st = path.stat()
            t0 = time.perf_counter()
            try:
                load_note(VaultFile("note.md", path, None, st.st_mtime, st.st_size), ["public"])
                outcome = "loaded"
            except NoteError as exc:
                outcome = str(exc)
            ms = (time.perf_counter() - t0) * 1000
            print(f"{name}: {len(text.encode())} bytes, {ms:.1f} ms: {outcome}")


if __name__ == "__main__":
    main()
