"""Load test of the HTTP API: concurrent clients on POST /api/search and POST /api/ask.

Indexes a vault (default: the bundled sample vault) into a temporary index folder
with the configured embedding provider (default e5; ``--provider hash`` for a quick
run), serves ``create_app`` on a uvicorn server on a free 127.0.0.1 port in a thread
(settings as ``sunlib serve`` uses them), then runs, in the same process and run:

1. a single-client baseline (requests one after the other), then
2. N concurrent clients (asyncio + httpx, one connection each), each sending its
   requests one after the other.

Every client alternates search and ask; the texts rotate through the questions of
the bundled QA set (English and Chinese, answerable and not). Reports p50/p95/max
latency (as the client sees it), errors and refusals per endpoint and phase, the
throughput of each phase and the concurrent/baseline ratios; prints a table and
writes it into docs/benchmarks.md between ``<!-- load:start -->`` and
``<!-- load:end -->`` (the section is appended when the markers are absent).

    python benchmarks/load_api.py                     # e5, 8 clients x 25 requests
    python benchmarks/load_api.py --provider hash     # quick look
    python benchmarks/load_api.py --clients 4 --requests 10 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn

from sunlib import Library
from sunlib.config import merge
from sunlib.evaluate.qa import load_qa
from sunlib.server import create_app

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SAMPLE_VAULT = ROOT / "src" / "sunlib" / "sample_vault"
QA_SET = ROOT / "src" / "sunlib" / "qa" / "sample_vault.jsonl"
START, END = "<!-- load:start -->", "<!-- load:end -->"
HEADING = "## HTTP API under load"
ENDPOINTS = ("search", "ask")
PATHS = {"search": "/api/search", "ask": "/api/ask"}


@dataclass
class Sample:
    endpoint: str
    ms: float
    error: str | None
    refused: bool = False


@dataclass
class Phase:
    name: str
    clients: int
    wall_s: float
    samples: list[Sample]

    def of(self, endpoint: str) -> list[Sample]:
        return [s for s in self.samples if s.endpoint == endpoint]

    @property
    def throughput(self) -> float:
        return len(self.samples) / self.wall_s if self.wall_s else 0.0


def stats(samples: list[Sample]) -> dict[str, Any]:
    ok = np.array([s.ms for s in samples if s.error is None], dtype=float)
    errors: dict[str, int] = {}
    for s in samples:
        if s.error is not None:
            errors[s.error] = errors.get(s.error, 0) + 1
    return {
        "n": len(samples),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "refused": sum(s.refused for s in samples),
        "p50": float(np.percentile(ok, 50)) if ok.size else float("nan"),
        "p95": float(np.percentile(ok, 95)) if ok.size else float("nan"),
        "max": float(ok.max()) if ok.size else float("nan"),
    }


# -- the server ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerThread:
    """``create_app(library)`` on uvicorn, 127.0.0.1 and a free port, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="uvicorn")

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


# -- the clients ---------------------------------------------------------------------------------


async def one_client(url: str, n: int, start: int, texts: list[str], out: list[Sample]) -> None:
    """n requests one after the other, alternating search and ask, texts rotating from ``start``."""
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        for i in range(n):
            endpoint = ENDPOINTS[(start + i) % 2]
            text = texts[(start + i) % len(texts)]
            body = {"query": text} if endpoint == "search" else {"question": text}
            t0 = time.perf_counter()
            error, refused = None, False
            try:
                r = await client.post(PATHS[endpoint], json=body)
                if r.status_code != 200:
                    error = f"HTTP {r.status_code}"
                elif endpoint == "ask":
                    refused = bool(r.json().get("refused"))
            except httpx.HTTPError as exc:
                error = type(exc).__name__
            out.append(Sample(endpoint, (time.perf_counter() - t0) * 1000.0, error, refused))


async def run_phase(name: str, url: str, clients: int, requests: int, texts: list[str]) -> Phase:
    samples: list[Sample] = []
    stride = max(1, len(texts) // clients)
    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(url, requests, c * stride, texts, samples) for c in range(clients)))
    return Phase(name, clients, time.perf_counter() - t0, samples)


# -- the report ----------------------------------------------------------------------------------


def fmt(x: float) -> str:
    return "n/a" if x != x else (f"{x:.0f}" if x >= 100 else f"{x:.1f}")


def render(info: dict[str, Any], base: Phase, load: Phase) -> str:
    lines = [
        START,
        f"Command: `{info['command']}` ({info['date']}, {info['machine']}).",
        "",
        f"Setup: {info['vault']} ({info['notes']} notes, {info['chunks']} chunks) indexed with `{info['provider']}`"
        f" into a temporary index; `create_app` on uvicorn at 127.0.0.1 in the same process, settings as"
        f" `sunlib serve` uses them (dense engine `{info['dense_engine']}`, writer `{info['writer']}`,"
        f" reranker `{info['reranker']}`). Each client sends its requests one after the other, alternating"
        f" `POST /api/search` and `POST /api/ask`, over the {info['texts']} questions of the bundled QA set"
        f" (English and Chinese, answerable and not). Latency is as the client sees it, in ms. Warm-up requests"
        f" (model load) are excluded. The machine is shared: its 1-minute load average was"
        f" {info['loadavg'][0]:.2f} before and {info['loadavg'][1]:.2f} after the measured phases (the clients"
        f" run in the server's process and count in it).",
        "",
        "| phase | endpoint | requests | errors | refused (ask) | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for phase in (base, load):
        for endpoint in ENDPOINTS:
            s = stats(phase.of(endpoint))
            refused = str(s["refused"]) if endpoint == "ask" else ""
            lines.append(
                f"| {phase.name} | {endpoint} | {s['n']} | {s['errors']} | {refused} |"
                f" {fmt(s['p50'])} | {fmt(s['p95'])} | {fmt(s['max'])} |"
            )
    lines += ["", "| endpoint | p50 ratio (load / baseline) | p95 ratio (load / baseline) |", "|---|---|---|"]
    for endpoint in ENDPOINTS:
        b, c = stats(base.of(endpoint)), stats(load.of(endpoint))
        lines.append(f"| {endpoint} | {c['p50'] / b['p50']:.2f}x | {c['p95'] / b['p95']:.2f}x |")
    ratio = load.throughput / base.throughput if base.throughput else float("nan")
    p50s = [stats(load.of(e))["p50"] / stats(base.of(e))["p50"] for e in ENDPOINTS]
    p50_low, p50_high = min(p50s), max(p50s)
    lines += [
        "",
        f"Throughput (search and ask together): {base.throughput:.1f} requests/s with 1 client,"
        f" {load.throughput:.1f} requests/s with {load.clients} clients ({ratio:.2f}x).",
        "",
        f"Reading it: the server handles one request at a time (one SQLite connection behind a lock; query"
        f" embedding, retrieval and the writer all run under it), so concurrent clients queue rather than run"
        f" in parallel. With {load.clients} clients the throughput changed {ratio:.2f}x and each request waited"
        f" {p50_low:.1f}-{p50_high:.1f}x longer at the median. Errors are requests that did not come back 200.",
        END,
    ]
    return "\n".join(lines)


def write_doc(section: str, path: Path) -> None:
    """Replace what lies between the markers (inclusive); append the section when they are absent."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if START in text and END in text and text.index(START) < text.index(END):
        before, rest = text.split(START, 1)
        after = rest.split(END, 1)[1]
        text = before + section + after
    else:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{section}\n"
    path.write_text(text, encoding="utf-8")


# -- main ----------------------------------------------------------------------------------------


async def measure(url: str, args: argparse.Namespace, texts: list[str]) -> tuple[Phase, Phase]:
    warm: list[Sample] = []
    await one_client(url, 4, 0, texts, warm)  # loads the query model and the writer; not counted
    failed = [s for s in warm if s.error]
    if failed:
        raise SystemExit(f"warm-up requests failed: {[s.error for s in failed]}")
    base = await run_phase("1 client", url, 1, args.baseline_requests or 2 * args.requests, texts)
    load = await run_phase(f"{args.clients} clients", url, args.clients, args.requests, texts)
    return base, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vault", type=Path, default=SAMPLE_VAULT, help="default: the bundled sample vault")
    ap.add_argument("--provider", default="e5", help="embedding provider (default e5; hash for a quick run)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=25, help="requests per client")
    ap.add_argument("--baseline-requests", type=int, default=0, help="single-client requests (default 2x --requests)")
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--no-write", action="store_true", help="print only, leave the doc alone")
    args = ap.parse_args()
    if args.clients < 1 or args.requests < 2:
        ap.error("--clients must be at least 1 and --requests at least 2")

    texts = [case.question for case in load_qa(QA_SET)]
    with tempfile.TemporaryDirectory(prefix="sunlib-load-") as tmp:
        lib = Library.open(args.vault, embedding={"provider": args.provider}, index_dir=Path(tmp) / "index")
        if lib.settings.server.dense_engine_numpy:  # as `sunlib serve` does
            lib.settings = merge(lib.settings, search={"dense_engine": "numpy"})
        t0 = time.perf_counter()
        print(f"indexing {lib.vault} with {args.provider} ...", flush=True)
        report = lib.index()
        print(f"indexed in {time.perf_counter() - t0:.1f} s ({len(report.added)} notes)", flush=True)
        status = lib.status()
        with ServerThread(create_app(lib)) as server:
            load_before = os.getloadavg()[0]
            base, load = asyncio.run(measure(server.url, args, texts))
            load_after = os.getloadavg()[0]
        lib.close()

    vault_name = "the bundled sample vault" if args.vault == SAMPLE_VAULT else f"`{args.vault}`"
    command = "python benchmarks/load_api.py" + (f" --provider {args.provider}" if args.provider != "e5" else "")
    if (args.clients, args.requests) != (8, 25):
        command += f" --clients {args.clients} --requests {args.requests}"
    info = {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPU cores, Python {platform.python_version()}",
        "vault": vault_name,
        "notes": status["counts"]["notes"],
        "chunks": status["counts"]["chunks"],
        "provider": args.provider,
        "dense_engine": lib.settings.search.dense_engine,
        "writer": lib.settings.answer.writer,
        "reranker": lib.settings.answer.reranker,
        "texts": len(texts),
        "loadavg": (load_before, load_after),
    }
    section = render(info, base, load)
    print(section)
    for phase in (base, load):
        kinds = {e: stats(phase.of(e))["error_kinds"] for e in ENDPOINTS}
        if any(kinds.values()):
            print(f"errors in {phase.name}: {kinds}")
    if not args.no_write:
        write_doc(section, args.doc)
        print(f"wrote {args.doc}")


if __name__ == "__main__":
    main()
