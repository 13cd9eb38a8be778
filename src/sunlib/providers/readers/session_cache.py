"""The reader's ONNX session, opened from the graph onnxruntime optimized for this machine.

Opening ``reader.onnx`` runs onnxruntime's graph optimizations (about 35 of the 55 ms it takes,
in every process that asks). The first process saves the graph they produce under
``$SUNLIB_HOME/cache/`` (onnxruntime's ``optimized_model_filepath``); later ones open that file
with the optimizations off, so the session runs the same graph: ``tests/test_reader.py`` checks
that its outputs are those of a session opened from ``reader.onnx``, bit for bit. The optimized
graph may hold kernels chosen for this CPU, so the file is keyed by the model's sha256, the
onnxruntime version and the CPU's name and flags: another machine sharing the home makes its own.
A cache that does not open is made again; a home that is not writable means no cache, not an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
from pathlib import Path
from typing import Any

from ...config import sunlib_home

FORMAT = 1


def open_session(model: Path, sha256: str, threads: int) -> Any:
    """An ``onnxruntime.InferenceSession`` of ``model`` (whose sha256 the caller has checked) on
    ``threads`` intra-op threads, from the cached optimized graph when there is one."""
    import onnxruntime as ort

    cached = _cache_file(sha256, ort.__version__)
    if cached is not None and cached.is_file():
        with contextlib.suppress(Exception):  # a damaged or foreign file: open the model as before
            return _session(ort, cached, threads, optimize=False)
    if cached is None:
        return _session(ort, model, threads, optimize=True)
    staging = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        session = _session(ort, model, threads, optimize=True, save=staging)
        staging.replace(cached)  # whole or not at all; a racing writer's file is just as good
        return session
    except OSError:
        return _session(ort, model, threads, optimize=True)
    finally:
        with contextlib.suppress(OSError):
            staging.unlink(missing_ok=True)


def _session(ort: Any, path: Path, threads: int, *, optimize: bool, save: Path | None = None) -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if save is not None:
        opts.optimized_model_filepath = str(save)
        opts.log_severity_level = 3  # not the warning that a saved optimized graph is for this machine only
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _cache_file(sha256: str, ort_version: str) -> Path | None:
    try:
        key = hashlib.sha256("\n".join([str(FORMAT), sha256, ort_version, _cpu()]).encode()).hexdigest()[:16]
        return sunlib_home() / "cache" / f"reader-{key}.onnx"
    except Exception:  # no home: open the model each time
        return None


def _cpu() -> str:
    """This CPU's name and instruction-set flags (Linux), else what ``platform`` says of it."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
        wanted = {"model name", "flags", "Features", "CPU part"}
        lines = [line.strip() for line in fh if line.split(":", 1)[0].strip() in wanted]
        return "\n".join(dict.fromkeys(lines))  # every core repeats them
    return f"{platform.machine()} {platform.processor()}"
