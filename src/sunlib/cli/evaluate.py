"""``sunlib eval retrieval DATASET_DIR``: BEIR-format retrieval evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..config import load_settings, merge
from ..evaluate import evaluate_retrieval, load_beir
from .app import app
from .common import err, out, print_json
from .progress import ProgressBars

eval_app = typer.Typer(help="Measure retrieval and answers on labelled data.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

METRIC_KEYS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "latency_ms_p50", "latency_ms_p95")


@eval_app.command("retrieval")
def retrieval(
    dataset: Annotated[Path, typer.Argument(help="folder with corpus.jsonl, queries.jsonl, qrels/<split>.tsv")],
    mode: Annotated[str, typer.Option("--mode", "-m", help="bm25, dense or hybrid")] = "hybrid",
    split: Annotated[str, typer.Option(help="qrels split: test, train, trial, ...")] = "test",
    provider: Annotated[str | None, typer.Option(help="embedding provider")] = None,
    fusion: Annotated[str | None, typer.Option(help="rrf, zscore or minmax")] = None,
    bm25_weight: Annotated[float | None, typer.Option(help="fusion weight of the BM25 route")] = None,
    dense_weight: Annotated[float | None, typer.Option(help="fusion weight of the dense route")] = None,
    chunker: Annotated[str | None, typer.Option(help="structure or fixed")] = None,
    threads: Annotated[int | None, typer.Option(help="model threads")] = None,
    limit_queries: Annotated[int | None, typer.Option(help="evaluate only the first N judged queries")] = None,
    report: Annotated[Path | None, typer.Option(help="write the full report (settings, per-query) here")] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object with the metrics")] = False,
) -> None:
    """nDCG@10, recall@10/100, MRR@10 and query latency for one retrieval mode."""
    settings = merge(
        load_settings(None, config),
        embedding={"provider": provider, "threads": threads},
        index={"chunker": chunker},
        search={"fusion": fusion, "bm25_weight": bm25_weight, "dense_weight": dense_weight},
    )
    data = load_beir(dataset, split)
    with ProgressBars(enabled=not as_json) as bars:
        result = evaluate_retrieval(
            data,
            settings,
            mode,
            progress=bars,
            on_query=lambda n, t: bars("queries", n, t),
            limit_queries=limit_queries,
        )
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(
            json.dumps(
                {"metrics": result.metrics, "info": result.info, "per_query": result.per_query},
                ensure_ascii=False,
                indent=1,
            ),
            encoding="utf-8",
        )
    if as_json:
        print_json({k: result.metrics[k] for k in METRIC_KEYS})
        return
    info = result.info
    out.print(f"{info['dataset']} [{info['split']}] mode={mode} queries={info['queries']} docs={info['documents']}")
    if info.get("embedding"):
        out.print(f"embedding {info['embedding']}" + (f"  fusion {info['fusion']}" if info.get("fusion") else ""))
    for key in METRIC_KEYS:
        out.print(f"  {key:<15} {result.metrics[key]}")
    if report is not None:
        err.print(f"full report: {report}")
