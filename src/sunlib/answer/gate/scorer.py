"""The learned answer scorer: which unit states the answer, and whether any does.

Two logistic models, fitted by ``tools/scorer/train.py`` on labelled data (SQuAD 2.0,
CMRC2018, the bundled calibration set; docs/evaluation.md) and shipped as the small file
``scorer.json`` beside this module. Inference is a dot product in numpy.

* The **unit model** gives every answer unit of the evidence (``answer.gate.units``) the
  probability that it states the answer. Its features: the unit's and its heading's cosine
  with the question under the sentence model (USE by default), the IDF-weighted share of
  the question's terms in it (stems; CJK bigrams), how much it says beyond the question's
  own words, the question's names it mentions, whether it states the kind of value the
  question asks for (``answer.gate.expect.asked_types``), its kind and position, and its
  passage's rank and score.
* The **answerability model** turns the best units' probabilities and the gate signals
  (dense cosine, coverage, the name and quantity checks, the question's language against
  the evidence's) into the probability that the evidence answers the question. Below
  ``threshold`` the question is refused. The same threshold serves every vault.

Without a sentence model both models fall back to variants fitted without the cosine
features.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from ...contracts import Ranked, ScoredUnit, Unit
from ...providers.base import Embedder
from ...text import TermWeights, fts_tokens, is_cjk
from ...text.terms import fold, names
from .expect import asked_types, expected_answer, stated_types
from .units import KINDS, split_units

PARAMS_FILE = "scorer.json"
_PROCEDURE = re.compile(r"\bhow (?:do|can|should|to)\b|\bsteps?\b|\bprocedure\b|如何|怎么|怎样|步骤", re.IGNORECASE)
_ENUMERATION = re.compile(
    r"\bwhich\b.*\b(?:are|options|ways|kinds|types)\b|\bwhat are\b|\blist\b|\bname (?:the|all)\b|哪些|有哪|几种",
    re.IGNORECASE,
)

BASE_FEATURES = (
    "cos_unit",
    "cos_unit_rel",
    "cos_heading",
    "share",
    "share_rel",
    "share_context",
    "novelty",
    "names_found",
    "question_has_names",
    "type_asked",
    "type_stated",
    "has_number",
    "has_code",
    *(f"kind_{k}" for k in KINDS),
    "position",
    "first_in_passage",
    "passage_inv_rank",
    "passage_score",
    "passage_dense",
    "log_chars",
    "lead_in",
    "procedure_x_list",
    "enumeration_x_list",
    "cross_language",
)
# Computed from the base features (so that records of earlier training runs can be refitted):
# "echo", a unit that holds nearly all of the question's terms and little else (the question quoted
# back, e.g. in a code line or a heading); "code_unasked", a code line when no command was asked for.
DERIVED_FEATURES = ("echo", "code_unasked")
UNIT_FEATURES = BASE_FEATURES + DERIVED_FEATURES
ANSWERABLE_FEATURES = (
    "p_top",
    "p_second",
    "p_top3_mean",
    "cos_unit_top",
    "share_top",
    "log_terms",
    "dense_cosine",
    "has_dense",
    "coverage",
    "missing_names",
    "quantity_missing",
    "type_asked_unmet",
    "cross_language",
    "kept",
)
NO_COSINE = {"cos_unit", "cos_unit_rel", "cos_heading", "cos_unit_top"}


@dataclass(frozen=True)
class Passage:
    """A passage whose units are scored: its id, text and heading trail, and its rank and score."""

    chunk_id: str
    text: str
    heading: str
    rank: int  # 1-based, among the selected passages
    score: float  # the reranker's, best = 1.0
    dense: float | None = None  # its cosine with the question under the embedding model (e5)

    @classmethod
    def of(cls, ranked: Ranked, rank: int) -> Passage:
        h = ranked.hit
        return cls(h.chunk_id, h.text, " > ".join(h.heading_path) or h.title, rank, ranked.score, dense_score(ranked))


@dataclass(frozen=True)
class Answerability:
    probability: float
    threshold: float
    features: dict[str, float]

    @property
    def answerable(self) -> bool:
        return self.probability >= self.threshold


@dataclass(frozen=True)
class Logistic:
    """``sigmoid(((x - mean) / scale) @ coef + intercept)``; fitted parameters from scorer.json."""

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Logistic:
        return cls(
            tuple(data["features"]),
            np.asarray(data["mean"], dtype=float),
            np.asarray(data["scale"], dtype=float),
            np.asarray(data["coef"], dtype=float),
            float(data["intercept"]),
        )

    def predict(self, rows: np.ndarray) -> np.ndarray:
        z = ((rows - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


@dataclass(frozen=True)
class Params:
    unit: Logistic
    unit_no_cosine: Logistic
    answerable: Logistic
    answerable_no_cosine: Logistic
    threshold: float
    source: str
    fingerprint: str = ""  # of scorer.json: a per-vault calibration is valid for these parameters only


@cache
def load_params() -> Params | None:
    """The shipped parameters (None before the first training run)."""
    path = resources.files(__package__).joinpath(PARAMS_FILE)
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    models = data["models"]
    return Params(
        Logistic.from_json(models["unit"]),
        Logistic.from_json(models["unit_no_cosine"]),
        Logistic.from_json(models["answerable"]),
        Logistic.from_json(models["answerable_no_cosine"]),
        float(data["threshold"]),
        f"trained {data.get('trained_at', '?')} on {data.get('trained_on', '?')}",
        hashlib.sha256(text.encode("utf-8")).hexdigest()[:16],
    )


def with_derived(rows: np.ndarray) -> np.ndarray:
    """Base feature rows (``BASE_FEATURES`` columns) with the derived features appended."""
    col = {name: j for j, name in enumerate(BASE_FEATURES)}
    echo = (rows[:, col["share"]] >= 0.9) & (rows[:, col["novelty"]] <= 0.25)
    code_unasked = (rows[:, col["kind_code"]] > 0) & (rows[:, col["type_stated"]] == 0)
    return np.column_stack([rows, echo.astype(float), code_unasked.astype(float)])


def dense_score(ranked: Ranked) -> float | None:
    """A ranked hit's cosine under the embedding model, when the dense route found it."""
    route = ranked.hit.routes.get("dense")
    return route.score if route is not None and route.rank else None


def _lang(text: str) -> str:
    chars = [ch for ch in text if not ch.isspace()]
    cjk = sum(1 for ch in chars if is_cjk(ch))
    return "zh" if chars and cjk / len(chars) > 0.2 else "en"


class UnitFeaturizer:
    """Features of every answer unit of some passages, for one question."""

    def __init__(
        self, question: str, weights: TermWeights, sentence_model: Callable[[], Embedder] | None = None
    ) -> None:
        self.question = question
        self.weights = weights
        self.sentence_model = sentence_model
        self.lang = _lang(question)
        self.names = names(question)
        self.asked = asked_types(question)
        self.quantity = expected_answer(question)
        self.question_tokens = set(fts_tokens(question))
        self.procedure = bool(_PROCEDURE.search(question))
        self.enumeration = bool(_ENUMERATION.search(question))

    def units(self, passages: Sequence[Passage]) -> list[tuple[int, Unit]]:
        seen: set[str] = set()
        out = []
        for i, p in enumerate(passages):
            for u in split_units(p.text):
                if u.text not in seen:  # overlapping passages repeat their units
                    seen.add(u.text)
                    out.append((i, u))
        return out

    def features(self, passages: Sequence[Passage], units: Sequence[tuple[int, Unit]]) -> np.ndarray:
        if not units:
            return np.zeros((0, len(UNIT_FEATURES)))
        cos_unit = np.zeros(len(units))
        cos_heading = np.zeros(len(passages))
        if self.sentence_model is not None:
            model = self.sentence_model()
            q = model.embed_query(self.question)
            cos_unit = np.asarray(model.embed([u.full for _, u in units]) @ q, dtype=float)
            headings = [p.heading or p.text[:80] for p in passages]
            cos_heading = np.asarray(model.embed(headings) @ q, dtype=float)
        shares = np.array([self.weights.share([u.full]) if self.weights else 0.0 for _, u in units])
        counts: dict[int, int] = {}
        for i, _ in units:
            counts[i] = counts.get(i, 0) + 1
        rows = []
        for n, (i, u) in enumerate(units):
            p = passages[i]
            tokens = set(fts_tokens(u.text))
            folded = set(fts_tokens(fold(u.full)))
            found = sum(1 for nm in self.names if set(nm.tokens) <= folded)
            stated = stated_types(u.full, self.asked, self.quantity)
            row = {
                "cos_unit": cos_unit[n],
                "cos_unit_rel": cos_unit[n] - cos_unit.max(),
                "cos_heading": cos_heading[i],
                "share": shares[n],
                "share_rel": shares[n] - shares.max(),
                "share_context": self.weights.share([u.full, p.heading]) if self.weights else 0.0,
                "novelty": len(tokens - self.question_tokens) / len(tokens) if tokens else 0.0,
                "names_found": found / len(self.names) if self.names else 1.0,
                "question_has_names": float(bool(self.names)),
                "type_asked": float(bool(self.asked)),
                "type_stated": float(bool(stated)),
                "has_number": float(any(ch.isdigit() for ch in u.text)),
                "has_code": float(u.kind == "code" or "`" in u.text),
                **{f"kind_{k}": float(u.kind == k) for k in KINDS},
                "position": u.position / max(1, counts[i] - 1),
                "first_in_passage": float(u.position == 0),
                "passage_inv_rank": 1.0 / p.rank,
                "passage_score": p.score,
                "passage_dense": p.dense or 0.0,
                "log_chars": math.log1p(len(u.text)),
                "lead_in": float(u.kind == "sentence" and u.text.endswith((":", "："))),
                "procedure_x_list": float(self.procedure and u.kind in ("steps", "list", "item")),
                "enumeration_x_list": float(self.enumeration and u.kind in ("steps", "list", "item", "row")),
                "cross_language": float(_lang(u.text) != self.lang),
            }
            rows.append([row[f] for f in BASE_FEATURES])
        return with_derived(np.asarray(rows, dtype=float))


def answerable_features(
    probabilities: np.ndarray,
    unit_rows: np.ndarray,
    *,
    dense_cosine: float | None,
    coverage: float,
    missing_names: bool,
    quantity_missing: bool,
    cross_language: bool,
    kept: int,
    terms: int,
) -> dict[str, float]:
    top = np.sort(probabilities)[::-1] if len(probabilities) else np.zeros(1)
    col = {name: j for j, name in enumerate(UNIT_FEATURES)}
    asked = bool(len(unit_rows)) and bool(unit_rows[0, col["type_asked"]])
    stated = bool(len(unit_rows)) and bool(unit_rows[:, col["type_stated"]].max())
    return {
        "p_top": float(top[0]),
        "p_second": float(top[1]) if len(top) > 1 else 0.0,
        "p_top3_mean": float(top[:3].mean()),
        "cos_unit_top": float(unit_rows[:, col["cos_unit"]].max()) if len(unit_rows) else 0.0,
        "share_top": float(unit_rows[:, col["share"]].max()) if len(unit_rows) else 0.0,
        "log_terms": math.log1p(terms),
        "dense_cosine": dense_cosine or 0.0,
        "has_dense": float(dense_cosine is not None),
        "coverage": coverage,
        "missing_names": float(missing_names),
        "quantity_missing": float(quantity_missing),
        "type_asked_unmet": float(asked and not stated),
        "cross_language": float(cross_language),
        "kept": float(kept),
    }


class AnswerScorer:
    """Scores units and answerability with the shipped parameters."""

    def __init__(self, params: Params, sentence_model: Callable[[], Embedder] | None) -> None:
        self.params = params
        self.sentence_model = sentence_model

    def _unit_model(self) -> Logistic:
        return self.params.unit if self.sentence_model is not None else self.params.unit_no_cosine

    def _answerable_model(self) -> Logistic:
        return self.params.answerable if self.sentence_model is not None else self.params.answerable_no_cosine

    def score_units(
        self, question: str, weights: TermWeights, passages: Sequence[Passage]
    ) -> tuple[list[ScoredUnit], np.ndarray]:
        """Every unit of the passages with its probability, best first, and the feature rows."""
        featurizer = UnitFeaturizer(question, weights, self.sentence_model)
        units = featurizer.units(passages)
        rows = featurizer.features(passages, units)
        model = self._unit_model()
        probs = model.predict(_columns(rows, UNIT_FEATURES, model.features)) if len(units) else np.zeros(0)
        scored = [
            ScoredUnit(u, passages[i].chunk_id, i, float(pr), tuple(r))
            for (i, u), pr, r in zip(units, probs, rows, strict=True)
        ]
        scored.sort(key=lambda s: -s.probability)
        return scored, rows

    def answerability(self, features: dict[str, float]) -> Answerability:
        model = self._answerable_model()
        row = np.asarray([[features[f] for f in model.features]], dtype=float)
        return Answerability(float(model.predict(row)[0]), self.params.threshold, features)


def _columns(rows: np.ndarray, have: Sequence[str], want: Sequence[str]) -> np.ndarray:
    index = {name: j for j, name in enumerate(have)}
    return rows[:, [index[name] for name in want]]
