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

from ..contracts import Refusal


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


def refusal(code: str, **params: Any) -> Refusal:
    """The refusal record for ``code``, its message rendered from ``params``."""
    if code not in _MESSAGES:
        raise ValueError(f"unknown refusal code {code!r}; the codes are {', '.join(CODES)}")
    return Refusal(code, dict(params), _MESSAGES[code](params))


def joined(refusals: Sequence[Refusal]) -> str | None:
    """The sentence users read: every reason's message, joined with "; "."""
    return "; ".join(r.message for r in refusals) or None
