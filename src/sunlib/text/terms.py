"""What a question (or an answer sentence) is about, and how much of it a text says.

A term is a stemmed word (question words and stop words left out) or, in Chinese,
one content character together with the bigrams it forms with its neighbours.
Chinese has no spaces, so the bigrams of a question include pairs that straddle two
words ("是公" in "是公开的"); a character counts as present when any of its bigrams
occurs in the text, so a straddle never counts against a text that says the words.
Function characters (的, 了, 吗, 什么 ...) are not terms.

Terms carry weights (the index's inverse document frequency, see
``answer.gate.relevance``), so a word in every note counts for little and a word in none
counts for a lot.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .tokens import CJK_CLASS, SEGMENT, STOPWORDS, fts_tokens, is_cjk, stem_word


def _words(*lines: str) -> list[str]:
    return " ".join(lines).split()


# Words that frame a question rather than name what it is about. A user who asks
# "I really want to know how big ..." is asking about the same thing as one who asks
# "how big ...", so none of these count towards (or against) coverage.
QUESTION_WORDS = frozenset(
    _words(
        # interrogatives, auxiliaries and modals
        "what which who whom whose when where why how does do did done can could should would may might must",
        "shall will am been being has have had is are was were",
        # pronouns and indefinites
        "i me my mine we us our you your he she him her its them somebody someone anybody anyone everybody",
        "everyone nobody something anything everything nothing thing things stuff",
        # wishes, needs and attempts
        "want wants wanted need needs needed wish like try trying tried hope able allowed supposed going",
        # discourse adverbs and quantifiers
        "about any some all more most also so than too very just really actually exactly basically simply",
        "still already even ever else anyway currently now again there here from up out over under between",
        "each other only own same",
        # request and light verbs
        "get got use used using tell please know explain happen happens",
    )
)
# After "how", a degree word is part of the question ("how big", "how many", "how long").
DEGREE_WORDS = frozenset(
    _words(
        "much many big large small long short often far fast slow quickly old high low early late soon well",
        "frequently heavy wide deep",
    )
)
# Before "of", these only introduce a category ("what kind of search").
CATEGORY_WORDS = frozenset(_words("kind kinds sort sorts type types"))
# Chinese question frames, removed from a run of Han characters before it is split into
# terms: interrogatives, "what is the use of / difference between", hedges and adverbs.
CJK_FRAMES = tuple(
    sorted(
        _words(
            "什么 怎么 怎样 怎么样 如何 为什么 为何 哪些 哪个 哪里 哪儿 哪种 多少 多长 多久 多大 多快 多么",
            "是否 能否 能不能 会不会 是不是 有没有 可不可以 可以 需要 应该 一下 到底 究竟 干脆 直接",
            "作用 用途 用处 用来 用于 做什么 干什么 区别 不同 差别 差异 意思 含义 意味着",
            "情况下 情况 的时候 时候 时 的话 请问 一般 通常 大概 大约 还能 正常 想要 想 希望",
            "几个 几种 几 各自 分别 各 遇到 表现",
        ),
        key=len,
        reverse=True,
    )
)
CJK_FRAME = re.compile("|".join(CJK_FRAMES))
CJK_FUNCTION_CHARS = frozenset(
    "的了吗呢吧啊呀么是在有和与或及也都就还要会能把被让给对从向这那哪个些什怎如何为请问我你他她它们并且而里中上下"
)
_CJK_PUNCT = re.compile(r"\s+")


@dataclass(frozen=True)
class Term:
    name: str  # a word stem, or one CJK character
    any_of: tuple[str, ...]  # index tokens, any of which in a text means the term is there


# "How does X work?": the verb frames the question ("how does ... work" asks how X works), it names nothing
_HOW_WORKS = re.compile(r"\bhow (?:do|does|did|can|could|will|would|should)\b.*\bwork(?:s|ed|ing)?\b")


def content_terms(text: str) -> list[Term]:
    out: dict[Term, None] = {}
    lowered = text.lower()
    segments = [(m.group(1), m.group(2)) for m in SEGMENT.finditer(lowered)]
    frames_work = bool(_HOW_WORKS.search(lowered))
    for i, (cjk, word) in enumerate(segments):
        if cjk:
            for run in CJK_FRAME.split(cjk):
                for j, ch in enumerate(run):
                    if ch in CJK_FUNCTION_CHARS:
                        continue
                    grams = tuple(g for g in (run[j - 1 : j + 1] if j else "", run[j : j + 2]) if len(g) == 2)
                    out[Term(ch, grams or (ch,))] = None
        elif not (frames_work and word in ("work", "works", "worked", "working")) and not _frame_word(
            word, segments[i - 1][1] if i else None, segments[i + 1][1] if i + 1 < len(segments) else None
        ):
            stem = stem_word(word)
            out[Term(stem, (stem,))] = None
    return list(out)


def _frame_word(word: str, before: str | None, after: str | None) -> bool:
    return (
        word in STOPWORDS
        or word in QUESTION_WORDS
        or (before == "how" and word in DEGREE_WORDS)
        or (after == "of" and word in CATEGORY_WORDS)
    )


@dataclass(frozen=True)
class TermWeights:
    weights: Mapping[Term, float]

    @classmethod
    def uniform(cls, text: str) -> TermWeights:
        return cls(dict.fromkeys(content_terms(text), 1.0))

    def __bool__(self) -> bool:
        return bool(self.weights)

    def coverage(self, tokens: set[str]) -> tuple[float, list[str]]:
        """(weighted share of the terms present in ``tokens``, names of those missing); 1.0 without terms."""
        found = missing = 0.0
        absent: list[str] = []
        for term, weight in self.weights.items():
            if any(t in tokens for t in term.any_of):
                found += weight
            else:
                missing += weight
                absent.append(term.name)
        total = found + missing
        return (found / total if total else 1.0), absent

    def share(self, texts: Iterable[str]) -> float:
        return self.coverage(token_set(texts))[0]

    def names(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for term, w in self.weights.items():
            out[term.name] = max(w, out.get(term.name, 0.0))
        return out


def token_set(texts: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for text in texts:
        out.update(fts_tokens(text))
    return out


# -- names ---------------------------------------------------------------------------------

_NAME_CHAR = rf"[^\W{CJK_CLASS}]|[.@/+-]"  # letters and digits of non-CJK scripts, and joiners
_NAME = re.compile(rf"(?<!{_NAME_CHAR})(?:--?)?(?:\d{{1,3}}(?:,\d{{3}})+|[^\W_{CJK_CLASS}](?:{_NAME_CHAR})*)")
_SENTENCE_START = re.compile(r"(?:^|[.!?。！？:：]\s*|\n)$")
_CJK_NUMBER = re.compile("[一二三四五六七八九两十][零一二三四五六七八九两十百千万亿]*[十百千万亿]")


def fold(text: str) -> str:
    """Text for matching names: full-width forms made plain, accents dropped ("Ｂeauséjour" -> "Beausejour")."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))


@dataclass(frozen=True)
class Name:
    """A name a question mentions: an option, an identifier, a version, a product."""

    text: str  # as written
    tokens: tuple[str, ...]  # its index tokens, all of which a text must contain to mention it


def names(text: str) -> list[Name]:
    """Names in a question, which evidence must mention for the notes to be about them.

    A name is a word written like one: an option (``--as``), an identifier with a digit,
    underscore, dot, slash or at sign (``rrf_k``, ``k1``, ``0.1``, ``nDCG@10``), a word
    with a capital after its first letter (``macOS``, ``HNSW``), a capitalised word that
    does not start a sentence (``Windows``), anything in backticks, or any Latin word in
    a Chinese question (``watch``). A number is a name from 1000 up (``10,000``, and
    ``一万`` or ``两千`` in Chinese): smaller ones are mostly values the asker proposes
    ("from 500 to 300"). Plain English words are not names, hyphenated or not
    (``messed-up``, ``sqlite-vec``; write `` `sqlite-vec` `` to make it one).
    """
    has_cjk = any(is_cjk(ch) for ch in text)
    out: dict[str, Name] = {}
    for m in _NAME.finditer(text):
        word = m.group(0).rstrip(".@/+-")
        tokens = tuple(dict.fromkeys(fts_tokens(fold(word))))
        if not any(len(t) >= 2 or t.isdigit() for t in tokens):  # "e.g." is no name; "0.1" is
            continue
        inner = word.lstrip("-")
        if inner.lower() in STOPWORDS or inner.lower() in QUESTION_WORDS:
            continue  # "WHat", "US": a function word, however it is written
        number = fold(inner).replace(",", "")  # "①" and "１２" fold to the digits int() reads
        if number.isdecimal() and int(number) < 1000:
            continue
        written_as_name = (
            word.startswith("-")
            or any(ch.isdigit() or ch in "_.@/+" for ch in inner)
            or any(ch.isupper() for ch in inner[1:])
            or (inner[0].isupper() and not _SENTENCE_START.search(text[: m.start()]))
            or text[m.start() - 1 : m.start()] == "`"
            or has_cjk
        )
        if written_as_name:
            out.setdefault(word.lower(), Name(word, tokens))
    for m in _CJK_NUMBER.finditer(text):  # (folding leaves Han characters as they are)
        out.setdefault(m.group(0), Name(m.group(0), tuple(dict.fromkeys(fts_tokens(m.group(0))))))
    return list(out.values())


def as_words(question: str, missing: Sequence[str]) -> list[str]:
    """Missing term names as a reader would name them: a CJK term is one character, so each run
    of missing CJK characters in the question becomes one word ("文件恢复", not "文, 件, 恢, 复")."""
    single = {m for m in missing if len(m) == 1 and is_cjk(m)}
    runs: list[str] = []
    run = ""
    for ch in question.lower():
        if ch in single:
            run += ch
            continue
        if run:
            runs.append(run)
        run = ""
    if run:
        runs.append(run)
    return [m for m in missing if m not in single] + list(dict.fromkeys(runs))


_SQL_LIKE = re.compile(
    r"\b(?:select|insert|update|delete|drop|union|alter)\b[^?？]*\b(?:from|table|into|set|where|select)\b"
    r"(?=.*(?:[;*=]|--))",
    re.IGNORECASE | re.DOTALL,
)


def has_content(question: str) -> bool:
    """Whether a question has a word to look up: not ``???``, ``' OR 1=1 --`` or a SQL statement."""
    if _SQL_LIKE.search(question):
        return False
    return any(not (len(t.name) == 1 and t.name.isdigit()) for t in content_terms(question))
