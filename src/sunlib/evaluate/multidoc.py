"""Multi-document answer metrics: what a run gathered as evidence, and whether it holds every part.

A run's **evidence** is read from its trace: the chunks each ``Selection/Refusal`` step kept
(``selected``). A single-shot ask has one; an agentic run has one per round, nested in its
``Round`` span, and a sub-question's evidence is its last round's selection. The parts' lists
are interleaved (first of each part, then second, ...) and the first ``EVIDENCE_K`` distinct
chunks are the evidence, so a part is not crowded out by another part's long list. A refused
selection still counts: these metrics measure what retrieval and selection found, beside
the refusal metrics that measure what the answer did with it.

* ``all_gold_recall@10``: of the answerable questions with two or more gold groups (a gold file
  each, or RGB's passage groups, one per answer item), the share whose evidence holds a member
  of every group;
* ``part_coverage``: over the questions with parts the notes cover, the mean share of those
  parts covered by the evidence: a part is covered when one of its gold phrases is in the
  evidence text, or (RGB) a passage of its group is in the evidence;
* ``rounds``: retrieval rounds per question (1 for a single shot that retrieved, 0 for a
  direct reply).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from ..answer.details import RoundDetails, SelectionDetails, read
from ..contracts import RunTrace
from ..errors import DatasetError
from ..trace.steps import Step

EVIDENCE_K = 10


@dataclass(frozen=True)
class QAPart:
    """One fact an answer needs. Covered by any of ``phrases`` in the evidence text, or by any of
    ``files`` among the evidence's notes; neither given: the notes do not cover it."""

    name: str
    phrases: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def coverable(self) -> bool:
        return bool(self.phrases or self.files)


def parse_parts(row: Mapping[str, Any], where: str) -> tuple[QAPart, ...]:
    """``parts`` of a QA line: ``{"part", "gold_file", "gold_phrase"}`` (benchmarks/multidoc; both
    null for an uncovered part) or ``{"part", "gold_files": [...], "gold_phrases": [...]}``."""
    raw = row.get("parts") or []
    if not isinstance(raw, list):
        raise DatasetError(f"{where}: parts must be a list")
    out = []
    for n, p in enumerate(raw, 1):
        if not isinstance(p, dict):
            raise DatasetError(f"{where}: part {n} is not an object")
        phrases = p.get("gold_phrases") or ([p["gold_phrase"]] if p.get("gold_phrase") else [])
        files = p.get("gold_files") or []
        if not all(isinstance(x, str) and x for x in [*phrases, *files]):
            raise DatasetError(f"{where}: part {n}: gold phrases and files must be non-empty strings")
        out.append(QAPart(str(p.get("part") or f"part {n}"), tuple(phrases), tuple(files)))
    return tuple(out)


def parse_groups(row: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], ...]:
    """``gold_groups``: lists of files of which any one stands for its group (RGB's passage groups);
    absent: every gold file is its own group."""
    raw = row.get("gold_groups")
    if raw is None:
        return tuple((f,) for f in row.get("gold_files") or [])
    if not isinstance(raw, list) or not all(isinstance(g, list) and g for g in raw):
        raise DatasetError(f"{where}: gold_groups must be a list of non-empty lists of files")
    return tuple(tuple(str(f) for f in g) for g in raw)


def evidence_ids(trace: RunTrace, k: int = EVIDENCE_K) -> list[str]:
    """The run's evidence chunk ids (see the module docstring), at most ``k``."""
    rounds = {s.span_id: s for s in trace.steps if s.name == Step.ROUND}
    per_part: dict[str, list[str]] = {}
    for s in trace.steps:
        if s.name != Step.SELECT or s.status == "skipped":
            continue
        r = rounds.get(s.parent_id or "")
        part = read(r, RoundDetails).sub_question if r is not None else None
        key = "single" if r is None else json.dumps(r.iteration if part is None else part)
        per_part[key] = [str(c) for c in read(s, SelectionDetails).selected or ()]
    out: list[str] = []
    for row in zip_longest(*per_part.values()):
        for chunk_id in row:
            if chunk_id is not None and chunk_id not in out:
                out.append(chunk_id)
    return out[:k]


def rounds_of(trace: RunTrace) -> int:
    n = sum(1 for s in trace.steps if s.name == Step.ROUND)
    if n:
        return n
    return int(any(s.name == Step.SELECT and s.status != "skipped" for s in trace.steps))


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def part_figures(
    groups: Sequence[Sequence[str]], parts: Sequence[QAPart], paths: Sequence[str], texts: Sequence[str]
) -> dict[str, Any]:
    """A question's figures on its evidence (the notes' ``paths`` and chunk ``texts``)."""
    have, joined = set(paths), [_norm(t) for t in texts]
    all_gold = all(any(f in have for f in g) for g in groups) if len(groups) >= 2 else None
    coverable = [p for p in parts if p.coverable]
    covered = [
        p.name
        for p in coverable
        if any(f in have for f in p.files) or any(_norm(ph) in t for ph in p.phrases for t in joined)
    ]
    return {
        "all_gold@10": all_gold,
        "parts_total": len(coverable),
        "parts_covered": covered,
        "part_coverage": round(len(covered) / len(coverable), 4) if coverable else None,
    }


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The multi-document metrics over ``run_case`` rows."""
    gold = [float(r["all_gold@10"]) for r in rows if r.get("answerable") and r.get("all_gold@10") is not None]
    cover = [float(r["part_coverage"]) for r in rows if r.get("part_coverage") is not None]
    rounds = [int(r.get("rounds", 0)) for r in rows]
    return {
        "all_gold_recall@10": round(sum(gold) / len(gold), 4) if gold else None,
        "part_coverage": round(sum(cover) / len(cover), 4) if cover else None,
        "rounds": round(sum(rounds) / len(rounds), 2) if rounds else None,
    }
