"""The reader's tokenizer: e5's unigram vocabulary, trimmed to the pieces English and Chinese text uses.

e5's 250k pieces cost 1.3 s to load as a ``tokenizers`` file; the pieces that en / zh-Hans / zh-Hant
text actually produces are a small part of them. Kept: the four specials, every piece that the full
vocabulary produces on the corpora under ``../shared/data`` (text only, never labels), and every
single-character piece in the Latin, CJK and common punctuation blocks, so no such character of
unseen text becomes ``<unk>``. The same piece keeps its e5 score, and ``id_map.npy`` gives each kept
id its row of e5's embedding table.

    python -m tools.reader.vocab ../shared/data OUT_DIR
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from sunlib.providers.readers.e5_file import E5File, Vocabulary, default_path

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
META = "\u2581"


def build(pieces: list[tuple[str, float]], unk: int) -> Tokenizer:
    tok = Tokenizer(models.Unigram(pieces, unk_id=unk, byte_fallback=False))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement=META, prepend_scheme="always")
    return tok


def _script_char(piece: str) -> bool:
    body = piece.removeprefix(META)
    if len(body) != 1:
        return False
    cp = ord(body)
    return (
        cp < 0x250 or 0x2000 <= cp < 0x2070 or 0x2100 <= cp < 0x2C00 or 0x3000 <= cp < 0xA000 or 0xFF00 <= cp < 0xFFF0
    )


def texts(data: Path) -> Iterator[str]:
    for path in sorted(data.rglob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                for key in ("title", "text", "question", "claim"):
                    if isinstance(row.get(key), str):
                        yield row[key]
    for path in sorted(data.rglob("*.md")):
        yield path.read_text(encoding="utf-8", errors="replace")


def trimmed(vocab: Vocabulary, data: Path) -> tuple[Tokenizer, np.ndarray]:
    full = build([(p, float(s)) for p, s in zip(vocab.pieces, vocab.scores, strict=True)], vocab.unk)
    keep = {vocab.pieces.index(s) for s in SPECIALS}
    keep.update(i for i, p in enumerate(vocab.pieces) if _script_char(p))
    batch: list[str] = []
    for text in texts(data):
        batch.append(text)
        if len(batch) == 512:
            for enc in full.encode_batch(batch, add_special_tokens=False):
                keep.update(enc.ids)
            batch = []
    for enc in full.encode_batch(batch, add_special_tokens=False):
        keep.update(enc.ids)
    order = sorted(keep)  # e5's order, so the specials stay 0..3
    tok = build([(vocab.pieces[i], float(vocab.scores[i])) for i in order], order.index(vocab.unk))
    return tok, np.asarray(order, dtype=np.int32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    tok, id_map = trimmed(E5File(default_path()).vocabulary, args.data)
    args.out.mkdir(parents=True, exist_ok=True)
    tok.save(str(args.out / "tokenizer.json"))
    np.save(args.out / "id_map.npy", id_map)
    print(f"{len(id_map)} pieces kept of e5's vocabulary -> {args.out}")


if __name__ == "__main__":
    main()
