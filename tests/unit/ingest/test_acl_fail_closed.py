"""Access control fails closed.

A restricted note whose frontmatter is damaged (never closed, a fence written ``--`` or indented or
after a blank line, ``ACL:`` in capitals, a second ``acl:``, a truncated write) is not indexed: it is
listed as failed with the reason, and its earlier indexed version is withdrawn. The property test
damages a restricted note's frontmatter at random and checks that its codeword never reaches a
principal outside its ACL, through BM25, dense and hybrid search and ask.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sunlib import Library
from sunlib.ingest.markdown import FrontmatterError, split_frontmatter

CODEWORD = "zephyrquartz"
NOTE = "hr/salaries.md"
GOOD = f"---\ntitle: Salaries\nacl: [hr]\n---\n# Salaries\n\nThe {CODEWORD} band is reviewed each March.\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("---\nacl: [hr]\n# Salaries\n\nbody\n", "never closed"),
        ("--\nacl: [hr]\n--\n# Salaries\n", "must open with '---'"),
        (" ---\nacl: [hr]\n---\n# Salaries\n", "must open with '---'"),
        ("\n---\nacl: [hr]\n---\n# Salaries\n", "must open with '---'"),
        ("---\nacl: [hr]\nacl: [public]\n---\n# Salaries\n", "appears twice"),
    ],
)
def test_damaged_frontmatter_is_an_error(text: str, reason: str) -> None:
    with pytest.raises(FrontmatterError, match=reason):
        split_frontmatter(text)


def test_a_rule_later_in_the_text_is_still_no_frontmatter() -> None:
    assert split_frontmatter("Text first.\n\n---\n\nacl: not metadata\n") == ({}, 0)
    assert split_frontmatter("# Title\n---\nkey: value\n") == ({}, 0)


def _visible(lib: Library, principals: list[str]) -> bool:
    """Whether anything of the restricted note reaches ``principals`` on any search route or ask."""
    for mode in ("bm25", "dense", "hybrid"):
        for hit in lib.search(CODEWORD, mode=mode, principals=principals, limit=20).hits:
            if hit.path == NOTE or CODEWORD in hit.text:
                return True
    frame = lib.ask(f"When is the {CODEWORD} band reviewed?", principals=principals, save=False).frame
    # a refusal names the question's own words: only an answer or its evidence can leak the note
    return any(e.path == NOTE for e in frame.evidence) or (not frame.refused and CODEWORD in frame.answer)


@pytest.fixture
def restricted(hash_library: Library, hash_vault: Path) -> Library:
    (hash_vault / NOTE).parent.mkdir(parents=True, exist_ok=True)
    (hash_vault / NOTE).write_text(GOOD, encoding="utf-8")
    report = hash_library.index()
    assert NOTE in report.added
    assert not _visible(hash_library, ["public"]) and _visible(hash_library, ["public", "hr"])
    return hash_library


def test_an_unclosed_edit_withdraws_the_indexed_version(restricted: Library, hash_vault: Path) -> None:
    (hash_vault / NOTE).write_text(GOOD.replace("---\n# Salaries", "# Salaries"), encoding="utf-8")
    report = restricted.index()
    assert [p for p, _ in report.failed] == [NOTE] and "never closed" in report.failed[0][1]
    assert report.withdrawn == [NOTE]
    assert not _visible(restricted, ["public"])
    assert not _visible(restricted, ["public", "hr"])  # not served at all until it parses again
    (hash_vault / NOTE).write_text(GOOD, encoding="utf-8")
    restricted.index()
    assert _visible(restricted, ["public", "hr"]) and not _visible(restricted, ["public"])


def test_acl_in_capitals_is_an_error(restricted: Library, hash_vault: Path) -> None:
    (hash_vault / NOTE).write_text(GOOD.replace("acl:", "ACL:"), encoding="utf-8")
    report = restricted.index()
    assert report.failed and "'ACL' is not 'acl'" in report.failed[0][1]
    assert not _visible(restricted, ["public"])


def _damage(kind: str, at: int) -> str:
    head, body = GOOD.split("---\n# Salaries", 1)
    body = "# Salaries" + body
    fm = head  # "---\ntitle: Salaries\nacl: [hr]\n"
    if kind == "truncate":  # a writer caught mid-write
        return GOOD[: 4 + at % (len(GOOD) - 4)]
    if kind == "drop_close":
        return fm + body
    if kind == "two_dashes":
        return fm.replace("---", "--", 1) + "--\n" + body
    if kind == "indent":
        return " " + GOOD
    if kind == "blank_first":
        return "\n" * (1 + at % 3) + GOOD
    if kind == "caps":
        return GOOD.replace("acl", ["ACL", "Acl", "aCl"][at % 3], 1)
    if kind == "second_acl":
        return GOOD.replace("acl: [hr]\n", "acl: [hr]\nacl: [public]\n")
    if kind == "space":  # a space or tab dropped in somewhere in the frontmatter, not inside the word "acl"
        key = GOOD.index("acl:")
        spots = [p for p in range(len(fm) + 1) if not key < p <= key + 3]
        pos = spots[at % len(spots)]
        return GOOD[:pos] + [" ", "\t"][at % 2] + GOOD[pos:]
    raise AssertionError(kind)


KINDS = ["truncate", "drop_close", "two_dashes", "indent", "blank_first", "caps", "second_acl", "space"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), at=st.integers(min_value=0, max_value=10_000))
def test_damaged_frontmatter_never_makes_the_note_public(
    restricted: Library, hash_vault: Path, kind: str, at: int
) -> None:
    (hash_vault / NOTE).write_text(_damage(kind, at), encoding="utf-8")
    restricted.index()
    assert not _visible(restricted, ["public"]), (kind, _damage(kind, at))
    (hash_vault / NOTE).write_text(GOOD, encoding="utf-8")  # the next example starts from the good note
    restricted.index()
