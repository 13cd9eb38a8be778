"""Fit the answer scorer (``sunlib.answer.gate.scorer``) on labelled data and write its parameters.

    # 1. features: every question goes through the real pipeline up to selection
    python -m tools.scorer.train extract OUT_DIR [--data ../shared/data]
    # 2. fit both models on the training questions, report on the validation ones, write scorer.json
    python -m tools.scorer.train fit OUT_DIR [--write src/sunlib/answer/gate/scorer.json]

Training data (none of it is a set docs/evaluation.md reports on):

* SQuAD 2.0 half-dev: questions that are in neither the calibration nor the test set that
  ``benchmarks.qa_from_beir`` writes (those two are reported); answerable ones label the
  unit holding a human answer span, unanswerable ones are negatives for answerability;
* CMRC2018 ``trial`` split (Chinese; the reported set is ``test``);
* the bundled calibration set (``src/sunlib/qa/sample_vault_calibration.jsonl``).

Every answerable question is also asked a second time with the passages that hold its answer
removed from the candidates: the evidence left is on topic but does not answer it, the hard
negative that a refusal has to catch. Questions are split 80/20 by a hash of their id into
fit and validation; the answerability threshold is the one with the best balanced accuracy
on the fit questions' out-of-fold probabilities. Needs scikit-learn (``pip install -e .[train]``);
the runtime does not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sunlib.answer.gate.scorer import (
    ANSWERABLE_FEATURES,
    BASE_FEATURES,
    NO_COSINE,
    UNIT_FEATURES,
    Passage,
    UnitFeaturizer,
    answerable_features,
    with_derived,
)
from sunlib.answer.gate.select import Selection
from sunlib.answer.single.stages import Question, Reranked
from sunlib.config import sunlib_home
from sunlib.library import Library
from sunlib.providers import sentence_model
from sunlib.text import language
from sunlib.trace import Tracer

ROOT = Path(__file__).resolve().parents[2]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _cases(data: Path, extra: list[tuple[Path, Path]]) -> Iterator[tuple[str, Path, list[dict[str, Any]]]]:
    """(set name, vault, cases) with cases {id, question, answerable, phrases}."""
    home = sunlib_home() / "eval"
    squad = next(home.glob("squad2-dev-half-*"), None)
    if squad is None:
        sys.exit(
            "run python -m benchmarks.qa_from_beir ../shared/data/squad2_dev_half --calibration 200 --test 300 first"
        )
    reported = {r["id"] for f in ("calibration.jsonl", "test.jsonl") for r in _jsonl(squad / "qa" / f)}
    rows = _jsonl(data / "squad2_dev_half" / "rag_qa.jsonl")
    rows = [r for r in rows if r["_id"] not in reported]
    random.Random(7).shuffle(rows)
    ans = [r for r in rows if r["answerable"]][:500]
    unans = [r for r in rows if not r["answerable"]][:300]
    yield (
        "squad",
        squad / "vault",
        [
            {"id": r["_id"], "question": r["question"], "answerable": r["answerable"], "phrases": r["answers"]}
            for r in ans + unans
        ],
    )
    cmrc = next(home.glob("cmrc2018-*"), None)
    if cmrc is None:
        sys.exit("run python -m benchmarks.qa_from_beir ../shared/data/cmrc2018 --test 500 first")
    queries = {r["_id"]: r["text"] for r in _jsonl(data / "cmrc2018" / "queries_trial.jsonl")}
    answers = _jsonl(data / "cmrc2018" / "answers_trial.jsonl")
    random.Random(7).shuffle(answers)
    yield (
        "cmrc",
        cmrc / "vault",
        [
            {"id": a["_id"], "question": queries[a["_id"]], "answerable": True, "phrases": a["answers"]}
            for a in answers[:500]
            if queries.get(a["_id"], "").strip()
        ],
    )
    vault = sunlib_home() / "train" / "sample_vault"
    if not vault.is_dir():
        shutil.copytree(ROOT / "src" / "sunlib" / "sample_vault", vault)
    yield "sample_calibration", vault, _qa_cases(ROOT / "src" / "sunlib" / "qa" / "sample_vault_calibration.jsonl")
    for qa, own in extra:
        yield qa.stem if qa.stem != "qa" else qa.parent.name, own, _qa_cases(qa)


def _qa_cases(path: Path) -> list[dict[str, Any]]:
    """The cases of a QA set in ``sunlib eval rag``'s format."""
    return [
        {
            "id": r["id"],
            "question": r["question"],
            "answerable": r["type"] != "unanswerable",
            "phrases": r.get("gold_phrases") or [],
        }
        for r in _jsonl(path)
    ]


def _record(lib: Library, case: dict[str, Any], featurizer_model: Any, removed: bool) -> dict[str, Any] | None:
    asker = lib.asker
    q = Question(case["question"], language(case["question"]), None, tuple(lib.settings.search.principals))
    tracer = Tracer("train")
    shot = asker.single
    retrieved = shot.retrieve.run(q, tracer)
    ranked = shot.rerank.run(q, retrieved, tracer).ranked
    phrases = [_norm(p) for p in case["phrases"]]
    if removed:
        ranked = tuple(r for r in ranked if not any(p in _norm(r.hit.text) for p in phrases))
    sel: Selection = shot.select.run(q, retrieved, Reranked(ranked), tracer)
    passages = [Passage.of(r, i) for i, r in enumerate(sel.kept, 1)]
    featurizer = UnitFeaturizer(q.text, retrieved.weights, featurizer_model)
    units = featurizer.units(passages)
    rows = featurizer.features(passages, units)
    labels = [bool(phrases) and any(p in _norm(u.full) for p in phrases) for _, u in units]
    top_lang = language(passages[0].text) if passages else q.lang
    answerable = bool(case["answerable"]) and not removed and any(labels)
    return {
        "id": case["id"] + ("#removed" if removed else ""),
        "question_id": case["id"],
        "lang": q.lang,
        "label": answerable,
        "units": [
            {"kind": u.kind, "label": lab, "x": [round(float(v), 5) for v in row]}
            for (_, u), lab, row in zip(units, labels, rows, strict=True)
        ],
        "gate": {
            "dense_cosine": sel.top_cosine,
            "coverage": sel.coverage,
            "missing_names": bool(sel.missing_names),
            "quantity_missing": not sel.expectation_met,
            "cross_language": top_lang != q.lang,
            "kept": len(sel.kept),
            "terms": len(retrieved.weights.weights),
        },
    }


def extract(out: Path, data: Path, extra: list[tuple[Path, Path]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, vault, cases in _cases(data, extra):
        target = out / f"{name}.jsonl"
        done = {r["question_id"] for r in _jsonl(target)} if target.exists() else set()
        lib = Library.open(vault)
        if not (vault / "sunlib.toml").is_file():  # not an eval cache vault: (re)index it
            lib.index()
        model = sentence_model(lib.settings)
        t0 = time.time()
        with target.open("a", encoding="utf-8") as fh:
            for n, case in enumerate(cases, 1):
                if case["id"] in done:
                    continue
                for removed in (False, True) if case["answerable"] else (False,):
                    rec = _record(lib, case, model, removed)
                    if rec is not None:
                        fh.write(json.dumps({**rec, "set": name}, ensure_ascii=False) + "\n")
                if n % 50 == 0:
                    print(f"{name}: {n}/{len(cases)} in {time.time() - t0:.0f} s", flush=True)
        lib.close()


# -- fitting --------------------------------------------------------------------------------


def _split(qid: str) -> str:
    return "validation" if int(hashlib.sha256(qid.encode()).hexdigest(), 16) % 5 == 0 else "fit"


def _logistic(x: np.ndarray, y: np.ndarray, names: tuple[str, ...], c: float = 1.0) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    model = LogisticRegression(C=c, max_iter=2000, class_weight="balanced").fit((x - mean) / scale, y)
    return {
        "features": list(names),
        "mean": mean.round(6).tolist(),
        "scale": scale.round(6).tolist(),
        "coef": model.coef_[0].round(6).tolist(),
        "intercept": round(float(model.intercept_[0]), 6),
    }


def _ranker(x: np.ndarray, y: np.ndarray, groups: np.ndarray, names: tuple[str, ...]) -> dict[str, Any]:
    """A pairwise ranker (logistic regression on unit differences within a question, which ranks
    units better than a pointwise fit: docs/evaluation.md), then Platt-scaled into probabilities."""
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    xs = (x - mean) / scale
    rng = np.random.default_rng(0)
    diffs = []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        pos, neg = idx[y[idx]], idx[~y[idx]]
        for p in pos if len(neg) else ():
            for n in rng.choice(neg, size=min(len(neg), 8), replace=False):
                diffs.append(xs[p] - xs[n])
    d = np.asarray(diffs)
    pairs = LogisticRegression(C=0.1, fit_intercept=False, max_iter=3000).fit(
        np.vstack([d, -d]), np.r_[np.ones(len(d)), np.zeros(len(d))]
    )
    w = pairs.coef_[0]
    platt = LogisticRegression(max_iter=2000).fit((xs @ w)[:, None], y)
    a, b = float(platt.coef_[0][0]), float(platt.intercept_[0])
    return {
        "features": list(names),
        "mean": mean.round(6).tolist(),
        "scale": scale.round(6).tolist(),
        "coef": (a * w).round(6).tolist(),
        "intercept": round(b, 6),
    }


def _predict(params: dict[str, Any], x: np.ndarray) -> np.ndarray:
    z = ((x - np.asarray(params["mean"])) / np.asarray(params["scale"])) @ np.asarray(params["coef"])
    return 1.0 / (1.0 + np.exp(-(z + params["intercept"])))


def _rows(rec: dict[str, Any]) -> np.ndarray:
    """A record's unit feature rows, ``UNIT_FEATURES`` columns (records hold the base features)."""
    x = np.asarray([u["x"][: len(BASE_FEATURES)] for u in rec["units"]], dtype=float)
    return with_derived(x.reshape(-1, len(BASE_FEATURES)))


def _unit_matrix(records: list[dict[str, Any]], names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cols = [UNIT_FEATURES.index(n) for n in names]
    xs, ys, groups = [], [], []
    for g, rec in enumerate(records):
        xs.append(_rows(rec)[:, cols])
        ys += [u["label"] for u in rec["units"]]
        groups += [g] * len(rec["units"])
    return np.vstack(xs) if xs else np.zeros((0, len(cols))), np.asarray(ys, dtype=bool), np.asarray(groups)


def _answerable_rows(records: list[dict[str, Any]], unit_params: dict[str, Any], names: tuple[str, ...]) -> np.ndarray:
    cols = [UNIT_FEATURES.index(n) for n in unit_params["features"]]
    rows = []
    for rec in records:
        x = _rows(rec)
        probs = _predict(unit_params, x[:, cols]) if len(x) else np.zeros(0)
        feats = answerable_features(probs, x, **rec["gate"])
        rows.append([feats[n] for n in names])
    return np.asarray(rows, dtype=float)


def _top1(records: list[dict[str, Any]], scores_of: Any) -> float:
    """Share of questions with a labelled unit whose best-scored unit is labelled."""
    hits = total = 0
    for rec in records:
        if not any(u["label"] for u in rec["units"]):
            continue
        best = int(np.argmax(scores_of(_rows(rec))))
        hits += rec["units"][best]["label"]
        total += 1
    return hits / total if total else float("nan")


def _baseline(x: np.ndarray) -> np.ndarray:
    """The writer's hand-set relevance before the scorer: 0.3 share + 0.7 cosine + 0.2 passage score."""
    f = {n: x[:, i] for i, n in enumerate(UNIT_FEATURES)}
    return 0.3 * f["share"] + 0.7 * f["cos_unit"] + 0.2 * f["passage_score"]


def _auc(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p))


def _threshold(y: np.ndarray, p: np.ndarray) -> float:
    best, chosen = -1.0, 0.5
    for t in np.unique(np.round(p, 3)):
        tpr = float(np.mean(p[y] >= t))
        tnr = float(np.mean(p[~y] < t))
        if (tpr + tnr) / 2 > best:
            best, chosen = (tpr + tnr) / 2, float(t)
    return chosen


def fit(out: Path, write: Path | None) -> None:
    from sklearn.model_selection import GroupKFold

    records = [r for f in sorted(out.glob("*.jsonl")) for r in _jsonl(f)]
    fit_recs = [r for r in records if _split(r["question_id"]) == "fit"]
    val_recs = [r for r in records if _split(r["question_id"]) == "validation"]
    models: dict[str, Any] = {}
    report: dict[str, Any] = {"questions": {"fit": len(fit_recs), "validation": len(val_recs)}, "by_set": {}}
    for suffix, unit_names, ans_names in (
        ("", UNIT_FEATURES, ANSWERABLE_FEATURES),
        (
            "_no_cosine",
            tuple(n for n in UNIT_FEATURES if n not in NO_COSINE),
            tuple(n for n in ANSWERABLE_FEATURES if n not in NO_COSINE),
        ),
    ):
        x, y, groups = _unit_matrix(fit_recs, unit_names)
        unit = _ranker(x, y, groups, unit_names)
        # answerability on out-of-fold unit probabilities, so p_top is as honest as at run time
        oof_rows = np.zeros((len(fit_recs), len(ans_names)))
        folds = GroupKFold(n_splits=5)
        rec_index = np.arange(len(fit_recs))
        for train_idx, test_idx in folds.split(rec_index, groups=[r["question_id"] for r in fit_recs]):
            tx, ty, tg = _unit_matrix([fit_recs[i] for i in train_idx], unit_names)
            fold_unit = _ranker(tx, ty, tg, unit_names)
            oof_rows[test_idx] = _answerable_rows([fit_recs[i] for i in test_idx], fold_unit, ans_names)
        labels = np.asarray([r["label"] for r in fit_recs], dtype=bool)
        answerable = _logistic(oof_rows, labels, ans_names)
        oof_p = _predict(answerable, oof_rows)
        threshold = _threshold(labels, oof_p)
        models["unit" + suffix] = unit
        models["answerable" + suffix] = answerable
        val_rows = _answerable_rows(val_recs, unit, ans_names)
        val_y = np.asarray([r["label"] for r in val_recs], dtype=bool)
        val_p = _predict(answerable, val_rows)
        cols = [UNIT_FEATURES.index(n) for n in unit_names]

        def scores(x: np.ndarray, unit: dict[str, Any] = unit, cols: list[int] = cols) -> np.ndarray:
            return _predict(unit, x[:, cols])

        entry: dict[str, Any] = {
            "unit_top1_validation": round(_top1(val_recs, scores), 4),
            "unit_top1_validation_baseline": round(_top1(val_recs, _baseline), 4) if not suffix else None,
            "answerable_auc_validation": round(_auc(val_y, val_p), 4),
            "threshold_fit": threshold,
            "refusal_validation": round(float(np.mean(val_p[~val_y] < threshold)), 4),
            "false_refusal_validation": round(float(np.mean(val_p[val_y] < threshold)), 4),
        }
        for name in sorted({r["set"] for r in val_recs}):
            idx = [i for i, r in enumerate(val_recs) if r["set"] == name]
            yy, pp = val_y[idx], val_p[idx]
            mine = [val_recs[i] for i in idx]
            entry[name] = {
                "questions": len(idx),
                "unit_top1": round(_top1(mine, scores), 4),
                "unit_top1_baseline": round(_top1(mine, _baseline), 4) if not suffix else None,
                "refusal": round(float(np.mean(pp[~yy] < threshold)), 4) if (~yy).any() else None,
                "false_refusal": round(float(np.mean(pp[yy] < threshold)), 4) if yy.any() else None,
            }
        report["by_set"]["with_cosine" if not suffix else "no_cosine"] = entry
        if not suffix:
            models["threshold"] = threshold
    print(json.dumps(report, indent=2, ensure_ascii=False))
    if write is not None:
        threshold = models.pop("threshold")
        payload = {
            "trained_at": datetime.now(UTC).date().isoformat(),
            "trained_on": "SQuAD 2.0 half-dev (not the reported calibration/test questions), CMRC2018 trial, "
            "the bundled calibration set; tools/scorer/train.py",
            "threshold": threshold,
            "validation": report,
            "models": models,
        }
        write.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {write}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("out", type=Path)
    ex.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ex.add_argument(
        "--qa", nargs=2, action="append", type=Path, default=[], metavar=("QA_JSONL", "VAULT"), help="a set of your own"
    )
    ft = sub.add_parser("fit")
    ft.add_argument("out", type=Path)
    ft.add_argument("--write", type=Path)
    args = ap.parse_args()
    if args.command == "extract":
        extract(args.out, args.data, [(qa, vault) for qa, vault in args.qa])
    else:
        fit(args.out, args.write)


if __name__ == "__main__":
    main()
