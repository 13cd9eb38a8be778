"""Retrieval evaluation: metric code against ir-measures, BEIR loading, the CLI contract."""

from __future__ import annotations

import json
import random
from pathlib import Path

import ir_measures
import pytest
from ir_measures import MRR, R, nDCG

from sunlib.config import load_settings
from sunlib.errors import DatasetError, ProviderError
from sunlib.evaluate import evaluate_retrieval, load_beir, mrr_at_k, ndcg_at_k, recall_at_k
from sunlib.evaluate.metrics import percentile
from tests.support.clients import sunlib
from tests.support.embedders import FlakyEmbedder
from tests.support.eval_data import write_beir


def test_metrics_match_ir_measures_on_a_random_run() -> None:
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(60)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, list[str]] = {}
    for q in range(25):
        qid = f"q{q}"
        qrels[qid] = {d: rng.choice([1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 6))}
        run[qid] = rng.sample(docs, 40)
    # one query with no relevant document retrieved at all
    run["q0"] = [d for d in docs if d not in qrels["q0"]][:40]
    ir_run = {q: {d: float(len(r) - i) for i, d in enumerate(r)} for q, r in run.items()}
    ref = ir_measures.calc_aggregate([nDCG @ 10, R @ 10, R @ 100, MRR @ 10], qrels, ir_run)
    ours = {
        "ndcg": sum(ndcg_at_k(run[q], qrels[q], 10) for q in qrels) / len(qrels),
        "r10": sum(recall_at_k(run[q], qrels[q], 10) for q in qrels) / len(qrels),
        "r100": sum(recall_at_k(run[q], qrels[q], 100) for q in qrels) / len(qrels),
        "mrr": sum(mrr_at_k(run[q], qrels[q], 10) for q in qrels) / len(qrels),
    }
    assert ours["ndcg"] == pytest.approx(ref[nDCG @ 10], abs=1e-9)
    assert ours["r10"] == pytest.approx(ref[R @ 10], abs=1e-9)
    assert ours["r100"] == pytest.approx(ref[R @ 100], abs=1e-9)
    assert ours["mrr"] == pytest.approx(ref[MRR @ 10], abs=1e-9)


def test_percentile_matches_numpy() -> None:
    import numpy as np

    values = [random.Random(1).random() * 100 for _ in range(37)]
    for q in (50, 95, 99):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_evaluate_retrieval_on_a_small_bilingual_set(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "ds"))
    assert sorted(data.qrels) == ["q1", "q2", "q3", "q4"]
    settings = load_settings(embedding={"provider": "counting"})
    report = evaluate_retrieval(data, settings, "bm25")
    assert report.metrics["ndcg@10"] == pytest.approx(1.0)
    assert report.metrics["recall@10"] == pytest.approx(1.0)
    hybrid = evaluate_retrieval(data, settings, "hybrid")
    assert hybrid.info["vectors_embedded"] == 6  # one chunk per document
    assert hybrid.metrics["recall@10"] == pytest.approx(1.0)
    again = evaluate_retrieval(data, settings, "dense")
    assert again.info["vectors_embedded"] == 0  # the cached index is reused: nothing re-embedded
    assert again.info["index_cache"] == hybrid.info["index_cache"]


def test_as_is_searches_the_index_with_the_vectors_it_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = load_beir(write_beir(tmp_path / "ds"))
    monkeypatch.setattr(FlakyEmbedder, "fail_after", 1)  # one batch of 2 vectors, then the embedder fails
    settings = load_settings(embedding={"provider": "flaky", "batch_size": 2})
    with pytest.raises(ProviderError):
        evaluate_retrieval(data, settings, "hybrid")  # embedding interrupted: 4 of 6 chunks have no vector
    for fill in (True, False):
        run = load_settings(embedding={"provider": "flaky", "batch_size": 2}, search={"fill_missing": fill})
        report = evaluate_retrieval(data, run, "hybrid", as_is=True)  # would fail if it embedded anything
        assert report.info["as_is"] is True and report.info["vectors_embedded"] == 0
        assert report.info["vectors_pending"] == 4 and report.info["chunks"] == 6
        assert report.info["fill_missing"] is fill
        assert (report.info["filled_in_per_query"] > 0) is fill
    dense = evaluate_retrieval(data, settings, "dense", as_is=True)
    assert dense.info["vectors_pending"] == 4 and dense.metrics["recall@100"] <= 0.5  # 2 documents have vectors


def test_eval_cli_json_has_exactly_the_metric_keys(tmp_path: Path) -> None:
    ds = write_beir(tmp_path / "ds")
    args = ("eval", "retrieval", str(ds), "--mode", "bm25", "--json")
    r = sunlib(*args, "--report", str(tmp_path / "report.json"))
    assert r.returncode == 0, r.stderr
    metrics = json.loads(r.stdout)
    assert list(metrics) == ["ndcg@10", "recall@10", "recall@100", "mrr@10", "latency_ms_p50", "latency_ms_p95"]
    full = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert set(full["per_query"]) == {"q1", "q2", "q3", "q4"}
    assert full["info"]["mode"] == "bm25"

    as_is = sunlib(*args, "--as-is")
    assert as_is.returncode == 0, as_is.stderr
    assert list(json.loads(as_is.stdout)) == [*metrics, "vectors_pending", "filled_in_per_query"]


def test_beir_loader_rejects_broken_datasets(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="is missing"):
        load_beir(tmp_path)
    ds = write_beir(tmp_path / "ds")
    (ds / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{not json}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:2: invalid JSON"):
        load_beir(ds)
    ds2 = write_beir(tmp_path / "ds2")
    (ds2 / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ten1\tmaybe\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="is not a number"):
        load_beir(ds2)
    with pytest.raises(DatasetError, match=r"train\.tsv is missing"):
        load_beir(ds2, split="train")


def test_empty_queries_score_zero_instead_of_aborting(tmp_path: Path) -> None:
    ds = write_beir(tmp_path / "ds")
    lines = (ds / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    lines[0] = json.dumps({"_id": "q1", "text": "   "})
    (ds / "queries.jsonl").write_text("\n".join(lines), encoding="utf-8")
    report = evaluate_retrieval(load_beir(ds), load_settings(), "bm25")
    assert report.info["empty_queries"] == 1
    assert report.per_query["q1"]["ndcg@10"] == 0.0
    assert report.metrics["recall@10"] == pytest.approx(0.75)
