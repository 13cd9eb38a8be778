"""BEIR-format datasets: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.

Only query ids present in the qrels are evaluated. For a split other than
``test``, queries come from ``queries_<split>.jsonl`` when that file exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import DatasetError
from ..ingest.ids import sha256_hex


@dataclass(frozen=True)
class BeirDataset:
    root: Path
    split: str
    corpus: dict[str, tuple[str, str]]  # doc id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    fingerprint: str  # hash of the corpus file: keys the cached index


def _jsonl(path: Path) -> Iterator[dict[str, object]]:
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{n}: invalid JSON ({exc.msg})") from None
            if not isinstance(row, dict) or "_id" not in row:
                raise DatasetError(f'{path}:{n}: each line needs an "_id"')
            yield row


def load_beir(root: Path, split: str = "test") -> BeirDataset:
    root = Path(root)
    corpus_path, qrels_path = root / "corpus.jsonl", root / "qrels" / f"{split}.tsv"
    queries_path = root / f"queries_{split}.jsonl"
    if not queries_path.is_file():
        queries_path = root / "queries.jsonl"
    for p in (corpus_path, queries_path, qrels_path):
        if not p.is_file():
            raise DatasetError(f"not a BEIR dataset: {p} is missing")
    corpus = {str(r["_id"]): (str(r.get("title") or ""), str(r.get("text") or "")) for r in _jsonl(corpus_path)}
    queries = {str(r["_id"]): str(r.get("text") or "") for r in _jsonl(queries_path)}
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if n == 1 and parts[0] == "query-id":
                continue
            if len(parts) < 3:
                if line.strip():
                    raise DatasetError(f"{qrels_path}:{n}: expected 'query-id<TAB>corpus-id<TAB>score'")
                continue
            try:
                grade = int(float(parts[2]))
            except ValueError:
                raise DatasetError(f"{qrels_path}:{n}: score {parts[2]!r} is not a number") from None
            if parts[0] in queries:
                qrels.setdefault(parts[0], {})[parts[1]] = grade
    if not qrels:
        raise DatasetError(f"{qrels_path}: no judged query is in {queries_path.name}")
    fingerprint = sha256_hex(corpus_path.read_bytes())[:16]
    return BeirDataset(root, split, corpus, queries, qrels, fingerprint)
