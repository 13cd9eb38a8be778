"""Incremental indexing and store invariants, on real SQLite files in tmp dirs.

Providers: the deterministic ``hash`` embedder, and the test-only ``counting``
(records what it embeds) and ``flaky`` (fails after N batches) from tests/support/embedders.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from sunlib import Library
from sunlib.contracts import SearchFilters
from sunlib.errors import ProviderError
from sunlib.providers.embedders.hashing import HashEmbedder
from sunlib.providers.registry import Kind, register_embedder
from sunlib.store import Visibility, embed_text_for
from sunlib.sync.indexing import bulk_workers
from tests.support.embedders import CountingEmbedder, FlakyEmbedder
from tests.support.store_helpers import all_chunk_ids, chunk_ids_by_path, embed_texts, paths_with_vectors, vector_count

ALL = ["public", "team", "ops"]
QUERIES = ["how large is a chunk", "reciprocal rank fusion", "中文分词", "rebuild window backup", "embedding cache"]


# -- helpers ---------------------------------------------------------------------------------


def snapshot(lib: Library, modes: tuple[str, ...] = ("bm25", "dense", "hybrid")) -> dict[tuple[str, str], list]:
    """(mode, query) -> [(chunk_id, score rounded to 6 places)], searching as every principal."""
    return {
        (mode, q): [(h.chunk_id, round(h.score, 6)) for h in lib.search(q, mode=mode, principals=ALL, limit=15).hits]
        for mode in modes
        for q in QUERIES
    }


def paths_of(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.path for h in result.hits]


# -- first run, no-op run ----------------------------------------------------------------------


def test_first_index_adds_everything_and_second_run_does_nothing(vault: Path) -> None:
    md_files = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md") if ".obsidian" not in p.parts)
    with Library.open(vault, embedding={"provider": "counting"}) as lib:
        first = lib.index()
        assert sorted(first.added) == md_files
        assert first.changed == first.deleted == first.moved == []
        assert first.chunks_written == lib.store.counts().chunks > 0
        assert first.vectors_embedded == len(CountingEmbedder.seen) == first.chunks_written
        assert first.vectors_pending == 0
        ids_before = chunk_ids_by_path(lib.store)

        CountingEmbedder.seen = []
        second = lib.index()
        assert second.added == second.changed == second.deleted == second.moved == []
        assert second.unchanged == len(md_files)
        assert second.chunks_written == 0
        assert second.vectors_embedded == 0
        assert second.vectors_from_cache == 0
        assert CountingEmbedder.seen == []
        assert chunk_ids_by_path(lib.store) == ids_before


# -- edit ------------------------------------------------------------------------------------


def test_editing_one_paragraph_rechunks_one_note_and_reembeds_only_changed_text(vault: Path) -> None:
    target = "guide/indexing/chunking.md"
    with Library.open(vault, embedding={"provider": "counting"}) as lib:
        lib.index()
        store = lib.store
        before_ids = chunk_ids_by_path(store)
        before_texts = embed_texts(store)
        indexed_at = {p: store.note_by_id(nid).indexed_at for nid, p, _ in store.iter_notes()}
        assert len(before_ids[target]) >= 3  # the edit must leave some chunks of the note untouched

        path = vault / target
        text = path.read_text(encoding="utf-8")
        old = "Overlap means a fact stated at a chunk boundary can still be found with its surrounding sentences."
        assert old in text
        path.write_text(text.replace(old, "Overlap keeps a boundary fact next to its neighbours."), encoding="utf-8")

        CountingEmbedder.seen = []
        report = lib.index()
        assert report.changed == [target]
        assert report.added == report.deleted == report.moved == []
        assert report.unchanged == len(before_ids) - 1

        after_ids = chunk_ids_by_path(store)
        note_id = store.note_states()[target].note_id
        rows = store.chunks_of_note(note_id)
        assert report.chunks_written == len(rows)  # only the edited note was re-chunked
        texts = [embed_text_for(r.title, r.heading_path, r.text) for r in rows]
        new_texts = [t for t in texts if t not in before_texts]
        assert 0 < len(new_texts) < len(rows)
        assert sorted(CountingEmbedder.seen) == sorted(new_texts)
        assert report.vectors_embedded == len(new_texts)
        assert report.vectors_from_cache == len(rows) - len(new_texts)
        assert report.vectors_pending == 0

        # the edited note keeps the ids of its unchanged chunks; every other note is untouched
        assert len(set(after_ids[target]) & set(before_ids[target])) == len(rows) - len(new_texts)
        for p, ids in before_ids.items():
            if p != target:
                assert after_ids[p] == ids, p
        indexed_after = {p: store.note_by_id(nid).indexed_at for nid, p, _ in store.iter_notes()}
        assert {p for p in indexed_at if indexed_after[p] != indexed_at[p]} == {target}
        hits = lib.search("boundary fact next to its neighbours", mode="bm25", limit=1).hits
        assert hits and hits[0].path == target and "neighbours" in hits[0].text


# -- delete ----------------------------------------------------------------------------------


# -- move ------------------------------------------------------------------------------------


def test_moved_note_keeps_note_id_and_chunk_ids(vault: Path) -> None:
    old, new = "guide/search/filters-and-acl.md", "guide/access/filters.md"
    with Library.open(vault, embedding={"provider": "counting"}) as lib:
        lib.index()
        store = lib.store
        note_id = store.note_states()[old].note_id
        ids = chunk_ids_by_path(store)[old]
        count = store.counts()

        (vault / "guide" / "access").mkdir()
        (vault / old).rename(vault / new)
        CountingEmbedder.seen = []
        report = lib.index()

        assert report.moved == [(old, new)]
        assert report.added == report.changed == report.deleted == []
        states = store.note_states()
        assert old not in states
        assert states[new].note_id == note_id
        assert chunk_ids_by_path(store)[new] == ids
        assert store.counts() == count
        assert CountingEmbedder.seen == []  # same text: every vector came from the cache
        assert report.vectors_from_cache == len(ids)
        hits = lib.search("An empty ACL is not public", mode="hybrid", limit=3).hits
        assert hits[0].path == new and hits[0].note_id == note_id


def test_new_note_at_a_moved_notes_old_path_does_not_evict_it(vault: Path) -> None:
    old, new = "guide/search/filters-and-acl.md", "guide/filters.md"
    with Library.open(vault, embedding={"provider": "hash"}) as lib:
        lib.index()
        note_id = lib.store.note_states()[old].note_id
        (vault / old).rename(vault / new)
        assert lib.index().moved == [(old, new)]

        (vault / old).write_text("# Replacement\n\nA different note about walrus colonies.\n", encoding="utf-8")
        report = lib.index()
        assert report.added == [old] and report.deleted == [] and report.moved == []
        states = lib.store.note_states()
        assert set(states) >= {old, new}
        assert states[new].note_id == note_id  # the moved note keeps its id and its rows
        assert states[old].note_id != note_id
        assert paths_of(lib.search("An empty ACL is not public", mode="bm25", limit=1)) == [new]
        assert paths_of(lib.search("walrus colonies", mode="bm25", limit=1)) == [old]
        assert lib.index().added == []  # nothing left to repair on the next run


# -- interrupted run -------------------------------------------------------------------------


def test_interrupted_embedding_leaves_a_consistent_index_that_resumes(vault: Path, tmp_path: Path) -> None:
    FlakyEmbedder.fail_after = 1
    lib = Library.open(vault, embedding={"provider": "flaky", "batch_size": 4})
    with pytest.raises(ProviderError, match="simulated failure"):
        lib.index()

    store = lib.store
    assert store.integrity_check() == "ok"
    pending, total = store.vectors.count_pending(lib.space)
    assert total == store.counts().chunks > 0
    assert pending == total - 4  # exactly one batch of 4 made it in
    assert vector_count(store, lib.space) == 4
    # every note's text is searchable with BM25 already (scratch.md has acl: [] and is hidden from all)
    for note_id, path, title in store.iter_notes():
        hits = lib.search(title, mode="bm25", principals=ALL, filters=SearchFilters(note_ids=(note_id,))).hits
        assert bool(hits) == (path != "internal/scratch.md"), path

    FlakyEmbedder.fail_after = 10**9
    report = lib.index()
    assert report.added == report.changed == report.deleted == []
    assert report.vectors_embedded == total - 4  # the batch that made it is kept, not recomputed
    assert report.vectors_from_cache == 0
    assert report.vectors_pending == 0
    assert store.vectors.count_pending(lib.space) == (0, total)
    resumed = snapshot(lib)
    resumed_ids = all_chunk_ids(store)
    lib.close()

    with Library.open(vault, embedding={"provider": "flaky"}, index_dir=tmp_path / "fresh") as fresh:
        fresh.index()
        assert all_chunk_ids(fresh.store) == resumed_ids
        assert snapshot(fresh) == resumed


# -- rebuild ---------------------------------------------------------------------------------


def test_rebuild_from_scratch_gives_identical_ids_and_results(vault: Path, tmp_path: Path) -> None:
    with (
        Library.open(vault, embedding={"provider": "hash"}, index_dir=tmp_path / "A") as a,
        Library.open(vault, embedding={"provider": "hash"}, index_dir=tmp_path / "B") as b,
    ):
        a.index()
        b.index()
        assert a.db_path != b.db_path and a.db_path.is_file() and b.db_path.is_file()
        assert all_chunk_ids(a.store) == all_chunk_ids(b.store)
        assert len(all_chunk_ids(a.store)) == a.store.counts().chunks
        snap_a = snapshot(a)
        assert snap_a == snapshot(b)
        assert all(snap_a[key] for key in snap_a)  # every query found something

        # delete the db and re-index: same again
        a.close()
        for p in (tmp_path / "A").iterdir():
            p.unlink()
        a.index()
        assert all_chunk_ids(a.store) == all_chunk_ids(b.store)
        assert snapshot(a) == snap_a


def test_incremental_updates_end_where_a_fresh_index_starts(vault: Path, tmp_path: Path) -> None:
    with Library.open(vault, embedding={"provider": "hash"}, index_dir=tmp_path / "inc") as inc:
        inc.index()
        (vault / "reference" / "cli.md").unlink()
        chunking = vault / "guide" / "indexing" / "chunking.md"
        chunking.write_text(chunking.read_text(encoding="utf-8") + "\nA closing remark about windows.\n", "utf-8")
        (vault / "getting-started" / "installation.md").rename(vault / "getting-started" / "setup.md")
        (vault / "new-note.md").write_text("# New note\n\nFresh text about chunk windows.\n", encoding="utf-8")
        report = inc.index()
        assert report.deleted == ["reference/cli.md"]
        assert report.changed == ["guide/indexing/chunking.md"]
        assert report.moved == [("getting-started/installation.md", "getting-started/setup.md")]
        assert report.added == ["new-note.md"]

        with Library.open(vault, embedding={"provider": "hash"}, index_dir=tmp_path / "fresh") as fresh:
            fresh.index()
            # note ids differ for the moved note only (a fresh index names it by its new path)
            assert all_chunk_ids(inc.store) - all_chunk_ids(fresh.store) == set(
                chunk_ids_by_path(inc.store)["getting-started/setup.md"]
            )
            strip = {
                key: [s for _, s in hits] for key, hits in snapshot(inc).items()
            }  # scores: FTS statistics and vectors
            assert strip == {key: [s for _, s in hits] for key, hits in snapshot(fresh).items()}
            assert inc.store.counts().chunks == fresh.store.counts().chunks


# -- embedding spaces ------------------------------------------------------------------------


def test_two_providers_get_separate_spaces_that_never_mix(vault: Path, tmp_path: Path) -> None:
    with Library.open(vault, embedding={"provider": "hash"}) as h:
        h.index()
        hash_space = h.space
    with Library.open(vault, embedding={"provider": "counting"}) as c:
        report = c.index()
        counting_space = c.space
        assert report.unchanged > 0 and report.chunks_written == 0  # text is shared
        assert report.vectors_embedded == c.store.counts().chunks  # no cross-space cache hits

        spaces = {s.name: s for s in c.store.vectors.spaces()}
        assert set(spaces) == {hash_space.name, counting_space.name}
        assert hash_space.vec_table != counting_space.vec_table
        chunks = c.store.counts().chunks
        assert spaces[hash_space.name].vectors == spaces[counting_space.name].vectors == chunks
        assert (spaces[hash_space.name].dim, spaces[counting_space.name].dim) == (256, 64)
        counting_dense = {q: [x.chunk_id for x in c.search(q, mode="dense").hits] for q in QUERIES}

    with (
        Library.open(vault, embedding={"provider": "hash"}) as both,
        Library.open(vault, embedding={"provider": "hash"}, index_dir=tmp_path / "only") as only,
    ):
        only.index()
        assert [s.name for s in only.store.vectors.spaces()] == [hash_space.name]
        for q in QUERIES:
            mixed = [(x.chunk_id, round(x.score, 6)) for x in both.search(q, mode="dense").hits]
            alone = [(x.chunk_id, round(x.score, 6)) for x in only.search(q, mode="dense").hits]
            assert mixed == alone, q
            assert all(-1.0001 <= s <= 1.0001 for _, s in mixed)
        # the two spaces really rank differently, so a mix-up would show
        assert any(counting_dense[q] != [x.chunk_id for x in both.search(q, mode="dense").hits] for q in QUERIES)


# -- text-only and partial vectors -----------------------------------------------------------


def test_text_only_index_searches_with_bm25_and_warns_about_missing_vectors(vault: Path) -> None:
    newest = max(p.stat().st_mtime for p in vault.rglob("*.md")) + 60
    os.utime(vault / "getting-started" / "installation.md", (newest, newest))  # embedded first: changed last
    with Library.open(vault, embedding={"provider": "flaky", "batch_size": 4}) as lib:
        report = lib.index(embed=False)
        assert report.chunks_written > 0 and report.vectors_embedded == 0
        assert FlakyEmbedder.batches == 0
        assert lib.store.vectors.spaces() == []

        bm25 = lib.search("how large is a chunk", mode="bm25")
        assert bm25.hits and bm25.warnings == ()
        hybrid = lib.search("how large is a chunk", mode="hybrid")
        assert hybrid.hits
        assert [h.chunk_id for h in hybrid.hits] == [h.chunk_id for h in bm25.hits]
        assert any("dense route skipped" in w for w in hybrid.warnings), hybrid.warnings
        dense = lib.search("how large is a chunk", mode="dense")
        assert dense.hits == ()
        assert any("dense route skipped" in w for w in dense.warnings), dense.warnings

        # a partial embed: one batch of 4, then the provider fails
        FlakyEmbedder.fail_after = 1
        with pytest.raises(ProviderError):
            lib.index()
        assert vector_count(lib.store, lib.space) == 4
        visible = len(lib.store.visible_chunk_ids(Visibility(("public",))))
        embedded_paths = paths_with_vectors(lib.store, lib.space)
        assert embedded_paths == {"getting-started/installation.md"}  # a public note: 4 visible vectors
        partial = lib.search("how large is a chunk", mode="hybrid")
        assert partial.hits
        assert any(f"covers 4/{visible} visible chunks" in w for w in partial.warnings), partial.warnings
        assert any("dense" in w for w in partial.trace.warnings)


# -- chunker change --------------------------------------------------------------------------


def test_chunker_change_rechunks_every_note_into_a_new_space(vault: Path) -> None:
    with Library.open(vault, embedding={"provider": "hash"}) as lib:
        lib.index()
        old_space = lib.space
        old_ids = all_chunk_ids(lib.store)
        notes = sorted(lib.store.note_states())

    with Library.open(vault, embedding={"provider": "hash"}, index={"chunker": "fixed"}) as fixed:
        new_space = fixed.space
        assert new_space.name != old_space.name and new_space.chunker.startswith("fixed")
        report = fixed.index()
        assert sorted(report.changed) == notes
        assert report.unchanged == 0 and report.added == report.deleted == []
        store = fixed.store
        assert {st.chunker for st in store.note_states().values()} == {new_space.chunker}
        assert store.get_meta("chunker") == new_space.chunker
        assert not all_chunk_ids(store) & old_ids
        spaces = {s.name: s for s in store.vectors.spaces()}
        assert set(spaces) == {old_space.name, new_space.name}
        assert spaces[new_space.name].vectors == store.counts().chunks
        assert spaces[old_space.name].vectors == 0  # old chunks (and their vectors) are gone
        # same text model: vectors of texts that did not change come from the cache
        assert report.vectors_from_cache + report.vectors_embedded == store.counts().chunks
        hits = fixed.search("how large is a chunk", mode="dense").hits
        assert hits and all(h.chunk_id in all_chunk_ids(store) for h in hits)

        again = fixed.index()
        assert again.changed == [] and again.chunks_written == 0


def test_moved_note_keeps_its_id_after_a_later_edit(hash_library: Library) -> None:
    vault = hash_library.vault
    src, dst = vault / "guide/search/search-modes.md", vault / "guide/search/modes-moved.md"
    before = {p: nid for nid, p, _ in hash_library.store.iter_notes()}["guide/search/search-modes.md"]
    src.rename(dst)
    (vault / "guide/search/search-modes.metadata.yaml").rename(vault / "guide/search/modes-moved.metadata.yaml")
    hash_library.index()
    with dst.open("a", encoding="utf-8") as fh:
        fh.write("\nOne more sentence after the move.\n")
    report = hash_library.index()
    assert report.changed == ["guide/search/modes-moved.md"]
    after = {p: nid for nid, p, _ in hash_library.store.iter_notes()}
    assert after["guide/search/modes-moved.md"] == before  # not note_id_for the new path


class NiceProbe(HashEmbedder):
    """The hash embedder, noting the thread priority of every passage batch it embeds."""

    provider = "nice-probe"
    priorities: ClassVar[list[int]] = []

    def embed_batch(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        if kind == "passage":
            NiceProbe.priorities.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return super().embed_batch(texts, kind)


register_embedder("nice-probe")(lambda settings: NiceProbe(64))


def test_parallel_bulk_embedding_gives_the_same_vectors_at_a_lower_priority(vault: Path, tmp_path: Path) -> None:
    """``[embedding] workers``: batches embedded at once, on threads at ``bulk_nice``; every vector
    is what one worker writes, and the calling thread (a server's searches) keeps its priority."""
    spaces = {}
    for workers in (1, 3):
        NiceProbe.priorities = []
        embedding = {"provider": "nice-probe", "batch_size": 4, "workers": workers, "bulk_nice": 7}
        with Library.open(vault, embedding=embedding, index_dir=tmp_path / f"w{workers}") as lib:
            report = lib.index()
            assert report.vectors_pending == 0 and report.vectors_embedded > 10
            ids = sorted(all_chunk_ids(lib.store))
            spaces[workers] = lib.store.vectors.vectors_for(lib.space, ids)
        own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert set(NiceProbe.priorities) == ({own} if workers == 1 else {max(own, 7)})
    assert spaces[1].keys() == spaces[3].keys()
    assert all(np.array_equal(spaces[1][c], spaces[3][c]) for c in spaces[1])


def test_auto_workers_take_the_idle_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert 1 <= bulk_workers("auto") <= cores
    assert bulk_workers(2) == 2
