"""The postings lexical engine (store/postings.py): FTS5's BM25 answers from numpy postings.

A random bilingual vault (English and Chinese words, headings, tags, folders, ACLs of three
principals) is indexed by the real indexer; every query is asked of ``SqliteLexical`` (FTS5)
and of ``PostingsLexical`` on the same file, for several principals, filters and a script
narrowing: the chunk ids, their order and their scores (to 1e-9) must be the same, before and
after incremental updates (notes added, changed, deleted; a rowid reused), and after the
postings are opened again from their files. Damaged or foreign files are rebuilt, never trusted.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from sunlib.config import ServerSettings, load_settings
from sunlib.contracts import SearchFilters
from sunlib.server.policy import server_lexical_engine
from sunlib.store import PostingsLexical, SqliteStore, Visibility
from sunlib.store.postings import POSTINGS
from sunlib.sync.indexing import sync_text
from sunlib.text import fts_query
from tests.support.clients import sunlib

EN = "harbour keeper tide river bridge index vector journal crash garden tomato kernel thread lock query".split()  # noqa: SIM905
ZH = "向量 索引 数据库 崩溃 恢复 日志 查询 排序 中文 笔记 花园 番茄 河流 桥梁".split()  # noqa: SIM905
QUERIES = [
    "harbour tide",
    "river bridge keeper keeper",
    "index vector journal crash",
    "向量 索引",
    "数据库 崩溃 harbour",
    "花",
    "garden 番茄 tomato kernel thread lock",
    "absentword",
]
VISIBILITIES = [
    Visibility(("public", "team", "ops")),  # every chunk until a note of nobody's arrives: FTS5's own bm25()
    Visibility(("public",)),
    Visibility(("team", "public")),
    Visibility(("ops",)),
    Visibility(("public", "team", "ops"), SearchFilters(folders=("work",))),
    Visibility(("public", "team"), SearchFilters(tags=("db",))),
    Visibility(("public", "team", "ops")).in_script("cjk"),
    Visibility(()),
]


def note_text(rng: random.Random, serial: int, acl: list[str] | None) -> str:
    zh = rng.random() < 0.4
    words = ZH if zh else EN
    sep = "" if zh else " "

    def sentence() -> str:
        return sep.join(rng.choice(words) for _ in range(rng.randint(1, 12))) + ("。" if zh else ".")

    front = [f"tags: [{', '.join(rng.sample(['db', 'garden', 'ops'], rng.randint(0, 2)))}]"]
    if acl is not None:
        front.append(f"acl: [{', '.join(acl)}]")
    parts = ["---\n" + "\n".join(front) + "\n---\n", f"# Note {serial} {rng.choice(words)}\n"]
    for s in range(rng.randint(0, 3)):
        parts.append(f"## {rng.choice(words)} {s}\n")
        parts.extend(" ".join(sentence() for _ in range(rng.randint(1, 4))) + "\n" for _ in range(rng.randint(1, 3)))
    return "\n".join(parts)


def random_acl(rng: random.Random) -> list[str] | None:
    return rng.choice([None, None, ["team"], ["ops"], ["team", "ops"], ["public", "team"]])


def write_note(vault: Path, rng: random.Random, serial: int, acl: list[str] | None = None) -> None:
    path = vault / rng.choice(["", "work", "home", "work/db"]) / f"n{serial:03d}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(note_text(rng, serial, acl if acl is not None else random_acl(rng)), encoding="utf-8")


def sync(store: SqliteStore, vault: Path) -> None:
    sync_text(store, vault, load_settings(vault).index)


def same_answers(fts5: SqliteStore, postings: SqliteStore) -> int:
    """Assert both engines answer every query and visibility alike; returns how many hits were compared."""
    compared = 0
    for query in QUERIES:
        match = fts_query(query)
        assert match is not None
        terms = [t.strip('"') for t in match.split(" OR ")]
        for visibility, limit in itertools.product(VISIBILITIES, (12, 3, 1)):
            want = fts5.lexical.bm25(match, visibility, limit)
            got = postings.lexical.bm25(match, visibility, limit)
            assert [c for c, _ in got] == [c for c, _ in want], (query, visibility, limit)
            assert all(abs(a - b) < 1e-9 for (_, a), (_, b) in zip(got, want, strict=True)), (query, visibility)
            compared += len(want)
        for visibility in VISIBILITIES:
            assert postings.lexical.doc_freqs(terms, visibility) == fts5.lexical.doc_freqs(terms, visibility)
    return compared


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SqliteStore, SqliteStore, Path]:
    """(an FTS5 store, a postings store) on one index of a random 50-note vault, and the vault."""
    rng = random.Random(7)
    vault = tmp_path / "vault"
    for i in range(50):
        write_note(vault, rng, i)
    db = tmp_path / "index" / "sunlib.db"
    db.parent.mkdir()
    fts5, postings = SqliteStore(db), SqliteStore(db, lexical_engine="postings")
    sync(fts5, vault)
    yield fts5, postings, vault
    POSTINGS.forget(postings.db.identity())
    fts5.close()
    postings.close()


def engine(store: SqliteStore) -> PostingsLexical:
    assert isinstance(store.lexical, PostingsLexical)
    return store.lexical


def test_the_postings_answer_as_fts5_through_updates_and_a_reopen(
    pair: tuple[SqliteStore, SqliteStore, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sunlib.store.postings.SAVE_SHARE", 0.5)  # the updates below stay in the delta
    fts5, postings, vault = pair
    lexical = engine(postings)
    assert fts5.lexical.visible_stats(VISIBILITIES[0])[2]  # type: ignore[attr-defined]  # FTS5's own path is among those compared
    assert same_answers(fts5, postings) > 100
    chunks = fts5.counts().chunks
    assert lexical.postings().tokenised == chunks  # built from the chunks once
    lexical.refresh()
    assert lexical.state().state == "fresh" and lexical.verify() == []

    rng = random.Random(8)
    notes = sorted(vault.rglob("*.md"))
    for path in notes[:3]:  # changed
        path.write_text(path.read_text(encoding="utf-8") + "\nharbour 向量 tide tide.\n", encoding="utf-8")
    for path in notes[3:5]:  # deleted
        path.unlink()
    write_note(vault, rng, 100)  # added
    write_note(vault, rng, 101, acl=[])  # nobody's: now no principal set sees every chunk
    before, stamp = lexical.postings().tokenised, fts5.generation()
    sync(fts5, vault)
    written = int(fts5.db.one("SELECT count(*) FROM chunks WHERE stamp > ?", (stamp,)))
    assert same_answers(fts5, postings) > 100
    assert lexical.postings().tokenised - before == written  # caught up by difference, not rebuilt
    assert lexical.state().state == "behind"  # a small change is not saved by a query

    last = max(vault.rglob("n1*.md"))  # the newest note holds the highest rowids: SQLite reuses them
    rowids = {int(r[0]) for r in fts5.db.conn.execute("SELECT id FROM chunks")}
    last.unlink()
    sync(fts5, vault)
    same_answers(fts5, postings)
    write_note(vault, rng, 102)
    sync(fts5, vault)
    assert {int(r[0]) for r in fts5.db.conn.execute("SELECT id FROM chunks")} & (rowids - {0}) != set()
    same_answers(fts5, postings)

    POSTINGS.forget(postings.db.identity())  # another process: the saved postings plus the difference
    assert same_answers(fts5, postings) > 100
    assert 0 < lexical.postings().tokenised < chunks
    lexical.refresh()
    assert lexical.state().state == "fresh" and lexical.verify() == []
    POSTINGS.forget(postings.db.identity())
    reopened = SqliteStore(postings.db.path, lexical_engine="postings")
    try:
        assert same_answers(fts5, reopened) > 100
        assert engine(reopened).postings().tokenised == 0  # opened from the files alone
        assert isinstance(engine(reopened).postings().view.base.docs, np.memmap)
    finally:
        reopened.close()


def test_a_query_that_is_not_quoted_single_tokens_goes_to_fts5(pair: tuple[SqliteStore, SqliteStore, Path]) -> None:
    fts5, postings, _ = pair
    visibility = Visibility(("public",))
    assert postings.lexical.bm25('"harbour tide"', visibility, 5) == fts5.lexical.bm25('"harbour tide"', visibility, 5)
    with pytest.raises(ValueError):  # SqliteLexical's own answer to an expression it cannot score
        postings.lexical.bm25("harbour NEAR tide", visibility, 5)


def saved_files(lexical: PostingsLexical) -> dict[str, Path]:
    assert lexical.files is not None
    saved = lexical.files.read()
    assert saved is not None
    return dict(saved.paths)


@pytest.mark.parametrize(
    ("damage", "state"),
    [
        (lambda files, stamp: files["docs.npy"].write_bytes(files["docs.npy"].read_bytes()[:-8]), "damaged"),
        (lambda files, stamp: _flip(files["tfs.npy"]), "damaged"),  # same size: the CRC tells
        (lambda files, stamp: files["rowids.npy"].unlink(), "damaged"),
        (lambda files, stamp: stamp.write_text("{not json", encoding="utf-8"), "damaged"),
        (lambda files, stamp: stamp.write_text(_foreign(stamp), encoding="utf-8"), "foreign"),
        (lambda files, stamp: shutil.rmtree(stamp.parent), "missing"),
    ],
    ids=["truncated", "same-size", "file-gone", "stamp-unreadable", "foreign", "folder-gone"],
)
def test_damaged_foreign_or_missing_files_are_rebuilt_never_trusted(
    pair: tuple[SqliteStore, SqliteStore, Path], damage: object, state: str
) -> None:
    fts5, postings, _ = pair
    lexical = engine(postings)
    lexical.refresh()
    assert lexical.files is not None
    damage(saved_files(lexical), lexical.files.stamp_path)  # type: ignore[operator]
    POSTINGS.forget(postings.db.identity())
    assert lexical.state().state == state
    same_answers(fts5, postings)
    assert lexical.postings().tokenised == fts5.counts().chunks  # rebuilt from the chunks
    assert lexical.state().state == "fresh"  # a rebuild is saved at once
    assert lexical.verify() == []


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _foreign(stamp: Path) -> str:
    return json.dumps({**json.loads(stamp.read_text(encoding="utf-8")), "index_uuid": "another"})


def test_a_save_removes_what_an_interrupted_save_left(pair: tuple[SqliteStore, SqliteStore, Path]) -> None:
    fts5, postings, vault = pair
    lexical = engine(postings)
    lexical.refresh()
    assert lexical.files is not None
    folder = lexical.files.folder
    leftovers = [folder / "postings-dead00.docs.npy", folder / ".postings.dead00.json.tmp"]
    for path in leftovers:
        path.write_bytes(b"half written")
    assert lexical.state().state == "fresh"  # the stamp names its own files, not these
    next(vault.rglob("*.md")).unlink()
    sync(fts5, vault)
    lexical.refresh()
    assert not any(path.exists() for path in leftovers)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [lexical.files.stamp_path.name, *(p.name for p in saved_files(lexical).values())]
    )


def test_doctor_reports_the_postings_and_repair_rewrites_them(tmp_path: Path) -> None:
    rng = random.Random(3)
    vault = tmp_path / "vault"
    for i in range(12):
        write_note(vault, rng, i)
    index_dir = tmp_path / "index"
    env = {
        "SUNLIB_INDEX_DIR": str(index_dir),
        "SUNLIB_HOME": str(tmp_path / "home"),
        "SUNLIB_EMBEDDING__PROVIDER": "hash",
        "SUNLIB_SEARCH__LEXICAL_ENGINE": "postings",
    }

    def doctor(*args: str) -> tuple[int, str]:
        r = sunlib("doctor", "--json", "-V", str(vault), *args, env=env)
        return r.returncode, json.loads(r.stdout)["postings"]["state"]

    try:
        assert sunlib("index", str(vault), "-q", env=env).returncode == 0
        assert doctor() == (0, "fresh")  # `sunlib index` saved the postings after the text phase
        for docs in (index_dir / "sunlib.postings").glob("*.docs.npy"):
            _flip(docs)
        assert doctor() == (1, "damaged")
        assert doctor("--repair") == (0, "fresh")
        shutil.rmtree(index_dir / "sunlib.postings")
        assert sunlib("doctor", "--json", "-V", str(vault), env=env).returncode == 0  # missing: no problem
    finally:
        with SqliteStore(index_dir / "sunlib.db") as store:
            POSTINGS.forget(store.db.identity())


def test_the_server_switches_to_the_postings_from_a_chunk_count() -> None:
    counted: list[int] = []

    def chunks() -> int:
        counted.append(1)
        return 150_000

    assert server_lexical_engine(ServerSettings(), chunks) is None and counted == []  # default: never counts
    assert server_lexical_engine(ServerSettings(postings_above_chunks=100_000), chunks) == "postings"
    assert server_lexical_engine(ServerSettings(postings_above_chunks=200_000), chunks) is None
