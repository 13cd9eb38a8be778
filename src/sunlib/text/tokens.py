"""Tokens for the full-text index, identical on the index side and the query side.

FTS5's built-in tokenizers do not split Chinese: a run of Han characters
becomes one token, so a query for a word inside it finds nothing. sunlib
therefore segments text itself and hands FTS5 space-separated tokens:

* non-CJK words: Unicode letters/digits, lower-cased, English Snowball-stemmed
  (PyStemmer), minus a short stop list (Lucene's English set);
* CJK runs: every character (unigram) and every adjacent pair (bigram), so a
  one-character query, a two-character word and a longer phrase all match.

Query text is tokenised the same way and every token is quoted, so user input
can never be read as FTS5 syntax (``"``, ``*``, ``AND``, ``NEAR``, ``:`` are text).
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

# Han, Hiragana/Katakana, Hangul, CJK punctuation excluded (they split runs).
CJK_CLASS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u309f\u30a0-\u30ff\uac00-\ud7af\U00020000-\U0002ebef"
CJK_RUN = re.compile(f"[{CJK_CLASS}]+")
_WORD = re.compile(rf"[^\W_{CJK_CLASS}]+", re.UNICODE)
_SYMBOL = re.compile(rf"[^\w\s{CJK_CLASS}]")
SEGMENT = re.compile(rf"([{CJK_CLASS}]+)|([^\W_{CJK_CLASS}]+)", re.UNICODE)

# Lucene's default English stop set (EnglishAnalyzer), as used by BEIR's BM25 baselines.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)

_stemmer = Stemmer.Stemmer("english")


def is_cjk(ch: str) -> bool:
    return bool(CJK_RUN.fullmatch(ch))


def language(text: str) -> str:
    """A question's or a passage's language for answering: "zh" when at least a fifth of the
    non-space characters are CJK, else "en"."""
    chars = [ch for ch in text if not ch.isspace()]
    cjk = sum(1 for ch in chars if is_cjk(ch))
    return "zh" if chars and cjk * 5 >= len(chars) else "en"


# Scripts, for cross-language retrieval: a text is "cjk" when its CJK characters are at least
# as many as its other words, else "other". So "how does sunlib split 中文?" is English, a
# Chinese note's paragraph with a line of code is Chinese, and an English release note that
# names a Chinese article is English. The store compiles the same rule into SQL (``SCRIPT_SQL``).
SCRIPTS = ("cjk", "other")
CJK_GLOB = f"*[{CJK_CLASS}]*"  # SQL GLOB: the text holds a CJK character


def has_cjk(text: str) -> bool:
    return CJK_RUN.search(text) is not None


def text_script(text: str) -> str:
    """The script a text (a question or a chunk) is written in: "cjk" or "other"."""
    if not has_cjk(text):
        return "other"
    cjk = sum(len(m) for m in CJK_RUN.findall(text))
    return "cjk" if cjk >= len(_WORD.findall(text)) else "other"


query_script = text_script


def other_script(script: str) -> str:
    return "other" if script == "cjk" else "cjk"


@lru_cache(maxsize=200_000)
def stem_word(word: str) -> str:
    return str(_stemmer.stemWord(word))


@lru_cache(maxsize=200_000)
def word_token(word: str) -> str | None:
    """The index token of one non-CJK word, or None for a stopword."""
    low = word.lower()
    return None if low in STOPWORDS else stem_word(low)


def fts_tokens(text: str) -> list[str]:
    """Tokens in text order: stemmed words, then CJK unigrams and bigrams per run."""
    out: list[str] = []
    for m in SEGMENT.finditer(text.lower()):
        cjk, word = m.group(1), m.group(2)
        if cjk:
            out.extend(cjk)
            out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
        elif word not in STOPWORDS:
            out.append(stem_word(word))
    return out


def query_terms(text: str) -> list[str]:
    """Distinct query tokens, first occurrence first."""
    return list(dict.fromkeys(fts_tokens(text)))


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression matching any token of ``text``; None when it has no tokens.

    Every token is a quoted string, so nothing the user types is FTS5 syntax.
    Tokens only contain letters and digits, but quotes are doubled anyway.
    """
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def estimate_tokens(text: str) -> int:
    """A model-free token estimate: one per CJK character, one per other word or symbol.

    Subword tokenizers split English words a little more often than this, so
    a 500-token chunk stays inside e5's 512-token window for most prose.
    """
    cjk, words, symbols = _counts(text)
    return cjk + words + symbols // 2


def token_weight(text: str) -> float:
    """``estimate_tokens`` before rounding down: ``int(token_weight(t)) == estimate_tokens(t)``.

    Unlike the estimate, the weight is additive over pieces cut at whitespace or at a
    CJK character, so summed weights give the exact estimate of the joined span.
    """
    cjk, words, symbols = _counts(text)
    return cjk + words + symbols / 2


def _counts(text: str) -> tuple[int, int, int]:
    cjk = sum(len(m) for m in CJK_RUN.findall(text))
    words = len(_WORD.findall(text))
    symbols = len(_SYMBOL.findall(text))
    return cjk, words, symbols
