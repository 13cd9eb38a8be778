"""The rule reranker (seed 000): fused score plus exact-term, title and tag bonuses.

    final = fused (min-max scaled over the candidates)
          + 0.30 * weighted share of the question's terms found in the chunk
          + 0.10 if an identifier from the question (``dense_engine``, ``--explain``,
                 ``SUNLIB_HOME``, a quoted phrase) appears verbatim
          + 0.10 * weighted share of the terms found in the title and heading path
          + 0.05 per question term that is one of the note's tags (at most 0.10)

then scaled again so the best candidate is 1.0. Every bonus is reported per hit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...config import AnswerSettings
from ...contracts import Hit, Ranked
from ...text import TermWeights, fts_tokens
from ..base import Reranker

TERM_BONUS = 0.30
IDENTIFIER_BONUS = 0.10
TITLE_BONUS = 0.10
TAG_BONUS = 0.05
TAG_BONUS_MAX = 0.10

_IDENTIFIER = re.compile(
    r"""--?[A-Za-z][\w-]*|\b\w*[_.]\w+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][A-Z0-9]{2,}\b|"[^"]+"|`[^`]+`"""
)


def identifiers(question: str) -> list[str]:
    """Tokens a user means literally: flags, snake_case/dotted names, camelCase, CONSTANTS, quoted text."""
    return list(dict.fromkeys(m.group().strip('"`') for m in _IDENTIFIER.finditer(question) if m.group().strip('"`')))


class LexicalReranker(Reranker):
    name = "lexical"

    def rerank(self, question: str, hits: Sequence[Hit], term_weights: TermWeights) -> list[Ranked]:
        if not hits:
            return []
        lo, hi = min(h.score for h in hits), max(h.score for h in hits)
        idents = identifiers(question)
        names = set(term_weights.names())
        ranked = []
        for hit in hits:
            base = (hit.score - lo) / (hi - lo) if hi > lo else 1.0
            terms = term_weights.share([hit.text]) if term_weights else 0.0
            lowered = hit.text.lower()
            exact = [i for i in idents if i.lower() in lowered]
            title = term_weights.share([hit.title, *hit.heading_path]) if term_weights else 0.0
            tags = [t for t in hit.tags if set(fts_tokens(t)) & names]
            bonuses = {
                "terms": round(TERM_BONUS * terms, 4),
                "exact": IDENTIFIER_BONUS if exact else 0.0,
                "title": round(TITLE_BONUS * title, 4),
                "tags": min(TAG_BONUS_MAX, TAG_BONUS * len(tags)),
            }
            details = {"fused": round(base, 4), **bonuses, "exact_matches": exact, "tag_matches": tags}
            ranked.append(Ranked(hit, base + sum(bonuses.values()), details))
        top = max(r.score for r in ranked) or 1.0
        ranked = [Ranked(r.hit, r.score / top, r.details) for r in ranked]
        ranked.sort(key=lambda r: (-r.score, r.hit.chunk_id))
        return ranked


def create_lexical(settings: AnswerSettings) -> Reranker:
    return LexicalReranker()
