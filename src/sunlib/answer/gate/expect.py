"""What kind of answer a question asks for, and whether the evidence has one.

"How long does a full index take?" asks for a duration, "how many tokens ..." for a
count of tokens, "多少显存" for a size. Passages that discuss the topic but never state
such a value cannot answer the question, however similar they are to it. This is the
answer-type check of classic question answering, kept to the types that numbers
express, because those are the ones a reader can verify in a sentence:

* ``duration``: a number with a unit of time, or "at once" / "立即";
* ``rate``: a number with "per second" / "每秒" and the like;
* ``size``: a number with a unit of bytes;
* ``count``: a number in the same sentence as the counted noun ("500 tokens");
* ``number``: any number ("how much", "多少" with nothing more specific).

Numbers are digits, English number words or Chinese numerals.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ...text import fts_tokens, sentence_spans
from ...text.terms import QUESTION_WORDS
from ...text.tokens import STOPWORDS

_EN_NUMBER = (
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|"
    r"hundred|thousand|million|billion|dozen|half|once|twice)\b"
)
NUMBER = re.compile(rf"{_EN_NUMBER}|[零一二三四五六七八九十百千万亿两半]", re.IGNORECASE)

_TIME_UNIT = (
    r"(?:ms|milliseconds?|seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?)\b|"
    r"毫秒|秒|分钟|小时|钟头|天|日|周|星期|个月|年"
)
_SIZE_UNIT = r"(?:[kmgt]i?b|bytes?|kilobytes?|megabytes?|gigabytes?|terabytes?)\b|字节|兆"
_RATE_UNIT = r"per (?:second|minute|hour|day)|a second|/s\b|每秒|每分钟|每小时|每天"
WHEN_DONE = re.compile(r"\b(?:at once|instantly|immediately|right away)\b|立即|立刻|马上|瞬间")

UNITS = {
    "duration": re.compile(rf"(?:{_EN_NUMBER}|[零一二三四五六七八九十百千万两半几])\s*(?:{_TIME_UNIT})", re.IGNORECASE),
    "rate": re.compile(_RATE_UNIT, re.IGNORECASE),
    "size": re.compile(rf"\d\s*(?:{_SIZE_UNIT})|(?:{_SIZE_UNIT})", re.IGNORECASE),
}

# question patterns, tried in this order; the first that matches decides
_ASKS = (
    (
        "rate",
        re.compile(
            r"\bhow (?:many|much)\b[^?？]*\bper (?:second|minute|hour|day)\b|每秒|每分钟|每小时|"
            r"(?:requests|queries) per",
            re.IGNORECASE,
        ),
    ),
    (
        "duration",
        re.compile(
            r"\bhow long\b[^?？]*\b(?:take|takes|took|last|lasts|wait|keep|kept)\b|\bhow much time\b|"
            r"\bhow (?:many|much) (?:seconds|minutes|hours|days|weeks|months|years)\b|\bhow soon\b|"
            r"多长时间|多久|多少时间|几秒|几分钟|几个?小时|几天|多少天|多少秒|多少分钟|多少小时|几周|几个月|几年",
            re.IGNORECASE,
        ),
    ),
    (
        "size",
        re.compile(
            r"\bhow (?:much|many) (?:disk|space|memory|ram|storage|megabytes|gigabytes|kilobytes|bytes|mb|gb)\b|"
            r"\bhow (?:big|large) (?:is|are) (?:the |a |an )?(?:file|package|model|index|database|download)s?\b|"
            r"多少(?:显存|内存|空间|磁盘|存储|字节|兆|MB|GB)|多大(?:的)?(?:空间|内存|显存|磁盘)",
            re.IGNORECASE,
        ),
    ),
)
_COUNT_EN = re.compile(r"\bhow many ((?:[a-z][\w-]*\s*){1,3})", re.IGNORECASE)
_COUNT_ZH = re.compile(r"(?:多少|几)个?\s*([A-Za-z][\w-]*|[\u4e00-\u9fff]{1,2})")
_NUMBER_Q = re.compile(
    r"\bhow (?:much|many|big|large|long|often)\b|多少|几个|几种|几次|多大|多长|多高|多快", re.IGNORECASE
)
_NOT_A_UNIT_EN = STOPWORDS | QUESTION_WORDS
_CJK_NOT_A_UNIT = frozenset(["内容", "部分", "方面", "地方", "东西", "问题", "情况", "种", "个", "次"])


@dataclass(frozen=True)
class Expectation:
    kind: str  # duration | rate | size | count | number
    unit: str | None = None  # the counted noun, for "count"

    def describe(self) -> str:
        if self.kind == "count":
            return f"a number of {self.unit}"
        return {"duration": "a duration", "rate": "a rate", "size": "a size in bytes"}.get(self.kind, "a number")

    def met_by(self, texts: Iterable[str]) -> bool:
        """Whether some sentence of the texts states a value of the expected kind (for a count: a
        number and one of the counted words)."""
        unit_tokens = set(fts_tokens(self.unit)) if self.unit else set()
        for text in texts:
            for start, end in sentence_spans(text):
                sentence = text[start:end]
                if self.kind == "duration" and WHEN_DONE.search(sentence):
                    return True
                if self.kind in UNITS:
                    if UNITS[self.kind].search(sentence) and NUMBER.search(sentence):
                        return True
                elif NUMBER.search(sentence) and (not unit_tokens or unit_tokens & set(fts_tokens(sentence))):
                    return True
        return False


def expected_answer(question: str) -> Expectation | None:
    for kind, pattern in _ASKS:
        if pattern.search(question):
            return Expectation(kind)
    m = _COUNT_EN.search(question)
    if m:  # "how many Muslim empires have ...": the words up to the first function word
        words = list(itertools.takewhile(lambda w: w.lower() not in _NOT_A_UNIT_EN, m.group(1).split()))
        if words and fts_tokens(" ".join(words)):
            return Expectation("count", " ".join(words))
    m = _COUNT_ZH.search(question)
    if m and m.group(1) not in _CJK_NOT_A_UNIT and fts_tokens(m.group(1)):
        return Expectation("count", m.group(1))
    if _NUMBER_Q.search(question):
        return Expectation("number")
    return None


# -- answer types, as features of the unit scorer (answer.scorer) --------------------------
# Softer than ``Expectation``: they never refuse; they tell the scorer that a unit states the
# kind of value a question asks for (a key combination, a path, a command, a version, a default).

_ASKED = {
    "key": re.compile(r"\b(?:shortcut|hotkey|keyboard|key(?:s|stroke)?|press)\b|快捷键|按键|热键|键盘", re.IGNORECASE),
    "path": re.compile(
        r"\bwhere\b|\b(?:which|what) (?:file|folder|directory|path|url|endpoint|route)\b|"
        r"路径|目录|文件夹|在哪|哪个文件",
        re.IGNORECASE,
    ),
    "command": re.compile(
        r"\b(?:command|cli|run|install|launch|start|invoke|type)\b|命令|运行|安装|启动|执行", re.IGNORECASE
    ),
    "version": re.compile(r"\bversions?\b|\brelease\b|\bsince when\b|版本", re.IGNORECASE),
    "default": re.compile(r"\bdefaults?\b|\bby default\b|默认", re.IGNORECASE),
    "limit": re.compile(
        r"\b(?:max(?:imum)?|min(?:imum)?|limits?|size|timeout|how (?:big|large|long|many|much|often))\b|"
        r"最大|最小|上限|下限|限制|多大|多少|多久|超时",
        re.IGNORECASE,
    ),
    "name": re.compile(
        r"\b(?:which|what) (?:\w+ )?(?:parameter|option|setting|flag|class|function|method|argument|field|"
        r"header|status|code|port|model|library|package|module|type|key|variable|name)s?\b|哪个|哪些|什么参数|什么类",
        re.IGNORECASE,
    ),
}
_STATED = {
    "key": re.compile(
        r"\b(?:ctrl|cmd|command|alt|option|shift|meta|super|win)\s*[-+]\s*\S|<kbd>|[⌘⌥⇧⌃]", re.IGNORECASE
    ),
    "path": re.compile(r"(?:[\w.~-]+/)+[\w.-]+|\b[\w-]+\.(?:md|py|toml|json|ya?ml|txt|ini|cfg|sh|html|js|ts)\b"),
    "command": re.compile(r"`[^`\n]{2,}`|^\s*(?:\$ )?(?:pip|python|uvicorn|fastapi|sunlib|npm|git|docker|make)\b"),
    "version": re.compile(r"\b\d+\.\d+(?:\.\d+)?\b|\bv\d+\b"),
    "default": re.compile(r"\bdefaults?\b|\bby default\b|默认"),
    "limit": re.compile(r"\d"),
    "name": re.compile(r"`[^`\n]+`|\b[A-Za-z]+[A-Z_][A-Za-z0-9_]*\b|\b\d{3}\b"),
}


def asked_types(question: str) -> frozenset[str]:
    """The kinds of value a question asks for (``key``, ``path``, ``command``, ``version``,
    ``default``, ``name``, and the quantity of ``expected_answer``)."""
    kinds = {kind for kind, pattern in _ASKED.items() if pattern.search(question)}
    quantity = expected_answer(question)
    if quantity is not None:
        kinds.add("quantity")
    return frozenset(kinds)


def stated_types(text: str, asked: frozenset[str], quantity: Expectation | None) -> frozenset[str]:
    """The kinds of value ``text`` states, among the ``asked`` ones (``quantity``: the question's
    ``expected_answer``)."""
    kinds = {kind for kind in asked & _STATED.keys() if _STATED[kind].search(text)}
    if quantity is not None and quantity.met_by([text]):
        kinds.add("quantity")
    return frozenset(kinds)
