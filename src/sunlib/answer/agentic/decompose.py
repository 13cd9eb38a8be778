"""Offline rules for the agentic loop: what kind of question this is, and its sub-questions.

``analyze(question)`` finds the language, the question type (fact, comparison,
enumeration, procedure, multi_part) and the named terms. ``decompose(question,
analysis, cap)`` splits a comparison ("A vs B", "the difference between A and B",
"How does A differ from B", "A 和 B 的区别", "A 与 B 有什么不同"), a list ("the defaults
of A and B", "A、B 和 C 的默认值") and a multi-part question (two question marks,
"；", "以及", ", and what ...") into at most ``cap`` sub-questions. Framing words
("please", "tell me", "请问") are removed; the names a question uses are kept as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ...text import content_terms, is_cjk, language
from ...text.terms import names

Kind = Literal["fact", "comparison", "enumeration", "procedure", "multi_part"]


@dataclass(frozen=True)
class Analysis:
    lang: str  # "en" or "zh"
    kind: Kind
    terms: tuple[str, ...]  # the names the question uses (as written), then its content terms
    rule: str  # which rule found the kind


@dataclass(frozen=True)
class SubQuestion:
    index: int  # 1-based
    text: str  # a standalone question
    focus: tuple[str, ...]  # the names it is about, as the question wrote them


@dataclass(frozen=True)
class Decomposition:
    parts: tuple[SubQuestion, ...]
    rule: str  # the rule that split it, or "whole" when nothing did
    dropped: int = 0  # parts left out by the sub-question cap


_FRAMING = re.compile(
    r"^(?:(?:please|pls|kindly)\s+|(?:can|could) you (?:please )?(?:tell me|explain)\s+|tell me\s+|"
    r"i (?:want|would like) to know\s+|请问|请|我想知道|想问一下|想问)+",
    re.IGNORECASE,
)
_EN_COMPARE = (
    (
        "difference between",
        re.compile(
            r"^(?:what(?:'s| is| are)\s+)?(?:the\s+)?differences?\s+between\s+(?P<a>.+?)\s+and\s+(?P<b>.+)$", re.I
        ),
    ),
    (
        "differ from",
        re.compile(r"^how\s+(?:does|do|is|are)\s+(?P<a>.+?)\s+(?:differ|different)\s+from\s+(?P<b>.+)$", re.I),
    ),
    ("compare", re.compile(r"^compare\s+(?P<a>.+?)\s+(?:and|with|to)\s+(?P<b>.+)$", re.I)),
    ("vs", re.compile(r"^(?P<a>.+?)\s+(?:vs\.?|versus)\s+(?P<b>.+)$", re.I)),
)
_ZH_COMPARE = (
    ("和…有什么不同", re.compile(r"^(?P<a>.+?)(?:和|与|跟|同)(?P<b>.+?)有(?:什么|哪些|何)(?:不同|区别|差异|差别)")),
    ("和…的区别", re.compile(r"^(?P<a>.+?)(?:和|与|跟|同)(?P<b>.+?)(?:之间)?的?(?:区别|不同|差异|差别)")),
)
_EN_QWORD = r"(?:what|how|which|where|when|why|who|is|are|does|do|can|should)\b"
_EN_CLAUSE = re.compile(rf",?\s+and\s+(?={_EN_QWORD})", re.I)
_EN_LIST = re.compile(
    r"^(?P<head>.*?\b(?:of|for|in|about|between)\s+)(?P<items>.+?)\s+and\s+(?P<last>[^,?]+?)\s*\??$", re.I
)
_ZH_QWORD = re.compile(r"什么|如何|怎么|怎样|哪|多少|吗|是否|几")
_ZH_LIST = re.compile(r"^(?P<items>[^，,。？?；;的]+?)(?:和|与|以及|及)(?P<last>[^，,。？?；;的和与]+?)(?P<tail>的.+)$")
_PROCEDURE = re.compile(r"^(?:how (?:do|can|should) (?:i|we|you)|how to|steps?\b)|如何|怎么|怎样|步骤", re.I)
_ENUMERATION = re.compile(r"^(?:which|what)\s+\w+s\s+(?:are|do)\b|^list\b|哪些|有哪几", re.I)


def analyze(question: str) -> Analysis:
    """The question's language, type and named terms (rules only)."""
    text = _unframed(question)
    lang = language(text)
    named = [n.text for n in names(text)]
    terms = tuple(dict.fromkeys([*named, *(t.name for t in content_terms(text))]))
    compared = _comparison(text)
    if compared is not None:
        return Analysis(lang, "comparison", terms, compared[0])
    clauses, rule = _clauses(text)
    if len(clauses) > 1:
        return Analysis(lang, "multi_part", terms, rule)
    if _list_items(text) is not None:
        return Analysis(lang, "enumeration", terms, "list")
    if _ENUMERATION.search(text):
        return Analysis(lang, "enumeration", terms, "which/list")
    if _PROCEDURE.search(text):
        return Analysis(lang, "procedure", terms, "how to")
    return Analysis(lang, "fact", terms, "default")


def decompose(question: str, analysis: Analysis, cap: int = 4) -> Decomposition:
    """At most ``cap`` standalone sub-questions; one (the question, unframed) when no rule splits it."""
    text = _unframed(question)
    texts: list[str] = []
    rule = "whole"
    compared = _comparison(text)
    if compared is not None:
        rule, items = compared
        texts = [_what_is(item, analysis.lang) for item in items]
    else:
        clauses, clause_rule = _clauses(text)
        if len(clauses) > 1:
            rule = clause_rule
            for clause in clauses:
                listed = _list_items(clause)
                texts += listed if listed is not None else [_ask(clause, analysis.lang)]
        elif (listed := _list_items(text)) is not None:
            rule, texts = "list", listed
    if len(texts) < 2:
        texts, rule = [_ask(text, analysis.lang)], "whole"
    unique = list(dict.fromkeys(texts))
    kept = unique[:cap]
    parts = tuple(SubQuestion(i, t, tuple(n.text for n in names(t))) for i, t in enumerate(kept, 1))
    return Decomposition(parts, rule, len(unique) - len(kept))


def _unframed(question: str) -> str:
    return _FRAMING.sub("", question.strip()).strip()


def _comparison(text: str) -> tuple[str, tuple[str, str]] | None:
    bare = text.rstrip("?？。. ")
    patterns = _ZH_COMPARE if language(bare) == "zh" else _EN_COMPARE
    for rule, pattern in patterns:
        m = pattern.search(bare)
        if m is not None:
            a, b = _item(m.group("a")), _item(m.group("b"))
            if a and b and a.lower() != b.lower():
                return rule, (a, b)
    return None


def _clauses(text: str) -> tuple[list[str], str]:
    """The question's clauses when it asks more than one thing, and the rule that split it."""
    for rule, pattern in (
        ("；", r"[；;]"),
        ("question marks", r"(?<=[?？])"),
        ("以及", r"[，,]?以及(?=.*(?:什么|如何|怎么|怎样|哪|多少|吗|是否|几))"),
        ("and + question word", _EN_CLAUSE.pattern),
        ("，+ question word", r"[，,](?=[^，,]*(?:什么|多少|谁|哪|几|如何|怎么|何时))"),
    ):
        parts = [p.strip(" ，,") for p in re.split(pattern, text, flags=re.I) if p and p.strip(" ，,?？")]
        if len(parts) > 1 and all(len(content_terms(p)) >= 1 for p in parts):
            if rule == "，+ question word":
                if not all(_ZH_ASKS.search(p) for p in parts):
                    continue
                parts = _with_subject(parts)
            return parts, rule
    return [text], "whole"


_ZH_ASKS = re.compile(r"什么|多少|谁|哪|几|如何|怎么|怎样|何时|吗|是否")


def _with_subject(parts: list[str]) -> list[str]:
    """Later clauses of "X的A是什么，B是多少" get the first clause's subject ("X的") when they lack it."""
    head, de, _ = parts[0].partition("的")
    if not de or not head.strip():
        return parts
    return [parts[0], *(p if p.startswith(head) else f"{head}的{p}" for p in parts[1:])]


def _list_items(clause: str) -> list[str] | None:
    """ "What are the defaults of A and B?" -> one question per item; None when it lists nothing."""
    bare = clause.strip()
    if language(bare) == "zh":
        m = _ZH_LIST.match(bare.rstrip("？?。"))
        if m is None or not _ZH_QWORD.search(m.group("tail")):
            return _zh_pair(bare)
        items = [*re.split(r"[、]", m.group("items")), m.group("last")]
        if any(len(i.strip()) > _ZH_MAX_ITEM and any(map(is_cjk, i)) for i in items):  # a shared prefix or suffix
            return _zh_pair(bare) or [_ask(f"{_item(i)}{m.group('tail')}", "zh") for i in items if _item(i)]
        tail = m.group("tail").replace("分别", "", 1)
        return [_ask(f"{_item(i)}{tail}", "zh") for i in items if _item(i)]
    m = _EN_LIST.match(bare)
    if m is None or not re.match(_EN_QWORD, m.group("head"), re.I):
        return None
    items = [*re.split(r",\s*", m.group("items")), m.group("last")]
    if any(len(i.split()) > 4 for i in items):
        return None
    return [_ask(f"{m.group('head')}{_item(i)}", "en") for i in items if _item(i)]


_ZH_AND = re.compile(r"(?<![总温缓调柔饱附暖共])(?:以及|和|与|及)(?![平谐解善蔼煦])")
_ZH_STOP = "的是，,。？?；;：:《》“”\"' 　"
_ZH_YEAR = re.compile(r"(\d{2,4})(年?)(?:以及|和|与|及)(\d{2,4})(年?)")
_ZH_LATIN = re.compile(r"([A-Za-z][A-Za-z0-9_.+-]*)\s*(?:以及|和|与|及)\s*([A-Za-z][A-Za-z0-9_.+-]*)")
_ZH_MAX_ITEM = 6  # a coordinated item longer than this is a clause, not a name


def _zh_pair(clause: str) -> list[str] | None:
    """A pair joined inside a Chinese question ("2021年中国和美国经济分别增长了多少", "的时间和地点",
    "2022年和2023年...", "ChatGPT和GPT4的..."): one question per item, the rest of the sentence shared;
    "分别" ("respectively") dropped. None when no such pair is found."""
    body = clause.strip().rstrip("？?。")
    for pattern in (_ZH_YEAR, _ZH_LATIN):
        m = pattern.search(body)
        if m is not None:
            if pattern is _ZH_YEAR:
                year = m.group(2) or m.group(4)
                items = [m.group(1) + year, m.group(3) + year]
            else:
                items = [m.group(1), m.group(2)]
            return _zh_versions(body[: m.start()], items, body[m.end() :])
    m = _ZH_AND.search(body)
    if m is None or _inside_title(body, m.start()):
        return None
    before, after = body[: m.start()], body[m.end() :]
    a_full = re.split(f"[{re.escape(_ZH_STOP)}]", before)[-1]
    b_full = re.split(f"[{re.escape(_ZH_STOP)}]|分别", after)[0]
    if not a_full or not b_full or not all(is_cjk(ch) for ch in a_full[-1] + b_full[0]):
        return None
    b = _zh_second(before, a_full, after, b_full)
    a = _zh_first(a_full, len(b))
    return _zh_versions(before[: len(before) - len(a)], [a, b], after[len(b) :])


def _zh_first(a_full: str, size: int) -> str:
    """The first item of a pair: whole dictionary words from the end of ``a_full`` ("2021年中国" ->
    "中国", "北京冬奥会" for a four-character second item), until it is as long as the second item;
    without the dictionary, as many characters as the second item has (one more takes it all)."""
    from ...text.dictionary import MAX_WORD, load_dictionary

    words = load_dictionary()
    if words is None:
        return a_full if len(a_full) <= size + 1 else a_full[-size:]
    end = len(a_full)
    while end > 0 and len(a_full) - end < size:
        if not is_cjk(a_full[end - 1]):
            break
        step = next((n for n in range(min(MAX_WORD, end), 1, -1) if a_full[end - n : end] in words.raw), 1)
        end -= step
    return a_full[end:] or a_full[-size:]


def _zh_second(before: str, a_full: str, after: str, b_full: str) -> str:
    """The second item of a pair: as long as the first item's last character recurs in it ("成都大运会和
    杭州亚运会"), else all of it where it ends a "的" phrase or lists attributes after one ("的时间和
    地点"), else two characters (a Chinese word is most often two)."""
    top = min(len(b_full), _ZH_MAX_ITEM)
    k = next((k for k in range(top, 1, -1) if b_full[k - 1] == a_full[-1]), 0)
    if k:
        return b_full[:k]
    ends_de = after[len(b_full) : len(b_full) + 1] == "的"
    after_de = before[: len(before) - len(a_full)].endswith("的")
    if (ends_de and len(b_full) <= _ZH_MAX_ITEM) or (after_de and len(b_full) <= _ZH_MAX_ITEM + 2):
        return b_full
    return b_full[:2]


def _zh_versions(pre: str, items: list[str], post: str) -> list[str] | None:
    post = post.replace("分别", "", 1)
    if not (pre + post).strip() or any(not i for i in items):
        return None
    return [_ask(f"{pre}{item}{post}", "zh") for item in items]


def _inside_title(text: str, at: int) -> bool:
    return text.rfind("《", 0, at) > text.rfind("》", 0, at)


def _item(text: str) -> str:
    """A compared or listed thing: trimmed of articles, quotes and end punctuation, names intact."""
    item = text.strip(" ，,。.?？、\"'“”")
    return re.sub(r"^(?:the|a|an)\s+", "", item, flags=re.I)


def _what_is(item: str, lang: str) -> str:
    return f"{item}是什么？" if lang == "zh" else f"What is {item}?"


def _ask(clause: str, lang: str) -> str:
    body = clause.strip().rstrip("?？。.;；,， ")
    if lang == "zh":
        return f"{body}？"
    return f"{body[:1].upper()}{body[1:]}?"
