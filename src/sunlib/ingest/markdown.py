"""Markdown -> frontmatter, heading-aware blocks, tags and wikilinks.

Block structure comes from markdown-it-py (CommonMark + tables): it knows
ATX and setext headings and never reads ``#`` inside a code fence as a
heading. Its line maps are turned into code-point spans of the original text,
so every block is an exact slice of the file.

Tags are ``#word`` in prose, read from markdown-it's inline tokens so that only text
counts: not code (inline or fenced), not HTML, not a link's text or target
(``[x](page.md#anchor)``, ``<https://a.b/#frag>``), not a bare URL, not a wikilink
(``[[#Heading]]``, ``[[Note#Heading|alias]]``), not a heading's ``{#id}``, and not an
escaped ``\\#`` or an entity ``&#35;``. Headings (``# Title``) are never tags: the ``#``
of a heading is its marker, not part of its text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from ..contracts import Block
from .ids import line_starts


# text_join off: escapes and entities stay their own tokens, so "\#x" and "&#35;x" are no tags
@functools.cache
def _parser() -> Any:
    """The CommonMark parser, built on first use: a search that parses no note never imports it."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").disable("text_join")


_LONE_CR = re.compile(r"\r(?!\n)")
_FRONTMATTER_END = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.MULTILINE)
_FRONTMATTER_OPEN = re.compile(r"\A---[ \t]*\r?\n")
# a fence-like first line (after blank lines, indented, two dashes or more, spaces between them),
# then a "key:" line
_LOOKS_LIKE_FRONTMATTER = re.compile(r"\A(?:[ \t]*\r?\n)*[ \t]*-[ \t]*-[- \t]*\r?\n[ \t]*[A-Za-z_][\w-]*[ \t]*:")
# A trailing attribute list on a heading ("Setup { #setup }", MkDocs/Pandoc) is an anchor, not title text.
_HEADING_ATTRS = re.compile(r"\s*\{\s*#[^{}]*\}\s*$")
_WIKILINK = re.compile(r"\[\[([^\[\]|#\n]+)(?:#[^\[\]|\n]*)?(?:\|[^\[\]\n]*)?\]\]")
_INLINE_TAG = re.compile(r"(?<![\w#&/\\])#([^\W\d_][\w\-/]*|\d+[^\W\d_][\w\-/]*)", re.UNICODE)
_NOT_PROSE = re.compile(
    r"!?\[\[[^\[\]\n]*\]\]"  # wikilinks and embeds
    r"|\b(?:[A-Za-z][A-Za-z0-9+.\-]*://|www\.)\S*"  # bare URLs
)
_BLOCK_KINDS = {
    "paragraph_open": "paragraph",
    "bullet_list_open": "list",
    "ordered_list_open": "list",
    "blockquote_open": "quote",
    "table_open": "table",
    "fence": "code",
    "code_block": "code",
    "html_block": "html",
}


class FrontmatterError(ValueError):
    pass


@dataclass(frozen=True)
class ParsedMarkdown:
    frontmatter: dict[str, Any]
    body_start: int  # code point where the body starts (after frontmatter)
    blocks: tuple[Block, ...]
    first_h1: str | None
    tags: tuple[str, ...]
    links: tuple[str, ...]


def split_frontmatter(text: str) -> tuple[dict[str, Any], int]:
    """YAML frontmatter (``---`` on the first line, closed by ``---`` or ``...``) and where the body starts.

    It fails closed: a file that starts like frontmatter but is not well-formed frontmatter raises
    FrontmatterError (the note is not indexed), never reads as a note without metadata, because its
    ``acl:`` would then be body text and the note public. That is an opening ``---`` that is never
    closed, and a fence-like first line (``--``, `` ---``, ``---`` after blank lines) followed by a
    ``key:`` line."""
    opening = _FRONTMATTER_OPEN.match(text)
    if opening is None:
        if _LOOKS_LIKE_FRONTMATTER.match(text):
            raise FrontmatterError("frontmatter must open with '---' alone on the first line")
        return {}, 0
    import yaml  # on first use: a search that reads no frontmatter never imports PyYAML (about 25 ms)

    from .yaml_bounded import DuplicateKey, YamlTooLarge, load_yaml

    first_nl = opening.end()
    m = _FRONTMATTER_END.search(text, first_nl)
    if m is None:
        raise FrontmatterError("frontmatter opened on line 1 is never closed (no '---' line after it)")
    try:
        data = load_yaml(text[first_nl : m.start()]) or {}
    except YamlTooLarge as exc:
        raise FrontmatterError(f"YAML frontmatter too large: {exc}") from None
    except DuplicateKey as exc:
        raise FrontmatterError(f"invalid YAML frontmatter: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise FrontmatterError(f"invalid YAML frontmatter{where}: {getattr(exc, 'problem', exc)}") from None
    except ValueError as exc:  # a value YAML reads but Python cannot hold, e.g. the date 2024-13-45
        raise FrontmatterError(f"invalid YAML frontmatter: {exc}") from None
    if not isinstance(data, dict):
        raise FrontmatterError("frontmatter must be a YAML mapping")
    end = m.end()
    if end < len(text) and text[end] == "\r":
        end += 1
    if end < len(text) and text[end] == "\n":
        end += 1
    return data, end


def parse_markdown(text: str) -> ParsedMarkdown:
    """Frontmatter, blocks (code-point spans of ``text``), first H1, tags and links of one note.

    markdown-it ends a line at a lone CR too; it is read as LF here (same length, so every
    span is still one of ``text``), and the line lookup agrees with markdown-it's line map."""
    text = _LONE_CR.sub("\n", text)
    frontmatter, body_start = split_frontmatter(text)
    starts = line_starts(text)
    first_body_line = text.count("\n", 0, body_start)
    # Blank out the frontmatter lines so markdown-it's line numbers match the file.
    source = "\n" * first_body_line + text[body_start:]
    tokens = _parser().parse(source)

    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []  # (level, title) stack
    first_h1: str | None = None
    inline_text: list[str] = []
    tag_text: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "heading_open":
            level = int(tok.tag[1])
            title = _HEADING_ATTRS.sub("", tokens[i + 1].content).strip()
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, title))
            if level == 1 and first_h1 is None:
                first_h1 = title
            inline_text.append(title)
            tag_text.append(_HEADING_ATTRS.sub("", _taggable(tokens[i + 1])))
            i += 3
            continue
        if tok.type == "inline":
            inline_text.append(tok.content)
            tag_text.append(_taggable(tok))
        if tok.level == 0 and tok.type in _BLOCK_KINDS and tok.map:
            line0, line1 = tok.map
            start = starts[line0]
            end = starts[line1] if line1 < len(starts) else len(text)
            while end > start and text[end - 1] in "\r\n \t":
                end -= 1
            if end > start:
                blocks.append(
                    Block(
                        kind=_BLOCK_KINDS[tok.type],
                        heading_path=tuple(t for _, t in headings),
                        start=start,
                        end=end,
                        start_line=line0 + 1,
                        end_line=line0 + text.count("\n", start, end) + 1,
                    )
                )
        i += 1

    prose = "\n".join(inline_text)
    tags = tuple(dict.fromkeys(t.lower() for t in _INLINE_TAG.findall("\n".join(tag_text))))
    links = tuple(dict.fromkeys(m.group(1).strip() for m in _WIKILINK.finditer(prose)))
    return ParsedMarkdown(frontmatter, body_start, tuple(blocks), first_h1, tags, links)


def _taggable(inline: Any) -> str:
    """The prose of an inline token where a tag may stand: its text outside code, HTML, links and URLs."""
    parts: list[str] = []
    in_link = 0
    for child in inline.children or ():
        kind = child.type
        if kind == "link_open":
            in_link += 1
        elif kind == "link_close":
            in_link -= 1
        if in_link or kind in ("link_open", "link_close"):
            parts.append(" ")
        elif kind == "text":
            parts.append(child.content)
        elif kind == "text_special":
            parts.append(child.markup)  # "\#" or "&#35;" as written, which the tag pattern skips
        elif kind in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif kind in ("code_inline", "html_inline", "image"):
            parts.append(" ")
        # emphasis open/close marks add nothing: "**#tag**" is the tag "#tag"
    return _NOT_PROSE.sub(" ", "".join(parts))
