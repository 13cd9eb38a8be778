"""The fast tier (e5 distilled into a static table) and two-pass indexing: the real bundled table,
a real index. The main space here is the hash embedder's, so a test controls which chunks have
their main vector by deleting some (as if e5 had not reached them yet)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from sunlib import Library
from sunlib.config import EmbeddingSettings
from sunlib.contracts import SearchResult
from sunlib.providers import Embedder, create_embedder
from sunlib.providers.embedders.hashing import HashEmbedder
from sunlib.providers.registry import Kind, register_embedder
from sunlib.store import Visibility
from sunlib.trace.steps import Step
from tests.support.embedders import CountingEmbedder

NOTES = {
    "tides.md": "# Tides\n\nThe harbour gate closes two hours before high tide.\n",
    "kiln.md": "# Kiln\n\nFire the kiln slowly: raise the heat by fifty degrees an hour.\n",
    "library.md": "# Library\n\nBooks are lent for three weeks and can be renewed twice.\n",
    "bees.md": "# 蜜蜂\n\n蜂箱在冬天需要挡风，巢门要缩小。\n",
}


@pytest.fixture(scope="module")
def fast() -> Embedder:
    return create_embedder(EmbeddingSettings(provider="e5-fast"))


def test_vectors_are_unit_length_deterministic_and_bilingual(fast: Embedder) -> None:
    texts = ["The harbour gate closes before high tide.", "港口的闸门在涨潮前关闭。", "Fire the kiln slowly."]
    a, b = fast.embed(texts), fast.embed(texts)
    assert a.shape == (3, fast.dim) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(a, b)
    # a Chinese sentence lies nearer its English translation than an unrelated English sentence
    assert float(a[1] @ a[0]) > float(a[1] @ a[2])
    q = fast.embed_query("when does the harbour gate close?")
    assert q.shape == (fast.dim,) and float(q @ a[0]) > float(q @ a[2])


def _open(root: Path, fast_tier: str = "e5-fast") -> Library:
    return Library.open(
        root / "vault", embedding={"provider": "hash", "fast_tier": fast_tier}, index_dir=root / f"index-{fast_tier}"
    )


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Library, Library]]:
    vault = tmp_path / "vault"
    vault.mkdir()
    for name, text in NOTES.items():
        (vault / name).write_text(text, encoding="utf-8")
    with _open(tmp_path) as tiered, _open(tmp_path, "none") as plain:
        tiered.index()
        plain.index()
        yield tiered, plain


def ranking(result: SearchResult) -> list[tuple[object, ...]]:
    return [(h.chunk_id, h.score, tuple(sorted(h.routes.items()))) for h in result.hits]


def steps(result: SearchResult) -> list[str]:
    return [s.name for s in result.trace.steps]


def test_the_fast_tier_is_embedded_first_and_silent_once_the_main_space_is_full(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for name, text in NOTES.items():
        (vault / name).write_text(text, encoding="utf-8")
    phases: list[str] = []
    with _open(tmp_path) as lib:
        report = lib.index(progress=lambda phase, done, total: phases.append(phase))
        assert lib.fast is not None
        fast_space = lib.fast[1]
        assert report.fast_vectors == len(NOTES) and report.vectors_embedded == len(NOTES)
        assert phases.index("fast") < phases.index("vectors")  # every chunk has a fast vector before e5 starts
        assert lib.store.vectors.count_pending(fast_space)[0] == 0
        assert lib.status().active_space == lib.space.name  # the fast tier never becomes the index's space
        again = lib.index()
        assert again.fast_vectors == 0 and again.vectors_embedded == 0  # nothing done is redone


def test_with_every_main_vector_search_is_exactly_what_it_is_without_a_fast_tier(two: tuple[Library, Library]) -> None:
    tiered, plain = two
    for mode in ("hybrid", "dense"):
        a, b = (
            tiered.search("when does the harbour gate close", mode=mode),
            plain.search("when does the harbour gate close", mode=mode),
        )
        assert ranking(a) == ranking(b)
        assert Step.DENSE_FAST not in steps(a)


def test_chunks_without_their_main_vector_are_ranked_by_the_fast_tier(two: tuple[Library, Library]) -> None:
    lib, _ = two
    rows = {r.path: r.chunk_id for r in lib.store.chunks_by_ids(_all_chunks(lib))}
    assert len(rows) == len(NOTES)
    waiting = rows["tides.md"]
    lib.store.vectors.delete(lib.space, [waiting])  # e5 has not reached this chunk yet
    result = lib.search("when does the harbour gate close", mode="hybrid")
    assert Step.DENSE_FAST in steps(result)
    by_path = {h.path: h for h in result.hits}
    tides = by_path["tides.md"]
    assert tides.routes["dense-fast"].rank >= 1 and tides.routes["dense"].rank == 0  # scored by its best tier
    for path, hit in by_path.items():
        if path != "tides.md" and "dense" in hit.routes:
            assert hit.routes["dense"].rank >= 1  # the others keep their main cosine
            assert "dense-fast" not in hit.routes or hit.routes["dense-fast"].rank == 0  # and no fast one
    step = next(s for s in result.trace.steps if s.name == Step.DENSE_FAST)
    assert step.details["space"] == lib.fast[1].name and step.details["main_space"] == lib.space.name  # type: ignore[index]

    lib.index()  # the backfill reaches it: the fast tier falls silent
    assert Step.DENSE_FAST not in steps(lib.search("when does the harbour gate close", mode="hybrid"))


def test_with_no_main_vectors_at_all_dense_search_runs_on_the_fast_tier(two: tuple[Library, Library]) -> None:
    lib, _ = two
    lib.store.vectors.delete(lib.space, _all_chunks(lib))
    dense = lib.search("蜂箱 冬天", mode="dense")
    assert dense.hits and all(set(h.routes) == {"dense-fast"} for h in dense.hits)
    assert dense.hits[0].path == "bees.md"
    # cross-language: an English question finds the Chinese note by meaning
    english = lib.search("beehive entrance in winter", mode="dense")
    assert english.hits[0].path == "bees.md"


def _all_chunks(lib: Library) -> list[str]:
    return lib.store.visible_chunk_ids(Visibility.of(["public"]))


def _backlog_vault(root: Path) -> Path:
    vault = root / "vault"
    vault.mkdir()
    for i in range(40):
        (vault / f"n{i:02d}.md").write_text(f"# Note {i}\n\nFiller text number {i} about nothing.\n", encoding="utf-8")
        os.utime(vault / f"n{i:02d}.md", (1_700_000_000 + i, 1_700_000_000 + i))
    (vault / "tides.md").write_text(NOTES["tides.md"], encoding="utf-8")
    os.utime(vault / "tides.md", (1_600_000_000, 1_600_000_000))  # the oldest note of all
    return vault


def test_the_backfill_embeds_notes_being_edited_and_chunks_searched_for_first(tmp_path: Path) -> None:
    """A chunk a search showed while it waited, then a note saved during the
    backfill, are embedded before the rest, which goes the notes changed last first."""
    vault = _backlog_vault(tmp_path)
    embedding = {"provider": "counting", "fast_tier": "e5-fast", "batch_size": 4}
    with Library.open(vault, embedding=embedding, index_dir=tmp_path / "index") as lib:
        lib.index(backfill=False)  # text and the fast tier: every main vector still to come
        assert lib.store.vectors.count_pending(lib.space)[0] == 41
        hits = lib.search("when does the harbour gate close before high tide", mode="hybrid", limit=1).hits
        assert [h.path for h in hits] == ["tides.md"]
        (vault / "n05.md").write_text("# Note 5\n\nEdited during the backfill.\n", encoding="utf-8")
        lib.index(embed=False)
        CountingEmbedder.seen = []
        lib.embed()
    first = CountingEmbedder.seen[:4]
    assert "harbour gate" in first[0]  # asked about: first, though its note is the oldest
    assert any("Edited during the backfill" in t for t in first)  # saved last: next
    rest = [t for t in CountingEmbedder.seen if "Filler" in t]
    numbers = [int(t.split("number ")[1].split()[0]) for t in rest]
    assert numbers == sorted(numbers, reverse=True)  # then the notes changed last first


def test_a_server_fills_in_the_vectors_a_first_index_left(tmp_path: Path) -> None:
    """``sunlib serve`` indexes the text and the fast tier, then serves while its lifespan's backfill
    job embeds the rest."""
    from fastapi.testclient import TestClient

    from sunlib.server import create_app

    vault = _backlog_vault(tmp_path)
    with Library.open(vault, embedding={"provider": "hash", "fast_tier": "e5-fast"}, index_dir=tmp_path / "i") as lib:
        lib.index(backfill=False)
        assert lib.store.vectors.count_pending(lib.space)[0] == 41
        with TestClient(create_app(lib), base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as client:
            r = client.post("/api/search", json={"query": "harbour gate high tide", "mode": "hybrid"})
            assert r.status_code == 200 and r.json()["results"][0]["path"] == "tides.md"
            deadline = time.monotonic() + 60
            while lib.store.vectors.count_pending(lib.space)[0]:
                assert time.monotonic() < deadline, "the backfill did not run"
                time.sleep(0.05)
        main = [e for e in lib.status().embedding if e.role == "main"]
        assert main and main[0].embedded == main[0].total == 41


class SlowEmbedder(HashEmbedder):
    """The hash embedder, a quarter of a second per passage batch: a backfill that takes a while."""

    provider = "slow-hash"

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        if kind == "passage":
            time.sleep(0.25)
        return super().embed_batch(texts, kind)


register_embedder("slow-hash")(lambda settings: SlowEmbedder(64))


def test_a_server_stops_at_once_while_its_backfill_runs_and_keeps_what_it_embedded(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from sunlib.server import create_app

    vault = _backlog_vault(tmp_path)
    embedding = {"provider": "slow-hash", "fast_tier": "e5-fast", "batch_size": 1}
    with Library.open(vault, embedding=embedding, index_dir=tmp_path / "i") as lib:
        lib.index(backfill=False)
        with TestClient(create_app(lib), base_url="http://127.0.0.1", client=("127.0.0.1", 50000)):
            deadline = time.monotonic() + 30
            while lib.store.vectors.count_pending(lib.space)[0] > 38:  # the backfill is under way
                assert time.monotonic() < deadline, "the backfill did not start"
                time.sleep(0.02)
            t0 = time.monotonic()
        assert time.monotonic() - t0 < 5  # not the 10 s the rest of the backfill would take
        left = lib.store.vectors.count_pending(lib.space)[0]
        assert 0 < left <= 38
        assert lib.index().vectors_pending == 0  # the next run goes on where it stopped
