"""Hostile notes: frontmatter built to exhaust the parser (alias bombs, deep nesting, oversized
metadata), metadata filters past SQLite's expression depth, symbolic links out of the vault, stale
temp files of killed writers, and old-Mac line endings.

Each test reproduces one attack's recipe on a private copy of the sample vault with a copy of
the session's hash index (``hash_library``), through the real indexer and the real app (ASGI).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from sunlib import Library
from sunlib.contracts import SearchFilters
from sunlib.errors import UserError
from sunlib.ingest import load_note, walk_vault
from sunlib.ingest.ids import utf16_slice
from sunlib.ingest.vault import MAX_METADATA_BYTES, VaultFile
from sunlib.server import create_app
from sunlib.sync.notes_io import TEMP_SUFFIX, read_note
from tests.harness.hostile_yaml import alias_bomb, nested
from tests.support.clients import sunlib

# The alias bomb: nine aliases wide, seven deep; 9**7 = 4.8 million strings from 269 bytes.
ALIAS_BOMB = alias_bomb(7) + "\nalias bomb body\n"
DEEP = nested(3000) + "\ndeep body\n"  # deep nesting: 6 KB
DEEP_API = nested(900)  # deep nesting over the API: 1.8 KB
# metadata over the per-note cap from inline tags alone (each YAML document is within its bounds)
MANY_TAGS = "# Tags\n\n" + " ".join(f"#tag{i:06d}" for i in range((MAX_METADATA_BYTES // 10) + 1000)) + "\n"
HOSTILE = {"hostile/bomb.md": ALIAS_BOMB, "hostile/deep.md": DEEP, "hostile/tags.md": MANY_TAGS}


def call(app: FastAPI, method: str, url: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.request(method, url, **kwargs)

    return asyncio.run(go())


@pytest.fixture
def app(hash_library: Library) -> FastAPI:
    application = create_app(hash_library)
    yield application
    application.state.sunlib.jobs.close()


def _failed(report: Any) -> dict[str, str]:
    return dict(report.failed)


# -- frontmatter bounded, the rest of the vault indexed ------------------------


def test_hostile_frontmatter_is_reported_and_the_rest_indexed(hash_library: Library, hash_vault: Path) -> None:
    assert len(ALIAS_BOMB.encode()) < 300
    for rel, text in HOSTILE.items():
        (hash_vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (hash_vault / rel).write_text(text, "utf-8")
    (hash_vault / "hostile" / "fine.md").write_text("# Fine\n\nunbombed neighbour text\n", "utf-8")
    side = hash_vault / "hostile" / "side.md"
    side.write_text("# Side\n\nside body\n", "utf-8")
    side.with_name("side.metadata.yaml").write_text("x: " + "[" * 3000 + "]" * 3000 + "\n", "utf-8")

    before = hash_library.db_path.stat().st_size
    report = hash_library.index(embed=False)
    failed = _failed(report)
    assert "nested deeper than 32 levels" in failed["hostile/deep.md"]
    assert "aliases are expanded" in failed["hostile/bomb.md"]
    assert "metadata is" in failed["hostile/tags.md"] and f"{MAX_METADATA_BYTES:,}" in failed["hostile/tags.md"]
    assert failed["hostile/side.md"].startswith("invalid sidecar side.metadata.yaml: nested deeper")
    assert report.added == ["hostile/fine.md"]
    indexed = hash_library.store.note_states()
    assert "hostile/fine.md" in indexed and not set(HOSTILE) & set(indexed)
    assert hash_library.db_path.stat().st_size < before + 1_000_000


def test_hostile_frontmatter_over_http_is_422_and_nothing_is_written(app: FastAPI, hash_vault: Path) -> None:
    for name, text in (("bomb.md", ALIAS_BOMB), ("deep.md", DEEP_API), ("tags.md", MANY_TAGS)):
        r = call(app, "POST", "/api/notes", json={"path": f"api/{name}", "content": text})
        assert r.status_code == 422, (name, r.status_code, r.text[:300])
        assert r.json()["error"] == "invalid_note" and f"api/{name}" in r.json()["message"]
        assert not (hash_vault / "api" / name).exists()
    assert not (hash_vault / "api").exists() or not any((hash_vault / "api").iterdir())
    # an update to such text is refused the same way, and the old file stays
    r = call(app, "POST", "/api/notes", json={"path": "api/ok.md", "content": "# Ok\n"})
    assert r.status_code == 201, r.text
    r = call(app, "PATCH", f"/api/notes/{r.json()['note_id']}", json={"content": ALIAS_BOMB})
    assert r.status_code == 422 and (hash_vault / "api" / "ok.md").read_text("utf-8") == "# Ok\n"
    listing = call(app, "GET", "/api/notes", params={"limit": 500})
    assert listing.status_code == 200 and len(listing.content) < 1_000_000


def test_cli_index_and_serve_start_with_hostile_notes(hash_vault: Path) -> None:
    (hash_vault / "deep.md").write_text(DEEP, "utf-8")
    (hash_vault / "bomb.md").write_text(ALIAS_BOMB, "utf-8")
    r = sunlib("index", str(hash_vault), "--provider", "hash", "--no-embed", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert sorted(p for p, _ in data["failed"]) == ["bomb.md", "deep.md"]
    assert not data["added"] and data["unchanged"] > 0


# -- lone CR, CRLF and mixed line endings; any parse error costs one note only ----------

ENDINGS = {
    "cr.md": "# Old Mac\r\rFirst passage about ferns.\r\r## Second\r\rThe marker passage zyxwv.\r",
    "crlf.md": "# Windows\r\n\r\nFirst passage about ferns.\r\n\r\n## Second\r\n\r\nThe marker passage zyxwv.\r\n",
    "mixed.md": "# Mixed\n\rFirst passage about ferns.\r\n\r## Second\n\r\nThe marker passage zyxwv.\r",
}


def test_line_endings_parse_and_offsets_open_the_passage(hash_library: Library, hash_vault: Path) -> None:
    for name, text in ENDINGS.items():
        (hash_vault / "endings").mkdir(exist_ok=True)
        (hash_vault / "endings" / name).write_bytes(text.encode("utf-8"))
    report = hash_library.index(embed=False)
    assert not [f for f in report.failed if f[0].startswith("endings/")], report.failed
    for name, text in ENDINGS.items():
        rel = f"endings/{name}"
        served = read_note(hash_vault, rel)
        assert served is not None and "\r" not in served.text
        hits = hash_library.search("zyxwv", mode="bm25", filters=SearchFilters(folders=("endings",))).hits
        hit = next(h for h in hits if h.path == rel)
        c = hit.citation
        quoted = utf16_slice(served.text, c.start, c.end)
        assert quoted == hit.text and quoted.endswith("The marker passage zyxwv.")  # exact in the served content
        # lines count as in the file: the passage is on the file's line holding the marker
        file_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        assert file_lines[c.end_line - 1] == "The marker passage zyxwv."
        if "\r\n" not in text:  # lone CR keeps its position: offsets are exact against the file itself
            assert utf16_slice(text, c.start, c.end).replace("\r", "\n") == quoted


def test_an_unexpected_parse_error_reports_the_note(app: FastAPI, hash_library: Library, hash_vault: Path) -> None:
    """YAML reads ``2024-13-45`` as a date and Python refuses it (ValueError, not a YAML error):
    one note is reported, the rest of the run goes on, and the API answers 422."""
    bad = "---\ndate: 2024-13-45\n---\n# Dated\n\nbody\n"
    (hash_vault / "dated.md").write_text(bad, "utf-8")
    (hash_vault / "dated-side.md").write_text("# Side\n\nbody\n", "utf-8")
    (hash_vault / "dated-side.metadata.yaml").write_text("date: 2024-13-45\n", "utf-8")
    (hash_vault / "after.md").write_text("# After\n\nindexed after the bad one\n", "utf-8")
    report = hash_library.index(embed=False)
    failed = _failed(report)
    assert failed["dated.md"] == "invalid YAML frontmatter: month must be in 1..12"
    assert failed["dated-side.md"] == "invalid sidecar dated-side.metadata.yaml: month must be in 1..12"
    assert report.added == ["after.md"]
    r = call(app, "POST", "/api/notes", json={"path": "api-dated.md", "content": bad})
    assert r.status_code == 422 and "month must be in 1..12" in r.json()["message"], r.text
    assert not (hash_vault / "api-dated.md").exists()


# -- metadata filters capped --------------------------------------------------------


def test_metadata_filter_size_is_capped_everywhere(app: FastAPI, hash_vault: Path) -> None:
    many = {f"k{i}": "v" for i in range(1000)}
    r = call(app, "POST", "/api/search", json={"query": "vault", "filters": {"metadata": many}})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_request" and "filters.metadata" in r.json()["message"]
    assert "50" in r.json()["message"]
    fifty = dict(list(many.items())[:50])
    r = call(app, "POST", "/api/search", json={"query": "vault", "filters": {"metadata": fifty}})
    assert r.status_code == 200, r.text  # the cap is below what SQLite can take
    with pytest.raises(UserError, match=r"filters\.metadata: 51 given; at most 50"):
        SearchFilters(metadata=tuple((f"k{i}", "v") for i in range(51)))
    args = [a for i in range(51) for a in ("--filter", f"k{i}=v")]
    r2 = sunlib("search", "vault", "--vault", str(hash_vault), *args, env={"SUNLIB_EMBEDDING__PROVIDER": "hash"})
    assert r2.returncode == 1 and r2.stderr.strip().count("\n") == 0
    assert "filters.metadata" in r2.stderr and "Traceback" not in r2.stderr


# -- symbolic links never lead out of the vault ---------------------------------------


def test_links_out_of_the_vault_are_never_indexed_or_served(
    app: FastAPI, hash_library: Library, hash_vault: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "creds").write_text("# Creds\n\nsecret password qwertyzzz\n", "utf-8")  # not even .md
    (outside / "folder" / "leak.md").write_text("# Leak\n\nfolder secret qwertyzzz\n", "utf-8")
    (hash_vault / "creds.md").symlink_to(outside / "creds")
    (hash_vault / "linked").symlink_to(outside / "folder", target_is_directory=True)
    (hash_vault / "alias.md").symlink_to(hash_vault / "index.md")  # inside: not a second copy
    (hash_vault / "guide" / "again").symlink_to(hash_vault / "reference", target_is_directory=True)

    files, problems = walk_vault(hash_vault)
    rels = {f.rel_path for f in files}
    assert not {"creds.md", "alias.md"} & rels and not any(r.startswith(("linked/", "guide/again/")) for r in rels)
    assert {p.rel_path: p.reason for p in problems} == {
        "creds.md": "symbolic link to a file outside the vault: not indexed",
        "linked": "symbolic link to a folder outside the vault: not indexed",
    }
    report = hash_library.index(embed=False)  # a rebuild after start, as in the recipe
    assert not [p for p in report.added if p in ("creds.md", "alias.md") or p.startswith("linked/")]
    r = call(app, "POST", "/api/search", json={"query": "qwertyzzz", "mode": "bm25"})
    assert r.status_code == 200 and r.json()["results"] == []
    listed = call(app, "GET", "/api/notes?limit=500").json()["notes"]
    assert all(n["path"] not in ("creds.md", "linked/leak.md") for n in listed)
    assert read_note(hash_vault, "creds.md") is None and read_note(hash_vault, "linked/leak.md") is None


def test_a_note_swapped_for_a_link_after_indexing_is_not_served(
    app: FastAPI, hash_library: Library, hash_vault: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.md").write_text("# Secret\n\nswapped secret text\n", "utf-8")
    row = hash_library.store.note_states_of(["index.md"])["index.md"]
    (hash_vault / "index.md").unlink()
    (hash_vault / "index.md").symlink_to(tmp_path / "secret.md")
    r = call(app, "GET", f"/api/notes/{row.note_id}")
    assert r.status_code == 404, r.text
    assert "swapped secret" not in r.text


# -- temp files of killed writers ---------------------------------------------------


def test_stale_temp_files_are_removed_at_start_and_never_indexed(hash_vault: Path) -> None:
    stale = hash_vault / "guide" / f".note.md.0123456789ab{TEMP_SUFFIX}"
    fresh = hash_vault / f".other.md.ba9876543210{TEMP_SUFFIX}"
    stale.write_text("# Stale\n\nleft by a killed server\n", "utf-8")
    fresh.write_text("# Fresh\n\na write under way\n", "utf-8")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    keep = hash_vault / "guide" / ".notes-of-mine.sunlib-tmp-not"  # not one of ours
    keep.write_text("x", "utf-8")
    r = sunlib("index", str(hash_vault), "--provider", "hash", "--no-embed", "--json")
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and fresh.exists() and keep.exists()
    data = json.loads(r.stdout)
    assert not [p for p in data["added"] if TEMP_SUFFIX in p]


def test_load_note_of_a_temp_file_applies_the_same_bounds(tmp_path: Path) -> None:
    """The API's validator loads the temp file as the indexer would: the bounds apply there too."""
    tmp = tmp_path / f".x.md.000000000000{TEMP_SUFFIX}"
    tmp.write_text(ALIAS_BOMB, "utf-8")
    st = tmp.stat()
    with pytest.raises(Exception, match="aliases are expanded"):
        load_note(VaultFile("x.md", tmp, None, st.st_mtime, st.st_size), ["public"])
