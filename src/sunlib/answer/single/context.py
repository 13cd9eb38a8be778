"""Build the writer's context: a token budget, grouped by section, in reading order.

Seed 002 phases 2 and 5: chunks are taken best score first while the running
estimate stays under the soft limit; past it, only strong chunks (seeds at or above
the expansion threshold) are still taken, and nothing ever passes the hard limit.
What was taken is grouped by (note, section); a group keeps reading order inside it,
and groups are ordered by their best score. Each chunk becomes a ``[Source n]``
block that names its chunk id.

Evidence is data. Each block's text sits between two lines holding a marker made
fresh for every run, which a note cannot know in advance; the system prompt says that
everything between the markers is quoted note text. Any copy of the marker inside a
note is removed, and ``[ref:`` inside a note is defused so that a note cannot forge a
citation that looks like the writer's.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...contracts import BuiltContext, Evidence
from ...text import estimate_tokens
from ...text.refs import defuse_refs


@dataclass(frozen=True)
class Budget:
    soft_tokens: int
    max_tokens: int
    strong_score: float


@dataclass(frozen=True)
class ContextReport:
    context: BuiltContext
    dropped: tuple[str, ...]  # chunk ids left out by the budget
    groups: int


def build_context(candidates: Sequence[Evidence], budget: Budget, fence: str | None = None) -> ContextReport:
    fence = fence or f"=====EVIDENCE-{secrets.token_hex(6)}====="
    taken: list[Evidence] = []
    dropped: list[str] = []
    used = 0
    for ev in sorted(candidates, key=lambda e: -e.score):
        cost = estimate_tokens(ev.text) + 20  # the header line
        fits_soft = used + cost <= budget.soft_tokens
        fits_hard = used + cost <= budget.max_tokens and ev.score >= budget.strong_score and ev.expanded_from is None
        if fits_soft or fits_hard or not taken:
            if not taken and used + cost > budget.max_tokens:
                ev = replace(ev, text=_truncate(ev.text, budget.max_tokens - 20))
                cost = budget.max_tokens
            taken.append(ev)
            used += cost
        else:
            dropped.append(ev.chunk_id)
    groups: dict[tuple[str, tuple[str, ...]], list[Evidence]] = {}
    for ev in taken:
        groups.setdefault((ev.note_id, ev.heading_path), []).append(ev)
    ordered = sorted(groups.values(), key=lambda g: -max(e.score for e in g))
    evidence = [
        replace(ev, source=n)
        for n, ev in enumerate((ev for g in ordered for ev in sorted(g, key=lambda e: e.ordinal)), 1)
    ]
    text = "\n\n".join(render_source(ev, fence) for ev in evidence)
    return ContextReport(BuiltContext(tuple(evidence), text, used, fence), tuple(dropped), len(ordered))


def render_source(ev: Evidence, fence: str) -> str:
    section = " > ".join(ev.heading_path)
    header = f"[Source {ev.source}] chunk_id={ev.chunk_id} note={ev.path}" + (f" section={section}" if section else "")
    return f"{header}\n{fence}\n{as_data(ev.text, fence)}\n{fence}"


def as_data(text: str, fence: str) -> str:
    return defuse_refs(text.replace(fence, ""))


def _truncate(text: str, tokens: int) -> str:
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix within the budget
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]
