"""Markdown and Obsidian syntax -> the text a reader of the note sees.

``render_markdown`` turns one passage of note text into what an answer should quote:

* wikilinks: ``[[Note]]`` -> ``Note``, ``[[Note|alias]]`` -> ``alias``, ``[[Note#Heading]]``
  -> ``Note > Heading``, ``[[#Heading]]`` -> ``Heading``, ``[[Note#^block]]`` -> ``Note``;
  an embed of a note (``![[Note]]``) reads like its link, an embed of an attachment
  (``![[diagram.png]]``, ``![[talk.pdf#page=3]]``) is dropped: nothing of it is text;
* Markdown links and images: ``[text](url)`` and ``[text][ref]`` -> ``text``,
  ``![alt](img)`` -> ``alt``, ``<https://a.b>`` -> ``https://a.b``;
* callouts: the line ``> [!tip]- Title`` becomes ``Title:`` (``Title：`` after Chinese, no
  colon when the title ends in punctuation) and a callout without a title loses the line;
  the ``>`` markers of the callout's lines go (a quote nested inside keeps its own);
* containers, as docs sites write them: VitePress / Docusaurus ``::: tip Title`` (or
  ``:::tip[Title]``) ... ``:::`` and MkDocs admonitions ``!!! note "Title"`` (``???`` when
  collapsible) read like callouts: the opening line becomes ``Title:`` (or goes, untitled), a
  closing ``:::`` goes, and the admonition's indented lines lose their four spaces;
* emphasis: ``**x**``, ``__x__``, ``*x*``, ``_x_``, ``~~x~~``, ``==x==`` -> ``x``. A delimiter
  that touches an ASCII letter or digit on its outer side is left alone (``x**2``,
  ``2*3*4``, ``a==b``), and underscores never open inside a word (``snake_case_name``);
  ``__word__`` around one lowercase word reads as a Python name (``__init__``) and stays;
* HTML: known tags are dropped and their text kept (``<kbd>Ctrl</kbd>`` -> ``Ctrl``;
  ``<br>`` and block tags become a space), comments (``<!-- -->``, ``%% %%``) go,
  entities are decoded (``&amp;`` -> ``&``); ``List<String>`` is not HTML and stays;
* footnote references (``[^1]``), block ids (`` ^abc123`` at a line's end) and task boxes
  (``- [x] ``) go; a backslash escape gives its character (``\\*`` -> ``*``).

Code is not Markdown: inline code keeps its content *and its backticks* (answers are
shown as Markdown-ish text, where the backticks still mark an identifier or command),
and fenced code blocks are returned exactly as written. Headings, list markers, table
pipes and the markers of plain quotes are block structure, not inline syntax: they are
kept, so the result still has the passage's lines (``sentences.clean_sentence`` strips
them when it makes one line of a sentence).

Rendering never produces a ``[ref:`` marker: what it uncovers (``\\[ref:x\\]`` -> ``[ref:x]``)
is defused (``refs.defuse_refs``). The function is pure and keeps no offsets: the
citation verifier reads a chunk both as written and as rendered (``answer.single.citations``),
so a quote in rendered form still matches the note it came from.
"""

from __future__ import annotations

import html
import re

from .refs import defuse_refs
from .tokens import is_cjk

__all__ = ["render_markdown", "render_wikilink"]

_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")

# ---------------------------------------------------------------- callouts
_QUOTE_MARKER = re.compile(r"[ \t]*>[ \t]?")
_CALLOUT = re.compile(r"(?P<markers>(?:[ \t]*>)+)[ \t]*\[!(?P<kind>[^\]\n]+)\][+-]?(?P<title>[^\n]*)")
_TITLE_ENDS = ".:!?;。：！？；…"

# ---------------------------------------------------------------- protected spans
# One left-to-right scan finds what later passes must not touch: code spans (any run of
# backticks closed by a run of the same length), backslash escapes, comments, autolinks,
# wikilinks and bare URLs. Each is replaced by a placeholder and restored at the end.
_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_GONE, _BREAK = "\ue002", "\ue003"  # where something was dropped / where a tag broke the line
# Any character but a blank line; spans are bounded so that unclosed markup costs linear time.
_NO_BLANK_LINE = r"(?:(?!\n[ \t]*\n)[\s\S])"
_URL_START = r"(?i:https?://|s?ftps?://|file://|ssh://|git://|obsidian://|zotero://|www\.)"
_SCAN = re.compile(
    # the lookahead lets the engine skip, in one step, every position nothing here can start at
    rf"(?=[`\\{_PH_OPEN}{_PH_CLOSE}{_GONE}{_BREAK}<%!\[hHfFsSgGoOzZwW])(?:"
    + "|".join(
        (
            rf"(?P<code>(?<!`)(?P<ticks>`+)(?!`){_NO_BLANK_LINE}{{1,1000}}?(?<!`)(?P=ticks)(?!`))",
            r"(?P<esc>\\(?P<escaped>[!-/:-@\[-`{-~]))",
            rf"(?P<pua>[{_PH_OPEN}{_PH_CLOSE}{_GONE}{_BREAK}])",
            r"(?P<comment><!--[\s\S]*?-->|%%[\s\S]*?%%)",
            r"<(?P<autolink>[A-Za-z][A-Za-z0-9+.\-]{1,31}:[^\s<>]*|[^\s<>@\\]+@[^\s<>@\\]+\.[^\s<>@\\]+)>",
            r"(?P<wikilink>(?P<embed>!?)\[\[(?P<inner>[^\[\]\n]+)\]\])",
            rf"(?P<url>\b{_URL_START}[^\s<>()\[\]`]*[^\s<>()\[\]`.,;:!?'\"*_~=])",
        )
    )
    + ")"
)
_PLACEHOLDER = re.compile(rf"{_PH_OPEN}(\d+){_PH_CLOSE}")
# A dropped piece takes the spaces before it along when a space or punctuation follows it.
_GAP = re.compile(rf"[ \t]*{_GONE}+(?=[ \t]|$|[.,;:!?)\]。，；：！？）])|{_GONE}+", re.MULTILINE)
# A line-breaking tag is one space between words and nothing at either end of a line.
_BREAKS = re.compile(rf"[ \t]*(?:{_BREAK}[ \t]*)+")
_EDGE_BREAKS = re.compile(rf"^[ \t]*(?:{_BREAK}[ \t]*)+|(?:[ \t]*{_BREAK})+[ \t]*$", re.MULTILINE)
_ALIAS_BAR = re.compile(r"\\?\|")  # "\|" inside a table
_ATTACHMENT = re.compile(r"\.(?!md$)[A-Za-z][A-Za-z0-9]{0,4}$", re.IGNORECASE)

# ---------------------------------------------------------------- links, notes, HTML
_LINK_TEXT = r"\[(?P<text>(?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]"
_LINK_DEST = r"\(\s*(?:<[^<>\n]*>|(?:[^()\s]|\([^()\s]*\))*)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
_IMAGE = re.compile(rf"!{_LINK_TEXT}(?:{_LINK_DEST}|\[[^\[\]\n]*\])")
_LINK = re.compile(rf"{_LINK_TEXT}(?:{_LINK_DEST}|\[[^\[\]\n]*\])")
_FOOTNOTE_DEF = re.compile(r"^([ \t]*)\[\^[^\]\s]+\]:[ \t]*", re.MULTILINE)
_FOOTNOTE_REF = re.compile(r"\[\^[^\]\s]+\]")
_BLOCK_ID = re.compile(r"[ \t]+\^[A-Za-z0-9\-]+[ \t]*$", re.MULTILINE)
_TASK_BOX = re.compile(r"^([ \t]*(?:>[ \t]*)*(?:[-*+]|\d{1,9}[.)])[ \t]+)\[[ xX\-/]\][ \t]+", re.MULTILINE)
_BLOCK_TAGS = (
    "address|article|aside|blockquote|br|center|dd|details|div|dl|dt|figcaption|figure|footer|h1|h2|h3|h4|h5|"
    "h6|header|hr|li|main|nav|ol|p|pre|section|summary|table|tbody|td|tfoot|th|thead|tr|ul"
)
_INLINE_TAGS = (
    "a|abbr|b|bdi|bdo|big|cite|code|del|dfn|em|font|i|img|ins|kbd|label|mark|"
    "q|s|samp|small|span|strike|strong|sub|sup|time|tt|u|var|wbr"
)
_HTML_DROP = re.compile(r"<(script|style)\b[^>]*>[\s\S]*?</\1\s*>", re.IGNORECASE)
_HTML_BLOCK = re.compile(rf"</?(?:{_BLOCK_TAGS})\b(?:\s[^<>]*)?/?>", re.IGNORECASE)
_HTML_INLINE = re.compile(rf"</?(?:{_INLINE_TAGS})\b(?:\s[^<>]*)?/?>", re.IGNORECASE)
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")

# ---------------------------------------------------------------- emphasis
_ALNUM = "A-Za-z0-9"


def _delimited(delim: str, outer: str) -> re.Pattern[str]:
    """``delim`` text ``delim``: no space just inside, none of ``outer`` (or the delimiter) just outside."""
    d = re.escape(delim)
    c = re.escape(delim[0])
    # the delimiter comes first and the look-behind after it, so the engine can search for the literal
    return re.compile(
        rf"{d}(?<![{outer}{c}\\]{d})(?![\s{c}])(?P<body>{_NO_BLANK_LINE}{{1,500}}?)(?<![\s{c}]){d}(?![{outer}{c}])"
    )


_EMPHASIS = (
    ("***", _delimited("***", _ALNUM)),
    ("___", _delimited("___", r"\w")),
    ("**", _delimited("**", _ALNUM)),
    ("__", _delimited("__", r"\w")),
    ("*", _delimited("*", _ALNUM)),
    ("_", _delimited("_", r"\w")),
    ("~~", _delimited("~~", _ALNUM)),
    ("==", _delimited("==", _ALNUM)),
)
_DUNDER = re.compile(r"[a-z][a-z0-9_]*")


def render_markdown(text: str) -> str:
    """The passage as its reader sees it: see the module docstring for what changes."""
    # Containers and callouts first: once their markers are gone, a code fence inside one is a fence.
    lines = _callouts(_containers(text.splitlines(keepends=True)))
    out: list[str] = []
    prose: list[str] = []
    for line, code in _fenced(lines):
        if code:
            out.append(_render_prose("".join(prose)))
            prose = []
            out.append(line)
        else:
            prose.append(line)
    out.append(_render_prose("".join(prose)))
    return defuse_refs("".join(out))  # an escaped \[ref:x\] must not become a marker


def _fenced(lines: list[str]) -> list[tuple[str, bool]]:
    """Each line, and whether it belongs to a fenced code block (its fences included)."""
    out: list[tuple[str, bool]] = []
    fence: str | None = None
    for line in lines:
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
            out.append((line, fence is not None))
            continue
        out.append((line, True))
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end() :].strip():
            fence = None
    return out


def render_wikilink(inner: str, embed: bool = False) -> str:
    """What ``[[inner]]`` (``![[inner]]`` when ``embed``) shows: its alias, else note and headings."""
    bar = _ALIAS_BAR.search(inner)
    target, alias = (inner[: bar.start()], inner[bar.end() :]) if bar else (inner, "")
    if embed and _ATTACHMENT.search(target.split("#", 1)[0].strip()):
        return ""
    if alias.strip():
        return alias.strip()
    note, *anchors = target.split("#")
    parts = [note.strip(), *(a.strip() for a in anchors if not a.strip().startswith("^"))]
    return " > ".join(p for p in parts if p)


def _render_prose(text: str) -> str:
    if not text:
        return text
    stash: list[str] = []
    text = _SCAN.sub(lambda m: _protect(m, stash), text)
    if "[" in text:
        text = _IMAGE.sub(lambda m: m.group("text") or _GONE, text)
        text = _LINK.sub(lambda m: m.group("text"), text)
        text = _FOOTNOTE_DEF.sub(r"\1", text)
        text = _FOOTNOTE_REF.sub(_GONE, text)
        text = _TASK_BOX.sub(r"\1", text)
    if "^" in text:
        text = _BLOCK_ID.sub("", text)
    if "<" in text:
        text = _HTML_DROP.sub(_GONE, text)
        text = _HTML_BLOCK.sub(_BREAK, text)
        text = _HTML_INLINE.sub("", text)
    text = _emphasis(text)
    if "&" in text:
        text = _ENTITY.sub(lambda m: html.unescape(m.group()), text)
    if _GONE in text:
        text = _GAP.sub("", text)
    if _BREAK in text:
        text = _BREAKS.sub(" ", _EDGE_BREAKS.sub("", text))
    return _PLACEHOLDER.sub(lambda m: stash[int(m.group(1))], text) if stash else text


def _protect(m: re.Match[str], stash: list[str]) -> str:
    if m.group("code") is not None:
        kept = m.group("code")
    elif m.group("esc") is not None:
        kept = m.group("escaped")
    elif m.group("pua") is not None:
        kept = m.group("pua")
    elif m.group("comment") is not None:
        return _GONE
    elif m.group("autolink") is not None:
        kept = m.group("autolink")
    elif m.group("wikilink") is not None:
        kept = render_wikilink(m.group("inner"), embed=bool(m.group("embed")))
        if not kept:
            return _GONE
    else:
        kept = m.group("url")
    stash.append(kept)
    return f"{_PH_OPEN}{len(stash) - 1}{_PH_CLOSE}"


def _emphasis(text: str) -> str:
    for _ in range(4):  # nested emphasis (**a _b_ c**) takes one pass a level
        before = text
        for delim, pattern in _EMPHASIS:
            if delim in text:
                text = pattern.sub(_unwrap, text)
        if text == before:
            break
    return text


def _unwrap(m: re.Match[str]) -> str:
    body = m.group("body")
    if m.group().startswith("__") and _DUNDER.fullmatch(body):
        return m.group()  # __init__, __name__: a Python name, not bold
    return body


# ---------------------------------------------------------------- containers

_COLONS = re.compile(
    r"[ \t]*:{3,}[ \t]*(?P<kind>[A-Za-z][\w-]*)?(?:[ \t]*\[(?P<bracket>[^\]\n]*)\]|[ \t]+(?P<title>[^\n]*?))?[ \t]*"
)
_ADMONITION = re.compile(
    r"(?P<indent>[ \t]*)(?:!!!|\?\?\?\+?)[ \t]+(?P<kind>[\w-]+)(?:[ \t]+\"(?P<title>[^\"\n]*)\")?[ \t]*"
)


def _containers(lines: list[str]) -> list[str]:
    """``:::`` containers and ``!!!`` admonitions -> their title line (or nothing), markers gone."""
    if not any(":::" in line or "!!!" in line or "???" in line for line in lines):
        return lines
    out: list[str] = []
    body: str | None = None  # the indent an open admonition's lines carry
    for line, code in _fenced(lines):
        text = line.rstrip("\r\n")
        eol = line[len(text) :]
        if body is not None:
            if text.startswith(body) or not text.strip():
                out.append(text[len(body) :] + eol)
                continue
            body = None
        if code:
            out.append(line)
            continue
        colons = _COLONS.fullmatch(text)
        admonition = _ADMONITION.fullmatch(text)
        if colons is not None:
            title = (colons.group("bracket") or colons.group("title") or "").strip()
        elif admonition is not None:
            title = (admonition.group("title") or "").strip()
            body = admonition.group("indent") + "    "
        else:
            out.append(line)
            continue
        if title:
            out.append(_with_colon(title) + eol)
    return out


# ---------------------------------------------------------------- callouts


def _callouts(lines: list[str]) -> list[str]:
    """Callout headers -> their title, and the callout's ``>`` markers removed (not inside code fences)."""
    if not any("[!" in line for line in lines):
        return lines
    out: list[str] = []
    open_depths: list[int] = []  # quote markers each open callout takes (nested ones take more)
    for line, code in _fenced(lines):
        if code and not open_depths:
            out.append(line)
            continue
        body = line.rstrip("\r\n")
        eol = line[len(body) :]
        depth = _quote_depth(body)
        while open_depths and depth < open_depths[-1]:
            open_depths.pop()
        inside = open_depths[-1] if open_depths else 0
        rest = _strip_markers(body, inside)
        header = _CALLOUT.fullmatch(rest)
        if header is not None:
            open_depths.append(inside + header.group("markers").count(">"))
            title = header.group("title").strip()
            if title:
                out.append(_with_colon(title) + eol)
            continue
        out.append(rest + eol)
    return out


def _quote_depth(line: str) -> int:
    depth, pos = 0, 0
    while m := _QUOTE_MARKER.match(line, pos):
        depth, pos = depth + 1, m.end()
    return depth


def _strip_markers(line: str, count: int) -> str:
    pos = 0
    for _ in range(count):
        m = _QUOTE_MARKER.match(line, pos)
        if m is None:
            break
        pos = m.end()
    return line[pos:]


def _with_colon(title: str) -> str:
    last = _visible_last_char(title)
    if not last or last in _TITLE_ENDS:
        return title
    return title + ("：" if is_cjk(last) else ":")


def _visible_last_char(title: str) -> str:
    """The last character the title shows: closing emphasis, link and code marks do not count."""
    return _render_prose(title).rstrip()[-1:]
