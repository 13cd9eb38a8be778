"""The ``rewrite`` state of the agentic loop: the forms of a question that retrieval may ask.

    RewriteStage   Question -> Rewrites

* **standalone**: a follow-up ("and its default?") made standalone by ``answer.conversation``
  before the pipeline ran (``Question.follow_up``); otherwise the question itself.
* **keywords**: the question without its framing and question words ("How big are the windows of
  the fixed-window chunker?" -> "windows fixed-window chunker"), names kept as written. BM25 ranks a
  short keyword query by the words that matter, and the dense route loses little.
* **variant**: the question in the vault's other language, through the bundled bilingual
  dictionary (CC-CEDICT, ``text.dictionary``, as the cross-language "Translated BM25" route uses
  it): a Chinese question as English words, an English one as Chinese words. Names written in
  Latin letters (``top_k``, ``APIRouter``) are kept. Only when the vault holds chunks in the
  other script; None when it does not, or when the dictionary is not installed.

Rules only: nothing here calls a model. The plan (``answer.agentic.plan_rules``) turns these forms into the
queries of each sub-question.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ...contracts import FollowUp
from ...retrieve.routes import OtherScript
from ...store import Store, Visibility
from ...text.terms import CATEGORY_WORDS, CJK_FRAME, DEGREE_WORDS, QUESTION_WORDS
from ...text.tokens import CJK_RUN as CJK_RUN
from ...text.tokens import STOPWORDS, has_cjk
from ...trace import Tracer
from ...trace.steps import Step
from ..single.stages import Question, Stage

# CJK characters that only glue a question together: dropped at the edges of a run
_CJK_GLUE = "的了吗呢吧啊呀么是在有和与或也都就还要会能请问我你"
_CJK_JOINERS = re.compile("以及|并且|而且|还有|同时")
_WORD = re.compile(r"`[^`]+`|[^\W_](?:[\w.@/+-]*\w)?|_\w+", re.UNICODE)
_LATIN = re.compile(r"`[^`]+`|[A-Za-z0-9_][\w.@/+-]*\w|[A-Za-z0-9]")

HasOtherScript = Callable[[str], bool]  # does the vault hold visible chunks in the other script than this text's?


@dataclass(frozen=True)
class Rewrites:
    """The question's forms, as the trace shows them."""

    standalone: str  # what the loop decomposes: the question, or the follow-up made standalone
    keywords: str | None  # framing and question words removed; None when nothing was removed
    variant: str | None  # the other language's words; None when not wanted or not possible
    variant_note: str  # why there is a variant, or why not
    follow_up: FollowUp | None  # the conversation's rewrite, when the question was a follow-up

    def queries(self) -> tuple[str, ...]:
        """The distinct forms, standalone first."""
        return tuple(dict.fromkeys(q for q in (self.standalone, self.keywords, self.variant) if q))


def keyword_form(text: str) -> str | None:
    """``text`` without its framing and question words, names as written; None when that removes
    nothing or leaves nothing."""
    bare = text.strip()
    if has_cjk(bare):
        out = _cjk_keywords(bare)
    else:
        words = _WORD.findall(bare)
        kept = [w for i, w in enumerate(words) if not _frame(w, words[i - 1] if i else "", _at(words, i + 1))]
        out = " ".join(kept)
    out = " ".join(out.split())
    if not out or out.lower() == bare.rstrip("?？。.!！ ").lower():
        return None
    return out


def _at(words: list[str], i: int) -> str:
    return words[i] if i < len(words) else ""


def _frame(word: str, before: str, after: str) -> bool:
    w = word.lower()
    return (
        w in STOPWORDS
        or w in QUESTION_WORDS
        or (before.lower() == "how" and w in DEGREE_WORDS)
        or (after.lower() == "of" and w in CATEGORY_WORDS)
    )


def _cjk_keywords(text: str) -> str:
    """Chinese: the question frames ("什么", "如何", "是多少") and the glue at the edges of each run
    removed; Latin names and words kept, framing words among them dropped."""
    pieces: list[str] = []
    for part in re.split(rf"({CJK_RUN.pattern})", text):
        if not part.strip():
            continue
        if has_cjk(part):
            for run in CJK_FRAME.split(_CJK_JOINERS.sub(" ", part)):
                pieces += [w for w in (piece.strip(_CJK_GLUE) for piece in run.split()) if w]
        else:
            words = _WORD.findall(part)
            pieces += [w for i, w in enumerate(words) if not _frame(w, words[i - 1] if i else "", _at(words, i + 1))]
    return " ".join(pieces)


def other_language(text: str) -> str | None:
    """``text`` as words of the other language (CC-CEDICT), Latin names kept; None when the
    dictionary is not installed or nothing translates."""
    from ...text.dictionary import load_dictionary

    dictionary = load_dictionary()
    if dictionary is None:
        return None
    keep = [w.strip("`") for w in _LATIN.findall(text)] if has_cjk(text) else []
    if has_cjk(text):
        words = dictionary.english_terms(text)
    else:
        words = dictionary.chinese_words(keyword_form(text) or text)
        keep = [
            w.strip("`")
            for w in _LATIN.findall(text)
            if ("_" in w or "`" in w or w[:1].isupper()) and w.lower() not in QUESTION_WORDS
        ]
    if not words:
        return None
    return " ".join(dict.fromkeys([*keep, *words]))[:500]


class RewriteStage(Stage[Rewrites]):
    """``Question -> Rewrites`` (step "Query Rewrite")."""

    steps = (Step.REWRITE,)

    def __init__(self, store: Store, min_share: float | None) -> None:
        """``min_share``: the cross-language routes' ``crosslang_min_share`` (None: they are off, so
        no variant is made)."""
        self.store = store
        self.min_share = min_share

    def run(self, q: Question, tracer: Tracer) -> Rewrites:

        def other_script(text: str) -> bool:
            if self.min_share is None:
                return False
            where = OtherScript.of(self.store, text, Visibility.of(q.principals, q.filters))
            return where.skip_reason(self.min_share) is None

        with tracer.step(Step.REWRITE, f"{q.text[:80]!r}") as step:
            rewrites = rewrite(q.text, q.follow_up, other_script)
            step.done(
                _summary(rewrites),
                standalone=rewrites.standalone,
                keywords=rewrites.keywords,
                variant=rewrites.variant,
                variant_note=rewrites.variant_note,
                follow_up=None
                if rewrites.follow_up is None
                else {"said": rewrites.follow_up.said, "reason": rewrites.follow_up.reason},
            )
        return rewrites


def rewrite(text: str, follow_up: FollowUp | None, other_script: HasOtherScript) -> Rewrites:
    """The question's forms (see the module docstring)."""
    if not other_script(text):
        variant, note = None, "no visible chunk is in the other language"
    else:
        variant = other_language(text)
        note = "through CC-CEDICT" if variant else "nothing of the question translates (or CC-CEDICT is missing)"
    return Rewrites(text, keyword_form(text), variant, note, follow_up)


def _summary(r: Rewrites) -> str:
    forms = [f"keywords {r.keywords!r}" if r.keywords else "", f"variant {r.variant!r}" if r.variant else ""]
    head = f"follow-up made standalone: {r.standalone!r}" if r.follow_up is not None else "standalone"
    return "; ".join([head, *(f for f in forms if f)])
