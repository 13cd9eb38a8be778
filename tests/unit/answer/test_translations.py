"""Translated pages (issue: an English answer quoted the Chinese copy of the same passage): of two
kept passages that translate each other, the answer keeps the one in the question's language. Real
e5 vectors (the threshold is e5's), a real index."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sunlib import Library
from sunlib.trace.steps import Step

NOTES = {
    "backups.md": "# Backups\n\nThe nightly backup job copies the database to the archive server at two in the "
    "morning and keeps thirty days of copies.\n",
    "zh/backups.md": "# 备份\n\n每晚的备份任务在凌晨两点把数据库复制到归档服务器，并保留三十天的副本。\n",
    "kiln.md": "# Kiln\n\nFire the kiln slowly: raise the heat by fifty degrees an hour until it glows.\n",
    "zh/kiln.md": "# 窑炉\n\n窑炉要慢慢升温：每小时升高五十度，直到发光。\n",
}


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    root = tmp_path_factory.mktemp("translations")
    for name, text in NOTES.items():
        (root / "vault" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "vault" / name).write_text(text, encoding="utf-8")
    with Library.open(root / "vault", embedding={"provider": "e5"}, index_dir=root / "index") as lib:
        lib.index()
        yield lib


def selection(result: object) -> dict[str, object]:
    return next(s.details for s in result.trace.steps if s.name == Step.SELECT)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("question", "own", "twin"),
    [
        ("When does the nightly backup run?", "backups.md", "zh/backups.md"),
        ("每晚的备份什么时候运行？", "zh/backups.md", "backups.md"),
    ],
)
def test_the_answer_keeps_the_passage_in_the_questions_language(
    lib: Library, question: str, own: str, twin: str
) -> None:
    result = lib.ask(question, save=False)
    paths = [r.hit.path for r in result.selection.kept]  # type: ignore[union-attr]
    assert own in paths and twin not in paths, paths
    dropped = selection(result)["dropped_translations"]
    twin_chunk = next(r.chunk_id for r in lib.search("backup 备份", mode="bm25").hits if r.path == twin)
    assert [d["dropped"] for d in dropped] == [twin_chunk]  # type: ignore[index, union-attr]


def test_without_the_check_both_copies_stay(lib: Library) -> None:
    off = lib.with_settings(answer={"translation_cosine": 0})
    result = off.ask("When does the nightly backup run?", save=False)
    assert selection(result)["dropped_translations"] == []
    paths = {r.hit.path for r in result.selection.kept}  # type: ignore[union-attr]
    assert {"backups.md", "zh/backups.md"} <= paths  # what the check removes: the Chinese copy, for an English question
