"""Answer units: the pieces of a passage that an answer can quote, as the Markdown draws them.

A passage is read line by line into blocks, and each block gives its units:

* prose paragraphs give one ``sentence`` per sentence; a line written as ``Term: what it
  is`` (or ``**Term** — ...``) is one ``definition``;
* a heading gives a ``heading`` unit: the heading with the first sentence under it;
* a list gives one ``item`` per entry, prefixed with its lead-in sentence when that ends
  with a colon ("To run it: ... Install uvicorn"), and, from two entries up, the whole list
  as one unit (``steps`` when numbered, ``list`` otherwise), so a procedure question can get
  every step;
* a table gives one ``row`` per body row, each cell behind its column header
  ("Status: 404 · Meaning: not found");
* a fenced code block gives one ``code`` unit per short, non-blank line.

Every unit carries its text as a reader sees it (``clean_sentence``: no list, heading or
quote markers, links and emphasis rendered), the context it needs to be understood
(``lead``: the lead-in or the table header), its offset in the passage and its position
among the passage's units.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...contracts import Unit
from ...text.sentences import clean_sentence, is_quotable, sentence_spans

KINDS = ("sentence", "definition", "heading", "item", "steps", "list", "row", "code")
MAX_LIST_ITEMS = 12
MAX_LIST_CHARS = 900
MAX_CODE_CHARS = 100
MAX_DEFINITION_CHARS = 320

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^(\s*)([-*+]|\d{1,3}[.)])\s+(.*)$")
_ROW = re.compile(r"^\s*\|.*\|\s*$")
_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_DEFINITION = re.compile(  # "Term: what it is", "**Term** — what it is"
    r"^\s*(?:\*\*[^*\n]{1,60}\*\*|`[^`\n]{1,60}`|[^\s:：][^:：\n]{0,40}?)\s*(?:[:：]|\s[—–-]\s)\s*\S"
)


@dataclass
class _Block:
    kind: str  # prose | heading | list | table | code
    lines: list[tuple[int, str]]  # (offset, raw line)


def split_units(text: str) -> list[Unit]:
    """The answer units of one passage, in reading order."""
    units: list[Unit] = []
    blocks = _blocks(text)
    for i, block in enumerate(blocks):
        if block.kind == "prose":
            units += _prose(block)
        elif block.kind == "heading":
            nxt = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1].kind == "prose" else None
            units += _heading(block, nxt)
        elif block.kind == "list":
            units += _list(block, _lead_in(blocks, i))
        elif block.kind == "table":
            units += _table(block)
        else:
            units += _code(block)
    return [Unit(u.kind, u.text, u.start, n, u.lead) for n, u in enumerate(units)]


def _blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    offset = 0
    fenced = False
    for raw in text.splitlines(keepends=True):
        line = raw.rstrip("\r\n")
        at = offset
        offset += len(raw)
        if _FENCE.match(line):
            fenced = not fenced
            if fenced:
                blocks.append(_Block("code", []))
            continue
        if fenced:
            blocks[-1].lines.append((at, line))
            continue
        if not line.strip():
            blocks.append(_Block("blank", []))
            continue
        if _HEADING.match(line):
            kind = "heading"
        elif _ROW.match(line):
            kind = "table"
        elif _ITEM.match(line) or (blocks and blocks[-1].kind == "list" and line.startswith((" ", "\t"))):
            kind = "list"
        else:
            kind = "prose"
        if blocks and blocks[-1].kind == kind and kind != "heading":
            blocks[-1].lines.append((at, line))
        else:
            blocks.append(_Block(kind, [(at, line)]))
    return [b for b in blocks if b.kind != "blank" and b.lines]


def _prose(block: _Block) -> list[Unit]:
    out: list[Unit] = []
    start = block.lines[0][0]
    para = "\n".join(line for _, line in block.lines)
    for at, line in block.lines:  # a definition line stays whole
        clean = clean_sentence(line)
        if _DEFINITION.match(line) and len(clean) <= MAX_DEFINITION_CHARS and is_quotable(clean):
            out.append(Unit("definition", clean, at, 0))
    defined = {u.text for u in out}
    for s, e in sentence_spans(para):
        sentence = clean_sentence(para[s:e])
        if is_quotable(sentence) and not any(sentence in d for d in defined):
            out.append(Unit("sentence", sentence, start + s, 0))
    return sorted(out, key=lambda u: u.start)


def _heading(block: _Block, nxt: _Block | None) -> list[Unit]:
    at, line = block.lines[0]
    m = _HEADING.match(line)
    title = clean_sentence(m.group(1)) if m else ""
    if not title or nxt is None:
        return []
    para = "\n".join(x for _, x in nxt.lines)
    spans = sentence_spans(para)
    first = clean_sentence(para[spans[0][0] : spans[0][1]]) if spans else ""
    if not is_quotable(first):
        return []
    return [Unit("heading", first, at, 0, lead=title)]


def _lead_in(blocks: list[_Block], i: int) -> str:
    """The sentence right before a list, when it introduces it (ends with a colon)."""
    if i == 0 or blocks[i - 1].kind != "prose":
        return ""
    para = "\n".join(x for _, x in blocks[i - 1].lines)
    spans = sentence_spans(para)
    last = clean_sentence(para[spans[-1][0] : spans[-1][1]]) if spans else ""
    return last if last.endswith((":", "：")) else ""


def _list(block: _Block, lead: str) -> list[Unit]:
    items: list[tuple[int, str, bool]] = []  # (offset, text, numbered)
    for at, line in block.lines:
        m = _ITEM.match(line)
        if m and len(m.group(1)) < 2:  # a top-level entry
            items.append((at, m.group(3), m.group(2)[0].isdigit()))
        elif items:  # a continuation or a nested entry belongs to the entry above
            items[-1] = (items[-1][0], items[-1][1] + " " + line.strip(), items[-1][2])
    out: list[Unit] = []
    texts = [clean_sentence(t) for _, t, _ in items]
    for (at, _, _), item in zip(items, texts, strict=True):
        if is_quotable(item) or (lead and len(item) >= 2):
            out.append(Unit("item", item, at, 0, lead=lead))
    if len(items) >= 2:
        numbered = all(n for _, _, n in items)
        body = [f"{n}. {t}" if numbered else f"- {t}" for n, t in enumerate(texts[:MAX_LIST_ITEMS], 1)]
        whole = "\n".join(([lead] if lead else []) + body)
        if len(whole) <= MAX_LIST_CHARS:
            out.append(Unit("steps" if numbered else "list", whole, items[0][0], 0, lead=lead))
    return out


def _cells(line: str) -> list[str]:
    return [clean_sentence(c) for c in line.strip().strip("|").split("|")]


def _table(block: _Block) -> list[Unit]:
    rows = [(at, line) for at, line in block.lines if not _RULE.match(line)]
    has_header = len(block.lines) >= 2 and _RULE.match(block.lines[1][1]) is not None
    header = _cells(rows[0][1]) if has_header and rows else []
    out: list[Unit] = []
    for at, line in rows[1:] if header else rows:
        cells = _cells(line)
        if header and len(header) == len(cells):
            text = " · ".join(f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True) if c)
        else:
            text = " · ".join(c for c in cells if c)
        if len(text) >= 3:
            out.append(Unit("row", text, at, 0, lead=" · ".join(h for h in header if h)))
    return out


def _code(block: _Block) -> list[Unit]:
    out = []
    for at, line in block.lines:
        code = line.strip()
        if 2 < len(code) <= MAX_CODE_CHARS and any(ch.isalnum() for ch in code) and not code.startswith("#"):
            out.append(Unit("code", code, at, 0))
    return out
