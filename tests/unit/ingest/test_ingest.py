"""sunlib.ingest: vault walk, note loading and metadata, Markdown blocks, chunkers, ids and offsets."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from sunlib import Library
from sunlib.contracts import Chunk, Note
from sunlib.ingest import (
    FixedChunker,
    NoteError,
    StructureChunker,
    VaultFile,
    load_note,
    note_id_for,
    utf16_slice,
    walk_vault,
)
from sunlib.ingest.markdown import ParsedMarkdown
from sunlib.text import estimate_tokens, sentence_spans
from tests.support.chunk_checks import all_notes, cp_offset, sentence_ends

SAMPLE_NOTES = [
    "getting-started/installation.md",
    "getting-started/quick-tour.md",
    "guide/answers/asking.md",
    "guide/indexing/chunking.md",
    "guide/indexing/incremental-index.md",
    "guide/indexing/vaults-and-metadata.md",
    "guide/models/embedding-models.md",
    "guide/search/filters-and-acl.md",
    "guide/search/search-modes.md",
    "index.md",
    "internal/ops-runbook.md",
    "internal/roadmap-draft.md",
    "internal/scratch.md",
    "reference/cli.md",
    "reference/configuration.md",
    "zh/入门/安装.md",
    "zh/入门/快速上手.md",
    "zh/参考/常见问题.md",
    "zh/指南/中文检索.md",
    "zh/指南/引用与拒答.md",
    "zh/指南/提问.md",
]
SENTENCE_END = set(".!?。！？；")
CLOSERS = set("\"'”’」』）)]】")
ATX = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


# --------------------------------------------------------------------------- helpers


def _files(vault: Path) -> dict[str, VaultFile]:
    files, problems = walk_vault(vault)
    assert problems == []
    return {f.rel_path: f for f in files}


def _load(vault: Path, rel: str) -> tuple[Note, ParsedMarkdown]:
    files, _ = walk_vault(vault)
    vf = next(f for f in files if f.rel_path == rel)
    return load_note(vf, ["public"])


def _write(vault: Path, rel: str, text: str | bytes) -> Path:
    path = vault / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _note(tmp_path: Path, text: str, rel: str = "note.md") -> tuple[Note, ParsedMarkdown]:
    vault = tmp_path / "synthetic"
    _write(vault, rel, text)
    return _load(vault, rel)


def _heading_lines(note: Note, parsed: ParsedMarkdown) -> set[int]:
    """1-based lines of every heading (setext underline included), found by markdown-it itself."""
    blank = "\n" * note.text.count("\n", 0, parsed.body_start)
    tokens = MarkdownIt("commonmark").enable("table").parse(blank + note.text[parsed.body_start :])
    lines: set[int] = set()
    for tok in tokens:
        if tok.type == "heading_open" and tok.map:
            lines.update(range(tok.map[0] + 1, tok.map[1] + 1))
    return lines


def _sentence_starts(note: Note, parsed: ParsedMarkdown) -> set[int]:
    """Code-point offsets where a sentence starts; code and tables are cut at line starts when oversize."""
    starts: set[int] = set()
    for b in parsed.blocks:
        starts.add(b.start)
        if b.kind in ("code", "table", "html"):
            starts.update(m.end() for m in re.finditer("\n", note.text[: b.end]) if m.end() > b.start)
        else:
            starts.update(s for s, _ in sentence_spans(note.text, b.start, b.end))
    return starts


def _section_pairs(chunks: Sequence[Chunk]) -> Iterable[tuple[Chunk, Chunk]]:
    for a, b in pairwise(chunks):
        if a.heading_path == b.heading_path:
            yield a, b


def _prose_note() -> str:
    en = [
        f"Sentence {i} explains how hybrid search ranks passages"
        + " and why it matters" * (i % 4)
        + ("." if i % 3 else "!" if i % 2 else "?")
        for i in range(30)
    ]
    zh = [f"第{i}句说明中文检索如何使用二元组来匹配短词" + "并且保持引用准确" * (i % 3) + "。" for i in range(30)]
    quoted = [f"他说：“这是第{i}个例子。”" if i % 2 else f'She said "example {i} works."' for i in range(12)]
    return (
        "# Prose\n\nAn opening sentence for the note.\n\n"
        "## English\n\n" + " ".join(en[:15]) + "\n\n" + " ".join(en[15:]) + "\n\n"
        "## 中文\n\n" + "".join(zh[:15]) + "\n\n" + "".join(zh[15:]) + "\n\n"
        "## Mixed\n\n" + " ".join(quoted) + " Done.\n\n"
        "## Short\n\n" + " ".join(f"Short line {i}." if i % 2 else f"短句{i}。" for i in range(80)) + "\n"
    )


# --------------------------------------------------------------------------- walk_vault


def test_walk_lists_only_markdown_sorted_and_skips_hidden(vault: Path) -> None:
    assert (vault / ".obsidian" / "workspace.md").is_file()
    assert (vault / "attachments" / "diagram.txt").is_file()
    files, problems = walk_vault(vault)
    rels = [f.rel_path for f in files]
    assert problems == []
    assert rels == SAMPLE_NOTES
    assert rels == sorted(rels)
    assert all(r.endswith(".md") for r in rels)
    assert not any(part.startswith(".") for r in rels for part in r.split("/"))
    assert not any("diagram" in r or ".obsidian" in r for r in rels)
    for f in files:
        assert f.path.is_file()
        assert f.size == f.path.stat().st_size
    sidecars = {f.rel_path: f.sidecar for f in files}
    assert sidecars["guide/indexing/chunking.md"] == (vault / "guide/indexing/chunking.metadata.yaml").resolve()
    assert sidecars["guide/indexing/incremental-index.md"] is None


def test_walk_skips_git_sunlib_node_modules_and_hidden_files(vault: Path) -> None:
    for rel in (".git/x.md", ".sunlib/y.md", "node_modules/z.md", "guide/node_modules/w.md", "zh/.hidden.md"):
        _write(vault, rel, "# Hidden\n\nShould not be indexed.\n")
    _write(vault, "notes/visible.md", "# Visible\n")
    _write(vault, "notes/readme.txt", "not markdown\n")
    rels = [f.rel_path for f in walk_vault(vault)[0]]
    assert rels == sorted([*SAMPLE_NOTES, "notes/visible.md"])


def test_symlink_loop_terminates_and_each_note_is_listed_once(vault: Path, tmp_path: Path) -> None:
    (vault / "a").mkdir()
    os.symlink(vault, vault / "a" / "loop")  # a/loop -> vault root
    os.symlink(vault / "guide" / "indexing", vault / "aa-link")  # sorts before its target
    os.symlink(vault / "guide" / "indexing", vault / "zz-link")  # sorts after its target
    outside = tmp_path / "outside"
    _write(outside, "ext.md", "# Outside\n\nA note outside the vault.\n")
    os.symlink(outside, outside / "self")  # a loop outside the vault
    os.symlink(vault / "zh", outside / "back")  # and a way back in
    os.symlink(outside, vault / "ext")

    files, problems = walk_vault(vault)
    rels = [f.rel_path for f in files]
    # links are never followed: the one out of the vault is reported, those inside are left out
    assert [(p.rel_path, p.reason) for p in problems] == [
        ("ext", "symbolic link to a folder outside the vault: not indexed")
    ]
    assert len(rels) == len(set(rels))
    real = [os.path.realpath(f.path) for f in files]
    assert len(real) == len(set(real)), "a real note was listed twice"
    # notes inside the vault keep their real paths, whatever the link names
    assert rels == sorted(SAMPLE_NOTES)


# --------------------------------------------------------------------------- unreadable / invalid notes

BROKEN = {
    "broken/binary.md": (b"\xff\xfe bad", None, "UTF-8"),
    "broken/bad-frontmatter.md": ("---\ntitle: [unclosed\ntags: x\n---\n# Bad\n\nBody.\n", None, "frontmatter"),
    "broken/not-a-mapping.md": ("---\n- a\n- b\n---\n# List\n", None, "mapping"),
    "broken/bad-sidecar.md": ("# Fine\n\nBody text.\n", "tags: [a, b\nsummary: : x\n", "sidecar"),
    "broken/nul.md": ("# Nul\n\nA \x00 byte.\n", None, "binary"),
}


def _add_broken(vault: Path) -> None:
    for rel, (text, sidecar, _) in BROKEN.items():
        _write(vault, rel, text)
        if sidecar is not None:
            _write(vault, rel[:-3] + ".metadata.yaml", sidecar)


def test_load_note_raises_note_error_with_reason(vault: Path) -> None:
    _add_broken(vault)
    files = _files(vault)
    for rel, (_, _, reason) in BROKEN.items():
        with pytest.raises(NoteError, match=reason):
            load_note(files[rel], ["public"])
    with pytest.raises(NoteError, match=r"line \d+"):
        load_note(files["broken/bad-frontmatter.md"], ["public"])
    with pytest.raises(NoteError, match=r"bad-sidecar\.metadata\.yaml"):
        load_note(files["broken/bad-sidecar.md"], ["public"])
    # the rest still load
    for rel in SAMPLE_NOTES:
        note, _ = load_note(files[rel], ["public"])
        assert note.path == rel


def test_index_reports_failed_paths_with_reasons_and_adds_the_rest(vault: Path) -> None:
    _add_broken(vault)
    with Library.open(vault, embedding={"provider": "hash"}) as lib:
        report = lib.index()
    failed = dict(report.failed)
    assert set(failed) == set(BROKEN)
    for rel, (_, _, reason) in BROKEN.items():
        assert reason.lower() in failed[rel].lower(), (rel, failed[rel])
    assert sorted(report.added) == SAMPLE_NOTES


def test_unreadable_file_is_reported(vault: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod 000 does not stop reads")
    path = _write(vault, "locked.md", "# Locked\n")
    path.chmod(0)
    try:
        files = _files(vault)
        with pytest.raises(NoteError, match="cannot read"):
            load_note(files["locked.md"], ["public"])
        with Library.open(vault, embedding={"provider": "hash"}) as lib:
            report = lib.index()
        assert "locked.md" in dict(report.failed)
        assert "cannot read" in dict(report.failed)["locked.md"]
        assert sorted(report.added) == SAMPLE_NOTES
    finally:
        path.chmod(0o644)


# --------------------------------------------------------------------------- metadata


def test_sidecar_merges_with_frontmatter_and_inline_tags(vault: Path) -> None:
    path = vault / "guide/search/search-modes.md"
    path.write_text(path.read_text(encoding="utf-8") + "\nSee also #Ranking and `#not-a-tag`.\n", encoding="utf-8")
    note, _ = _load(vault, "guide/search/search-modes.md")
    md = note.metadata
    assert md["document_id"] == "doc_search_modes"
    assert md["chapter"] == "ch06"
    assert md["version"] == "v0.1"
    assert md["language"] == "en"
    assert md["summary"].startswith("Explains the bm25, dense and hybrid")
    assert md["aliases"] == ["Modes", "Fusion"]  # a frontmatter-only key survives
    # frontmatter [search, hybrid] + sidecar [search, fusion] + inline #search, #Ranking; code spans are not tags
    assert note.tags == ("search", "hybrid", "fusion", "ranking")
    assert md["tags"] == list(note.tags)
    assert note.title == "Search modes"


def test_sidecar_wins_and_tags_are_lowercased_union(tmp_path: Path) -> None:
    vault = tmp_path / "v"
    _write(
        vault,
        "n.md",
        "---\ntitle: From frontmatter\nchapter: ch01\ntags: [Alpha, Shared]\n---\n"
        "# Heading\n\nText with #Gamma and #shared tags.\n\n```\n#code-tag\n```\n",
    )
    _write(vault, "n.metadata.yaml", "title: From sidecar\ntags: [BETA, shared]\nversion: 2\n")
    note, _ = _load(vault, "n.md")
    assert note.title == "From sidecar"
    assert note.metadata["chapter"] == "ch01"
    assert note.metadata["version"] == 2
    assert note.tags == ("alpha", "shared", "beta", "gamma")


LINK_HEAVY_NOTE = """---
tags: [Front, shared]
---
# Help page #intitle

## Setup { #setup-anchor }

Jump to [[#Heading]], [[#Other heading|there]], [[Note#Heading]], [[Note#Heading|alias]],
[[Note (v2)#Part]], [[笔记#标题]], ![[diagram.png#frag]] and [[#^block-ref]].
Markdown links: [x](page.md#anchor), [y](#anchor2), [#linktext](u.md), ![#alt](i.png#imgfrag).
URLs: <https://a.b/#autofrag>, https://a.b/#barefrag, https://a.b/p-#dashfrag, www.a.b/#wwwfrag.
Code: `#code`, ``#code2 ` x`` and <a href="#htmlfrag">html</a>; escaped \\#escaped and &#35;entity.
Real tags: #project, #a/b-c, **#bold**, #中文标签 and #Shared again; C# and issue #123 are none.

| cell | [[#T\\|t]] #incell |
|---|---|
| x | [y](#cellfrag) |

```
#fenced
[[#fenced-link]]
```

    #indented-code
"""


def test_links_urls_code_and_headings_are_not_tags(tmp_path: Path) -> None:
    note, parsed = _note(tmp_path, LINK_HEAVY_NOTE)
    assert parsed.tags == ("intitle", "project", "a/b-c", "bold", "中文标签", "shared", "incell")
    # front matter first, then the inline tags in order, lower-cased and once each
    assert note.tags == ("front", "shared", "intitle", "project", "a/b-c", "bold", "中文标签", "incell")
    # the links themselves are still read
    assert parsed.links == ("Note", "Note (v2)", "笔记", "diagram.png")


def test_wikilinks_keep_only_the_target(tmp_path: Path, vault: Path) -> None:
    note, _ = _note(
        tmp_path,
        "# Links\n\nSee [[plain]], [[folder/target|Alias text]], [[other#Some heading]], "
        "[[both#Heading|alias]] and [[plain]] again.\n\n```\n[[in-code]]\n```\n",
    )
    assert note.links == ("plain", "folder/target", "other", "both")
    tour, _ = _load(vault, "getting-started/quick-tour.md")
    assert "guide/indexing/incremental-index" in tour.links  # written [[...|incremental indexing]]
    assert not any("|" in link or "#" in link for link in tour.links)
    chunking, _ = _load(vault, "guide/indexing/chunking.md")
    assert chunking.links == ("incremental-index",)  # written [[incremental-index#Embedding spaces]]


def test_acl_default_empty_and_explicit(vault: Path) -> None:
    notes = {n.path: n for n, _ in all_notes(vault)}
    assert notes["guide/indexing/chunking.md"].acl == ("public",)
    assert notes["internal/scratch.md"].acl == ()
    assert notes["internal/ops-runbook.md"].acl == ("ops",)
    assert notes["internal/roadmap-draft.md"].acl == ("team", "ops")
    files = _files(vault)
    custom, _ = load_note(files["index.md"], ["team", "staff"])
    assert custom.acl == ("team", "staff")
    scratch, _ = load_note(files["internal/scratch.md"], ["team"])
    assert scratch.acl == ()


# --------------------------------------------------------------------------- markdown blocks


def _fence_comments(text: str) -> list[str]:
    comments, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m and (fence is None or m.group(1)[0] == fence):
            fence = None if fence else m.group(1)[0]
        elif fence and line.startswith("#"):
            comments.append(line.lstrip("#").strip())
    return comments


def test_hash_lines_in_code_fences_are_not_headings(vault: Path) -> None:
    for rel in ("reference/configuration.md", "internal/ops-runbook.md", "getting-started/quick-tour.md"):
        note, parsed = _load(vault, rel)
        comments = _fence_comments(note.text)
        assert len(comments) >= 3, rel
        titles = {t for b in parsed.blocks for t in b.heading_path}
        assert not titles & set(comments), rel
    note, parsed = _load(vault, "reference/configuration.md")
    assert {b.heading_path for b in parsed.blocks} == {
        ("Configuration",),
        ("Configuration", "Where settings come from"),
        ("Configuration", "sunlib.toml"),
        ("Configuration", "sunlib.toml", "[index]"),
        ("Configuration", "sunlib.toml", "[embedding]"),
        ("Configuration", "sunlib.toml", "[search]"),
        ("Configuration", "sunlib.toml", "[answer]"),
        ("Configuration", "sunlib.toml", "[llm]"),
        ("Configuration", "Environment variables"),
        ("Configuration", "Checking the result"),
    }
    kinds = [b.kind for b in parsed.blocks if b.heading_path == ("Configuration", "sunlib.toml")]
    assert "code" in kinds


def test_backtick_and_tilde_fences_in_a_synthetic_note(tmp_path: Path) -> None:
    note, parsed = _note(
        tmp_path,
        "# Real\n\n```\n# fake one\n```\n\n~~~sh\n## fake two\n~~~\n\n````\n```\n# fake three\n````\n\nAfter.\n",
    )
    assert {b.heading_path for b in parsed.blocks} == {("Real",)}
    assert [b.kind for b in parsed.blocks] == ["code", "code", "code", "paragraph"]
    for b in parsed.blocks:
        assert note.text[b.start : b.end] == note.text[b.start : b.end].strip()
        assert note.text.split("\n")[b.start_line - 1] == note.text[b.start : b.end].split("\n")[0]


def test_setext_headings_without_frontmatter(vault: Path) -> None:
    _, parsed = _load(vault, "getting-started/quick-tour.md")
    assert parsed.frontmatter == {}
    assert parsed.body_start == 0
    assert parsed.first_h1 == "Quick tour"
    paths = {b.heading_path for b in parsed.blocks}
    assert ("Quick tour",) in paths
    assert ("Quick tour", "Ten minutes with the sample vault") in paths
    assert ("Quick tour", "Ten minutes with the sample vault", "Build the index") in paths
    assert ("Quick tour", "Where to go next") in paths
    assert not any("===" in t or "---" in t for p in paths for t in p)


def test_unclosed_frontmatter_fails_closed(tmp_path: Path) -> None:
    """Read as body text, an unclosed frontmatter's acl: would make the note public: the
    note is an error instead, and a lone rule that opens a page with no key after it is still text."""
    with pytest.raises(NoteError, match="never closed"):
        _note(tmp_path, "---\ntitle: not metadata\n\n# Heading\n\nBody text.\n")
    note, parsed = _note(tmp_path, "Intro.\n\n---\ntitle: not metadata\n")
    assert parsed.frontmatter == {} and "title" not in note.metadata


def test_frontmatter_offsets_keep_line_numbers(vault: Path) -> None:
    note, parsed = _load(vault, "guide/indexing/chunking.md")
    assert parsed.frontmatter["title"] == "Chunking"
    assert note.text[: parsed.body_start].count("\n") == 5
    lines = note.text.split("\n")
    for b in parsed.blocks:
        assert lines[b.start_line - 1].startswith(note.text[b.start : b.end].split("\n")[0])
        assert lines[b.end_line - 1].endswith(note.text[b.start : b.end].split("\n")[-1])


# --------------------------------------------------------------------------- offset invariant

ASTRAL = (
    "---\ntitle: Astral 😀\n---\n\n# Emoji 😀 heading\n\n"
    + "Intro 😀 with emoji. 𠀀𠀁𠀂是扩展B的字。More text 😀😀 here! " * 12
    + "\n\n## 二级 𠀀\n\n- item 😀 one\n- item 𠀀 two\n\n```python\nx = '𠀀😀'  # code\n```\n\n"
    + "𠀀" * 150
    + "\n\n| a | b |\n|---|---|\n| 😀 | 𠀀 |\n\nTail sentence 🎉.\n"
)
CHUNKERS = [
    StructureChunker(),
    StructureChunker(60),
    StructureChunker(25, 0.3),
    FixedChunker(),
    FixedChunker(120, 20),
    FixedChunker(37, 5),
]


def test_offset_invariant_on_every_note_and_astral_text(vault: Path, tmp_path: Path) -> None:
    notes = [*all_notes(vault), _note(tmp_path, ASTRAL, "astral.md")]
    assert len(notes) == len(SAMPLE_NOTES) + 1
    utf16_differs = 0
    total = 0
    for note, parsed in notes:
        lines = note.text.split("\n")
        for chunker in CHUNKERS:
            chunks = chunker.chunk(note, parsed)
            assert chunks, (note.path, chunker.fingerprint)
            for c in chunks:
                total += 1
                assert utf16_slice(note.text, c.start, c.end) == c.text, (note.path, chunker.fingerprint, c)
                assert c.text and c.text == c.text.strip()
                assert c.note_id == note.note_id
                text_lines = c.text.split("\n")
                assert text_lines[0] in lines[c.start_line - 1], (note.path, c.start_line)
                assert text_lines[-1] in lines[c.end_line - 1], (note.path, c.end_line)
                assert c.end_line - c.start_line == len(text_lines) - 1
                utf16_differs += note.text[c.start : c.end] != c.text
            assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert total > 500
    assert utf16_differs > 0, "offsets must be UTF-16 code units, not code points"


def test_utf16_slice_counts_surrogate_pairs() -> None:
    text = "a😀b𠀀c"
    assert utf16_slice(text, 0, 1) == "a"
    assert utf16_slice(text, 1, 3) == "😀"
    assert utf16_slice(text, 3, 4) == "b"
    assert utf16_slice(text, 4, 6) == "𠀀"
    assert utf16_slice(text, 6, 7) == "c"


# --------------------------------------------------------------------------- structure chunker


@pytest.mark.parametrize("max_tokens", [30, 60, 500])
def test_structure_chunks_fit_the_token_limit(vault: Path, max_tokens: int) -> None:
    chunker = StructureChunker(max_tokens)
    count = 0
    for note, parsed in all_notes(vault):
        for c in chunker.chunk(note, parsed):
            count += 1
            assert c.token_count == estimate_tokens(c.text)
            assert c.token_count <= max_tokens, (note.path, c.token_count, c.text[:80])
    assert count > len(SAMPLE_NOTES)


@pytest.mark.parametrize("max_tokens", [40, 60, 120])
def test_prose_chunks_end_at_sentence_ends(tmp_path: Path, max_tokens: int) -> None:
    note, parsed = _note(tmp_path, _prose_note())
    chunks = StructureChunker(max_tokens).chunk(note, parsed)
    assert len(chunks) > 6
    for c in chunks:
        assert c.token_count <= max_tokens
        last = c.text[-1]
        assert last in SENTENCE_END or last in CLOSERS, c.text[-40:]


def test_sample_chunks_end_at_sentence_or_block_ends(vault: Path) -> None:
    for note, parsed in all_notes(vault):
        ends = sentence_ends(note, parsed)
        for c in StructureChunker().chunk(note, parsed):
            assert cp_offset(note.text, c.end) in ends, (note.path, c.text[-60:])


def _check_overlaps(note: Note, parsed: ParsedMarkdown, chunker: StructureChunker) -> int:
    starts = _sentence_starts(note, parsed)
    overlaps = 0
    for a, b in _section_pairs(chunker.chunk(note, parsed)):
        if b.start >= a.end:
            continue
        overlaps += 1
        overlap = utf16_slice(note.text, b.start, a.end)
        assert a.text.endswith(overlap) and b.text.startswith(overlap)
        assert overlap != a.text, "the whole previous chunk was carried"
        assert b.start > a.start
        assert cp_offset(note.text, b.start) in starts, ("overlap starts mid-sentence", overlap[:60])
        assert estimate_tokens(overlap) <= chunker.overlap * chunker.max_tokens
    return overlaps


def test_overlap_is_whole_sentences_within_budget(tmp_path: Path, vault: Path) -> None:
    note, parsed = _note(tmp_path, _prose_note())
    synthetic = sum(_check_overlaps(note, parsed, StructureChunker(m)) for m in (40, 60, 120))
    assert synthetic > 5
    assert all(c.text[0] not in SENTENCE_END for c in StructureChunker(60).chunk(note, parsed))
    real = sum(_check_overlaps(n, p, StructureChunker(m)) for n, p in all_notes(vault) for m in (60, 120))
    assert real > 10


def test_chunks_never_cross_heading_boundaries(vault: Path, tmp_path: Path) -> None:
    notes = [*all_notes(vault), _note(tmp_path, _prose_note())]
    for note, parsed in notes:
        headings = _heading_lines(note, parsed)
        assert headings, note.path
        for chunker in (StructureChunker(), StructureChunker(60)):
            for c in chunker.chunk(note, parsed):
                assert not headings & set(range(c.start_line, c.end_line + 1)), (note.path, c.start_line)
                # every block the chunk touches is in the chunk's own section
                s, e = cp_offset(note.text, c.start), cp_offset(note.text, c.end)
                touched = [b for b in parsed.blocks if b.start < e and s < b.end]
                assert touched and all(b.heading_path == c.heading_path for b in touched)
        # textual check at the default size: no ATX heading line outside a code fence
        for c in StructureChunker().chunk(note, parsed):
            fence = None
            for line in c.text.split("\n"):
                m = FENCE.match(line)
                if m and (fence is None or m.group(1)[0] == fence):
                    fence = None if fence else m.group(1)[0]
                elif fence is None:
                    assert not ATX.match(line), (note.path, line)


def _oversize_case(tmp_path: Path, body: str, max_tokens: int, name: str) -> list[Chunk]:
    note, parsed = _note(tmp_path, f"# Oversize\n\n{body}\n\n## Next\n\nShort.\n", f"{name}.md")
    chunks = [c for c in StructureChunker(max_tokens).chunk(note, parsed) if c.heading_path == ("Oversize",)]
    assert len(chunks) >= 2, name
    for c in chunks:
        assert c.token_count <= max_tokens, (name, c.token_count)
    for a, b in pairwise(chunks):
        assert b.start >= a.end, "pieces of one oversize sentence do not overlap"
    assert re.sub(r"\s", "", "".join(c.text for c in chunks)) == re.sub(r"\s", "", body)
    return chunks


def test_oversize_cjk_sentence_is_split_into_fitting_pieces(tmp_path: Path) -> None:
    han = "".join(chr(0x4E00 + (i * 37) % 2000) for i in range(300))
    chunks = _oversize_case(tmp_path, han, 100, "han")
    assert [c.token_count for c in chunks] == [100, 100, 100]
    _oversize_case(tmp_path, "".join(chr(0x3042 + i % 80) for i in range(300)), 100, "kana")
    _oversize_case(tmp_path, "".join(chr(0x20000 + i) for i in range(300)), 100, "extension-b")
    # commas are half a token each: pieces must still fit once the halves add up
    _oversize_case(tmp_path, "中文，" * 100, 60, "commas")


def test_oversize_english_sentence_is_split_at_whitespace(tmp_path: Path) -> None:
    words = [f"word{i % 50}" for i in range(400)]
    body = " ".join(words)
    chunks = _oversize_case(tmp_path, body, 100, "english")
    assert sum(len(c.text.split()) for c in chunks) == 400
    for c in chunks:
        assert all(w in words for w in c.text.split())  # never cut inside a word
    _oversize_case(tmp_path, ", ".join(words), 90, "english-commas")
    # under the default limit the same 400 words stay whole
    note, parsed = _note(tmp_path, f"# One\n\n{body}\n", "whole.md")
    assert [c.text for c in StructureChunker().chunk(note, parsed)] == [body]


def test_fixed_window_baseline_cuts_mid_sentence_where_structure_does_not(vault: Path) -> None:
    note, parsed = _load(vault, "guide/indexing/chunking.md")
    ends = sentence_ends(note, parsed)
    for c in StructureChunker().chunk(note, parsed):
        assert cp_offset(note.text, c.end) in ends
    for chunker in (FixedChunker(800, 120), FixedChunker(120, 20)):
        chunks = chunker.chunk(note, parsed)
        mid = [c for c in chunks if cp_offset(note.text, c.end) not in ends]
        assert mid, chunker.fingerprint
        assert any(c.text[-1].isalnum() for c in mid)
        assert all(len(c.text) <= chunker.size for c in chunks)
        # windows overlap by (at most) the configured amount and start after the frontmatter
        assert cp_offset(note.text, chunks[0].start) >= parsed.body_start
        for a, b in pairwise(chunks):
            assert b.start < a.end and a.end - b.start <= chunker.overlap


def test_fixed_chunker_rejects_overlap_not_smaller_than_size() -> None:
    with pytest.raises(ValueError):
        FixedChunker(100, 100)


# --------------------------------------------------------------------------- ids


def test_note_id_is_sha256_of_the_relative_path(vault: Path) -> None:
    for note, _ in all_notes(vault):
        expected = "note_" + hashlib.sha256(note.path.encode("utf-8")).hexdigest()[:16]
        assert note.note_id == expected == note_id_for(note.path)
    assert note_id_for("a.md") != note_id_for("b/a.md")


def test_chunk_ids_are_stable_across_rechunking(vault: Path) -> None:
    for chunker in (StructureChunker(), StructureChunker(60), FixedChunker()):
        first = {n.path: [c.chunk_id for c in chunker.chunk(n, p)] for n, p in all_notes(vault)}
        second = {n.path: [c.chunk_id for c in chunker.chunk(n, p)] for n, p in all_notes(vault)}
        assert first == second
        ids = [i for v in first.values() for i in v]
        assert len(ids) == len(set(ids))
        assert all(re.fullmatch(r"chk_[0-9a-f]{16}", i) for i in ids)


def _ids_by_section(vault: Path, rel: str, chunker: StructureChunker) -> dict[tuple[str, ...], list[str]]:
    note, parsed = _load(vault, rel)
    out: dict[tuple[str, ...], list[str]] = {}
    for c in chunker.chunk(note, parsed):
        out.setdefault(c.heading_path, []).append(c.chunk_id)
    return out


@pytest.mark.parametrize("max_tokens", [60, 500])
def test_changing_one_sentence_changes_only_that_sections_ids(vault: Path, max_tokens: int) -> None:
    rel = "guide/indexing/chunking.md"
    chunker = StructureChunker(max_tokens)
    before = _ids_by_section(vault, rel, chunker)
    path = vault / rel
    old = "Overlap means a fact stated at a chunk boundary can still be found with its surrounding sentences."
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, "Overlap keeps boundary facts findable."), encoding="utf-8")
    after = _ids_by_section(vault, rel, chunker)
    changed = {hp for hp in before.keys() | after.keys() if before.get(hp) != after.get(hp)}
    assert changed == {("Chunking", "Overlap")}
    assert len(before) > 5


def test_identical_paragraphs_under_one_heading_get_distinct_ids(tmp_path: Path) -> None:
    para = "This exact paragraph appears twice under the same heading and must keep two distinct chunk ids."
    text = f"# Same\n\n{para}\n\n{para}\n\n# Other\n\n{para}\n"
    note, parsed = _note(tmp_path, text)
    chunks = StructureChunker(20).chunk(note, parsed)
    same = [c for c in chunks if c.text == para]
    assert len(same) == 3
    assert [c.heading_path for c in same] == [("Same",), ("Same",), ("Other",)]
    assert len({c.chunk_id for c in same}) == 3
    again = StructureChunker(20).chunk(note, parsed)
    assert [c.chunk_id for c in again] == [c.chunk_id for c in chunks]


def test_a_note_of_only_headings_or_frontmatter_is_one_findable_chunk(tmp_path: Path) -> None:
    """Such a note would get no chunk, so no search would find it, not even by its title."""
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "outline.md").write_text("# Roadmap\n\n## Quokka migration\n\n## Otter sync\n", encoding="utf-8")
    (vault / "card.md").write_text("---\ntitle: Zebra ledger\ntags: [x]\n---\n", encoding="utf-8")
    lib = Library.open(vault, embedding={"provider": "hash"})
    try:
        assert lib.index().chunks_written == 2
        assert [h.path for h in lib.search("Quokka migration", mode="bm25").hits] == ["outline.md"]
        assert [h.path for h in lib.search("zebra ledger", mode="bm25").hits] == ["card.md"]
        for hit in lib.search("Otter sync", mode="bm25").hits:
            text = (vault / hit.path).read_text(encoding="utf-8")
            assert text[hit.citation.start : hit.citation.end] == hit.text  # ASCII: UTF-16 = code points
    finally:
        lib.close()
