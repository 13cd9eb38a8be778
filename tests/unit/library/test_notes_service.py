"""The notes service from Python (``Library.notes``): the same safe writes and visibility as the API."""

from __future__ import annotations

from pathlib import Path

import pytest

from sunlib import Library
from sunlib.errors import BadPath, Conflict, InvalidNote, NotFound, SunlibError
from sunlib.store import Visibility

HIDDEN = "---\nacl: [hr]\n---\n# Salaries\n\nThe codeword is PLUM.\n"


@pytest.fixture
def lib(tmp_path: Path) -> Library:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_text("# A\n\nAlpha text about gardens.\n")
    library = Library.open(vault, embedding={"provider": "hash"}, index_dir=str(tmp_path / "index"))
    library.index()
    return library


def test_visibility_allows_is_the_acl_rule() -> None:
    assert Visibility.of(["public"]).allows(["public", "hr"])
    assert not Visibility.of(["public"]).allows(["hr"])
    assert not Visibility.of(["public"]).allows([])  # an empty ACL is visible to nobody


def test_create_read_update_move_delete(lib: Library) -> None:
    notes = lib.notes
    made = notes.create("b/new.md", "# New\n\nThe kettle is blue.\n", embed=True)
    note_id = made.note.record.note_id
    assert made.note.in_sync and made.needs_vectors
    assert lib.store.vectors.count_pending(lib.space)[0] == 0  # embed=True: vectors before returning
    assert "kettle" in (notes.read(note_id, ["public"]).content or "")
    assert lib.search("kettle", mode="bm25").hits[0].path == "b/new.md"

    notes.update(note_id, "# New\n\nThe kettle is green.\n", ["public"])
    assert "green" in (notes.read(note_id, ["public"]).content or "")
    moved = notes.move(note_id, "c/renamed.md", ["public"])
    assert moved.note.record.note_id == note_id and moved.note.record.path == "c/renamed.md"
    assert (lib.vault / "c/renamed.md").is_file() and not (lib.vault / "b/new.md").exists()

    notes.delete(note_id, ["public"])
    assert not (lib.vault / "c/renamed.md").exists()
    assert lib.search("kettle", mode="bm25").hits == ()
    with pytest.raises(NotFound):
        notes.read(note_id, ["public"])


def test_a_hidden_note_is_not_found_for_every_operation(lib: Library) -> None:
    hidden = lib.notes.create("hr/pay.md", HIDDEN).note.record.note_id
    for call in (
        lambda: lib.notes.read(hidden, ["public"]),
        lambda: lib.notes.update(hidden, "# Mine now\n", ["public"]),
        lambda: lib.notes.move(hidden, "public.md", ["public"]),
        lambda: lib.notes.delete(hidden, ["public"]),
    ):
        with pytest.raises(NotFound):
            call()
    assert "PLUM" in (lib.notes.read(hidden, ["hr"]).content or "")
    assert [n.path for n in lib.notes.list(["public"]).notes] == ["a.md"]
    assert lib.notes.list(["public"]).total == 1


def test_bad_input_raises_typed_errors_and_changes_nothing(lib: Library) -> None:
    before = sorted(p.name for p in lib.vault.rglob("*"))
    with pytest.raises(BadPath):
        lib.notes.create("../outside.md", "# x\n")
    with pytest.raises(Conflict):
        lib.notes.create("a.md", "# taken\n")
    with pytest.raises(InvalidNote):
        lib.notes.create("broken.md", "---\nacl: [hr\n---\n# x\n")
    with pytest.raises(InvalidNote):
        lib.notes.create("huge.md", "x" * 1_000_001)
    assert sorted(p.name for p in lib.vault.rglob("*")) == before
    assert all(issubclass(e, SunlibError) for e in (BadPath, Conflict, InvalidNote, NotFound))
