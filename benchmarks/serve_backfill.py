"""Search latency of a running ``sunlib serve`` while e5 fills in behind it, against the same server quiet.

    python -m benchmarks.serve_backfill ../shared/data/fastapi_docs/en [--queries 60] [--work DIR]

The vault (the FastAPI docs in English by default: about 2,000 chunks) is copied to ``WORK`` and
indexed with ``sunlib index --fast-only``: text and the fast tier, every e5 vector still to come,
as a big first index stands minutes in. Two servers are then started in turn on copies of that
same index, on a free loopback port: *quiet* with ``[index] embed = false`` (nothing is embedded),
and *backfill* with the defaults, whose lifespan queues the e5 backfill (``workers = "auto"``, its
threads at ``bulk_nice``). Against each, one client sends the same hybrid searches one after
another (the notes' titles, in turn) and times each whole HTTP request; for the backfill server
only while e5 is still running. The target: the backfill p95 at most 1.5x the
quiet p95. Writes its block of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmarks.common import ROOT, free_port, write_block


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def serve(vault: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "sunlib", "serve", "--vault", str(vault), "--port", str(port), "--no-index"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise SystemExit("sunlib serve exited")
        try:
            if httpx.get(f"{url}/api/index/status", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("sunlib serve did not start")
        time.sleep(0.2)


def e5_running(url: str) -> bool:
    status = httpx.get(f"{url}/api/index/status", timeout=30).json()
    rows = [e for e in status.get("embedding", []) if e.get("role") == "main"]
    return bool(rows) and rows[0]["embedded"] < rows[0]["total"]


def timed_searches(url: str, queries: list[str], n: int, while_running: bool) -> list[float]:
    out: list[float] = []
    with httpx.Client(timeout=60) as client:
        client.post(f"{url}/api/search", json={"query": queries[0], "mode": "hybrid"})  # models loaded
        for i in range(n):
            if while_running and i % 10 == 0 and not e5_running(url):
                break
            t0 = time.perf_counter()
            r = client.post(f"{url}/api/search", json={"query": queries[i % len(queries)], "mode": "hybrid"})
            out.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200, r.text
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "serve_backfill")
    args = ap.parse_args()
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    vault = work / "vault"
    shutil.copytree(args.vault, vault)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SUNLIB_")} | {"SUNLIB_HOME": str(work / "home")}
    fast_only = work / "index-fast"
    env = base | {"SUNLIB_INDEX_DIR": str(fast_only)}
    subprocess.run([sys.executable, "-m", "sunlib", "index", str(vault), "--fast-only", "-q"], env=env, check=True)
    titles = [p.stem.replace("-", " ") for p in sorted(vault.rglob("*.md"))][:40]

    results: dict[str, list[float]] = {}
    for arm, extra in (("quiet", {"SUNLIB_INDEX__EMBED": "false"}), ("backfill", {})):
        index = work / f"index-{arm}"
        shutil.copytree(fast_only, index)
        proc, url = serve(vault, base | {"SUNLIB_INDEX_DIR": str(index)} | extra)
        try:
            if arm == "backfill":
                deadline = time.monotonic() + 60
                while not e5_running(url) and time.monotonic() < deadline:
                    time.sleep(0.5)
            results[arm] = timed_searches(url, titles, args.queries, while_running=arm == "backfill")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    quiet, busy = results["quiet"], results["backfill"]
    ratio = p95(busy) / p95(quiet)
    body = "\n".join(
        [
            f"`python -m benchmarks.serve_backfill {args.vault} --queries {args.queries}`: hybrid `/api/search`, one "
            f"client, {os.cpu_count()} cores; the backfill server embeds with the default workers and bulk_nice.",
            "",
            "| server | searches | p50 | p95 |",
            "|---|---|---|---|",
            f"| quiet (`[index] embed = false`) | {len(quiet)} | {statistics.median(quiet):.0f} ms "
            f"| {p95(quiet):.0f} ms |",
            f"| while e5 fills in | {len(busy)} | {statistics.median(busy):.0f} ms | {p95(busy):.0f} ms |",
            "",
            f"p95 during the backfill / quiet p95: **{ratio:.2f}x** (target: at most 1.5x).",
        ]
    )
    print(body)
    write_block(
        "serve-backfill",
        body,
        "Searching while e5 fills in",
        "A server started on a first index serves on the fast tier at once; e5 fills in behind it.",
    )


if __name__ == "__main__":
    main()
