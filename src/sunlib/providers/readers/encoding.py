"""How a (question, passage) pair becomes the reader's input, the same for training and for reading.

A pair is ``<s> question </s> passage </s>``, the question cut to ``MAX_QUESTION`` tokens. A passage
longer than the room left is read in windows that overlap by ``OVERLAP`` tokens; each window keeps
the character offsets of its passage tokens, so a span the model points at maps back to the exact
characters of the note. Token ids are the reader's own (its trimmed vocabulary); ``id_map`` turns
them into rows of e5's embedding table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

MAX_LENGTH = 256
MAX_QUESTION = 64
OVERLAP = 64


@dataclass(frozen=True)
class Window:
    ids: list[int]  # the whole sequence, specials included
    first: int  # index in ``ids`` of the first passage token
    offsets: list[tuple[int, int]]  # character span in the passage of each passage token

    @property
    def last(self) -> int:  # index after the last passage token
        return self.first + len(self.offsets)


@dataclass(frozen=True)
class Specials:
    bos: int
    eos: int
    pad: int


def specials(tokenizer: Tokenizer) -> Specials:
    def need(piece: str) -> int:
        found = tokenizer.token_to_id(piece)
        if found is None:
            raise ValueError(f"the reader's tokenizer has no {piece}")
        return found

    return Specials(need("<s>"), need("</s>"), need("<pad>"))


def windows(
    tokenizer: Tokenizer,
    question: str,
    passage: str,
    *,
    max_length: int = MAX_LENGTH,
) -> list[Window]:
    """The windows that read ``passage`` against ``question`` (at least one, even for empty text)."""
    sp = specials(tokenizer)
    q = tokenizer.encode(question, add_special_tokens=False).ids[:MAX_QUESTION]
    enc = tokenizer.encode(passage, add_special_tokens=False)
    ids, offs = enc.ids, enc.offsets
    room = max(8, max_length - len(q) - 3)
    step = max(1, room - OVERLAP)
    out: list[Window] = []
    start = 0
    while True:
        part = slice(start, start + room)
        out.append(Window([sp.bos, *q, sp.eos, *ids[part], sp.eos], len(q) + 2, list(offs[part])))
        if start + room >= len(ids):
            return out
        start += step


def batch(windows_: Sequence[Window], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask, padded to the longest window (int64, as the model reads them)."""
    width = max(len(w.ids) for w in windows_)
    ids = np.full((len(windows_), width), pad, dtype=np.int64)
    mask = np.zeros((len(windows_), width), dtype=np.int64)
    for row, w in enumerate(windows_):
        ids[row, : len(w.ids)] = w.ids
        mask[row, : len(w.ids)] = 1
    return ids, mask
