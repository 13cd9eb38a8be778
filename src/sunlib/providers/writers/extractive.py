"""The offline writer: an answer made only of evidence sentences, each cited.

Every evidence sentence is scored by the weighted share of the question's terms it
contains (rare terms weigh more). Sources are visited best rerank score first: the
best source gives its two best-scoring sentences, every later source its best one,
until ``max_sentences`` are taken, so an answer shows depth from the strongest passage
and breadth from the next ones. Sentences are quoted verbatim, in the order they
appear in the context, each followed by ``[ref:chunk_id]``. Nothing is paraphrased,
so nothing can be stated that the evidence does not say. When no sentence shares a
term with the question (a paraphrase that the refusal gate let through on meaning),
the best source's opening sentence stands in.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ...config import Settings
from ...contracts import Draft, Evidence, WriteRequest
from ...text import estimate_tokens, is_cjk, sentence_spans
from ...text.refs import defuse_refs
from ..registry import Writer, register_writer

_MARKUP = re.compile(r"^(?:#{1,6}\s+|[-*+]\s+|\d{1,3}[.)]\s+|>\s*|\|)+")
MIN_SENTENCE_CHARS = 6
FIRST_SOURCE_SENTENCES = 2


def clean_sentence(text: str) -> str:
    """A sentence as it reads in an answer: one line, no list/heading/quote markers."""
    lines = (_MARKUP.sub("", line.strip()) for line in text.splitlines() if line.strip())
    return defuse_refs(" ".join(lines).strip(" |"))


def evidence_sentences(ev: Evidence) -> list[tuple[int, str]]:
    """(position in the chunk, cleaned sentence) for every sentence worth quoting."""
    out = []
    for s, e in sentence_spans(ev.text):
        sentence = clean_sentence(ev.text[s:e])
        if _quotable(sentence):
            out.append((s, sentence))
    return out


class ExtractiveWriter(Writer):
    name = "extractive"
    model = "extractive"

    def write(self, request: WriteRequest, on_token: Callable[[str], None] | None = None) -> Draft:
        weights = request.term_weights
        evidence = request.context.evidence
        scored: list[tuple[float, int, int, str, str]] = []  # (share, source index, position, sentence, chunk)
        seen: set[str] = set()
        for i, ev in enumerate(evidence):
            for pos, sentence in evidence_sentences(ev):
                if sentence in seen:
                    continue  # overlapping chunks repeat sentences
                seen.add(sentence)
                share = weights.share([sentence]) if weights else 0.0
                scored.append((share, i, pos, sentence, ev.chunk_id))
        best: list[tuple[float, int, int, str, str]] = []
        for rank, i in enumerate(sorted(range(len(evidence)), key=lambda i: -evidence[i].score)):
            mine = sorted((s for s in scored if s[1] == i and s[0] > 0), key=lambda s: -s[0])
            best += mine[: FIRST_SOURCE_SENTENCES if rank == 0 else 1]
        best = best[: request.max_sentences]
        if not best and scored:
            best = [min(scored, key=lambda s: (-evidence[s[1]].score, s[2]))]
        best.sort(key=lambda s: (s[1], s[2]))  # reading order of the context
        parts = [f"{sentence} [ref:{chunk_id}]" for _, _, _, sentence, chunk_id in best]
        text = _join(parts)
        if on_token is not None and text:
            on_token(text)
        return Draft(text=text, model=self.model, tokens_out=estimate_tokens(text))


def _quotable(sentence: str) -> bool:
    """Prose worth quoting: long enough, not a question (a heading like "Which model?"), not a fence."""
    words = len(sentence.split()) + sum(1 for ch in sentence if is_cjk(ch)) // 2
    return (
        len(sentence) >= MIN_SENTENCE_CHARS
        and words >= 3
        and not sentence.rstrip().endswith(("?", "？"))
        and not sentence.startswith(("```", "~~~"))
    )


def _join(parts: list[str]) -> str:
    if not parts:
        return ""
    cjk = sum(1 for p in parts for ch in p[:20] if is_cjk(ch))
    return ("" if cjk > 5 * len(parts) else " ").join(parts)


@register_writer("extractive")
def _extractive(settings: Settings) -> Writer:
    return ExtractiveWriter()
