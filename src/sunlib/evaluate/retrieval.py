"""Retrieval evaluation through sunlib's real pipeline.

The dataset's corpus is written once as a Markdown vault (one note per
document: ``# title`` then the text) and indexed with the normal indexer, so
the numbers measure what users get: the same chunker, FTS tokens, models and
fusion. The vault and its index are cached under ``$SUNLIB_HOME/eval/``, keyed
by the corpus hash and the chunker; vectors are cached per model inside it, so
repeated runs (other modes, other fusion settings) embed nothing.

A document's rank is the rank of its best chunk.

``as_is`` evaluates the cached index as it stands: the text is synced as always (nothing to
do on an unchanged cache) but no vector is computed, so dense and hybrid use only the vectors
already there. That is how hybrid is measured while vectors are missing (docs/evaluation.md,
"Hybrid while vectors are missing"); the report then says how many chunks had no vector and
how many fused hits per query were filled in for them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..answer.gate.relevance import term_weights
from ..config import Settings, sunlib_home
from ..errors import UserError
from ..ingest.chunkers import make_chunker
from ..ingest.ids import sha256_hex
from ..library import Library
from ..providers import create_reranker
from ..sync.indexing import Progress
from ..trace.steps import Step
from .beir import BeirDataset
from .metrics import mrr_at_k, ndcg_at_k, percentile, recall_at_k

DOC_POOL = 100  # documents kept per query (recall@100)
CHUNK_POOL = 200  # chunks requested to fill DOC_POOL documents


@dataclass
class RetrievalReport:
    metrics: dict[str, float]
    per_query: dict[str, dict[str, Any]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def eval_cache_dir(dataset: BeirDataset, settings: Settings) -> Path:
    chunker = make_chunker(settings.index).fingerprint
    name = "".join(ch if ch.isalnum() else "-" for ch in dataset.root.name)[:40]
    return sunlib_home() / "eval" / f"{name}-{dataset.fingerprint}-{sha256_hex(chunker)[:8]}"


def materialize(dataset: BeirDataset, root: Path) -> dict[str, str]:
    """Write the corpus as a vault (once); returns note path -> document id."""
    vault = root / "vault"
    mapping_file = root / "doc_ids.json"
    if mapping_file.is_file():
        return dict(json.loads(mapping_file.read_text(encoding="utf-8")))
    mapping: dict[str, str] = {}
    for i, (doc_id, (title, text)) in enumerate(sorted(dataset.corpus.items())):
        rel = f"d{i // 1000:03d}/{i:07d}.md"
        path = vault / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        title = " ".join(title.split())
        path.write_text((f"# {title}\n\n" if title else "") + text.strip() + "\n", encoding="utf-8")
        mapping[rel] = doc_id
    mapping_file.write_text(json.dumps(mapping), encoding="utf-8")
    return mapping


def evaluate_retrieval(
    dataset: BeirDataset,
    settings: Settings,
    mode: str,
    progress: Progress | None = None,
    on_query: Callable[[int, int], None] | None = None,
    limit_queries: int | None = None,
    rerank: str | None = None,
    as_is: bool = False,
    fast_only: bool = False,
) -> RetrievalReport:
    """Metrics for one mode; with ``rerank`` (lexical, fusion, cross-encoder) the fused hits are
    reranked as ``sunlib ask`` does before documents are ranked ("hybrid+rerank"). With
    ``as_is`` no vector is computed: the index is searched with the vectors it has. With
    ``fast_only`` only the fast tier's vectors are computed: search as it stands minutes into a
    first index, before the provider's vectors have filled in (on an index that has none yet)."""
    if mode not in ("bm25", "dense", "hybrid"):
        raise UserError(f"unknown mode {mode!r}; choose one of: bm25, dense, hybrid")
    root = eval_cache_dir(dataset, settings)
    mapping = materialize(dataset, root)
    settings = settings.model_copy(update={"index_dir": root / "index"})
    if rerank:
        settings = settings.model_copy(update={"answer": settings.answer.model_copy(update={"reranker": rerank})})
    lib = Library(root / "vault", settings)
    try:
        embed = (mode != "bm25" or bool(rerank)) and not as_is
        report = lib.index(embed=embed, backfill=not fast_only, progress=progress)
        reranker = create_reranker(settings.answer) if rerank else None
        if reranker is not None:
            reranker.bind(lib.store, settings, lib.rescore)
        qids = sorted(dataset.qrels)[:limit_queries] if limit_queries else sorted(dataset.qrels)
        per_query: dict[str, dict[str, Any]] = {}
        latencies: list[float] = []
        filled: list[int] = []  # per hybrid query: fused hits whose dense part was filled in
        empty = 0
        for n, qid in enumerate(qids, 1):
            text = dataset.queries[qid]
            ranked: list[str] = []
            latency: float | None = None
            if text.strip():  # an empty query (they exist in real sets) retrieves nothing and scores 0
                t0 = time.perf_counter()
                result = lib.search(text, mode=mode, limit=CHUNK_POOL)
                hits = list(result.hits)
                filled.extend(
                    int(st.details.get("filled_in", 0)) for st in result.trace.steps if st.name == Step.FUSION
                )
                if reranker is not None:
                    hits = [
                        r.hit
                        for r in reranker.rerank(text, hits, term_weights(lib.store, text, settings.search.principals))
                    ]
                latency = (time.perf_counter() - t0) * 1000.0
                latencies.append(latency)
                ranked = list(dict.fromkeys(mapping[h.path] for h in hits))[:DOC_POOL]
            else:
                empty += 1
            qrels = dataset.qrels[qid]
            per_query[qid] = {
                "ndcg@10": ndcg_at_k(ranked, qrels, 10),
                "recall@10": recall_at_k(ranked, qrels, 10),
                "recall@100": recall_at_k(ranked, qrels, 100),
                "mrr@10": mrr_at_k(ranked, qrels, 10),
                "top": ranked[:10],
                "latency_ms": None if latency is None else round(latency, 2),
            }
            if on_query:
                on_query(n, len(qids))
        n = max(len(per_query), 1)
        metrics = {
            key: round(sum(float(q[key]) for q in per_query.values()) / n, 4)
            for key in ("ndcg@10", "recall@10", "recall@100", "mrr@10")
        }
        metrics["latency_ms_p50"] = round(percentile(latencies, 50), 2)
        metrics["latency_ms_p95"] = round(percentile(latencies, 95), 2)
        info = {
            "dataset": str(dataset.root),
            "split": dataset.split,
            "mode": mode,
            "queries": len(per_query),
            "empty_queries": empty,
            "documents": len(dataset.corpus),
            "chunks": lib.store.counts().chunks,
            "chunker": make_chunker(settings.index).fingerprint,
            "embedding": lib.space.name if mode != "bm25" else None,
            "fusion": settings.search.fusion if mode == "hybrid" else None,
            "rerank": rerank,
            "rescore_provider": settings.answer.rescore_provider if rerank == "fusion" else None,
            "weights": {"bm25": settings.search.bm25_weight, "dense": settings.search.dense_weight},
            "vectors_embedded": report.vectors_embedded,
            "as_is": as_is,
            "fast_tier": lib.fast[1].name if lib.fast is not None and mode != "bm25" else None,
            "fast_only": fast_only,
            "vectors_pending": lib.store.vectors.count_pending(lib.space)[0] if mode != "bm25" else None,
            "fill_missing": settings.search.fill_missing if mode == "hybrid" else None,
            "filled_in_per_query": round(sum(filled) / len(filled), 2) if filled else 0.0,
            "index_cache": str(root),
        }
        return RetrievalReport(metrics, per_query, info)
    finally:
        lib.close()
