"""What a question (or an answer sentence) is about, and how much of it a text says.

A term is a stemmed word (question words and stop words left out) or, in Chinese,
one content character together with the bigrams it forms with its neighbours.
Chinese has no spaces, so the bigrams of a question include pairs that straddle two
words ("是公" in "是公开的"); a character counts as present when any of its bigrams
occurs in the text, so a straddle never counts against a text that says the words.
Function characters (的, 了, 吗, 什么 ...) are not terms.

Terms carry weights (the index's inverse document frequency, see
``answer.relevance``), so a word in every note counts for little and a word in none
counts for a lot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .tokens import _SEGMENT, STOPWORDS, _stem, fts_tokens

QUESTION_WORDS = frozenset(
    [
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "does",
        "do",
        "did",
        "done",
        "can",
        "could",
        "should",
        "would",
        "may",
        "might",
        "must",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "she",
        "him",
        "her",
        "its",
        "them",
        "am",
        "been",
        "being",
        "has",
        "have",
        "had",
        "about",
        "any",
        "some",
        "all",
        "more",
        "most",
        "also",
        "so",
        "than",
        "too",
        "very",
        "just",
        "there",
        "here",
        "from",
        "up",
        "out",
        "over",
        "under",
        "again",
        "between",
        "each",
        "other",
        "only",
        "own",
        "same",
        "get",
        "got",
        "use",
        "used",
        "using",
        "tell",
        "please",
    ]
)
CJK_FUNCTION_CHARS = frozenset(
    "的了吗呢吧啊呀么是在有和与或及也都就还要会能把被让给对从向这那哪个些什怎如何为请问我你他她它们并且而吗呢"
)
_CJK_PUNCT = re.compile(r"\s+")


@dataclass(frozen=True)
class Term:
    name: str  # a word stem, or one CJK character
    any_of: tuple[str, ...]  # index tokens, any of which in a text means the term is there


def content_terms(text: str) -> list[Term]:
    out: dict[Term, None] = {}
    for m in _SEGMENT.finditer(text.lower()):
        cjk, word = m.group(1), m.group(2)
        if cjk:
            for i, ch in enumerate(cjk):
                if ch in CJK_FUNCTION_CHARS:
                    continue
                grams = tuple(g for g in (cjk[i - 1 : i + 1] if i else "", cjk[i : i + 2]) if len(g) == 2)
                out[Term(ch, grams or (ch,))] = None
        elif word not in STOPWORDS and word not in QUESTION_WORDS:
            stem = _stem(word)
            out[Term(stem, (stem,))] = None
    return list(out)


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
