"""The fast tier: e5 distilled into a static table (``e5-fast``), a lookup and a mean per text.

``e5fast/vectors.npy`` holds one 256-d row per piece of the reader's vocabulary (e5's pieces that
English and Chinese use; the reader's tokenizer file, checked against the table's record), float16,
memory-mapped: a text's vector is the mean of its pieces' rows,
normalised. There is no transformer and no query/passage asymmetry, so it embeds thousands of
chunks a second on one core; it ranks below e5 and serves while e5 fills in behind it (two-pass
indexing, ``[embedding] fast_tier``). How the table was made: ``e5fast/CARD.md``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np

from ...config import EmbeddingSettings
from ...errors import ProviderError
from ..base import Embedder, Kind

HERE = Path(__file__).with_name("e5fast")
# the table's rows are the reader's vocabulary pieces: one tokenizer file serves both
TOKENIZER = Path(__file__).parents[1] / "readers" / "e5reader" / "tokenizer.json"
MAX_PIECES = 2048  # a chunk longer than this many pieces is represented by its first ones


@cache
def _table(folder: Path) -> tuple[np.ndarray, dict[str, object]]:
    """The table (memory-mapped: its header only is read now) and its record."""
    meta = json.loads((folder / "fast.json").read_text(encoding="utf-8"))
    return np.load(folder / "vectors.npy", mmap_mode="r"), meta


@cache
def _tokenizer(expected: str) -> object:
    """The reader's tokenizer, checked against the table's record: about 50 ms, so it is loaded when
    a text is first embedded, not with the embedder (a search on a fully embedded index, where the
    fast-tier route stays silent, never needs it)."""
    from tokenizers import Tokenizer

    if hashlib.sha256(TOKENIZER.read_bytes()).hexdigest() != expected:
        raise ProviderError(f"{TOKENIZER} is not the vocabulary the fast tier was made with; rebuild it (tools/static)")
    tok = Tokenizer.from_file(str(TOKENIZER))
    tok.no_padding()
    tok.no_truncation()
    return tok


class FastEmbedder(Embedder):
    provider = "e5-fast"
    crosslang_partner = None  # distilled from e5's aligned space: it is cross-language itself

    def __init__(self, folder: Path = HERE) -> None:
        table, meta = _table(folder)
        self._table = table
        self._expected = str(meta["sha256"]["tokenizer.json"])  # type: ignore[index]
        self.model = str(meta["model"])
        self.dim = int(table.shape[1])

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        tok = _tokenizer(self._expected)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, enc in enumerate(tok.encode_batch(list(texts), add_special_tokens=False)):  # type: ignore[attr-defined]
            ids = enc.ids[:MAX_PIECES]
            if ids:
                out[i] = self._table[np.asarray(ids)].mean(axis=0, dtype=np.float32)
        return out


def create_fast(settings: EmbeddingSettings) -> Embedder:
    return FastEmbedder()
