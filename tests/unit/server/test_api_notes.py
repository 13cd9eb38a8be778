"""/api/notes through the real app (ASGI transport): real files in a copy of the sample vault,
real SQLite, the hash embedder. Every test also checks that no temp file is left in the vault."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from sunlib import Library
from sunlib.ingest.ids import sha256_hex, utf16_slice
from sunlib.server import create_app
from sunlib.sync import notes_io
from sunlib.sync.notes_io import TEMP_SUFFIX, BadPath, Conflict, check_path

OPS_NOTE = "internal/ops-runbook.md"
TOUR = "getting-started/quick-tour.md"


# -- helpers ---------------------------------------------------------------------------------


def client(app: FastAPI) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


def call(app: FastAPI, method: str, url: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with client(app) as c:
            return await c.request(method, url, **kwargs)

    return asyncio.run(go())


def search(app: FastAPI, query: str, mode: str = "bm25", **kwargs: Any) -> list[dict[str, Any]]:
    r = call(app, "POST", "/api/search", json={"query": query, "mode": mode, "limit": 20}, **kwargs)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def note_id_of(lib: Library, path: str) -> str:
    state = lib.store.note_states_of([path])[path]
    return state.note_id


def wait_job(app: FastAPI, job_id: str, timeout: float = 30.0) -> Any:
    job = app.state.sunlib.jobs.get(job_id)
    assert job is not None
    deadline = time.monotonic() + timeout
    while job.status not in ("done", "failed"):
        assert time.monotonic() < deadline, "vectors job did not finish"
        time.sleep(0.02)
    return job


def leftovers(vault: Path) -> list[Path]:
    return [p for p in vault.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


def file_hash(vault: Path, rel: str) -> str:
    path = vault / rel
    side = path.with_name(path.name[:-3] + ".metadata.yaml")
    return sha256_hex(path.read_bytes(), side.read_bytes()) if side.is_file() else sha256_hex(path.read_bytes())


@pytest.fixture
def lib(hash_library: Library) -> Library:
    """The sample vault (the ``vault`` fixture) indexed with the hash embedder, private to the test."""
    return hash_library


def _finish(app: FastAPI, vault: Path) -> None:
    for kind in ("embed",):
        for job in app.state.sunlib.jobs.recent(kind, n=1000):
            wait_job(app, job.job_id)
    app.state.sunlib.jobs.close()
    assert leftovers(vault) == []


@pytest.fixture
def app(lib: Library, vault: Path) -> Iterator[FastAPI]:
    application = create_app(lib)
    yield application
    _finish(application, vault)


@pytest.fixture
def ops_app(vault: Path, lib: Library) -> Iterator[FastAPI]:
    """A second server on the same vault and index, with bearer tokens (ops, and public only)."""
    tokens = {"tok-ops": ["ops"], "tok-pub": []}
    other = Library.open(vault, embedding={"provider": "hash"}, server={"tokens": tokens})
    application = create_app(other)
    yield application
    _finish(application, vault)
    other.close()


OPS = {"Authorization": "Bearer tok-ops"}
PUB = {"Authorization": "Bearer tok-pub"}


# -- list ------------------------------------------------------------------------------------


def test_list_only_visible_notes_with_paging_and_filters(app: FastAPI, lib: Library) -> None:
    r = call(app, "GET", "/api/notes", params={"limit": 500})
    assert r.status_code == 200
    body = r.json()
    paths = [n["path"] for n in body["notes"]]
    indexed = {p: list(lib.store.note_by_id(i).acl) for i, p, _ in lib.store.iter_notes()}
    assert indexed[OPS_NOTE] == ["ops"] and OPS_NOTE not in paths
    assert sorted(paths) == paths == sorted(p for p, acl in indexed.items() if "public" in acl)
    assert body["total"] == len(paths) and body["limit"] == 500 and body["offset"] == 0
    tour = next(n for n in body["notes"] if n["path"] == TOUR)
    assert set(tour) == {"note_id", "path", "title", "tags", "metadata", "mtime"}
    assert tour["title"] == "Quick tour" and "tutorial" in tour["tags"]
    assert tour["note_id"] == note_id_of(lib, TOUR)

    first = call(app, "GET", "/api/notes", params={"limit": 3}).json()
    second = call(app, "GET", "/api/notes", params={"limit": 3, "offset": 3}).json()
    assert [n["path"] for n in first["notes"] + second["notes"]] == paths[:6]
    assert first["total"] == second["total"] == len(paths)

    guide = call(app, "GET", "/api/notes", params={"folder": "guide/", "limit": 500}).json()
    assert guide["notes"] and all(n["path"].startswith("guide/") for n in guide["notes"])
    assert guide["total"] == sum(p.startswith("guide/") for p in paths)
    tagged = call(app, "GET", "/api/notes", params={"tag": "#Tutorial"}).json()
    assert TOUR in [n["path"] for n in tagged["notes"]]
    assert all("tutorial" in n["tags"] for n in tagged["notes"])
    assert call(app, "GET", "/api/notes", params={"folder": "internal"}).json()["total"] == 0

    for bad in ({"limit": 0}, {"limit": 501}, {"offset": -1}, {"limit": "many"}):
        r = call(app, "GET", "/api/notes", params=bad)
        assert r.status_code == 422 and r.json()["error"] == "invalid_request"


# -- read ------------------------------------------------------------------------------------


def test_get_note_content_and_chunk_spans(app: FastAPI, lib: Library, vault: Path) -> None:
    note_id = note_id_of(lib, TOUR)
    r = call(app, "GET", f"/api/notes/{note_id}")
    assert r.status_code == 200
    note = r.json()
    assert note["note_id"] == note_id and note["path"] == TOUR and note["in_sync"] is True
    assert note["content"] == (vault / TOUR).read_text("utf-8").replace("\r\n", "\n")
    assert note["metadata"]["document_id"] == "doc_quick_tour"  # from the sidecar
    stored = {c.chunk_id: c for c in lib.store.chunks_of_note(note_id)}
    assert [c["chunk_id"] for c in note["chunks"]] == list(stored)
    lines = note["content"].split("\n")
    for c in note["chunks"]:
        assert set(c) == {"chunk_id", "ordinal", "heading_path", "start", "end", "start_line", "end_line"}
        assert utf16_slice(note["content"], c["start"], c["end"]) == stored[c["chunk_id"]].text
        first_line = utf16_slice(note["content"], c["start"], c["end"]).split("\n")[0]
        assert first_line in lines[c["start_line"] - 1]

    r = call(app, "GET", "/api/notes/note_0000000000000000")
    assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_chunk_offsets_count_utf16_units(app: FastAPI) -> None:
    content = "# Emoji 😀 note\n\nThe 🦊 fox word quixotically appears here.\n\n## Part 😺\n\nSecond 🐢 section text.\n"
    r = call(app, "POST", "/api/notes", json={"path": "emoji.md", "content": content})
    assert r.status_code == 201, r.text
    note = r.json()
    assert note["content"] == content
    spans = [utf16_slice(content, c["start"], c["end"]) for c in note["chunks"]]
    assert any("quixotically" in s for s in spans) and any("Second 🐢 section" in s for s in spans)
    assert all(s.strip() and s in content for s in spans)


def test_read_resyncs_a_file_changed_outside(app: FastAPI, lib: Library, vault: Path) -> None:
    """A read never hands out text the index has not seen: edited files are re-indexed first,
    and a note that became restricted stops being readable at once."""
    note_id = note_id_of(lib, "index.md")
    path = vault / "index.md"
    path.write_text(path.read_text("utf-8") + "\nAn outside edit mentions flibbertigibbet.\n", "utf-8")
    note = call(app, "GET", f"/api/notes/{note_id}").json()
    assert "flibbertigibbet" in note["content"] and note["in_sync"] is True
    assert [h["note_id"] for h in search(app, "flibbertigibbet")] == [note_id]

    path.write_text("---\nacl: [ops]\n---\n# Secret now\n\nzygomorphic plans\n", "utf-8")
    assert call(app, "GET", f"/api/notes/{note_id}").status_code == 404
    assert search(app, "zygomorphic") == []

    path.write_text("---\ntitle: [unclosed\n---\nbroken\n", "utf-8")  # cannot be indexed: last ACL stays
    r = call(app, "GET", f"/api/notes/{note_id}")
    assert r.status_code == 404


def test_unindexable_file_reads_as_out_of_sync(app: FastAPI, lib: Library, vault: Path) -> None:
    note_id = note_id_of(lib, TOUR)
    (vault / TOUR).write_text("---\ntitle: [unclosed\n---\nbroken\n", "utf-8")
    note = call(app, "GET", f"/api/notes/{note_id}").json()
    assert note["content"] is None and note["in_sync"] is False and note["chunks"]
    r = call(app, "POST", f"/api/notes/{note_id}/move", json={"new_path": "elsewhere.md"})
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    r = call(app, "PATCH", f"/api/notes/{note_id}", json={"content": "# Fixed\n\nrepaired text\n"})
    assert r.status_code == 200 and r.json()["note_id"] == note_id and r.json()["in_sync"] is True


# -- create, update, delete, move ------------------------------------------------------------


def test_create_writes_the_file_and_search_finds_it_at_once(app: FastAPI, lib: Library, vault: Path) -> None:
    content = "---\ntags: [fresh]\n---\n# Fresh note\n\nThe zanzibarquokka lives in a new folder.\n"
    r = call(app, "POST", "/api/notes", json={"path": "new/deeper/fresh.md", "content": content})
    assert r.status_code == 201, r.text
    note = r.json()
    assert note["path"] == "new/deeper/fresh.md" and note["title"] == "Fresh note" and note["tags"] == ["fresh"]
    assert note["content"] == content and note["chunks"] and note["vectors_job"]
    assert (vault / "new/deeper/fresh.md").read_text("utf-8") == content
    assert note_id_of(lib, "new/deeper/fresh.md") == note["note_id"]
    hits = search(app, "zanzibarquokka")
    assert [h["note_id"] for h in hits] == [note["note_id"]] and hits[0]["path"] == "new/deeper/fresh.md"
    listed = call(app, "GET", "/api/notes", params={"tag": "fresh"}).json()["notes"]
    assert [n["note_id"] for n in listed] == [note["note_id"]]
    assert call(app, "GET", f"/api/notes/{note['note_id']}").json()["content"] == content


def test_vectors_job_completes_and_dense_search_finds_the_note(app: FastAPI, lib: Library) -> None:
    content = "# Vectors\n\nplumbago xerophyte succulent garden notes.\n"
    note = call(app, "POST", "/api/notes", json={"path": "vectors.md", "content": content}).json()
    job = wait_job(app, note["vectors_job"])
    assert job.status == "done", job.error
    assert job.kind == "embed" and job.result["vectors_embedded"] >= 1
    assert lib.store.vectors.count_pending(lib.space)[0] == 0
    assert note["note_id"] in [h["note_id"] for h in search(app, "plumbago xerophyte succulent", mode="dense")]
    # a move re-creates chunk rows: their vectors come back from the cache
    moved = call(app, "POST", f"/api/notes/{note['note_id']}/move", json={"new_path": "plants/vectors.md"}).json()
    job = wait_job(app, moved["vectors_job"])
    assert job.status == "done" and job.result["vectors_from_cache"] >= 1 and job.result["vectors_embedded"] == 0
    assert lib.store.vectors.count_pending(lib.space)[0] == 0


def test_patch_replaces_text_and_index(app: FastAPI, lib: Library, vault: Path) -> None:
    note_id = note_id_of(lib, "index.md")
    assert note_id in [h["note_id"] for h in search(app, "sample vault")]
    mode = (vault / "index.md").stat().st_mode
    content = "# Home\n\nNow only about the hippopotomonstrosesquipedalian word.\n"
    r = call(app, "PATCH", f"/api/notes/{note_id}", json={"content": content})
    assert r.status_code == 200, r.text
    note = r.json()
    assert note["note_id"] == note_id and note["title"] == "Home" and note["content"] == content
    assert note["vectors_job"]
    assert (vault / "index.md").read_text("utf-8") == content
    assert (vault / "index.md").stat().st_mode == mode
    assert [h["note_id"] for h in search(app, "hippopotomonstrosesquipedalian")] == [note_id]
    assert note_id not in [h["note_id"] for h in search(app, "sample vault")]
    same = call(app, "PATCH", f"/api/notes/{note_id}", json={"content": content}).json()
    assert same["vectors_job"] is None  # nothing changed, nothing to embed

    r = call(app, "PATCH", "/api/notes/note_0000000000000000", json={"content": "x"})
    assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_move_keeps_note_id_and_carries_the_sidecar(app: FastAPI, lib: Library, vault: Path) -> None:
    note_id = note_id_of(lib, TOUR)
    before = (vault / TOUR).read_text("utf-8")
    r = call(app, "POST", f"/api/notes/{note_id}/move", json={"new_path": "archive/2025/tour.md"})
    assert r.status_code == 200, r.text
    note = r.json()
    assert note["note_id"] == note_id and note["path"] == "archive/2025/tour.md"
    assert note["title"] == "Quick tour" and note["metadata"]["document_id"] == "doc_quick_tour"
    assert not (vault / TOUR).exists() and not (vault / "getting-started/quick-tour.metadata.yaml").exists()
    assert (vault / "archive/2025/tour.md").read_text("utf-8") == before
    assert (vault / "archive/2025/tour.metadata.yaml").is_file()
    assert lib.store.note_states_of([TOUR]) == {}
    assert note_id_of(lib, "archive/2025/tour.md") == note_id
    hits = [h for h in search(app, "ten minutes sample vault tour") if h["note_id"] == note_id]
    assert hits and {h["path"] for h in hits} == {"archive/2025/tour.md"}
    assert call(app, "GET", f"/api/notes/{note_id}").json()["path"] == "archive/2025/tour.md"

    # edited after the move: still the same note (the id is not re-derived from the new path)
    r = call(app, "PATCH", f"/api/notes/{note_id}", json={"content": before + "\nwombatification\n"})
    assert r.status_code == 200 and r.json()["note_id"] == note_id
    assert [h["note_id"] for h in search(app, "wombatification")] == [note_id]

    # a new note at the old path is a different note
    created = call(app, "POST", "/api/notes", json={"path": TOUR, "content": "# Another tour\n\nnew one\n"}).json()
    assert created["note_id"] != note_id
    # moving to where it already is changes nothing
    same = call(app, "POST", f"/api/notes/{note_id}/move", json={"new_path": "archive/2025/tour.md"})
    assert same.status_code == 200 and same.json()["vectors_job"] is None


def test_delete_removes_file_sidecar_and_search_hits(app: FastAPI, lib: Library, vault: Path) -> None:
    note_id = note_id_of(lib, TOUR)
    assert note_id in [h["note_id"] for h in search(app, "ten minutes sample vault tour")]
    r = call(app, "DELETE", f"/api/notes/{note_id}")
    assert r.status_code == 204 and r.content == b""
    assert not (vault / TOUR).exists() and not (vault / "getting-started/quick-tour.metadata.yaml").exists()
    assert note_id not in [h["note_id"] for h in search(app, "ten minutes sample vault tour")]
    assert call(app, "GET", f"/api/notes/{note_id}").status_code == 404
    assert TOUR not in [n["path"] for n in call(app, "GET", "/api/notes", params={"limit": 500}).json()["notes"]]
    assert call(app, "DELETE", f"/api/notes/{note_id}").status_code == 404


# -- paths, conflicts, validation ------------------------------------------------------------

BAD_PATHS = [
    "",
    "../escape.md",
    "guide/../../escape.md",
    "guide/./x.md",
    "a//b.md",
    "/tmp/escape.md",
    "..\\escape.md",
    "C:\\escape.md",
    "C:escape.md",
    "guide\\x.md",
    "%2e%2e%2fescape.md",
    "%2E%2E/escape.md",
    "%252e%252e%252fescape.md",
    "guide%2fx.md",
    "nul\x00byte.md",
    "line\nbreak.md",
    ".sunlib/x.md",
    ".obsidian/x.md",
    "guide/.hidden.md",
    ".md",
    "node_modules/x.md",
    "notes.txt",
    "guide/x.md/",
    "guide/x",
    " spaced.md",
    "dotted./x.md",
    "x" * 300 + ".md",
    # paths that look like others
    "guide/\u202edm.txt.md",  # right-to-left override
    "a/\u2024\u2024/b.md",  # one-dot leaders for ".."
    "\uff0e\uff0e/escape.md",  # full-width dots
    "guide\u2215x.md",  # a division slash for "/"
    "zero\u200bwidth.md",
    "CON.md",
    "lpt1/x.md",
    "shout.MD",
]


def test_bad_paths_are_refused(app: FastAPI, lib: Library, vault: Path) -> None:
    before = sorted(p for p in vault.parent.rglob("*") if ".sunlib" not in p.parts)
    note_id = note_id_of(lib, "index.md")
    for path in BAD_PATHS:
        r = call(app, "POST", "/api/notes", json={"path": path, "content": "# Nope\n"})
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"] == "bad_path" and r.json()["message"], path
        r = call(app, "POST", f"/api/notes/{note_id}/move", json={"new_path": path})
        assert r.status_code == 400 and r.json()["error"] == "bad_path", path
    assert sorted(p for p in vault.parent.rglob("*") if ".sunlib" not in p.parts) == before
    for path in BAD_PATHS:
        with pytest.raises(BadPath):
            check_path(path)


def test_percent_without_escape_is_an_ordinary_character(app: FastAPI, vault: Path) -> None:
    r = call(app, "POST", "/api/notes", json={"path": "100% done.md", "content": "# Done\n"})
    assert r.status_code == 201 and (vault / "100% done.md").is_file()


def test_symlinks_are_never_written_through(app: FastAPI, lib: Library, vault: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.md"
    secret.write_text("# Linked\n\nlinked outside text\n", "utf-8")
    (vault / "outlink").symlink_to(outside, target_is_directory=True)
    (vault / "linked.md").symlink_to(secret)
    (vault / "guide" / "inlink").symlink_to(vault / "reference", target_is_directory=True)
    report = lib.index(embed=False)  # the walk never follows links (tests/unit/ingest/test_hostile_notes.py)
    assert ("linked.md", "symbolic link to a file outside the vault: not indexed") in report.failed

    for path in ("outlink/new.md", "outlink/deeper/new.md", "guide/inlink/new.md", "linked.md"):
        r = call(app, "POST", "/api/notes", json={"path": path, "content": "# Escape\n"})
        assert r.status_code == 400 and r.json()["error"] == "bad_path", (path, r.text)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.md"]
    assert not (vault / "reference" / "new.md").exists()

    assert "linked.md" not in lib.store.note_states_of(["linked.md"])  # not a note: nothing to PATCH
    for path in ("linked.md", "outlink/secret.md"):
        with pytest.raises(BadPath):
            notes_io.write_note(vault, path, "# Overwritten\n", create=False)
    with pytest.raises(BadPath):
        notes_io.move_note(vault, "linked.md", "unlinked.md")
    with pytest.raises(BadPath):
        notes_io.delete_note(vault, "linked.md")
    assert secret.read_text("utf-8") == "# Linked\n\nlinked outside text\n"
    assert (vault / "linked.md").is_symlink() and not (vault / "unlinked.md").exists()

    # a note cannot be moved through a link either
    note_id = note_id_of(lib, "index.md")
    r = call(app, "POST", f"/api/notes/{note_id}/move", json={"new_path": "outlink/index.md"})
    assert r.status_code == 400 and r.json()["error"] == "bad_path"
    assert (vault / "index.md").is_file() and sorted(p.name for p in outside.iterdir()) == ["secret.md"]


def test_name_collisions_are_conflicts(app: FastAPI, lib: Library, vault: Path) -> None:
    original = (vault / "index.md").read_bytes()
    r = call(app, "POST", "/api/notes", json={"path": "index.md", "content": "# Clobber\n"})
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    assert (vault / "index.md").read_bytes() == original
    r = call(app, "POST", "/api/notes", json={"path": "index.md/child.md", "content": "# Under a file\n"})
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    r = call(app, "POST", "/api/notes", json={"path": "guide.md", "content": "x"})  # guide/ is a folder, fine
    assert r.status_code == 201
    (vault / "guide" / "search.md").mkdir()
    r = call(app, "POST", "/api/notes", json={"path": "guide/search.md", "content": "x"})
    assert r.status_code == 409

    tour = note_id_of(lib, TOUR)
    r = call(app, "POST", f"/api/notes/{tour}/move", json={"new_path": "index.md"})
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    assert (vault / TOUR).is_file() and (vault / "index.md").read_bytes() == original
    assert note_id_of(lib, TOUR) == tour

    # a sidecar without its note would hand its metadata (and ACL) to a new note there
    (vault / "orphan.metadata.yaml").write_text("acl: [ops]\n", "utf-8")
    r = call(app, "POST", "/api/notes", json={"path": "orphan.md", "content": "# Orphan\n"})
    assert r.status_code == 409 and not (vault / "orphan.md").exists()
    r = call(app, "POST", f"/api/notes/{tour}/move", json={"new_path": "orphan.md"})
    assert r.status_code == 409 and (vault / TOUR).is_file()


def test_concurrent_creates_of_one_path_make_one_note(app: FastAPI, vault: Path) -> None:
    async def go() -> list[httpx.Response]:
        async with client(app) as c:
            return await asyncio.gather(
                *(c.post("/api/notes", json={"path": "race.md", "content": f"# Race {i}\n"}) for i in range(6))
            )

    codes = sorted(r.status_code for r in asyncio.run(go()))
    assert codes == [201] + [409] * 5
    assert (vault / "race.md").read_text("utf-8").startswith("# Race ")


def test_bodies_are_validated(app: FastAPI, lib: Library, vault: Path) -> None:
    note_id = note_id_of(lib, "index.md")
    for method, url, body in (
        ("POST", "/api/notes", {"path": 5, "content": "x"}),
        ("POST", "/api/notes", {"path": "a.md", "content": 5}),
        ("POST", "/api/notes", {"path": "a.md"}),
        ("POST", "/api/notes", {"path": "a.md", "content": "x", "acl": ["ops"]}),
        ("POST", "/api/notes", ["a.md", "x"]),
        ("POST", "/api/notes", {"path": "a.md", "content": "é" * 600_000}),  # 1.2 MB of UTF-8
        ("PATCH", f"/api/notes/{note_id}", {"content": ["x"]}),
        ("PATCH", f"/api/notes/{note_id}", {"content": None}),
        ("PATCH", f"/api/notes/{note_id}", {"content": "x", "path": "b.md"}),
        ("POST", f"/api/notes/{note_id}/move", {"path": "b.md"}),
        ("POST", f"/api/notes/{note_id}/move", {"new_path": 1}),
    ):
        r = call(app, method, url, json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"] == "invalid_request"
    r = call(app, "POST", "/api/notes", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert not (vault / "a.md").exists()


def test_text_the_indexer_would_reject_is_refused_before_writing(app: FastAPI, lib: Library, vault: Path) -> None:
    bad = ["---\ntitle: [unclosed\n---\nbody\n", "---\nacl: 5\n---\nbody\n", "# Nul\n\nbinary\x00byte\n"]
    for content in bad:
        r = call(app, "POST", "/api/notes", json={"path": "invalid.md", "content": content})
        assert r.status_code == 422 and r.json()["error"] == "invalid_note", r.text
    assert not (vault / "invalid.md").exists()
    r = call(app, "POST", "/api/notes", json={"path": "brand/new/invalid.md", "content": bad[0]})
    assert r.status_code == 422 and not (vault / "brand").exists()  # folders made for it are gone again
    note_id = note_id_of(lib, "index.md")
    original = (vault / "index.md").read_bytes()
    r = call(app, "PATCH", f"/api/notes/{note_id}", json={"content": bad[0]})
    assert r.status_code == 422 and (vault / "index.md").read_bytes() == original


# -- access control --------------------------------------------------------------------------


def test_restricted_note_is_invisible_to_the_default_caller(app: FastAPI, lib: Library, vault: Path) -> None:
    ops_id = note_id_of(lib, OPS_NOTE)
    original = (vault / OPS_NOTE).read_bytes()
    unknown = "note_ffffffffffffffff"
    for note_id in (ops_id, unknown):
        answers = [
            call(app, "GET", f"/api/notes/{note_id}"),
            call(app, "PATCH", f"/api/notes/{note_id}", json={"content": "# Taken over\n"}),
            call(app, "POST", f"/api/notes/{note_id}/move", json={"new_path": "stolen.md"}),
            call(app, "DELETE", f"/api/notes/{note_id}"),
        ]
        assert [(r.status_code, r.json()["error"]) for r in answers] == [(404, "not_found")] * 4
        assert {r.json()["message"] for r in answers} == {f"no note {note_id!r}"}
    assert (vault / OPS_NOTE).read_bytes() == original and not (vault / "stolen.md").exists()
    listed = call(app, "GET", "/api/notes", params={"limit": 500, "folder": "internal"}).json()
    assert listed == {"notes": [], "total": 0, "limit": 500, "offset": 0}

    # creating is open to any caller, also a note only ops may read: a write-only drop
    r = call(app, "POST", "/api/notes", json={"path": "drop.md", "content": "---\nacl: [ops]\n---\n# Drop\n"})
    assert r.status_code == 201
    assert call(app, "GET", f"/api/notes/{r.json()['note_id']}").status_code == 404


def test_bearer_token_principals_see_and_write_restricted_notes(ops_app: FastAPI, lib: Library, vault: Path) -> None:
    ops_id = note_id_of(lib, OPS_NOTE)
    assert call(ops_app, "GET", f"/api/notes/{ops_id}").status_code == 401
    assert call(ops_app, "GET", "/api/notes").status_code == 401
    assert call(ops_app, "GET", f"/api/notes/{ops_id}", headers=PUB).status_code == 404
    pub_paths = [
        n["path"] for n in call(ops_app, "GET", "/api/notes", params={"limit": 500}, headers=PUB).json()["notes"]
    ]
    assert OPS_NOTE not in pub_paths

    listed = call(ops_app, "GET", "/api/notes", params={"limit": 500}, headers=OPS).json()
    ops_paths = {n["path"] for n in listed["notes"]}
    assert OPS_NOTE in ops_paths and set(pub_paths) < ops_paths
    note = call(ops_app, "GET", f"/api/notes/{ops_id}", headers=OPS).json()
    assert note["title"] == "Operations runbook" and "ops" in note["metadata"]["acl"]

    content = note["content"].replace("# Operations runbook", "# Operations runbook\n\nRotate the cassowary keys.")
    r = call(ops_app, "PATCH", f"/api/notes/{ops_id}", json={"content": content}, headers=PUB)
    assert r.status_code == 404
    r = call(ops_app, "PATCH", f"/api/notes/{ops_id}", json={"content": content}, headers=OPS)
    assert r.status_code == 200 and r.json()["note_id"] == ops_id
    assert [h["note_id"] for h in search(ops_app, "cassowary", headers=OPS)] == [ops_id]
    assert search(ops_app, "cassowary", headers=PUB) == []

    r = call(ops_app, "POST", f"/api/notes/{ops_id}/move", json={"new_path": "ops/runbook.md"}, headers=OPS)
    assert r.status_code == 200 and r.json()["note_id"] == ops_id
    assert call(ops_app, "DELETE", f"/api/notes/{ops_id}", headers=PUB).status_code == 404
    assert (vault / "ops/runbook.md").is_file()
    assert call(ops_app, "DELETE", f"/api/notes/{ops_id}", headers=OPS).status_code == 204
    assert not (vault / "ops/runbook.md").exists()


# -- concurrency and atomicity ---------------------------------------------------------------


def test_concurrent_patches_leave_one_whole_version(app: FastAPI, lib: Library, vault: Path) -> None:
    note_id = note_id_of(lib, "index.md")
    words = [f"{n}zorp" for n in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")]
    contents = [f"# Version {i}\n\n" + f"{w} paragraph line.\n" * (50 + 40 * i) for i, w in enumerate(words)]

    async def go() -> list[httpx.Response]:
        async with client(app) as c:
            return await asyncio.gather(
                *(c.patch(f"/api/notes/{note_id}", json={"content": text}) for text in contents)
            )

    responses = asyncio.run(go())
    assert [r.status_code for r in responses] == [200] * len(contents)
    assert {r.json()["note_id"] for r in responses} == {note_id}
    assert sorted(r.json()["content"] for r in responses) == sorted(contents)  # each saw its own write
    final = (vault / "index.md").read_text("utf-8")
    assert final in contents
    winner = words[contents.index(final)]
    assert lib.store.note_by_id(note_id).content_hash == file_hash(vault, "index.md")
    assert hashlib.sha256(final.encode()).hexdigest() == file_hash(vault, "index.md")
    for w in words:
        hits = {h["note_id"] for h in search(app, w)}
        assert hits == ({note_id} if w == winner else set()), w
    assert call(app, "GET", f"/api/notes/{note_id}").json()["content"] == final


def test_writes_are_atomic_renames(app: FastAPI, lib: Library, vault: Path) -> None:
    """The note file is replaced, never rewritten in place: a reader holding the old file keeps
    the whole old text, and no temp file remains."""
    note_id = note_id_of(lib, "index.md")
    before = (vault / "index.md").read_bytes()
    with open(vault / "index.md", "rb") as held:
        inode = os.fstat(held.fileno()).st_ino
        r = call(app, "PATCH", f"/api/notes/{note_id}", json={"content": "# Replaced\n"})
        assert r.status_code == 200
        assert held.read() == before
    assert os.stat(vault / "index.md").st_ino != inode
    assert (vault / "index.md").read_text("utf-8") == "# Replaced\n"
    assert leftovers(vault) == []


def test_path_based_fallback_keeps_the_same_rules(vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the OS has no dir_fd (Windows) the verbs work on checked paths: same results."""
    monkeypatch.setattr(notes_io, "USE_DIR_FD", False)
    notes_io.write_note(vault, "fb/one.md", "# One\n", create=True)
    with pytest.raises(Conflict):
        notes_io.write_note(vault, "fb/one.md", "# Again\n", create=True)
    notes_io.write_note(vault, "fb/one.md", "# One, edited\n", create=False)
    assert (vault / "fb/one.md").read_text("utf-8") == "# One, edited\n"
    notes_io.move_note(vault, TOUR, "fb/tour.md")
    assert (vault / "fb/tour.metadata.yaml").is_file() and not (vault / TOUR).exists()
    with pytest.raises(Conflict):
        notes_io.move_note(vault, "fb/tour.md", "fb/one.md")
    (tmp_path / "outside").mkdir()
    (vault / "fb" / "out").symlink_to(tmp_path / "outside", target_is_directory=True)
    with pytest.raises(BadPath):
        notes_io.write_note(vault, "fb/out/x.md", "# Escape\n", create=True)
    with pytest.raises(BadPath):
        notes_io.move_note(vault, "fb/one.md", "fb/out/one.md")
    notes_io.delete_note(vault, "fb/tour.md")
    assert not (vault / "fb/tour.md").exists() and not (vault / "fb/tour.metadata.yaml").exists()
    assert list((tmp_path / "outside").iterdir()) == [] and leftovers(vault) == []


def test_server_shutdown_closes_the_worker_service(lib: Library) -> None:
    from fastapi.testclient import TestClient

    application = create_app(lib)
    jobs = application.state.sunlib.jobs
    # a real loopback client address: TestClient's default ("testclient") is not loopback
    with TestClient(application, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as c:  # runs the lifespan
        assert jobs.alive() == 2  # the index lane and the benchmark lane
        r = c.post("/api/notes", json={"path": "lifespan.md", "content": "# Lifespan\n\nshutdown text\n"})
        assert r.status_code == 201
        assert wait_job(application, r.json()["vectors_job"]).status == "done"
    assert jobs.alive() == 0
    # a job after shutdown is refused as JSON, and the vectors of the note above were kept
    r = call(application, "POST", "/api/index/rebuild")
    assert r.status_code == 503 and r.json()["error"] == "unavailable", r.text
    assert lib.store.vectors.count_pending(lib.space)[0] == 0
