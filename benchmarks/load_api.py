"""Load test of the HTTP API: concurrent clients, and a search beside a writing LLM.

Indexes a vault (default: the bundled sample vault) with the configured embedding
provider (default e5; ``--provider hash`` for a quick run), then serves it with
``sunlib serve`` in a subprocess (its own process, so the clients' work does not
compete with the server's threads for the GIL), on a free 127.0.0.1 port, and runs:

1. search throughput: one client, then N concurrent clients, on ``POST /api/search``;
2. mixed traffic: the same, each client alternating search and ``POST /api/ask``
   (the offline extractive writer);
3. a search beside a writer: a second server whose writer is an OpenAI-compatible LLM,
   the slow fake of tests/harness/llm_server.py (a real local HTTP server) streaming each
   answer for ``--writer-seconds``. A search's latency alone, then while a streamed
   ask's writer streams (only searches that start after its first token and end
   before its Writer step count).

Clients are asyncio + httpx, one connection each, requests one after the other; the
texts rotate through the questions of the bundled QA set. Latency is as the client
sees it. The machine may be shared: compare the ratios of one run, not absolute
figures across runs. Prints the tables and writes them into docs/benchmarks.md
between ``<!-- load:begin -->`` and ``<!-- load:end -->``.

    python -m benchmarks.load_api                     # e5, 8 clients x 25 requests
    python -m benchmarks.load_api --provider hash     # quick look
    python -m benchmarks.load_api --clients 4 --requests 10 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.common import DOC, SAMPLE_VAULT, TEST_QA, free_port, write_block
from sunlib import Library
from sunlib.evaluate.qa import load_qa
from sunlib.trace.steps import Step
from tests.harness.llm_server import ChatServer, start  # the tests' fake OpenAI-compatible server

PATHS = {"search": "/api/search", "ask": "/api/ask"}
ASK_QUESTION = "What is the SUNLIB_HOME environment variable used for?"
WRITER_DELTAS = 40  # the fake LLM's answer: this many deltas, evenly spread over --writer-seconds
OPEN_GATE = {  # the writer server answers every question, so that every ask reaches its writer
    "SUNLIB_ANSWER__WRITER": "openai",
    "SUNLIB_ANSWER__ROUTER": "rules",
    "SUNLIB_ANSWER__GATE_THRESHOLD": "0",
    "SUNLIB_ANSWER__GATE_THRESHOLD_BM25": "0",
    "SUNLIB_ANSWER__CHECK_NAMES": "false",
    "SUNLIB_ANSWER__CHECK_ANSWER_TYPE": "false",
    "SUNLIB_LLM__MODEL": "slow-fake",
    "SUNLIB_LLM__MAX_RETRIES": "0",
}


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


class ServeProcess:
    """``sunlib serve --no-index`` on an indexed vault, in a subprocess on a free loopback port."""

    def __init__(self, vault: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "sunlib", "serve", "--vault", str(vault), "--port", str(self.port), "--no-index"]
        self.proc = subprocess.Popen(cmd, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)

    def __enter__(self) -> ServeProcess:
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"sunlib serve exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
            try:
                if httpx.get(f"{self.url}/api/index/status", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("sunlib serve did not start")
            time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# -- the clients ---------------------------------------------------------------------------------


async def request(client: httpx.AsyncClient, endpoint: str, text: str) -> Sample:
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
    return Sample(endpoint, (time.perf_counter() - t0) * 1000.0, error, refused)


async def one_client(
    url: str, n: int, start: int, texts: list[str], endpoints: tuple[str, ...], out: list[Sample]
) -> None:
    """n requests one after the other, cycling through ``endpoints``, texts rotating from ``start``."""
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        for i in range(n):
            out.append(await request(client, endpoints[(start + i) % len(endpoints)], texts[(start + i) % len(texts)]))


async def run_phase(
    name: str, url: str, clients: int, requests: int, texts: list[str], endpoints: tuple[str, ...]
) -> Phase:
    samples: list[Sample] = []
    stride = max(1, len(texts) // clients)
    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(url, requests, c * stride, texts, endpoints, samples) for c in range(clients)))
    return Phase(name, clients, time.perf_counter() - t0, samples)


async def load_phases(url: str, args: argparse.Namespace, texts: list[str]) -> list[Phase]:
    warm: list[Sample] = []
    await one_client(url, 4, 0, texts, ("search", "ask"), warm)  # loads the models; not counted
    if failed := [s.error for s in warm if s.error]:
        raise SystemExit(f"warm-up requests failed: {failed}")
    base_n = args.baseline_requests or 2 * args.requests
    phases = []
    for label, endpoints in (("search", ("search",)), ("mixed", ("search", "ask"))):
        phases.append(await run_phase(f"{label}, 1 client", url, 1, base_n, texts, endpoints))
        phases.append(
            await run_phase(f"{label}, {args.clients} clients", url, args.clients, args.requests, texts, endpoints)
        )
    return phases


# -- a search beside a streaming writer ------------------------------------------------------------


async def streamed_ask(url: str, started: asyncio.Event, written: asyncio.Event) -> None:
    """POST /api/ask/stream to its end; ``started`` at the first token, ``written`` at the Writer step."""
    body = {"question": ASK_QUESTION}
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        client.stream("POST", "/api/ask/stream", json=body) as stream,
    ):
        event = ""
        async for line in stream.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
                if event == "token":
                    started.set()
            elif line.startswith("data:") and event == "step" and json.loads(line[5:])["name"] == Step.WRITE:
                written.set()
    if not (started.is_set() and written.is_set()):
        raise SystemExit("the ask never streamed from its writer (refused or failed)")


async def beside_writer(url: str, rounds: int, solo_n: int, texts: list[str]) -> tuple[list[Sample], list[Sample]]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for text in texts[:3]:
            await request(client, "search", text)  # warm-up
        solo = [await request(client, "search", texts[i % len(texts)]) for i in range(solo_n)]
        during: list[Sample] = []
        i = 0
        for _ in range(rounds):
            started, written = asyncio.Event(), asyncio.Event()
            ask = asyncio.create_task(streamed_ask(url, started, written))
            await asyncio.wait_for(started.wait(), 60)
            while not written.is_set():
                sample = await request(client, "search", texts[i % len(texts)])
                i += 1
                if not written.is_set():
                    during.append(sample)
            await ask
    return solo, during


def fake_llm(writer_seconds: float) -> tuple[ChatServer, Any]:
    chat, stop = start()
    chat.writer.reply = "SUNLIB_HOME names the folder where sunlib keeps the indexes of vaults it cannot write to. " * 2
    chat.writer.delta_size = size = -(-len(chat.writer.reply) // WRITER_DELTAS)
    chat.writer.delta_delay_s = writer_seconds / -(-len(chat.writer.reply) // size)
    return chat, stop


def cpu_capacity(rounds: int = 40) -> float:
    """How many cores this run could use: the work two GIL-free threads (SHA-256 of 1 MB)
    get done in the time one thread does half of it; 2.0 on two idle cores, 1.0 when the
    machine's other work leaves about one."""
    data = b"x" * (1 << 20)

    def work(n: int) -> None:
        for _ in range(n):
            hashlib.sha256(data).digest()

    t0 = time.perf_counter()
    work(rounds)
    one = time.perf_counter() - t0
    threads = [threading.Thread(target=work, args=(rounds,)) for _ in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 2 * one / (time.perf_counter() - t0)


# -- the report ----------------------------------------------------------------------------------


def fmt(x: float) -> str:
    return "n/a" if x != x else (f"{x:.0f}" if x >= 100 else f"{x:.1f}")


def row(name: str, endpoint: str, samples: list[Sample]) -> str:
    s = stats(samples)
    refused = str(s["refused"]) if endpoint == "ask" else ""
    latency = f"{fmt(s['p50'])} | {fmt(s['p95'])} | {fmt(s['max'])}"
    return f"| {name} | {endpoint} | {s['n']} | {s['errors']} | {refused} | {latency} |"


def render(info: dict[str, Any], phases: list[Phase], solo: list[Sample], during: list[Sample]) -> str:
    lines = [
        f"Command: `{info['command']}` ({info['date']}, {info['machine']}).",
        "",
        f"Setup: {info['vault']} ({info['notes']} notes, {info['chunks']} chunks) indexed with `{info['provider']}`"
        f" into a temporary index, served by `sunlib serve` in its own process (dense engine `numpy`, reranker"
        f" `{info['reranker']}`); the clients run in another process, one connection each, requests one after"
        f" the other, over the {info['texts']} questions of the bundled QA set. Latency is as the client sees"
        f" it, in ms; warm-up requests are excluded. The machine is shared with other work: its 1-minute load"
        f" average was {info['loadavg'][0]:.2f} before and {info['loadavg'][1]:.2f} after, and two GIL-free"
        f" threads got {info['capacity'][0]:.2f}x the work of one done before the phases and"
        f" {info['capacity'][1]:.2f}x after (2.0x on two idle cores): that bounds what more clients can gain."
        f" Compare the ratios of this run, not absolute figures across runs.",
        "",
        "| phase | endpoint | requests | errors | refused (ask) | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for phase in phases:
        endpoints = ("search", "ask") if phase.name.startswith("mixed") else ("search",)
        lines += [row(phase.name, e, phase.of(e)) for e in endpoints]
    search1, search_n, mixed1, mixed_n = phases
    search_ratio = search_n.throughput / search1.throughput
    mixed_ratio = mixed_n.throughput / mixed1.throughput
    solo_p50, during_p50 = stats(solo)["p50"], stats(during)["p50"]
    lines += [
        row("search alone (writer server)", "search", solo),
        row(f"search while a writer streams ({info['writer_seconds']:.0f} s)", "search", during),
        "",
        f"- Search throughput: {search1.throughput:.1f} requests/s with 1 client, {search_n.throughput:.1f} with"
        f" {search_n.clients} clients: **{search_ratio:.2f}x** (goal: at least 1.6x on two cores).",
        f"- Mixed search and ask (extractive writer): {mixed1.throughput:.1f} against {mixed_n.throughput:.1f}"
        f" requests/s: {mixed_ratio:.2f}x.",
        f"- A search while an ask's LLM writer streams for {info['writer_seconds']:.0f} s (the fake"
        f" OpenAI-compatible server of tests/harness/llm_server.py over real HTTP, {info['rounds']} asks): p50"
        f" {fmt(during_p50)} ms against {fmt(solo_p50)} ms alone: **{during_p50 / solo_p50:.2f}x** (goal: at"
        f" most 1.5x).",
        "",
        "Reading it: requests run in parallel on the server's worker threads, each on its own SQLite connection;"
        " no lock is held across a request or a provider call, so a search never waits for a writer. More"
        " clients gain at most the cores the machine leaves free (the capacity figure above), less the Python"
        " work between the GIL-free parts of a search (the query embedding, SQLite, numpy). Errors are requests"
        " that did not come back 200.",
    ]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--vault", type=Path, default=SAMPLE_VAULT, help="default: the bundled sample vault")
    ap.add_argument("--provider", default="e5", help="embedding provider (default e5; hash for a quick run)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=25, help="requests per client")
    ap.add_argument("--baseline-requests", type=int, default=0, help="single-client requests (default 2x --requests)")
    ap.add_argument("--writer-seconds", type=float, default=2.0, help="how long the fake LLM streams an answer")
    ap.add_argument("--rounds", type=int, default=3, help="streamed asks to search beside")
    ap.add_argument("--index-dir", type=Path, help="keep the index here (reused by the next run; default: temporary)")
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--no-write", action="store_true", help="print only, leave the doc alone")
    args = ap.parse_args()
    if args.clients < 1 or args.requests < 2 or args.rounds < 1:
        ap.error("--clients and --rounds must be at least 1 and --requests at least 2")
    return args


def command(args: argparse.Namespace) -> str:
    cmd = "python -m benchmarks.load_api" + (f" --provider {args.provider}" if args.provider != "e5" else "")
    if (args.clients, args.requests) != (8, 25):
        cmd += f" --clients {args.clients} --requests {args.requests}"
    if (args.writer_seconds, args.rounds) != (2.0, 3):
        cmd += f" --writer-seconds {args.writer_seconds:g} --rounds {args.rounds}"
    return cmd


def main() -> None:
    args = parse()
    texts = [case.question for case in load_qa(TEST_QA)]
    with tempfile.TemporaryDirectory(prefix="sunlib-load-") as tmp:
        index_dir = args.index_dir or Path(tmp) / "index"
        with Library.open(args.vault, embedding={"provider": args.provider}, index_dir=index_dir) as lib:
            t0 = time.perf_counter()
            print(f"indexing {lib.vault} with {args.provider} ...", flush=True)
            lib.index()
            print(f"indexed in {time.perf_counter() - t0:.1f} s", flush=True)
            status, reranker = lib.status().as_dict(), lib.settings.answer.reranker
        env = {"SUNLIB_HOME": str(Path(tmp) / "home"), "SUNLIB_INDEX_DIR": str(index_dir)}
        env["SUNLIB_EMBEDDING__PROVIDER"] = args.provider
        load_before, capacity_before = os.getloadavg()[0], cpu_capacity()
        with ServeProcess(lib.vault, env) as server:
            phases = asyncio.run(load_phases(server.url, args, texts))
        chat, stop = fake_llm(args.writer_seconds)
        try:
            with ServeProcess(lib.vault, {**env, **OPEN_GATE, "SUNLIB_LLM__BASE_URL": chat.base_url}) as server:
                solo, during = asyncio.run(beside_writer(server.url, args.rounds, 2 * args.requests, texts))
        finally:
            stop()
        load_after, capacity_after = os.getloadavg()[0], cpu_capacity()

    info = {
        "command": command(args),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPU cores, Python {platform.python_version()}",
        "vault": "the bundled sample vault" if args.vault == SAMPLE_VAULT else f"`{args.vault}`",
        "notes": status["counts"]["notes"],
        "chunks": status["counts"]["chunks"],
        "provider": args.provider,
        "reranker": reranker,
        "texts": len(texts),
        "loadavg": (load_before, load_after),
        "capacity": (capacity_before, capacity_after),
        "writer_seconds": args.writer_seconds,
        "rounds": args.rounds,
    }
    section = render(info, phases, solo, during)
    print(section)
    for phase in phases:
        kinds = {e: stats(phase.of(e))["error_kinds"] for e in PATHS}
        if any(kinds.values()):
            print(f"errors in {phase.name}: {kinds}")
    if not args.no_write:
        write_block("load", section, "HTTP API under load", doc=args.doc)
        print(f"wrote {args.doc}")


if __name__ == "__main__":
    main()
