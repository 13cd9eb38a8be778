"""Answer evaluation on a QA set (seed 002 phase 0, seed 001 module 5).

A QA set is JSONL, one question per line::

    {"id": "en-fact-01", "lang": "en", "type": "fact", "question": "...",
     "gold_files": ["guide/search/search-modes.md"], "gold_phrases": ["z-score"], "answer": "..."}

``type`` is one of TYPES; an ``unanswerable`` question has no gold files. Every
question goes through the real ask pipeline (``Library.ask``), and:

* ``recall@5``: a gold file is among the (at most five) selected evidence chunks;
* ``citation_correctness``: of the answered answerable questions, the share whose
  cited chunks contain a gold phrase (``citation_precision``: the share of all
  citations whose chunk contains one);
* ``refusal_rate``: unanswerable questions refused; ``false_refusal_rate``:
  answerable questions refused;
* ``unsupported_claim_rate``: claims left in the delivered answers that the verifier did not
  support, over all their claims (answered questions); ``dropped_claim_rate``: the drafts' claims
  the verifier took out (``[answer] unsupported = "drop"``), over all the drafts' claims;
* ``keyword_coverage``: gold phrases that appear in the answer text;
* ``answer_span_hit``: a gold phrase appears in the selected evidence;
* ``judge_refused`` / ``judge_no_verdict``: how many questions the answerability judge
  refused, and how many it was asked about but gave no verdict for (0 with the judge off);
* ``all_gold_recall@10``, ``part_coverage`` and ``rounds``: the multi-document figures
  (``evaluate.multidoc``), for sets whose questions carry ``parts`` (benchmarks/multidoc, RGB).

A multi-document line may also carry ``parts`` (the facts the answer needs, each with its gold
phrase; an uncovered part has none), ``gold_groups`` and ``follows`` (a follow-up: the id of the
question it continues, asked first with its answer as the conversation's history). An
``unanswerable`` line with gold files is partly answerable: some parts are covered, some not;
it counts as answerable (refusing it is a false refusal) and its uncovered parts are not
scored. ``agentic`` (``sunlib eval rag --mode``) asks every question in one mode.

Every metric is reported for the whole set, and per slice (answerable, unanswerable,
``lang:*``, ``type:*``) under ``by_slice``. A metric with no question to count is null.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..answer.details import ContextDetails, JudgeDetails, RerankDetails, SelectionDetails, read
from ..contracts import RunTrace, Turn
from ..errors import DatasetError
from ..library import Library
from ..store import LOCAL_OWNER, ChunkRow
from ..text.tokens import has_cjk
from ..trace.steps import Step
from .grading import AnswerGrader, GradeInput, grade_summary
from .metrics import percentile
from .multidoc import QAPart, evidence_ids, parse_groups, parse_parts, part_figures, rounds_of
from .multidoc import summary as multidoc_summary

TYPES = (
    "fact",
    "procedure",
    "comparison",
    "enumeration",
    "cross_doc",
    "multi_part",
    "follow_up",
    "code_identifier",
    "paraphrase",
    "unanswerable",
)
METRIC_KEYS = (
    "recall@5",
    "citation_correctness",
    "refusal_rate",
    "false_refusal_rate",
    "unsupported_claim_rate",
    "keyword_coverage",
)
EXTRA_KEYS = (
    "dropped_claim_rate",
    "citation_precision",
    "answer_span_hit",
    "latency_ms_p50",
    "latency_ms_p95",
    "questions",
    "judge_refused",
    "judge_no_verdict",
    "all_gold_recall@10",
    "part_coverage",
    "rounds",
)
HIGHER_IS_BETTER = {
    "recall@5": True,
    "citation_correctness": True,
    "refusal_rate": True,
    "false_refusal_rate": False,
    "unsupported_claim_rate": False,
    "dropped_claim_rate": False,
    "keyword_coverage": True,
    "citation_precision": True,
    "answer_span_hit": True,
    "all_gold_recall@10": True,
    "part_coverage": True,
}


@dataclass(frozen=True)
class QACase:
    id: str
    lang: str
    type: str
    question: str
    gold_files: tuple[str, ...]
    gold_phrases: tuple[str, ...]
    answer: str
    parts: tuple[QAPart, ...] = ()
    gold_groups: tuple[tuple[str, ...], ...] = ()  # empty: each gold file is its own group
    follows: str | None = None  # a follow-up: the id of the question it continues

    @property
    def answerable(self) -> bool:
        """Unanswerable questions have no gold file; one with gold files is partly answerable."""
        return self.type != "unanswerable" or bool(self.gold_files)

    @property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        return self.gold_groups or tuple((f,) for f in self.gold_files)


@dataclass
class QAReport:
    metrics: dict[str, Any]
    by_slice: dict[str, dict[str, Any]]
    cases: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.metrics, "by_slice": self.by_slice}


def load_qa(path: Path, label: str | None = None) -> list[QACase]:
    """The cases of a QA set; errors name it as ``label`` (default: ``path``), so that a server
    can name a vault file by its vault-relative path rather than where it lives on disk."""
    label = label or str(path)
    cases: list[QACase] = []
    seen: set[str] = set()
    for n, line in enumerate(_lines(path, label), 1):
        if line.strip():
            cases.append(_case(_row(line, f"{label}:{n}"), f"{label}:{n}", seen))
    if not cases:
        raise DatasetError(f"{label}: no questions")
    return cases


def _lines(path: Path, label: str) -> list[str]:
    if not path.is_file():
        raise DatasetError(f"QA set not found: {label}")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{label}: not UTF-8 text (byte {exc.start})") from None


def _row(line: str, where: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not JSON ({exc.msg})") from None
    except RecursionError:
        raise DatasetError(f"{where}: nested too deeply to be a question") from None
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object")
    return row


def _case(row: dict[str, Any], where: str, seen: set[str]) -> QACase:
    """One line's case, by the rules every set must keep to run (``seen``: the ids before it)."""
    missing = [k for k in ("id", "question", "type") if not isinstance(row.get(k), str) or not row[k].strip()]
    if missing:
        raise DatasetError(f"{where}: missing or empty field(s): {', '.join(missing)}")
    if row["type"] not in TYPES:
        raise DatasetError(f"{where}: type {row['type']!r} is not one of {', '.join(TYPES)}")
    if row["id"] in seen:
        raise DatasetError(f"{where}: duplicate id {row['id']!r}")
    seen.add(row["id"])
    gold_files, gold_phrases = row.get("gold_files") or [], row.get("gold_phrases") or []
    if not all(isinstance(x, str) for x in [*gold_files, *gold_phrases]):
        raise DatasetError(f"{where}: gold_files and gold_phrases must be lists of strings")
    parts = parse_parts(row, where)
    partial = any(not p.coverable for p in parts) and any(p.coverable for p in parts)
    if row["type"] == "unanswerable" and gold_files and not partial:
        raise DatasetError(
            f"{where}: an unanswerable question has no gold_files (unless its parts name an uncovered one)"
        )
    if row["type"] != "unanswerable" and not gold_files:
        raise DatasetError(f"{where}: an answerable question needs gold_files")
    return QACase(
        row["id"],
        str(row.get("lang") or "und"),
        row["type"],
        row["question"],
        tuple(gold_files),
        tuple(gold_phrases),
        str(row.get("answer") or ""),
        parts,
        parse_groups(row, where) if row.get("gold_groups") is not None else (),
        _follows(row, where, seen),
    )


def _follows(row: dict[str, Any], where: str, seen: set[str]) -> str | None:
    follows = row.get("follows")
    if follows is None:
        return None
    if not isinstance(follows, str) or follows not in seen or follows == row["id"]:
        raise DatasetError(f"{where}: follows {follows!r}, which is not an earlier id")
    return follows


FIELDS = ("id", "lang", "type", "question", "gold_files", "gold_phrases", "answer", "parts", "gold_groups", "follows")
PART_FIELDS = ("part", "gold_file", "gold_phrase", "gold_files", "gold_phrases")
LANGS = ("en", "zh")
_LATIN = re.compile(r"[A-Za-z]")


@dataclass(frozen=True)
class QACheck:
    """What ``check_qa`` found: the cases that load, and every problem as one line (``FILE:LINE: ...``)."""

    label: str
    cases: tuple[QACase, ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: the set's size, answerable and not, per language and per type."""
        langs = Counter(c.lang for c in self.cases)
        types = Counter(c.type for c in self.cases)
        partly = sum(c.type == "unanswerable" and c.answerable for c in self.cases)  # some parts uncovered
        answerable = sum(c.answerable for c in self.cases) - partly
        kinds = [f"{answerable} answerable"] + ([f"{partly} partly answerable"] if partly else [])
        kinds.append(f"{len(self.cases) - answerable - partly} unanswerable")
        files = len({f for c in self.cases for f in c.gold_files})
        return (
            f"{self.label}: OK, {len(self.cases)} questions ({', '.join(kinds)};"
            f" {', '.join(f'{k} {v}' for k, v in sorted(langs.items()))};"
            f" {', '.join(f'{k} {types[k]}' for k in TYPES if types[k])}), {files} gold files"
        )


def check_qa(path: Path, vault: Path, label: str | None = None) -> QACheck:
    """Check a QA set against the vault it is about (``sunlib eval check``): every line loads as
    ``load_qa`` reads it, and besides

    * no field is unknown, ``lang`` is en or zh and agrees with the question's script;
    * an answerable question has gold phrases, an unanswerable one without gold files has none;
      a cross_doc question and any question with parts (but a follow-up) cite two or more files,
      a multi_part question has two or more parts;
    * every gold file is a file inside the vault, every gold phrase is a verbatim substring of one
      of its question's gold files, and each gold file holds one of them (files of ``gold_groups``
      stand for their group and need not);
    * a covered part's file is among the gold files and holds the part's phrase; an answerable
      question has no uncovered part;
    * ``follows`` is on follow_up questions only, and each follow_up follows or is followed.
    """
    label = label or str(path)
    try:
        lines = _lines(path, label)
    except DatasetError as exc:
        return QACheck(label, (), (str(exc),))
    problems: list[str] = [] if vault.is_dir() else [f"vault not found: {vault}"]
    texts: dict[str, str | None] = {}
    cases: list[tuple[str, QACase]] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{label}:{n}"
        try:
            row = _row(line, where)
            case = _case(row, where, seen)
        except DatasetError as exc:
            problems.append(str(exc))
            continue
        cases.append((where, case))
        if vault.is_dir():
            problems += [f"{where}: {p}" for p in _problems(row, case, lambda rel: _text(vault, rel, texts))]
        else:
            problems += [f"{where}: {p}" for p in _row_problems(row, case)]
    followed = {c.follows for _, c in cases if c.follows}
    for where, c in cases:
        if c.type == "follow_up" and c.follows is None and c.id not in followed:
            problems.append(f"{where}: a follow_up question that neither follows another nor is followed")
    if not cases and not problems:
        problems.append(f"{label}: no questions")
    return QACheck(label, tuple(c for _, c in cases), tuple(problems))


def _text(vault: Path, rel: str, cache: dict[str, str | None]) -> str | None:
    """A gold file's text, None when it is not a readable file inside the vault."""
    if rel not in cache:
        root = vault.resolve()
        path = (root / rel).resolve()
        inside = not Path(rel).is_absolute() and path.is_relative_to(root)
        try:
            cache[rel] = path.read_text(encoding="utf-8") if inside and path.is_file() else None
        except (OSError, UnicodeDecodeError):
            cache[rel] = None
    return cache[rel]


def _row_problems(row: dict[str, Any], case: QACase) -> list[str]:
    """What is wrong with a line that loads, without reading the vault."""
    out = []
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        out.append(f"unknown field(s): {', '.join(unknown)}")
    lang = row.get("lang")
    if lang is None:
        out.append(f"no lang (one of {', '.join(LANGS)})")
    elif lang not in LANGS:
        out.append(f"lang {lang!r} is not one of {', '.join(LANGS)}")
    elif lang == "zh" and not has_cjk(case.question):
        out.append("lang zh, but the question has no Chinese characters")
    elif lang == "en" and has_cjk(case.question) and not _LATIN.search(case.question):
        out.append("lang en, but the question is in Chinese")
    if not isinstance(row.get("answer", ""), str):
        out.append("answer must be a string")
    for key in ("gold_files", "gold_phrases"):
        if row.get(key) is not None and not isinstance(row[key], list):
            out.append(f"{key} must be a list")
    if case.answerable and not case.gold_phrases:
        out.append("an answerable question needs gold_phrases")
    if not case.answerable and case.gold_phrases:
        out.append("an unanswerable question has no gold_phrases")
    if case.type == "cross_doc" and len(set(case.gold_files)) < 2:
        out.append("a cross_doc question needs two or more gold files")
    if case.parts and case.type != "follow_up" and len(set(case.gold_files)) < 2:
        out.append("a question with parts needs two or more gold files (a follow-up may cite one)")
    if case.type == "multi_part" and len(case.parts) < 2:
        out.append("a multi_part question needs two or more parts")
    if case.follows is not None and case.type != "follow_up":
        out.append(f"follows on a question of type {case.type}")
    for n, raw in enumerate(row.get("parts") or [], 1):
        if not str(raw.get("part") or "").strip():
            out.append(f"part {n} has no name")
        unknown = sorted(set(raw) - set(PART_FIELDS))
        if unknown:
            out.append(f"part {n}: unknown field(s): {', '.join(unknown)}")
        if raw.get("gold_file") is not None and not raw.get("gold_phrase"):
            out.append(f"part {n}: a gold_file without its gold_phrase")
    if case.type != "unanswerable":
        uncovered = [p.name for p in case.parts if not p.coverable]
        out += [f"part {name!r} has no gold phrase, in an answerable question" for name in uncovered]
    return out


def _problems(row: dict[str, Any], case: QACase, text: Callable[[str], str | None]) -> list[str]:
    """What is wrong with a line that loads, its gold files read from the vault."""
    out = _row_problems(row, case)
    found: dict[str, str] = {}
    for rel in case.gold_files:
        got = text(rel)
        if got is None:
            out.append(f"gold file not found in the vault: {rel}")
        else:
            found[rel] = got
    if len(found) == len(set(case.gold_files)):  # every gold file read: the phrases can be placed
        for phrase in case.gold_phrases:
            if not phrase.strip():
                out.append("an empty gold phrase")
            elif not any(phrase in t for t in found.values()):
                out.append(f"gold phrase not in its gold files: {phrase!r}")
        if case.gold_phrases and not case.gold_groups:
            out += [
                f"gold file {rel} holds none of the gold phrases"
                for rel, t in found.items()
                if not any(p in t for p in case.gold_phrases)
            ]
    for n, raw in enumerate(row.get("parts") or [], 1):
        files = raw.get("gold_files") or ([raw["gold_file"]] if raw.get("gold_file") else [])
        phrases = raw.get("gold_phrases") or ([raw["gold_phrase"]] if raw.get("gold_phrase") else [])
        for rel in files:
            if rel not in case.gold_files:
                out.append(f"part {n}: its file {rel} is not among gold_files")
        names = files or case.gold_files  # a part that names no file: the question's gold files
        read = [text(rel) for rel in names]
        present = [t for t in read if t is not None]
        if phrases and len(present) == len(read) and not any(p in t for p in phrases for t in present):
            out.append(f"part {n}: its gold phrase is not in {', '.join(names)}: {phrases[0]!r}")
    return out


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _contains_any(texts: Sequence[str], phrases: Sequence[str]) -> bool:
    normed = [_norm(t) for t in texts]
    return any(_norm(p) in t for p in phrases for t in normed)


def run_case(
    lib: Library,
    case: QACase,
    principals: Sequence[str] | None = None,
    grader: AnswerGrader | None = None,
    save: bool = False,
    agentic: bool | None = None,
    history: Sequence[Turn] = (),
    owner: str = LOCAL_OWNER,
) -> dict[str, Any]:
    """Ask one question and record what the metrics need (and, with a grader, its judged scores).
    ``agentic``: the mode to ask in (None: ``[answer] mode``); ``history``: the turns before it;
    ``owner``: whose saved run it is."""
    t0 = time.perf_counter()
    result = lib.ask(
        case.question,
        principals=principals,
        save=save,
        history=history,
        agentic=agentic,
        start_conversation=False,
        owner=owner,
    )
    latency = (time.perf_counter() - t0) * 1000.0
    frame = result.frame
    sel = result.selection  # None for a direct reply
    # the kept chunks (a single shot: its selection; an agentic run: each part's, interleaved)
    selected = evidence_ids(result.trace) if sel is not None else []
    selected_rows = lib.store.chunks_by_ids(selected)
    selected_paths = [r.path for r in selected_rows]
    texts = {ev.chunk_id: ev.text for ev in frame.evidence}
    cited = [texts.get(c.chunk_id, c.quote) for c in frame.citations]
    counted = [s for s in frame.sentences if (s.refs or not s.supported) and not s.dropped]
    judge = next((s for s in result.trace.steps if s.name == Step.JUDGE and s.status != "skipped"), None)
    grade = None
    if grader is not None:
        item = GradeInput(case.question, case.answer, case.answerable, frame.answer, frame.refused, tuple(cited))
        grade = grader.grade(item)
    return {
        "id": case.id,
        "lang": case.lang,
        "type": case.type,
        "question": case.question,
        "answerable": case.answerable,
        "refused": frame.refused,
        "refusal_reason": frame.refusal_reason,
        "answer": frame.answer,
        "selected_paths": selected_paths,
        "gold_in_selected": bool(set(case.gold_files) & set(selected_paths[:5])),
        "span_hit": _contains_any([r.text for r in selected_rows], case.gold_phrases) if case.gold_phrases else None,
        "citation_correct": _contains_any(cited, case.gold_phrases) if cited and case.gold_phrases else False,
        "citations_with_gold": sum(_contains_any([t], case.gold_phrases) for t in cited),
        "citations": len(cited),
        "claims": len(counted),
        "unsupported": frame.unsupported,
        "dropped": frame.dropped,
        "keyword_coverage": (
            # as a reader sees the answer: the bold around the reader's span is no text
            sum(_norm(p) in _norm(frame.answer.replace("**", "")) for p in case.gold_phrases) / len(case.gold_phrases)
            if case.gold_phrases
            else None
        ),
        # rounded to 4 places as the trace shows them: calibration fits its thresholds on these values
        "gate_score": _round(sel.gate_score) if sel is not None else None,
        "top_cosine": _round(sel.top_cosine) if sel is not None else None,
        "coverage": _round(sel.coverage) if sel is not None else None,
        "sentence_cosine": _round(sel.sentence_cosine) if sel is not None else None,
        "checks_passed": sel.checks_passed if sel is not None else True,
        "refusals": [r.code for r in frame.refusals],
        # a low score's refusals the reader overruled across languages (gate.AcrossLanguages)
        "overruled": [r.code for r in sel.decision.overruled] if sel is not None else [],
        "judge": None if judge is None else read(judge, JudgeDetails).answerable,  # None: not asked, or no verdict
        "judged": judge is not None,
        "latency_ms": round(latency, 1),
        "run_id": result.run_id,
        "run_saved": save,
        "citation_list": [{"id": c.citation_id, "path": c.path, "quote": c.quote[:300]} for c in frame.citations],
        "grade": None if grade is None else grade.to_json(),
        **retrieval_figures(result.trace),
        **_evidence_figures(case, selected_rows, result.trace),
    }


def _evidence_figures(case: QACase, rows: Sequence[ChunkRow], trace: RunTrace) -> dict[str, Any]:
    figures = part_figures(case.groups, case.parts, [r.path for r in rows], [r.text for r in rows])
    return {"rounds": rounds_of(trace), **figures}


def retrieval_figures(trace: RunTrace) -> dict[str, Any]:
    """Per question, read from the run's trace: the rerank scores (top 10), the context's chunks
    and characters, and the gate's signals (score, threshold, whether it passed)."""
    last = {s.name: s for s in trace.steps if s.status != "skipped"}
    rerank, context, select = last.get(Step.RERANK), last.get(Step.CONTEXT), last.get(Step.SELECT)
    sel = read(select, SelectionDetails) if select is not None else None
    gate = (
        {
            "gate_score": sel.gate_score,
            "threshold": sel.threshold,
            "passed": sel.passed,
            "gate_source": sel.gate_source,
            "confidence": sel.confidence,
            "missing_terms": None if sel.missing_terms is None else list(sel.missing_terms),
        }
        if sel is not None
        else None
    )
    ranked = read(rerank, RerankDetails).top if rerank is not None else ()
    built = read(context, ContextDetails) if context is not None else None
    return {
        "rerank_scores": [t.score for t in ranked or ()],
        "context_chunks": len(built.sources or ()) if built is not None else 0,
        "context_chars": int(built.chars or 0) if built is not None else 0,
        "context_tokens": int(built.token_estimate or 0) if built is not None else 0,
        "gate": gate,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    ans = [r for r in rows if r["answerable"]]
    unans = [r for r in rows if not r["answerable"]]
    answered = [r for r in ans if not r["refused"]]
    all_answered = [r for r in rows if not r["refused"]]
    claims = sum(r["claims"] for r in all_answered)
    dropped = sum(r.get("dropped", 0) for r in all_answered)  # rows saved before the field: none
    citations = sum(r["citations"] for r in answered)
    latencies = [r["latency_ms"] for r in rows]
    return {
        "recall@5": _mean([float(r["gold_in_selected"]) for r in ans]),
        "citation_correctness": _mean([float(r["citation_correct"]) for r in answered]),
        "refusal_rate": _mean([float(r["refused"]) for r in unans]),
        "false_refusal_rate": _mean([float(r["refused"]) for r in ans]),
        "unsupported_claim_rate": round(sum(r["unsupported"] for r in all_answered) / claims, 4) if claims else None,
        "dropped_claim_rate": round(dropped / (claims + dropped), 4) if claims + dropped else None,
        "keyword_coverage": _mean([r["keyword_coverage"] for r in answered if r["keyword_coverage"] is not None]),
        "citation_precision": round(sum(r["citations_with_gold"] for r in answered) / citations, 4)
        if citations
        else None,
        "answer_span_hit": _mean([float(r["span_hit"]) for r in ans if r["span_hit"] is not None]),
        "latency_ms_p50": round(percentile(latencies, 50), 1) if latencies else None,
        "latency_ms_p95": round(percentile(latencies, 95), 1) if latencies else None,
        "questions": len(rows),
        "judge_refused": sum(r["judge"] is False for r in rows),
        "judge_no_verdict": sum(r["judged"] and r["judge"] is None for r in rows),
        **multidoc_summary(rows),
        # judged scores (``--judge``): beside the metrics above, only when the answers were graded
        **(grade_summary([r.get("grade") for r in rows]) if any(r.get("grade") for r in rows) else {}),
    }


def evaluate_rag(
    lib: Library,
    cases: Sequence[QACase],
    principals: Sequence[str] | None = None,
    on_case: Callable[[int, int], None] | None = None,
    grader: AnswerGrader | None = None,
    save_runs: bool = False,
    agentic: bool | None = None,
) -> QAReport:
    """Every question through the real ask pipeline; with ``grader``, each answer judged too;
    with ``save_runs``, each question's run is saved in the index (its run chain can be opened).
    ``agentic``: True the agentic loop, False the single shot, None ``[answer] mode``. A follow-up
    (``follows``) is asked after the question it continues, with that question and its answer as
    the conversation's history."""
    rows = []
    asked: dict[str, tuple[str, str]] = {}
    for i, case in enumerate(cases, 1):
        before = asked.get(case.follows) if case.follows else None
        history = (Turn("user", before[0]), Turn("assistant", before[1])) if before else ()
        row = run_case(lib, case, principals, grader, save_runs, agentic, history)
        asked[case.id] = (case.question, row["answer"])
        rows.append(row)
        if on_case is not None:
            on_case(i, len(cases))
    info = {**run_info(lib, rows, grader), "answer_mode": _mode_name(lib, agentic)}
    return QAReport(summarize(rows), slice_metrics(rows), rows, info)


def _mode_name(lib: Library, agentic: bool | None) -> str:
    return lib.settings.answer.mode if agentic is None else ("agentic" if agentic else "single")


def slice_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The metrics of each slice: answerable, unanswerable, ``lang:*``, ``type:*``."""
    slices: dict[str, list[dict[str, Any]]] = {"answerable": [], "unanswerable": []}
    for r in rows:
        slices["answerable" if r["answerable"] else "unanswerable"].append(r)
        slices.setdefault(f"lang:{r['lang']}", []).append(r)
        slices.setdefault(f"type:{r['type']}", []).append(r)
    return {k: summarize(v) for k, v in slices.items() if v}


def run_info(lib: Library, rows: Sequence[dict[str, Any]], grader: AnswerGrader | None = None) -> dict[str, Any]:
    """The settings an evaluation ran with (the report's "Settings"). The vault is named by its
    folder only: a saved evaluation is read over HTTP too, where server paths are not shown."""
    return {
        "vault": lib.vault.name,
        "writer": lib.asker.writer.name,
        "judge": lib.asker.judge.model if lib.asker.judge is not None else "off",
        "reranker": lib.settings.answer.reranker,
        "mode": lib.settings.search.mode,
        "embedding": lib.settings.embedding.provider,
        "evaluated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "grader": None if grader is None else {"model": grader.model, "rubric": grader.rubric_version},
        "gate_threshold": _common_threshold(rows),
    }


def _common_threshold(rows: Sequence[dict[str, Any]]) -> float | None:
    """The gate threshold most questions were judged against (per language it may differ)."""
    seen = [r["gate"]["threshold"] for r in rows if r.get("gate") and r["gate"].get("threshold") is not None]
    return max(set(seen), key=seen.count) if seen else None


def regressions(current: dict[str, Any], baseline: dict[str, Any], tolerance: float) -> list[str]:
    """Metrics that moved the wrong way by more than ``tolerance`` (absolute)."""
    out = []
    for key, higher in HIGHER_IS_BETTER.items():
        now, then = current.get(key), baseline.get(key)
        if not isinstance(now, int | float) or not isinstance(then, int | float):
            continue
        drop = (then - now) if higher else (now - then)
        if drop > tolerance:
            out.append(f"{key}: {then} -> {now} (worse by {drop:.4f} > {tolerance})")
    return out
