"""Why a question was refused: a reason code, its parameters, and the sentence users read.

A refusal holds one ``Refusal`` per reason, in the order they were found; the answer
frame's ``refusal_reason`` is their messages joined with "; " (the text users have
always seen). The codes:

==================  ===================================================================
``no_evidence``     no passage visible to the asker survived selection
``no_content_terms`` the question has no word to look up (``???``, punctuation, symbols)
``low_gate``        the gate score is below the threshold (score, threshold, signals)
``low_answerability`` the learned scorer's probability that the evidence answers the
                    question is below its threshold (probability, threshold, best unit)
``reader_unanswerable`` the reader's best probability that a kept passage answers the question
                    is below its threshold (probability, threshold, reader)
``missing_name``    a name the question uses appears in no selected passage (names)
``missing_quantity`` the question asks for a duration, size or count none states (expects)
``llm_unanswerable`` the answerability judge (an LLM) found the evidence does not answer (reason, model)
``writer_failed``   the writer raised a provider error (error)
``unsupported_draft`` no sentence of the draft is supported by its citations (gate_score)
``not_looked_up``   agentic mode: a cap (retrievals, time) ended the run before this part was retrieved (cap)
==================  ===================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...contracts import Refusal


def below(value: float, threshold: float, digits: int) -> str:
    """``"value < threshold"`` with ``digits`` decimals, or as many more as it takes for the two
    to read differently (never "0.849 < 0.849"); up to 12, then the exact floats."""
    for places in range(digits, 13):
        left, right = f"{value:.{places}f}", f"{threshold:.{places}f}"
        if left != right:
            return f"{left} < {right}"
    return f"{value!r} < {threshold!r}"


def _low_gate(p: Mapping[str, Any]) -> str:
    cosine, coverage, sentence = p["top_cosine"], p["coverage"], p["sentence_cosine"]
    parts = (
        f"top cosine {cosine:.3f}, coverage {coverage:.2f}"
        if cosine is not None
        else (f"coverage {coverage:.2f}, no dense score")
    )
    if sentence is not None:
        parts += f", best sentence {sentence:.3f}"
    absent = f"; not in the evidence: {', '.join(p['missing_terms'])}" if p["missing_terms"] else ""
    return f"gate score {below(p['gate_score'], p['threshold'], 3)} ({parts}){absent}"


def _low_answerability(p: Mapping[str, Any]) -> str:
    absent = f"; not in the evidence: {', '.join(p['missing_terms'])}" if p["missing_terms"] else ""
    return f"the evidence is unlikely to answer it (answerability {below(p['probability'], p['threshold'], 2)}){absent}"


_MESSAGES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "no_evidence": lambda p: "no passage of the notes visible to you matches the question",
    "no_content_terms": lambda p: "the question has no word to look up in the notes",
    "low_gate": _low_gate,
    "low_answerability": _low_answerability,
    "reader_unanswerable": lambda p: (
        f"no selected passage answers it (the reader's best answerability {below(p['probability'], p['threshold'], 2)})"
    ),
    "missing_name": lambda p: f"no selected passage mentions {', '.join(p['names'])}",
    "missing_quantity": lambda p: f"the question asks for {p['expects']}, and no selected passage states one",
    "llm_unanswerable": lambda p: (
        "the language model judged that the selected passages do not answer the question"
        + (f" ({p['reason']})" if p.get("reason") else "")
    ),
    "writer_failed": lambda p: f"the writer failed ({p['error']})",
    "unsupported_draft": lambda p: (
        f"no sentence of the draft is supported by the evidence (gate score {p['gate_score']:.3f}; 0 verified spans)"
    ),
    "not_looked_up": lambda p: f"it was not looked up ({p['cap']})",
}
CODES: tuple[str, ...] = tuple(_MESSAGES)


def _low_gate_zh(p: Mapping[str, Any]) -> str:
    cosine, coverage = p["top_cosine"], p["coverage"]
    parts = (
        f"最高余弦 {cosine:.3f}，覆盖率 {coverage:.2f}" if cosine is not None else f"覆盖率 {coverage:.2f}，无向量分数"
    )
    if p["sentence_cosine"] is not None:
        parts += f"，最佳句子 {p['sentence_cosine']:.3f}"
    absent = f"；资料中没有：{'、'.join(p['missing_terms'])}" if p["missing_terms"] else ""
    return f"门限分数 {below(p['gate_score'], p['threshold'], 3)}（{parts}）{absent}"


# The same reasons for a Chinese question: the whole refusal is in the question's language.
_MESSAGES_ZH: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "no_evidence": lambda p: "你可见的笔记中没有与问题匹配的段落",
    "no_content_terms": lambda p: "问题中没有可以在笔记里查找的词",
    "low_gate": _low_gate_zh,
    "low_answerability": lambda p: (
        f"资料不太可能回答这个问题（可回答概率 {below(p['probability'], p['threshold'], 2)}）"
    ),
    "reader_unanswerable": lambda p: (
        f"选中的段落都不能回答它（阅读模型的最高可回答概率 {below(p['probability'], p['threshold'], 2)}）"
    ),
    "missing_name": lambda p: f"选中的段落都没有提到 {'、'.join(p['names'])}",
    "missing_quantity": lambda p: f"问题问的是{p['expects']}，但选中的段落都没有给出",
    "llm_unanswerable": lambda p: (
        "语言模型判断选中的段落不能回答这个问题" + (f"（{p['reason']}）" if p.get("reason") else "")
    ),
    "writer_failed": lambda p: f"写作模型出错（{p['error']}）",
    "unsupported_draft": lambda p: f"草稿中没有一句得到资料支持（门限分数 {p['gate_score']:.3f}；0 个已验证片段）",
    "not_looked_up": lambda p: f"没有查找（{p['cap']}）",
}


def localized(refusals: Sequence[Refusal], lang: str) -> tuple[Refusal, ...]:
    """The refusals with their messages in ``lang`` ("zh": Chinese; anything else: English as made).
    A part's refusal in agentic mode keeps its sub-question in front (params ``sub_question``)."""
    if lang != "zh":
        return tuple(refusals)
    out = []
    for r in refusals:
        render = _MESSAGES_ZH.get(r.code)
        if render is None:
            out.append(r)
            continue
        text = render(r.params)
        part = r.params.get("sub_question")
        out.append(Refusal(r.code, r.params, f"{part} {text}" if part else text))
    return tuple(out)


def refusal(code: str, **params: Any) -> Refusal:
    """The refusal record for ``code``, its message rendered from ``params``."""
    if code not in _MESSAGES:
        raise ValueError(f"unknown refusal code {code!r}; the codes are {', '.join(CODES)}")
    return Refusal(code, dict(params), _MESSAGES[code](params))


def joined(refusals: Sequence[Refusal], lang: str = "en") -> str | None:
    """The sentence users read: every reason's message, joined with "; " ("；" for Chinese)."""
    return ("；" if lang == "zh" else "; ").join(r.message for r in refusals) or None
