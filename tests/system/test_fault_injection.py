"""Seed 001's fault-injection table: each known RAG failure, injected, next to the real code.

Each test writes the faulty variant itself, inside the test (a post-filtered KNN,
unnormalised vectors pushed through the store's public methods, the fixed-window
chunker, dense-only retrieval, a disabled gate, a provider that falls back), shows
that it produces the failure signal, and shows that sunlib's real code does not.
Nothing of sunlib is patched: everything runs on real SQLite + sqlite-vec files,
the real pipeline and, where quality matters, the real bundled e5 model
(the session-scoped ``e5_library``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

# the chunker tests' own definition of "ends at a sentence or block end"
from sunlib import Library
from sunlib.config import EmbeddingSettings, load_settings
from sunlib.contracts import to_jsonable
from sunlib.errors import MissingCredentials
from sunlib.evaluate import QACase, load_qa
from sunlib.ingest import FixedChunker, StructureChunker, make_chunker
from sunlib.providers import Embedder, create_embedder, register_embedder
from sunlib.providers.embedders.hashing import HashEmbedder
from sunlib.store import Space, VectorItem, Visibility
from sunlib.trace.steps import Step
from tests.support.chunk_checks import all_notes, cp_offset, sentence_ends
from tests.support.clients import sunlib
from tests.support.paths import ROOT, index_of
from tests.support.store_helpers import all_chunk_ids, chunk_ids_by_path

QA_DIR = ROOT / "src" / "sunlib" / "qa"
TEST_QA = QA_DIR / "sample_vault.jsonl"
KEY_VARS = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _has_phrase(text: str, phrases: Sequence[str]) -> bool:
    return any(_norm(p) in _norm(text) for p in phrases)


def _selection(result) -> dict:  # type: ignore[no-untyped-def]
    return next(s.details for s in result.trace.steps if s.name == Step.SELECT)


# -- 1. ACL applied after the KNN ------------------------------------------------------------------

QUERY = "harbour lighthouse keeper logs the tide and the storm every evening at nine"
CODEWORD = "nightjar"  # only in the restricted note, never in the question


@pytest.fixture
def acl_vault(tmp_path: Path) -> Path:
    root = tmp_path / "acl"
    root.mkdir()
    (root / "public.md").write_text(
        "# Harbour\n\nThe harbour lighthouse keeper logs the weather every morning.\n", encoding="utf-8"
    )
    (root / "restricted.md").write_text(
        f"---\nacl: [ops]\n---\n# Harbour\n\n{QUERY.capitalize()}. The ops codeword is {CODEWORD}.\n",
        encoding="utf-8",
    )
    return root


def test_acl_after_knn_starves_the_caller_acl_inside_knn_does_not(acl_vault: Path) -> None:
    gate_off = {
        "gate_threshold": 0.0,
        "reader_threshold": 0.0,
        "gate_threshold_bm25": 0.0,
        "answerable_threshold": 0.0,
    }  # let the public question be answered
    with Library.open(acl_vault, embedding={"provider": "hash"}, answer=gate_off) as lib:
        lib.index()
        store, space = lib.store, lib.space
        # this backend's row ids, for the injected SQL only
        rowid = dict(store.conn.execute("SELECT n.path, c.id FROM chunks c JOIN notes n ON n.id = c.note_rowid"))
        assert set(rowid) == {"public.md", "restricted.md"}
        chunk = {path: ids[0] for path, ids in chunk_ids_by_path(store).items()}
        chunk_at = {rowid[path]: cid for path, cid in chunk.items()}
        qvec = lib.embedder.embed_query(QUERY)

        # Injected: top-k=1 from an unfiltered KNN over the vec table, then the ACL in Python.
        unfiltered = store.conn.execute(
            f"SELECT rowid, distance FROM {space.vec_table} WHERE embedding MATCH ? AND k = ? ORDER BY distance",
            (np.ascontiguousarray(qvec, dtype=np.float32).tobytes(), 1),
        ).fetchall()
        assert [chunk_at[r] for r, _ in unfiltered] == [chunk["restricted.md"]]  # without the filter: the ops chunk
        visible = set(store.visible_chunk_ids(Visibility(("public",))))
        assert visible == {chunk["public.md"]}
        post_filtered = [r for r, _ in unfiltered if chunk_at[r] in visible]
        assert post_filtered == []  # candidate starvation: the public principal gets nothing

        # Real: the visibility constraint sits inside the KNN, so k=1 still finds the public chunk.
        assert [c for c, _ in store.vectors.knn(space, qvec, Visibility(("public",)), k=1)] == [chunk["public.md"]]
        for mode in ("dense", "hybrid"):
            hits = lib.search(QUERY, mode=mode, principals=["public"], limit=1).hits
            assert [h.path for h in hits] == ["public.md"], mode
            assert lib.search(QUERY, mode=mode, principals=["public", "ops"], limit=1).hits[0].path == (
                "restricted.md"
            ), mode

        # The whole pipeline: asked as ops its evidence holds the restricted note (so it would leak if it could) ...
        ops = lib.ask(QUERY, principals=["public", "ops"], save=False)
        assert not ops.frame.refused and "restricted.md" in {e.path for e in ops.frame.evidence}
        # ... asked as public it answers from the public note only, and nothing in the frame, the trace
        # or the saved run names the ops note, its chunk or its words.
        public = lib.ask(QUERY, principals=["public"])
        frame = public.frame
        assert not frame.refused, frame.refusal_reason
        assert {c.path for c in frame.citations} == {"public.md"}
        assert {e.path for e in frame.evidence} == {"public.md"}
        restricted = store.chunks_of_note(store.note_states()["restricted.md"].note_id)
        saved = store.get_run(public.run_id, ["public"])
        assert saved is not None
        for blob in (
            json.dumps(to_jsonable(frame)),
            json.dumps(to_jsonable(public.trace)),
            json.dumps(to_jsonable(saved)),
        ):
            assert "restricted.md" not in blob
            assert CODEWORD not in blob.lower()
            assert all(c.chunk_id not in blob and c.note_id not in blob for c in restricted)


# -- 2. Unnormalised vectors -----------------------------------------------------------------------


def test_unnormalised_vectors_break_the_cosine_unit_vectors_do_not(hash_library: Library) -> None:
    lib = hash_library
    store = lib.store
    fault = Space("raw", "unnormalised", lib.embedder.dim, "fault-injection")
    store.vectors.ensure_space(fault)
    todo = store.vectors.pending(fault)
    texts = [p.embed_text for p in todo]
    query = "how do I filter search results by tag and folder"

    # Injected: the embedder's raw (pre-normalisation) vectors stored and queried in their own space.
    raw = lib.embedder.embed_batch(texts, "passage")
    raw_q = lib.embedder.embed_batch([query], "query")[0]
    assert np.abs(np.linalg.norm(raw, axis=1) - 1.0).max() > 1.0  # really not unit length
    items = [VectorItem(p.chunk_id, p.stamp, f"raw-{p.chunk_id}", v) for p, v in zip(todo, raw, strict=True)]
    assert store.vectors.upsert(fault, items, cache=False) == len(todo)
    bad = [c for _, c in store.vectors.knn(fault, raw_q, Visibility(("public",)), k=len(todo))]
    assert bad and any(c < -1.0 or c > 1.0 for c in bad), bad[:5]  # 1 - d²/2 is no cosine any more

    # Real: the public methods return unit rows, the store holds unit rows, cosines stay in [-1, 1].
    unit = lib.embedder.embed(texts)
    assert np.allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    q = lib.embedder.embed_query(query)
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    by_id = store.vectors.vectors_for(lib.space, [p.chunk_id for p in todo])
    stored = np.array(list(by_id.values()))
    assert len(by_id) == len(todo) and np.allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-5)
    good = store.vectors.knn(lib.space, q, Visibility(("public",)), k=len(todo))
    assert good
    for r, cos in good:
        assert -1.0 - 1e-6 <= cos <= 1.0 + 1e-6
        assert cos == pytest.approx(float(by_id[r] @ q), abs=1e-4)  # the recovered cosine is the dot product


@pytest.mark.slow
def test_e5_vectors_are_unit_length_and_cosines_stay_in_range(e5_library: Library) -> None:
    emb = e5_library.embedder
    texts = ["The rebuild window is Sunday 02:00 UTC.", "中文检索使用二元组。", "x"]
    assert np.allclose(np.linalg.norm(emb.embed(texts), axis=1), 1.0, atol=1e-5)
    by_id = e5_library.store.vectors.vectors_for(e5_library.space, sorted(all_chunk_ids(e5_library.store)))
    stored = np.array(list(by_id.values()))
    assert len(by_id) > 100 and np.allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-5)
    for query in ("how do I filter by tag", "怎样按标签过滤", "Ctrl-C"):
        q = emb.embed_query(query)
        assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
        cosines = [c for _, c in e5_library.store.vectors.knn(e5_library.space, q, Visibility(("public",)), k=50)]
        assert len(cosines) == 50 and all(-1.0 <= c <= 1.0 for c in cosines)


# -- 3. Mid-sentence chunks ------------------------------------------------------------------------


def test_fixed_windows_end_mid_sentence_structure_chunks_do_not(vault: Path) -> None:
    fixed = make_chunker(load_settings(index={"chunker": "fixed"}).index)
    structure = make_chunker(load_settings().index)
    assert isinstance(fixed, FixedChunker) and isinstance(structure, StructureChunker)
    notes = all_notes(vault)
    fixed_mid: list[tuple[str, str]] = []
    structure_mid: list[tuple[str, str]] = []
    total = 0
    for note, parsed in notes:
        ends = sentence_ends(note, parsed)
        for c in fixed.chunk(note, parsed):
            if cp_offset(note.text, c.end) not in ends:
                fixed_mid.append((note.path, c.text[-40:]))
        for c in structure.chunk(note, parsed):
            total += 1
            if cp_offset(note.text, c.end) not in ends:
                structure_mid.append((note.path, c.text[-40:]))
    assert fixed_mid, "the fixed-window baseline should cut somewhere mid-sentence"
    assert any(tail[-1].isalnum() for _, tail in fixed_mid)  # cut inside a word or right after one
    assert total > len(notes)
    assert structure_mid == []

    # The same through the settings an index uses: `index.chunker = "fixed"` stores mid-sentence chunks.
    by_path = {n.path: (n, p) for n, p in notes}
    with Library.open(vault, embedding={"provider": "hash"}, index={"chunker": "fixed"}) as lib:
        lib.index(embed=False)
        stored = [(p, c.end16) for nid, p, _ in lib.store.iter_notes() for c in lib.store.chunks_of_note(nid)]
    assert len(stored) > len(notes)
    mid = [p for p, end16 in stored if cp_offset(by_path[p][0].text, end16) not in sentence_ends(*by_path[p])]
    assert mid


# -- 4. Vector-only recall on exact identifiers ----------------------------------------------------

IDENTIFIER = re.compile(r"--[a-z][a-z-]*|\b[A-Za-z0-9]+_[A-Za-z0-9_]+\b")


def _gold_passage_in_top5(lib: Library, case: QACase, mode: str) -> tuple[bool, bool]:
    """(a gold file is among the top 5 hits, a gold file's chunk holding a gold phrase is among them)."""
    hits = lib.search(case.question, mode=mode, limit=5).hits
    gold = [h for h in hits if h.path in case.gold_files]
    return bool(gold), any(_has_phrase(h.text, case.gold_phrases) for h in gold)


@pytest.mark.slow
def test_dense_only_misses_an_identifier_that_hybrid_finds(e5_library: Library) -> None:
    cases = [c for c in load_qa(TEST_QA) if c.type == "code_identifier"]
    assert len(cases) >= 5 and all(c.answerable and c.gold_phrases for c in cases)
    found = {mode: {c.id: _gold_passage_in_top5(e5_library, c, mode) for c in cases} for mode in ("dense", "hybrid")}

    def recall(mode: str, which: int) -> float:
        return sum(v[which] for v in found[mode].values()) / len(cases)

    # On this small vault the dense route nearly always has *some* chunk of a gold file in its top 5,
    # so the failure shows at the passage that holds the answer: a gold file's chunk with a gold phrase.
    misses = [c for c in cases if not found["dense"][c.id][1] and found["hybrid"][c.id][1]]
    assert misses, found
    assert any(IDENTIFIER.search(c.question) for c in misses), [c.question for c in misses]
    assert recall("hybrid", 0) >= recall("dense", 0), found  # file-level recall@5
    assert recall("hybrid", 1) >= recall("dense", 1), found  # gold-passage recall@5
    assert recall("hybrid", 1) > recall("dense", 1), found


# -- 5. No refusal threshold -----------------------------------------------------------------------


@pytest.mark.slow
def test_without_a_gate_unanswerable_questions_get_answers(e5_library: Library) -> None:
    unanswerable = [c for c in load_qa(TEST_QA) if not c.answerable]
    assert len(unanswerable) >= 8

    # Injected: the same vault and index, the gate and its two checks disabled through settings.
    with Library.open(
        e5_library.vault,
        embedding={"provider": "e5"},
        index_dir=e5_library.index_dir,
        answer={
            "gate_threshold": 0.0,
            "reader_threshold": 0.0,
            "gate_threshold_bm25": 0.0,
            "answerable_threshold": 0.0,
            "check_names": False,
            "check_answer_type": False,
        },
    ) as open_gate:
        answered = []
        for case in unanswerable:
            result = open_gate.ask(case.question, save=False)
            sel = _selection(result)
            assert sel["threshold"] == 0.0 and sel["gate_source"] == "settings", sel  # no stored gate overrides it
            if not result.frame.refused:
                answered.append(case.id)
    refusal_rate = 1 - len(answered) / len(unanswerable)
    assert refusal_rate <= 0.2, "with no threshold nearly every unanswerable question gets an answer"

    # Real: the default (calibrated) gate and its checks refuse the unanswerable questions of the test set, all
    # but one since the cross-language routes (one Chinese question's translated evidence names what it
    # asks about and scores just above its gate; docs/evaluation.md, "Cross-language retrieval").
    not_refused = []
    for case in unanswerable:
        result = e5_library.ask(case.question, save=False)
        if not result.frame.refused:
            not_refused.append((case.id, _selection(result)["gate_score"]))
        else:
            assert result.frame.refusal_reason and not result.frame.citations
    assert len(not_refused) <= 1, not_refused


# -- 6. A provider that silently degrades ----------------------------------------------------------


def _degrading_gemini(settings: EmbeddingSettings) -> Embedder:
    """The fault: a remote provider that falls back to a local embedder when its key is missing."""
    try:
        return create_embedder(settings.model_copy(update={"provider": "gemini"}))
    except MissingCredentials:
        return HashEmbedder()


register_embedder("degrading-gemini")(_degrading_gemini)


def _sunlib(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI with exactly ENV as its environment."""
    return sunlib(*args, env={**dict.fromkeys(set(os.environ) - set(env)), **env})


def test_missing_key_fails_loudly_instead_of_falling_back(vault: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)

    # Injected: the degrading provider "works", but the vectors it writes are hash vectors.
    with Library.open(vault, embedding={"provider": "degrading-gemini"}) as lib:
        report = lib.index()
        assert report.vectors_embedded > 0  # no error anywhere ...
        assert lib.space.provider == "hash"  # ... yet the space is not the model that was asked for

    # Real: no fallback, in the registry or through the library.
    for provider, var in (("gemini", "GEMINI_API_KEY"), ("openai", "OPENAI_API_KEY")):
        with pytest.raises(MissingCredentials, match=var):
            create_embedder(EmbeddingSettings(provider=provider))
        with Library.open(vault, embedding={"provider": provider}) as lib, pytest.raises(MissingCredentials):
            lib.index()


def test_index_with_a_keyless_provider_exits_and_keeps_the_index(vault: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARS}
    first = _sunlib("index", str(vault), "--provider", "hash", "--json", env=env)
    assert first.returncode == 0, first.stderr
    db = index_of(vault) / "sunlib.db"
    with Library.open(vault, embedding={"provider": "hash"}) as lib:
        spaces_before = [dataclasses.asdict(s) for s in lib.store.vectors.spaces()]

    for provider, var in (("gemini", "GEMINI_API_KEY"), ("openai", "OPENAI_API_KEY")):
        r = _sunlib("index", str(vault), "--provider", provider, env=env)
        assert r.returncode != 0, (provider, r.stdout)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("error:") and var in lines[0] and "Traceback" not in r.stderr

    # the existing index is untouched and answers as before
    assert db.is_file()
    hash_env = {**env, "SUNLIB_EMBEDDING__PROVIDER": "hash"}
    status = json.loads(_sunlib("status", "--vault", str(vault), "--json", env=hash_env).stdout)
    assert status["counts"]["notes"] == 21 and status["vectors_pending"] == 0
    assert status["spaces"] == spaces_before and [s["provider"] for s in status["spaces"]] == ["hash"]
    search = _sunlib("search", "rebuild window", "--vault", str(vault), "--mode", "hybrid", "--json", env=hash_env)
    assert search.returncode == 0, search.stderr
    found = json.loads(search.stdout)
    assert found["results"] and found["warnings"] == []  # both routes ran: the hash vectors are all there
