"""The command line at its edges: what a new user meets in the first hour.

``~nouser`` vaults, Ctrl-C during ``sunlib index`` (a real subprocess and SIGINT), a second
``sunlib serve`` on a busy port (after a first one that started on a vault with a hostile
note), ``ask --no-save``, refusal reasons whose numbers read equal, and the browser
test's screenshots kept out of the checkout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sunlib.answer.gate.refusals import refusal
from tests.support.clients import SCREENSHOTS_ENV, ctrl_c_default, screenshot_dir, sunlib
from tests.support.paths import ROOT, index_of

ROOT = ROOT
HASH = {"SUNLIB_EMBEDDING__PROVIDER": "hash"}
RUN_ID = re.compile(r"\brun_[0-9a-f]{16}\b")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_vault_under_an_unknown_user_is_one_line(tmp_path: Path) -> None:
    for args in (["index", "~nouser-sunlib/x"], ["search", "x", "--vault", "~nouser-sunlib/x"]):
        r = sunlib(*args)
        assert r.returncode == 1, r.stderr
        assert _lines(r.stderr) == [_lines(r.stderr)[0]] and "~nouser-sunlib/x" in r.stderr, r.stderr
        assert "internal error" not in r.stderr and "vault folder not found" in r.stderr


def test_ctrl_c_during_index_says_what_is_kept(tmp_path: Path) -> None:
    vault = tmp_path / "big"
    for i in range(400):  # enough that the run is still going when the signal comes (about 4 s of work)
        folder = vault / f"f{i // 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(f"Paragraph {j} of note {i}: words about ferns, moss and lichen." for j in range(12))
        (folder / f"n{i:04d}.md").write_text(f"# Note {i}\n\n{body}\n", "utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sunlib", "index", str(vault), "--provider", "hash", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **HASH},
        preexec_fn=ctrl_c_default,
    )
    db = index_of(vault) / "sunlib.db"
    deadline = time.monotonic() + 60
    while not db.exists() and proc.poll() is None:  # the run has reached sunlib's own code
        assert time.monotonic() < deadline, "index did not start"
        time.sleep(0.05)
    assert proc.poll() is None, "the index run finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: committed work is kept; run the command again to finish" in err
    assert "Traceback" not in err


LOST_INTERRUPTS = """
import time
from sunlib.cli import _Interrupts, keep_lost_interrupts
keep_lost_interrupts()
class Housekeeping:
    def __del__(self):  # Python prints what a __del__ raises and carries on
        raise KeyboardInterrupt
try:
    Housekeeping()
    end = time.monotonic() + 10  # the work the command would go on with
    while time.monotonic() < end:
        pass
    print("ran on")
except KeyboardInterrupt:
    print("interrupted", _Interrupts.seen)
"""


def test_a_ctrl_c_that_python_would_drop_still_interrupts() -> None:
    """A Ctrl-C landing in a ``__del__`` or a weakref callback (an import's lock has one) was printed
    as "Exception ignored" and lost, and the command ran on; the CLI raises it again."""
    done = subprocess.run(
        [sys.executable, "-c", LOST_INTERRUPTS], capture_output=True, text=True, timeout=60, preexec_fn=ctrl_c_default
    )
    assert done.stdout.split() == ["interrupted", "True"], done.stderr
    assert "Exception ignored" not in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_starts_with_a_hostile_note_and_a_busy_port_is_one_line(hash_vault: Path) -> None:
    (hash_vault / "deep.md").write_text("---\na: " + "[" * 3000 + "]" * 3000 + "\n---\n# Deep\n", "utf-8")
    port = _free_port()
    first = subprocess.Popen(
        [sys.executable, "-m", "sunlib", "serve", "--port", str(port), "--vault", str(hash_vault)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **HASH, "COLUMNS": "400"},
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert first.poll() is None, first.communicate()[1]
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/index/status", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "serve did not answer in time"
                time.sleep(0.2)
        assert r.status_code == 200

        second = sunlib("serve", "--port", str(port), "--no-index", "--vault", str(hash_vault), env=HASH)
        assert second.returncode == 1
        assert _lines(second.stderr) == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]
        assert second.stdout == ""
    finally:
        first.send_signal(signal.SIGINT)  # Ctrl-C: a normal stop, not an interrupted command
        _, err = first.communicate(timeout=30)
    assert "failed: deep.md: YAML frontmatter too large: nested deeper than 32 levels" in err
    assert first.returncode == 0 and _lines(err)[-1] == "sunlib stopped" and "interrupted" not in err, err


@pytest.mark.parametrize("as_json", [False, True])
def test_no_save_prints_no_run_id(hash_vault: Path, as_json: bool) -> None:
    extra = ["--json", "--explain"] if as_json else ["--explain"]
    q = "What is the SUNLIB_HOME environment variable used for?"
    r = sunlib("ask", q, "--vault", str(hash_vault), "--mode", "bm25", "--no-save", *extra, env=HASH)
    assert r.returncode in (0, 2), r.stderr
    if as_json:
        data = json.loads(r.stdout)
        assert data["run_id"] is None
    else:
        assert not RUN_ID.search(r.stdout), r.stdout
        assert "run not saved (--no-save)" in r.stdout and "run chain (not saved)" in r.stdout
    listed = sunlib("runs", "list", "--vault", str(hash_vault), env=HASH)
    assert "no saved runs" in listed.stdout


def test_refusal_numbers_never_read_equal() -> None:
    gate = refusal(
        "low_gate",
        gate_score=0.84896,
        threshold=0.849,
        top_cosine=0.81,
        coverage=0.5,
        sentence_cosine=None,
        missing_terms=[],
    )
    assert "gate score 0.84896 < 0.84900" in gate.message
    far = refusal(
        "low_gate",
        gate_score=0.31,
        threshold=0.421,
        top_cosine=None,
        coverage=0.2,
        sentence_cosine=None,
        missing_terms=(),
    )
    assert "gate score 0.310 < 0.421" in far.message  # as before when three digits differ
    ans = refusal("low_answerability", probability=0.4199, threshold=0.42, missing_terms=[])
    assert "answerability 0.4199 < 0.4200" in ans.message
    for r in (gate, ans):
        left, right = re.search(r"(\d\.\d+) < (\d\.\d+)", r.message).groups()  # type: ignore[union-attr]
        assert left != right


def test_screenshots_go_to_a_temp_folder_unless_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(SCREENSHOTS_ENV, raising=False)
    assert not screenshot_dir().resolve().is_relative_to(ROOT)
    monkeypatch.setenv(SCREENSHOTS_ENV, str(tmp_path / "shots"))
    assert screenshot_dir() == tmp_path / "shots"
    makefile = (ROOT / "Makefile").read_text("utf-8")
    target = makefile[makefile.index("\nscreenshots:") :].split("\n\n")[0]
    assert f"{SCREENSHOTS_ENV}=$(CURDIR)/docs/screenshots" in target and "tests/system/test_web_e2e.py" in target


@pytest.mark.parametrize(("verb", "blocked", "extra"), [("serve", "uvicorn", "serve"), ("mcp", "mcp", "mcp")])
def test_a_missing_extra_is_one_line_that_names_the_install(
    tmp_path: Path, verb: str, blocked: str, extra: str
) -> None:
    """Without the serve or mcp extra (its package blocked from import here), the verb says what to install."""
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "a.md").write_text("# A\n\ntext\n")
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from sunlib.cli import main\n"
        f"sys.argv = ['sunlib', {verb!r}, '--vault', sys.argv[1]]\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(vault)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'sunlib[{extra}]'" in lines[0] and "Traceback" not in r.stderr, r.stderr
