"""Cite and verify: parse ``[ref:chunk_id]``, check each claim against what it cites.

A claim is a sentence that ends with refs, together with any sentences before it in
the same paragraph that carry none (a paragraph cited once at its end); a sentence
after the paragraph's last ref is a claim of its own. At most two refs count per claim
(seed 002 phase 6); a ref to a chunk that was not in the context is rejected. A claim
is supported when the share of its terms found in the cited chunks reaches 0.55 for a
short claim (< 50 characters) or 0.45 for a longer one. Claims with no content terms
("Yes.") are not counted either way.

A claim that cites no chunk of the context (small local models often quote the evidence
and forget the markers) is **attributed**: it is supported by the one passage of the
context that holds the largest share of its terms, when that share reaches
``ATTRIBUTION_THRESHOLD`` (0.7: stricter than for a cited claim, since the best of several
passages is taken), and the marker of that passage is written after it in the answer
(``Verification.text``), flagged ``attributed`` in its sentence. A claim that cites a
wrong chunk is not re-attributed: it stays unsupported. A draft that holds the run's fence
line echoes the prompt rather than answering it, and nothing in it is attributed
(``answer.single.stages.VerifyStage``).

A chunk says what its note text says *and* what that text shows once rendered
(``text.render``): writers quote the rendered form (``See Note > Setup``, not
``See [[Note#Setup]]``), and rendering can join what markup kept apart (in the note
text ``选择**红**色`` no Chinese bigram crosses the ``**``), so a chunk's terms are those
of both forms. The claim itself is taken as written: a link target hidden in a claim
still has to be supported.

With a reader (``support``: a model's probability that a passage supports a sentence; the LLM
path passes the configured reader's), each claim's best probability over the passages it cites is
recorded (``AnswerSentence.support``). With ``enforce_support`` (``[answer] reader_support``) the
claim must also reach ``support_threshold``; across languages (a Chinese sentence citing an English
passage) the shared-terms share cannot hold, and the reader decides alone. ``AnswerSentence.why``
says which check failed.

With ``drop`` (``[answer] unsupported = "drop"``, the default) every unsupported claim is taken
out of the delivered text, its sentence kept in ``Verification.sentences`` marked ``dropped``;
a list item or paragraph left empty goes with it. A draft with no supported claim keeps its
text: the pipeline refuses it whole.

Each accepted ref becomes a Citation that points at the exact sentences of the chunk
that best match the claims citing it, in UTF-16 offsets and lines of the note.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ...contracts import AnswerSentence, Citation, Evidence, SourceCard
from ...store import NoteRecord
from ...text import TermWeights, content_terms, fts_tokens, language, sentence_spans
from ...text.refs import REF, forged_markers, strip_refs
from ...text.render import render_markdown

Support = Callable[[Sequence[tuple[str, str]]], list[float]]  # (claim, passage) pairs -> probabilities

MAX_REFS = 2
SHORT_CLAIM_CHARS = 50
SHORT_THRESHOLD = 0.55
LONG_THRESHOLD = 0.45
ATTRIBUTION_THRESHOLD = 0.7
_EMPTY_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])?[ \t]*(?:\n|$)", re.M)  # a line left with no text
_LEADING_REFS = re.compile(r"(?:\s*\[ref:[^\]\n]{1,80}\])+")
_REFS_AFTER_END = re.compile(r"[.!?。！？；]+" + _LEADING_REFS.pattern)


@dataclass(frozen=True)
class Verification:
    sentences: tuple[AnswerSentence, ...]
    citations: tuple[Citation, ...]
    supported: int
    unsupported: int
    rejected_refs: tuple[str, ...]
    text: str = ""  # the answer as delivered: attributed markers written in, dropped claims out ("": as drafted)
    dropped: int = 0  # unsupported claims taken out of ``text`` (``drop=True``); ``unsupported`` counts them too
    forged: tuple[str, ...] = ()  # bracketed numbers of the draft that would read as citations, taken out


@dataclass(frozen=True)
class _Claim:
    text: str  # without markers
    refs: list[str]
    para: int  # its paragraph (index into the paragraphs ``_claims`` returns)
    start: int  # where its first sentence starts in that paragraph
    end: int  # where its last sentence ends in that paragraph (an attributed marker goes there)


def _units(para: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of a paragraph as written, the markers after its end
    included ("... end. [ref:x] Next", "... end.[ref:x] Next": the marker belongs to "... end."):
    a unit ends where the next begins, the last at the paragraph's end."""
    spans = sentence_spans(para)
    if not spans:
        return []
    starts = {spans[0][0]}
    for s, _ in spans[1:]:
        lead = _LEADING_REFS.match(para, s)
        starts.add(lead.end() if lead is not None else s)
    starts.update(m.end() for m in _REFS_AFTER_END.finditer(para, spans[0][0]))
    ordered = sorted(s for s in {len(para) - len(para[s:].lstrip()) for s in starts} if s < len(para))
    return list(zip(ordered, [*ordered[1:], len(para)], strict=True))


def without_repeats(drafts: Sequence[str]) -> list[str]:
    """The drafts with every sentence that an earlier one (or an earlier place in the same draft)
    already says taken out, compared without markers and whitespace, each kept sentence as written
    with its markers; a draft left empty is "". The agentic loop writes one draft per part over
    overlapping evidence (answer/agentic/loop.py)."""
    seen: set[str] = set()
    out: list[str] = []
    for draft in drafts:
        paras = []
        for para in re.split(r"\n\s*\n", draft):
            kept = []
            for s, e in _units(para):
                key = "".join(strip_refs(para[s:e]).split())
                if key and key not in seen:
                    seen.add(key)
                    kept.append(para[s:e])
            paras.append("".join(kept).strip())
        out.append("\n\n".join(p for p in paras if p))
    return out


def _claims(answer: str) -> tuple[list[str], list[_Claim]]:
    """The answer's paragraphs and its claims."""
    paras = re.split(r"\n\s*\n", answer)
    out: list[_Claim] = []
    for i, para in enumerate(paras):
        pending: list[tuple[str, int, int]] = []
        for s, e in _units(para):
            unit = para[s:e]
            refs = REF.findall(unit)
            pending.append((strip_refs(unit), s, s + len(unit.rstrip())))
            if refs:
                text = " ".join(t for t, _, _ in pending)
                out.append(_Claim(text, list(dict.fromkeys(refs)), i, pending[0][1], pending[-1][2]))
                pending = []
        out.extend(_Claim(text, [], i, s, e) for text, s, e in pending)  # after the last ref: one claim each
    return paras, [c for c in out if c.text]


def claims(answer: str) -> list[tuple[str, list[str]]]:
    """(claim text without markers, refs in order) for every claim of the answer."""
    return [(c.text, c.refs) for c in _claims(answer)[1]]


def verify(
    answer: str,
    evidence: Sequence[Evidence],
    attribute: bool = True,
    drop: bool = False,
    support: Support | None = None,
    support_threshold: float = 0.5,
    enforce_support: bool = True,
) -> Verification:
    """``attribute``: attribute the claims that cite nothing (see the module docstring); ``drop``:
    take the unsupported claims out of the delivered text (their sentences stay, marked ``dropped``),
    unless none is supported (the draft is then refused whole, ``unsupported_draft``); ``support``:
    the reader's check of each claim against the passages it cites (recorded in each sentence; with
    ``enforce_support`` it decides too). Bracketed numbers that would
    read as citations (``[1]`` quoted from a note, or written by a model) leave the text first."""
    drafted = answer
    answer, forged = forged_markers(answer)
    by_id = {ev.chunk_id: ev for ev in evidence}
    tokens = {ev.chunk_id: evidence_tokens(ev.text) for ev in evidence}
    sentences: list[AnswerSentence] = []
    spans: dict[str, tuple[int, int]] = {}
    rejected_all: list[str] = []
    marks: list[tuple[int, int, str]] = []  # (paragraph, offset, chunk id) of attributed claims
    cuts: list[tuple[int, int, int]] = []  # (paragraph, start, end) of unsupported claims
    cut_at: list[int] = []  # their indexes into ``sentences``
    supported = unsupported = 0
    paras, found = _claims(answer)
    for claim in found:
        text, refs = claim.text, claim.refs
        terms = content_terms(text)
        valid = [r for r in refs if r in by_id][:MAX_REFS]
        rejected = tuple(r for r in refs if r not in by_id)
        rejected_all.extend(rejected)
        threshold = SHORT_THRESHOLD if len(text) < SHORT_CLAIM_CHARS else LONG_THRESHOLD
        if not terms:
            sentences.append(AnswerSentence(text, tuple(valid), bool(valid), 1.0, threshold, rejected))
            continue
        weights = TermWeights(dict.fromkeys(terms, 1.0))
        attributed, share = False, 0.0
        if attribute and not valid:
            best, share = _attribute(weights, tokens)
            threshold = ATTRIBUTION_THRESHOLD
            if share >= threshold:
                valid, attributed = [best], True
                marks.append((claim.para, claim.end, best))
        cited = set().union(*(tokens[r] for r in valid)) if valid else set()
        # an uncited claim left unsupported shows how much of it the best passage holds
        overlap = weights.coverage(cited)[0] if valid or not attribute else share
        across = bool(valid) and all(language(by_id[r].text) != language(text) for r in valid)
        lexical = bool(valid) and (overlap >= threshold or (across and support is not None and enforce_support))
        why = (
            ""
            if lexical
            else ("it cites no passage of the context" if not valid else "too few of its terms are in what it cites")
        )
        backing: float | None = None
        if lexical and support is not None:
            backing = max(support([(text, by_id[r].text) for r in valid]))
            if enforce_support and backing < support_threshold:
                why = f"the reader finds no support in what it cites ({backing:.2f} < {support_threshold:.2f})"
        ok = lexical and not why
        supported += ok
        unsupported += not ok
        if not ok:
            cuts.append((claim.para, claim.start, claim.end))
            cut_at.append(len(sentences))
        sentences.append(
            AnswerSentence(
                text,
                tuple(valid),
                ok,
                round(overlap, 3),
                threshold,
                rejected,
                attributed,
                support=None if backing is None else round(backing, 4),
                why=why,
            )
        )
        if ok:
            for ref in valid:
                s, e = _best_span(by_id[ref].text, weights)
                old = spans.get(ref)
                spans[ref] = (min(s, old[0]), max(e, old[1])) if old else (s, e)
    citations = tuple(_citation(by_id[ref], s, e) for ref, (s, e) in spans.items())
    if not (drop and supported):
        cuts = []
    for i in cut_at if cuts else ():
        sentences[i] = dataclasses.replace(sentences[i], dropped=True)
    text = _edited(paras, marks, cuts) if marks or cuts else (answer if answer != drafted else "")
    rejected = tuple(dict.fromkeys(rejected_all))
    return Verification(tuple(sentences), citations, supported, unsupported, rejected, text, len(cuts), tuple(forged))


def _attribute(weights: TermWeights, tokens: Mapping[str, set[str]]) -> tuple[str, float]:
    """The context passage that holds the largest share of a claim's terms (the first one on a
    tie), and that share; ("", 0.0) without passages."""
    best, share = "", 0.0
    for chunk_id, held in tokens.items():
        got, _ = weights.coverage(held)
        if got > share:
            best, share = chunk_id, got
    return best, share


def _edited(paras: list[str], marks: Sequence[tuple[int, int, str]], cuts: Sequence[tuple[int, int, int]]) -> str:
    """The paragraphs with ``[ref:...]`` written after each attributed claim and each cut claim
    taken out, joined again; a paragraph or list item left empty goes too."""
    edits = [(para, end, end, f" [ref:{chunk_id}]") for para, end, chunk_id in marks]
    edits += [(para, end + _blank_after(paras[para], end), start, "") for para, start, end in cuts]
    out = list(paras)
    for para, end, start, insert in sorted(edits, reverse=True):  # from the end, so offsets hold
        out[para] = out[para][:start] + insert + out[para][end:]
    return "\n\n".join(p for p in (_EMPTY_ITEM.sub("", k).strip() for k in out) if p)


def _blank_after(text: str, at: int) -> int:
    """How many spaces and tabs start at ``text[at]``."""
    return len(text[at:]) - len(text[at:].lstrip(" \t"))


def evidence_tokens(text: str) -> set[str]:
    """The tokens a claim may draw on from ``text``: those of the note text and of its rendered form."""
    return set(fts_tokens(text)) | set(fts_tokens(render_markdown(text)))


def _best_span(text: str, weights: TermWeights) -> tuple[int, int]:
    """The chunk sentence (code-point span) that covers most of the claim's terms."""
    best, best_span = -1.0, (0, len(text))
    for s, e in sentence_spans(text):
        share, _ = weights.coverage(evidence_tokens(text[s:e]))
        if share > best:
            best, best_span = share, (s, e)
    return best_span


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _citation(ev: Evidence, s: int, e: int) -> Citation:
    """A citation of ``ev.text[s:e]``, with offsets into the note (UTF-16) and 1-based lines."""
    start = ev.start + _utf16_len(ev.text[:s])
    return Citation(
        citation_id="cit_" + ev.chunk_id,
        chunk_id=ev.chunk_id,
        note_id=ev.note_id,
        path=ev.path,
        title=ev.title,
        heading_path=ev.heading_path,
        start=start,
        end=start + _utf16_len(ev.text[s:e]),
        start_line=ev.start_line + ev.text.count("\n", 0, s),
        end_line=ev.start_line + ev.text.count("\n", 0, e),
        quote=ev.text[s:e],
    )


def source_cards(citations: Sequence[Citation], notes: Mapping[str, NoteRecord | None]) -> tuple[SourceCard, ...]:
    """One card per cited note, in order of first citation; ``notes`` maps note id to its stored record."""
    cards: dict[str, list[str]] = {}
    for c in citations:
        cards.setdefault(c.note_id, []).append(c.chunk_id)
    out = []
    for note_id, chunk_ids in cards.items():
        note = notes.get(note_id)
        meta = note.metadata if note is not None else {}
        first = next(c for c in citations if c.note_id == note_id)
        out.append(
            SourceCard(
                note_id=note_id,
                path=first.path,
                title=first.title,
                chapter=_text(meta.get("chapter")),
                version=_text(meta.get("version")),
                summary=_text(meta.get("summary")),
                chunk_ids=tuple(chunk_ids),
            )
        )
    return tuple(out)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
