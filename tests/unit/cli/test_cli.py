"""The CLI as a user meets it: real index files, one-line errors.

The verbs run in this process through the real entry point (``clients.sunlib``); what is about
the process itself (which modules ``sunlib --help`` and ``sunlib search`` load) runs in a
subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sunlib.trace.steps import RETRIEVAL_STEPS
from tests.support.clients import sunlib, sunlib_process
from tests.support.paths import index_of


@pytest.fixture
def indexed(hash_vault: Path) -> Path:
    """A vault indexed by ``sunlib index --provider hash`` (which also remembers it)."""
    r = sunlib("index", str(hash_vault), "--provider", "hash", "--json")
    assert r.returncode == 0, r.stderr
    return hash_vault


def test_index_reports_json_summary(vault: Path) -> None:
    r = sunlib("index", str(vault), "--provider", "hash", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert len(report["added"]) == 21
    assert report["failed"] == []
    assert report["vectors_pending"] == 0
    again = json.loads(sunlib("index", str(vault), "--provider", "hash", "--json").stdout)
    assert again["added"] == [] and again["unchanged"] == 21 and again["vectors_embedded"] == 0


def test_index_human_summary_lists_failures(vault: Path) -> None:
    (vault / "broken.md").write_bytes(b"---\ntitle: [unclosed\n---\nbody\n")
    r = sunlib("index", str(vault), "--provider", "hash", "-q")
    assert r.returncode == 0, r.stderr
    assert "added" in r.stdout and "failed" in r.stdout
    assert "broken.md" in r.stderr and "invalid YAML frontmatter" in r.stderr


def test_search_json_has_citations(indexed: Path) -> None:
    r = sunlib("search", "empty ACL public", "--vault", str(indexed), "--mode", "bm25", "--json", "-n", "3")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["mode"] == "bm25" and 1 <= len(data["results"]) <= 3
    top = data["results"][0]
    assert top["path"] == "guide/search/filters-and-acl.md"
    cit = top["citation"]
    text = (indexed / cit["path"]).read_text(encoding="utf-8")
    span = text.encode("utf-16-le")[2 * cit["start"] : 2 * cit["end"]].decode("utf-16-le")
    assert top["snippet"].strip("…")[:40] in span  # the snippet is a window of the cited span
    assert text.splitlines()[cit["start_line"] - 1].strip() in span


def test_search_explain_shows_routes_and_fusion(indexed: Path) -> None:
    env = {"SUNLIB_EMBEDDING__PROVIDER": "hash"}
    r = sunlib("search", "中文 分词", "--vault", str(indexed), "--explain", env=env)
    assert r.returncode == 0, r.stderr
    for step in RETRIEVAL_STEPS:
        assert step in r.stdout
    assert "contribution" in r.stdout or "+0." in r.stdout
    j = json.loads(sunlib("search", "中文 分词", "--vault", str(indexed), "--explain", "--json", env=env).stdout)
    names = [s["name"] for s in j["trace"]["steps"]]
    assert names == list(RETRIEVAL_STEPS)  # the sample vault is bilingual: the cross-language routes run
    first = j["results"][0]["routes"]
    assert abs(sum(r["contribution"] for r in first.values()) - j["results"][0]["score"]) < 1e-4


def test_search_acl_and_filters(indexed: Path) -> None:
    env = {"SUNLIB_EMBEDDING__PROVIDER": "hash"}
    public = json.loads(sunlib("search", "rebuild window Sunday", "--vault", str(indexed), "--json", env=env).stdout)
    assert all(not r["path"].startswith("internal/") for r in public["results"])
    ops = json.loads(
        sunlib("search", "rebuild window Sunday", "--vault", str(indexed), "--as", "ops", "--json", env=env).stdout
    )
    assert ops["results"][0]["path"] == "internal/ops-runbook.md"
    zh = json.loads(
        sunlib("search", "search", "--vault", str(indexed), "--filter", "language=zh", "--json", env=env).stdout
    )
    assert zh["results"] and all(r["path"].startswith("zh/") for r in zh["results"])
    folder = json.loads(
        sunlib("search", "index", "--vault", str(indexed), "--folder", "reference", "--json", env=env).stdout
    )
    assert folder["results"] and all(r["path"].startswith("reference/") for r in folder["results"])


def test_remembered_vault_and_status(indexed: Path, tmp_path: Path) -> None:
    env = {"SUNLIB_EMBEDDING__PROVIDER": "hash"}
    r = sunlib("status", "--json", cwd=tmp_path, env=env)  # no --vault: the last indexed vault
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["vault"] == str(indexed.resolve())
    assert info["counts"]["notes"] == 21 and info["vectors_pending"] == 0


def test_doctor_prints_versions() -> None:
    r = sunlib("doctor", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["sqlite"].startswith("3.") and info["sqlite_vec"].startswith("v0.1")
    assert info["fts5"] == "True"
    assert {"hash", "e5", "use", "minilm", "openai", "gemini"} <= set(info["embedders"])


def test_init_writes_config_once(tmp_path: Path) -> None:
    assert sunlib("init", str(tmp_path)).returncode == 0
    assert (tmp_path / "sunlib.toml").is_file()
    again = sunlib("init", str(tmp_path))
    assert again.returncode != 0 and "already exists" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["search", "x", "--mode", "fuzzy"], "unknown mode 'fuzzy'"),
        (["search", "   "], "the query is empty"),
        (["search", "x", "--filter", "chapter"], "--filter expects key=value"),
        (["search", "x", "--since", "yesterday"], "--since expects a date"),
        (["search", "x", "--fusion", "magic"], "invalid setting search.fusion"),
        (["index", "/definitely/not/here"], "vault folder not found"),
        (["index", "{vault}", "--provider", "nope"], "unknown embedding provider 'nope'"),
        (["eval", "retrieval", "{vault}"], "not a BEIR dataset"),
    ],
)
def test_errors_are_one_line_and_nonzero(indexed: Path, args: list[str], message: str) -> None:
    args = [a.replace("{vault}", str(indexed)) for a in args]
    if args[0] == "search":
        args += ["--vault", str(indexed)]
    r = sunlib(*args, env={"SUNLIB_EMBEDDING__PROVIDER": "hash"})
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert message in lines[0]
    assert "Traceback" not in r.stderr


def test_python_m_sunlib_is_the_same_entry_point(tmp_path: Path) -> None:
    """The one subprocess of the error tests: ``python -m sunlib`` runs ``main`` (one line, exit 1)."""
    r = sunlib_process("search", "x", "--vault", str(tmp_path / "nowhere"))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"error: vault folder not found: {tmp_path / 'nowhere'}"]
    assert r.stderr == sunlib("search", "x", "--vault", str(tmp_path / "nowhere")).stderr


def test_missing_index_and_bad_config_are_clear(vault: Path) -> None:
    r = sunlib("search", "x", "--vault", str(vault))
    assert r.returncode != 0 and "has no index yet" in r.stderr
    (vault / "sunlib.toml").write_text("[search\nmode=", encoding="utf-8")
    r = sunlib("status", "--vault", str(vault))
    assert r.returncode != 0 and "cannot read config" in r.stderr and "Traceback" not in r.stderr


def test_bad_input_loses_nothing(indexed: Path) -> None:
    db = index_of(indexed) / "sunlib.db"
    before = db.stat().st_size
    r = sunlib("search", 'NEAR("a" b) AND * : "', "--vault", str(indexed), "--mode", "bm25", "--json")
    assert r.returncode == 0, r.stderr
    r = sunlib("status", "--vault", str(indexed), "--json", env={"SUNLIB_EMBEDDING__PROVIDER": "hash"})
    assert json.loads(r.stdout)["counts"]["notes"] == 21
    assert db.stat().st_size >= before


SERVER_MODULES = ["fastapi", "sse_starlette", "starlette", "uvicorn"]
# run the CLI's entry point in a fresh interpreter, then report its exit code and the server modules loaded
PROBE = """
import json, sys
from sunlib.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted(m for m in %r if m in sys.modules)}))
"""


def _probe(*args: str) -> tuple[int, list[str]]:
    env = {**os.environ, "SUNLIB_EMBEDDING__PROVIDER": "hash"}
    r = subprocess.run(
        [sys.executable, "-c", PROBE % SERVER_MODULES, *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    return result["code"], result["loaded"]


def test_help_and_search_do_not_import_the_server(indexed: Path) -> None:
    assert _probe("--help") == (0, [])
    assert _probe("search", "empty ACL", "--vault", str(indexed), "-n", "1") == (0, [])  # hybrid: embedder too
    code, loaded = _probe("serve", "--port", "notaport")
    assert code == 2 and loaded == []  # a usage error is found before the verb imports the server
    # the probe would see them: importing the server package loads FastAPI
    r = subprocess.run(
        [sys.executable, "-c", "import json, sys, sunlib.server; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert {"fastapi", "starlette"} <= set(json.loads(r.stdout))


def test_index_progress_is_plain_lines_without_a_terminal(vault: Path) -> None:
    """Under nohup, in a log or in CI (stderr is no terminal) progress is plain periodic lines."""
    r = sunlib("index", str(vault), "--provider", "hash")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith(("notes -> text index:", "chunks -> vectors:"))]
    assert any(re.fullmatch(r"notes -> text index: 21/21 \(100%\)(, [\d.]+/s, \d+s)?", line) for line in lines), lines
    assert "\x1b[" not in r.stderr  # no bar drawing, no colour codes
    (vault / "new-note.md").write_text("# A new note\n\nSomething to index.\n", encoding="utf-8")
    quiet = sunlib("index", str(vault), "--provider", "hash", "-q")
    assert quiet.returncode == 0 and "notes -> text index" not in quiet.stderr


def test_a_misspelt_key_in_a_config_section_is_an_error_naming_it(indexed: Path) -> None:
    (indexed / "sunlib.toml").write_text('[answer]\nreadr = "none"\n', encoding="utf-8")
    r = sunlib("search", "x", "--vault", str(indexed), env={"SUNLIB_EMBEDDING__PROVIDER": "hash"})
    assert r.returncode != 0 and "Traceback" not in r.stderr
    [line] = [x for x in r.stderr.splitlines() if x.strip()]
    assert "unknown setting answer.readr" in line and "sunlib.toml" in line
    r = sunlib("search", "x", "--vault", str(indexed), env={"SUNLIB_SEARCH__MODDE": "bm25"})
    assert r.returncode != 0 and "search.modde" in r.stderr.lower()


def test_status_finds_the_vault_of_a_first_index_that_has_not_finished(vault: Path) -> None:
    """The vault is remembered when `sunlib index` starts, not when it ends."""
    r = sunlib("index", str(vault), "--provider", "flaky", "-q")  # fails while embedding
    assert r.returncode != 0
    status = sunlib("status", "--json", env={"SUNLIB_EMBEDDING__PROVIDER": "flaky"})
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["counts"]["notes"] == 21 and data["vault"] == str(vault.resolve())


def test_each_verb_is_registered_by_the_module_the_lazy_loader_imports() -> None:
    """``sunlib VERB`` imports only ``VERBS[VERB]``'s module: it must be the one that registers VERB."""
    from sunlib.cli import MODULES, VERBS, load_verbs
    from sunlib.cli.app import app

    load_verbs()
    registered: dict[str, str] = {}
    for command in app.registered_commands:
        name = command.name or (command.callback.__name__ if command.callback else "")
        if not command.hidden and command.callback is not None:
            registered[name.replace("_", "-")] = command.callback.__module__.rsplit(".", 1)[-1]
    for group in app.registered_groups:
        assert group.name and group.typer_instance
        callbacks = [c.callback for c in group.typer_instance.registered_commands if c.callback]
        registered[group.name] = callbacks[0].__module__.rsplit(".", 1)[-1]
    assert registered == VERBS
    assert set(VERBS.values()) == set(MODULES)
