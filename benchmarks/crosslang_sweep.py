"""Measure retrieval settings on the cross-language sets, with query vectors remembered on disk.

    python -m benchmarks.crosslang_sweep TAG SETS_DIR fastapi-xlang-en:zh-dev,fastapi-xlang-mixed:zh-dev \\
        search.crosslang_dictionary=false search.crosslang_weight=0.25

Each run calls ``evaluate_retrieval``, the function behind ``sunlib eval retrieval``, so the
figures are the command's (same index cache under ``$SUNLIB_HOME/eval/``, same chunker, routes
and fusion). The one difference: the query embedders are the bundled ``e5`` and ``use`` wrapped
so that a question's vector is computed once and kept in ``$SUNLIB_HOME/crosslang-qvec.npz``
(vectors are deterministic), so a sweep over weights re-embeds no question. Settings are
``section.field=value``; one JSON line per split is appended to ``$SUNLIB_HOME/crosslang-sweep.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sunlib.config import EmbeddingSettings, load_settings, merge, sunlib_home
from sunlib.evaluate import evaluate_retrieval, load_beir
from sunlib.providers.base import Embedder, Kind
from sunlib.providers.registry import create_embedder, register_embedder

MEMO_FILE = sunlib_home() / "crosslang-qvec.npz"  # written and read by this script only


def _read_memo() -> dict[tuple[str, str], np.ndarray]:
    if not MEMO_FILE.exists():
        return {}
    with np.load(MEMO_FILE) as data:
        keys = json.loads(str(data["keys"]))
        return {(p, t): data[f"v{i}"] for i, (p, t) in enumerate(keys)}


def _write_memo() -> None:
    keys = list(MEMO)
    arrays: dict[str, Any] = {f"v{i}": MEMO[k] for i, k in enumerate(keys)}  # savez's keywords, one per array
    np.savez(MEMO_FILE, keys=np.array(json.dumps(keys, ensure_ascii=False)), **arrays)


MEMO: dict[tuple[str, str], np.ndarray] = _read_memo()


class Remembering(Embedder):
    """A bundled embedder whose query vectors are remembered; its space is the inner model's."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.provider, self.model, self.dim = inner.provider, inner.model, inner.dim
        self.crosslang_partner = inner.crosslang_partner

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        return self.inner.embed_batch(texts, kind)

    def embed_query(self, text: str) -> np.ndarray:
        key = (self.provider, text)
        if key not in MEMO:
            MEMO[key] = self.inner.embed_query(text)
        return MEMO[key]


def _factory(name: str) -> Any:
    def create(settings: EmbeddingSettings) -> Embedder:
        return Remembering(create_embedder(settings.model_copy(update={"provider": name})))

    return create


for _name in ("e5", "use"):
    register_embedder(f"m{_name}")(_factory(_name))


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tag", help="names the runs in crosslang-sweep.jsonl")
    ap.add_argument("sets_dir", help="the folder benchmarks.crosslang_pairs wrote")
    ap.add_argument("splits", help="SET:SPLIT,SET:SPLIT,...")
    ap.add_argument("settings", nargs="*", metavar="section.field=value")
    args = ap.parse_args()
    tag, sets_dir, splits, pairs = args.tag, args.sets_dir, args.splits, args.settings
    sections: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        section, field = key.split(".")
        sections.setdefault(section, {})[field] = _value(value)
    sections.setdefault("embedding", {}).setdefault("provider", "me5")
    search = sections.setdefault("search", {})
    if search.get("crosslang_provider", "auto") in ("auto", "use"):
        search["crosslang_provider"] = "muse"
    elif search.get("crosslang_provider") == "e5":
        search["crosslang_provider"] = "me5"
    settings = merge(load_settings(None, None), **sections)
    out = sunlib_home() / "crosslang-sweep.jsonl"
    for item in splits.split(","):
        name, split = item.split(":")
        t0 = time.time()
        report = evaluate_retrieval(load_beir(Path(sets_dir) / name, split), settings, "hybrid")
        row = {"tag": tag, "set": name, "split": split, "settings": pairs, **report.metrics}
        row["seconds"] = round(time.time() - t0)
        with out.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
        _write_memo()


if __name__ == "__main__":
    main()
