"""Ways to fill in the dense part of chunks without a vector, compared on a partly embedded index.

Behind docs/evaluation.md, "Hybrid while vectors are missing". Each judged query's BM25 and
dense lists (the pools `sunlib eval retrieval` uses) are taken once from a copy of the cached
eval index, exactly as it is (only queries are embedded), and then fused in several ways with
z-score fusion, weights 0.5/0.5 (the defaults). For a BM25 candidate whose chunk has no vector,
the dense z is taken to be:

* ``floor``: the dense route's lowest z, as for a chunk ranked below its pool (sunlib before);
* ``agree``: the chunk's BM25 z, as if the dense route agreed with BM25 (sunlib's fill-in);
* ``mean``: 0, the mean of the dense candidate list (no information either way);
* ``best``: the dense route's best z (no such chunk can then fall below its BM25 rank);
* ``regress``: the least-squares prediction of the dense z from the BM25 z, fitted per query on
  the BM25 candidates that do have a vector (the dense floor where the dense route did not return
  them), never below the floor.

``floor`` and ``agree`` are computed with sunlib's own ``fuse`` (``agree`` is what search does).
Metrics are reported over all queries and over two groups: the queries whose relevant documents
all have vectors and those where none has one.

    usage: python -m benchmarks.fill_in_variants ../shared/data/scifact [--split test] [--cache DIR]

The cache defaults to the dataset's folder under $SUNLIB_HOME/eval/; it is copied to a temporary
folder first, so nothing is written to it. Prints one JSON line per variant.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from statistics import fmean, pstdev
from typing import NamedTuple

import numpy as np

from sunlib.config import load_settings
from sunlib.evaluate import BeirDataset, load_beir
from sunlib.evaluate.metrics import ndcg_at_k, recall_at_k
from sunlib.evaluate.retrieval import CHUNK_POOL, DOC_POOL, eval_cache_dir
from sunlib.library import Library
from sunlib.retrieve import fuse
from sunlib.retrieve.routes import DenseRoute, LexicalRoute
from sunlib.store import Visibility
from sunlib.trace import Tracer

Ranked = list[tuple[str, float]]
WEIGHTS = {"bm25": 0.5, "dense": 0.5}


class Row(NamedTuple):
    """One judged query: its two lists, the BM25 candidates without a vector, chunk -> document."""

    bm25: Ranked
    dense: Ranked
    missing: set[str]
    doc_of: dict[str, str]
    qrels: dict[str, int]
    group: str  # all_relevant_embedded | none | some


def _z(items: Ranked) -> tuple[dict[str, float], float, float]:
    """Each item's z over the list, the lowest z and the highest."""
    if not items:
        return {}, 0.0, 0.0
    scores = [s for _, s in items]
    mean, std = fmean(scores), pstdev(scores) or 1.0
    return {k: (s - mean) / std for k, s in items}, (min(scores) - mean) / std, (max(scores) - mean) / std


def _imputed(variant: str, bm25: Ranked, dense: Ranked, missing: set[str]) -> list[str]:
    zb, floor_b, _ = _z(bm25)
    zd, floor_d, best_d = _z(dense)
    a, b = 0.0, 1.0
    if variant == "regress":
        pairs = [(zb[k], zd.get(k, floor_d)) for k in zb if k not in missing]
        if len(pairs) >= 3:
            x, y = np.array(pairs).T
            b = float(np.cov(x, y, bias=True)[0, 1] / (x.var() or 1.0))
            a = float(y.mean() - b * x.mean())
    scored = []
    for key in set(zb) | set(zd):
        lexical = zb.get(key, floor_b)
        if key in zd:
            semantic = zd[key]
        elif key not in missing:
            semantic = floor_d
        elif variant == "mean":
            semantic = 0.0
        elif variant == "best":
            semantic = best_d
        else:  # regress
            semantic = max(a + b * lexical, floor_d)
        scored.append((-(WEIGHTS["bm25"] * lexical + WEIGHTS["dense"] * semantic), key))
    return [key for _, key in sorted(scored)]


def _ranker(variant: str) -> Callable[[Ranked, Ranked, set[str]], list[str]]:
    if variant == "bm25":
        return lambda bm25, dense, missing: [k for k, _ in sorted(bm25, key=lambda it: (-round(it[1], 6), it[0]))]
    if variant == "dense":
        return lambda bm25, dense, missing: [k for k, _ in sorted(dense, key=lambda it: (-round(it[1], 6), it[0]))]
    if variant == "floor":
        return lambda bm25, dense, missing: [f.key for f in fuse({"bm25": bm25, "dense": dense}, "zscore", WEIGHTS)]
    if variant == "agree":
        return lambda bm25, dense, missing: [
            f.key for f in fuse({"bm25": bm25, "dense": dense}, "zscore", WEIGHTS, 60, {"dense": missing})
        ]
    return lambda bm25, dense, missing: _imputed(variant, bm25, dense, missing)


VARIANTS = ("bm25", "dense", "floor", "agree", "mean", "best", "regress")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--cache", type=Path, help="the cached eval folder (vault/, index/, doc_ids.json)")
    args = parser.parse_args()
    data = load_beir(args.dataset, args.split)
    settings = load_settings()
    cache = args.cache or eval_cache_dir(data, settings)
    if not (cache / "index").is_dir():
        sys.exit(f"no cached index in {cache}: run `sunlib eval retrieval {args.dataset} --mode bm25` first")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(cache / "index", Path(tmp) / "index")
        mapping: dict[str, str] = json.loads((cache / "doc_ids.json").read_text(encoding="utf-8"))
        lib = Library(cache / "vault", settings.model_copy(update={"index_dir": Path(tmp) / "index"}))
        try:
            rows = _collect(lib, data, mapping)
        finally:
            lib.close()
    for variant in VARIANTS:
        rank = _ranker(variant)
        groups: dict[str, list[tuple[float, float, float]]] = {"all": [], "all_relevant_embedded": [], "none": []}
        for row in rows:
            docs = list(dict.fromkeys(row.doc_of[k] for k in rank(row.bm25, row.dense, row.missing)))[:DOC_POOL]
            m = (ndcg_at_k(docs, row.qrels, 10), recall_at_k(docs, row.qrels, 10), recall_at_k(docs, row.qrels, 100))
            groups["all"].append(m)
            if row.group in groups:
                groups[row.group].append(m)
        line: dict[str, object] = {"variant": variant, "split": args.split}
        for name, ms in groups.items():
            line[name] = {
                "queries": len(ms),
                "ndcg@10": round(fmean(m[0] for m in ms), 4) if ms else None,
                "recall@10": round(fmean(m[1] for m in ms), 4) if ms else None,
                "recall@100": round(fmean(m[2] for m in ms), 4) if ms else None,
            }
        print(json.dumps(line))


def _collect(lib: Library, data: BeirDataset, mapping: dict[str, str]) -> list[Row]:
    store, space = lib.store, lib.space
    pending, total = store.vectors.count_pending(space)
    print(json.dumps({"chunks": total, "without_vector": pending}), file=sys.stderr)
    doc_chunks: dict[str, list[str]] = {}
    for note_id, path, _ in store.iter_notes():
        doc_chunks.setdefault(mapping[path], []).extend(c.chunk_id for c in store.chunks_of_note(note_id))
    unembedded = store.vectors.without_vectors(space, [c for ids in doc_chunks.values() for c in ids])
    embedded_docs = {d for d, ids in doc_chunks.items() if any(c not in unembedded for c in ids)}
    lexical = LexicalRoute(store.lexical, WEIGHTS["bm25"])
    semantic = DenseRoute(store.vectors, space, lib.embedder.embed_query, WEIGHTS["dense"])
    visibility = Visibility(tuple(lib.settings.search.principals))
    rows: list[Row] = []
    for qid in sorted(data.qrels):
        query = data.queries[qid]
        qrels = data.qrels[qid]
        relevant = {d for d, g in qrels.items() if g > 0}
        have = len(relevant & embedded_docs)
        group = "all_relevant_embedded" if have == len(relevant) else "none" if have == 0 else "some"
        if not query.strip():
            rows.append(Row([], [], set(), {}, qrels, group))
            continue
        tracer = Tracer("fill-in variants")
        bm25 = lexical.retrieve(query, visibility, CHUNK_POOL, tracer) or []
        dense = semantic.retrieve(query, visibility, CHUNK_POOL, tracer) or []
        returned = {k for k, _ in dense}
        missing = semantic.unscored([k for k, _ in bm25 if k not in returned])
        ids = list(dict.fromkeys([k for k, _ in bm25] + [k for k, _ in dense]))
        doc_of = {row.chunk_id: mapping[row.path] for row in store.chunks_by_ids(ids)}
        rows.append(Row(bm25, dense, missing, doc_of, qrels, group))
    return rows


if __name__ == "__main__":
    main()
