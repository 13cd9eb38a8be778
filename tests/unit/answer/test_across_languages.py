"""Questions asked in one language of notes in another (``[answer] reader_across``): the score gate
measures words, so it refuses an English question whose only evidence is a Chinese note that
answers it; the reader reads both, and its probability overrules that refusal. Real e5 vectors,
the shipped reader, a real index."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sunlib import Library
from sunlib.trace.steps import Step

NOTES = {
    "备份.md": "# 备份索引\n\n索引文件保存在库目录下的 `.sunlib/sunlib.db` 中。要备份索引，先停止正在运行的服务，"
    "然后把整个 `.sunlib` 文件夹复制到另一块磁盘。恢复时，把文件夹复制回原处即可，不需要重新建立索引。\n",
    "端口.md": "# 服务端口\n\n`sunlib serve` 默认监听 8765 端口。用 `--port` 参数可以换成别的端口。\n",
}
QUESTION = "How do I back up the index?"


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    root = tmp_path_factory.mktemp("across")
    for name, text in NOTES.items():
        (root / "vault").mkdir(exist_ok=True)
        (root / "vault" / name).write_text(text, encoding="utf-8")
    with Library.open(root / "vault", embedding={"provider": "e5"}, index_dir=root / "index") as lib:
        lib.index()
        yield lib


def selection(result: object) -> object:
    return next(s for s in result.trace.steps if s.name == Step.SELECT)  # type: ignore[attr-defined]


def test_the_reader_overrules_a_low_score_across_languages(lib: Library) -> None:
    result = lib.ask(QUESTION, save=False)
    step = selection(result)
    assert not result.frame.refused, result.frame.refusal_reason
    assert step.details["overruled"] == ["low_gate"] and step.details["passed"]  # type: ignore[attr-defined]
    assert "the reader overruled low_gate" in step.output_summary  # type: ignore[attr-defined]
    assert step.details["gate_score"] < step.details["threshold"]  # type: ignore[attr-defined]
    assert {c.path for c in result.frame.citations} == {"备份.md"}


def test_without_the_rule_the_gate_refuses_it(lib: Library) -> None:
    result = lib.with_settings(answer={"reader_across": 1.0}).ask(QUESTION, save=False)  # 1.0: off
    assert result.frame.refused and [r.code for r in result.frame.refusals] == ["low_gate"]
    assert selection(result).details["overruled"] == []  # type: ignore[attr-defined]


def test_in_the_notes_language_the_score_gate_decides_alone(lib: Library) -> None:
    result = lib.ask("怎么备份索引？", save=False)
    assert not result.frame.refused and selection(result).details["overruled"] == []  # type: ignore[attr-defined]
