"""Answer units: what the Markdown draws, one unit each."""

from __future__ import annotations

from sunlib.answer.gate.units import split_units
from sunlib.library import Library
from sunlib.text.terms import TermWeights, as_words, content_terms

NOTE = """# Sync plans

Sync keeps your vault on every device. Each plan has its own limits.

To restore a file:

1. Open the file history.
2. Pick a version.
3. Press **Restore**.

Supported formats:

- Markdown
- PDF

| Plan | Max file size |
|------|---------------|
| Standard | 5 MB |
| Plus | 200 MB |

Timeout: the request gives up after 30 seconds.

```bash
sunlib index ~/notes
```
"""


def _by_kind(kind: str) -> list[str]:
    return [u.text for u in split_units(NOTE) if u.kind == kind]


def test_sentences_and_heading_unit() -> None:
    assert "Sync keeps your vault on every device." in _by_kind("sentence")
    heading = [u for u in split_units(NOTE) if u.kind == "heading"]
    assert heading[0].lead == "Sync plans" and heading[0].text == "Sync keeps your vault on every device."


def test_a_numbered_list_is_one_steps_unit_with_its_lead_in_and_items_keep_it() -> None:
    steps = _by_kind("steps")
    assert steps == ["To restore a file:\n1. Open the file history.\n2. Pick a version.\n3. Press Restore."]
    items = [u for u in split_units(NOTE) if u.kind == "item" and u.lead == "To restore a file:"]
    assert [u.text for u in items] == ["Open the file history.", "Pick a version.", "Press Restore."]
    assert _by_kind("list") == ["Supported formats:\n- Markdown\n- PDF"]


def test_table_rows_keep_their_header() -> None:
    assert _by_kind("row") == ["Plan: Standard · Max file size: 5 MB", "Plan: Plus · Max file size: 200 MB"]


def test_definition_and_code_lines() -> None:
    assert _by_kind("definition") == ["Timeout: the request gives up after 30 seconds."]
    assert "Timeout: the request gives up after 30 seconds." not in _by_kind("sentence")
    assert _by_kind("code") == ["sunlib index ~/notes"]


def test_units_are_in_reading_order_with_offsets_into_the_passage() -> None:
    units = split_units(NOTE)
    assert [u.position for u in units] == list(range(len(units)))
    assert all(NOTE[u.start :].lstrip().startswith(NOTE[u.start : u.start + 1]) for u in units)
    row = next(u for u in units if u.kind == "row")
    assert NOTE[row.start :].startswith("| Standard")


def test_missing_cjk_terms_are_named_as_words() -> None:
    question = "如何恢复删除的文件？"
    weights = TermWeights.uniform(question)
    _, missing = weights.coverage(set())
    assert sorted(as_words(question, missing)) == sorted(["恢复删除", "文件"])
    assert as_words("what is HNSW", ["hnsw"]) == ["hnsw"]
    assert content_terms("???") == []


def test_questions_without_content() -> None:
    from sunlib.text.terms import has_content

    for junk in ("???", "...", "' OR 1=1 --", "SELECT * FROM notes; --", "); DROP TABLE chunks;--"):
        assert not has_content(junk), junk
    for real in ("What does -q do?", "How do I delete a note from the index?", "什么是 BM25？", "k1?"):
        assert has_content(real), real


def test_a_question_without_content_is_refused_with_its_own_code(hash_library: Library) -> None:
    for junk in ("???", "' OR 1=1 --"):
        result = hash_library.ask(junk, save=False)
        assert result.frame.refused and [r.code for r in result.frame.refusals] == ["no_content_terms"], junk
        assert result.frame.confidence == 0.0


def test_a_chinese_refusal_names_words_not_characters(hash_library: Library) -> None:
    lib = hash_library.with_settings(answer={"gate": "score", "gate_threshold": 1.0, "gate_threshold_bm25": 1.0})
    result = lib.ask("怎么恢复被删除的附件？", save=False)
    assert result.frame.refused
    missing = next(r for r in result.frame.refusals if r.code == "low_gate").params["missing_terms"]
    assert missing and all(len(word) >= 2 for word in missing if any("\u4e00" <= ch <= "\u9fff" for ch in word))


def test_how_does_x_work_frames_the_question() -> None:
    assert [t.name for t in content_terms("How does the refusal gate work?")] == ["refus", "gate"]
    assert "work" in [t.name for t in content_terms("Does my work get saved?")]


def test_the_extractive_answer_opens_with_the_unit_holding_the_readers_span() -> None:
    from sunlib.answer.single.extractive import highlight, opener
    from sunlib.contracts import Reading, ScoredUnit

    text = "Here I'll show you how ports work. The server listens on port 8765 by default. Change it with --port."
    units = [ScoredUnit(u, "chk_a", 0, p) for u, p in zip(split_units(text), [0.9, 0.4, 0.3], strict=True)]
    assert [u.unit.text[:8] for u in units] == ["Here I'l", "The serv", "Change i"]
    start = text.index("8765")
    found = opener(units, {"chk_a": Reading(0.93, start, start + 4, 5.0, "8765")})
    assert found is not None
    unit, span = found
    assert unit.unit.text.startswith("The server listens") and span == "8765"  # not the scorer's favourite
    assert highlight(unit.unit.text, span) == "The server listens on port **8765** by default."
    assert opener(units, {"chk_a": Reading(0.93, 0, 0)}) is None  # no span: the scorer's order decides
    assert opener(units, {}) is None


def test_a_span_in_a_code_line_leaves_the_opening_to_the_scorer() -> None:
    from sunlib.answer.single.extractive import opener
    from sunlib.contracts import Reading, ScoredUnit

    text = 'Run it like this:\n\n```bash\nsunlib ask "how large is a chunk"\n```\n\nA chunk holds about 500 tokens.\n'
    units = [ScoredUnit(u, "chk_a", 0, 0.5) for u in split_units(text)]
    code = next(u for u in units if u.unit.kind == "code")
    start = text.index("how large")
    assert code.unit.start <= start
    assert opener(units, {"chk_a": Reading(0.97, start, start + 9)}) is None
