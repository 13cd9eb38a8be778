"""Two-pass indexing: how soon a big vault is searchable by meaning, and what the fast tier ranks.

    python -m benchmarks.two_pass speed ../shared/data [--watch 120]
    python -m benchmarks.two_pass memory ../shared/data [--copies 6] [--watch 60]
    python -m benchmarks.two_pass backfill ../shared/data [--copies 6] [--watch 1200] [--every 120]
    python -m benchmarks.two_pass quality ../shared/data XLANG [--skip-e5]

``speed`` writes every document of the corpora under ``../shared/data`` as its own note (SciFact,
RGB, CMRC2018, DRCD, SQuAD 2.0 half-dev, XQuAD en and zh, plus the FastAPI docs as they are), runs
``sunlib index`` on it in a child process (default settings, fresh ``SUNLIB_HOME``) and notes when
the text phase ends and when the fast tier is complete (the "search ready" line). At that moment a
second process runs a hybrid ``sunlib search`` and checks that the fast-tier route ranked. Then e5
runs for ``--watch`` seconds, its pace is read from ``sunlib status --json``, and the child is
stopped. The baseline is the same run's own e5 pace: before the fast tier, dense search waited for
e5 to embed every chunk. Peak RSS is the index process's ``VmHWM``.

``memory`` runs that first index on the corpora and on ``--copies`` copies of them (about 110k
chunks for 6) and compares the index process's peak RSS: streamed work holds the same memory
whatever the vault's size. ``backfill`` runs it on the copies only and samples the process's
anonymous RSS and e5's progress every ``--every`` seconds of a longer ``--watch``: flat while e5
embeds, if e5 streams.

``quality`` measures, in one ``SUNLIB_HOME``, nDCG@10 and recall@5 of BM25, the fast tier alone,
hybrid while only the fast tier is there (``--fast-only``: BM25 + the fast-tier route, as search
stands minutes into a first index), and, unless ``--skip-e5``, e5 alone and hybrid with e5 (the
backfill done). Sets: SciFact test, RGB zh_int test and the FastAPI cross-language check (XLANG is
``benchmarks/crosslang_pairs.py``'s output; zh->en on ``fastapi-xlang-en`` ``zh-test``). None of
them was used to make or tune the fast tier (tools/static/learn.py). Both write their block of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import write_block

SUNLIB = [sys.executable, "-m", "sunlib"]
CORPORA = [
    ("scifact", "corpus.jsonl"),
    ("rgb_zh_int", "corpus.jsonl"),
    ("cmrc2018", "corpus.jsonl"),
    ("drcd", "corpus_dev.jsonl"),
    ("drcd", "corpus_test.jsonl"),
    ("squad2_dev_half", "corpus.jsonl"),
    ("xquad", "corpus_en.jsonl"),
    ("xquad", "corpus_zh.jsonl"),
]


def build_vault(data: Path, vault: Path, copies: int = 1) -> int:
    """Every corpus document as a note (``copies`` times: a copy after the first ends with its
    number, so that its chunks are new texts to embed, not hits of the embedding cache)."""
    n = 0
    for copy in range(copies):
        for folder, name in CORPORA:
            with (data / folder / name).open(encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line)
                    title = " ".join(str(row.get("title") or "").split())
                    path = vault / folder / name.removesuffix(".jsonl") / f"{n // 1000:04d}" / f"{n:07d}.md"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tail = f"\n\nCopy {copy}.\n" if copy else "\n"
                    path.write_text(
                        (f"# {title}\n\n" if title else "") + str(row["text"]).strip() + tail, encoding="utf-8"
                    )
                    n += 1
    for md in sorted((data / "fastapi_docs").rglob("*.md")):
        dest = vault / "fastapi" / md.relative_to(data / "fastapi_docs")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(md.read_bytes())
        n += 1
    return n


def _status_mb(pid: int, key: str) -> float | None:
    """One memory figure of ``/proc/PID/status`` (``VmHWM``, ``RssAnon``...) in MB; None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _rss_peak_mb(pid: int) -> float | None:
    return _status_mb(pid, "VmHWM")


class AnonPeak:
    """The highest anonymous RSS (``RssAnon``: heap and arrays, not the pages of files it maps,
    such as SQLite's memory-mapped index) of a process, sampled every 0.2 s on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            now = _status_mb(self.pid, "RssAnon")
            if now is None:
                return
            self.peak = max(self.peak, now)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


@dataclass
class Run:
    notes: int
    chunks: int
    text_done: float
    ready: float
    search_s: float
    rate: float
    eta_s: float
    pending: int
    rss_ready: float | None  # the index process's peak RSS when the fast tier was complete
    rss: float | None  # ... and after ``watch`` seconds of e5
    anon_ready: float  # the peak anonymous RSS (AnonPeak) when the fast tier was complete
    anon: float  # ... and after the watch
    # every ``every`` seconds of the watch: (seconds of e5, chunks still without e5, anonymous RSS now, peak RSS)
    samples: list[tuple[float, int, float, float]]


def _status(vault: Path, env: dict[str, str]) -> dict[str, Any]:
    argv = [*SUNLIB, "status", "--vault", str(vault), "--json"]
    return dict(json.loads(subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout))


def _main_space(status: dict[str, Any]) -> dict[str, Any]:
    return dict(next(e for e in status["embedding"] if e["role"] == "main"))


def first_index(data: Path, watch: float, copies: int = 1, every: float = 0.0) -> Run:
    """``sunlib index`` on a new vault of the corpora: when each phase ends, a search at the moment
    the fast tier is complete, then e5's pace and the peak RSS after ``watch`` seconds of it (and,
    with ``every``, e5's progress and the anonymous RSS every so many seconds of it)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        vault = root / "vault"
        notes = build_vault(data, vault, copies)
        env = {**os.environ, "SUNLIB_HOME": str(root / "home")}
        t0 = time.monotonic()
        child = subprocess.Popen(
            [*SUNLIB, "index", str(vault)], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        assert child.stderr is not None
        anon = AnonPeak(child.pid)
        text_done = ready = None
        for line in child.stderr:
            if text_done is None and re.match(r"notes -> text index: (\d+)/\1 ", line):
                text_done = time.monotonic() - t0
            if line.startswith("search ready"):
                ready = time.monotonic() - t0
                break
        if ready is None:
            raise SystemExit(f"sunlib index ended before the fast tier was complete (exit {child.wait()})")
        rss_ready, anon_ready = _rss_peak_mb(child.pid), anon.peak
        q0 = time.monotonic()
        found = subprocess.run(
            [
                *SUNLIB,
                "search",
                "how do path parameters declare their type",
                "--vault",
                str(vault),
                "--json",
                "--explain",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        search_s = time.monotonic() - q0
        result = json.loads(found.stdout)
        steps = [s["name"] for s in result["trace"]["steps"]]
        assert "Fast-tier Retrieval" in steps, steps
        samples: list[tuple[float, int, float, float]] = []
        w0 = time.monotonic()
        while every and time.monotonic() - w0 + every <= watch:
            time.sleep(every)
            pending = int(_main_space(_status(vault, env))["pending"])
            now, peak = _status_mb(child.pid, "RssAnon"), _rss_peak_mb(child.pid)
            samples.append((time.monotonic() - w0, pending, now or 0.0, peak or 0.0))
        time.sleep(max(0.0, watch - (time.monotonic() - w0)))
        status = _status(vault, env)
        rss, anon_peak = _rss_peak_mb(child.pid), anon.stop()
        child.terminate()
        child.wait()
    main = _main_space(status)
    return Run(
        notes,
        status["counts"]["chunks"],
        text_done or 0.0,
        ready,
        search_s,
        main["rate"] or float("nan"),
        main["eta_s"] or 0.0,
        main["pending"],
        rss_ready,
        rss,
        anon_ready,
        anon_peak,
        samples,
    )


def speed(data: Path, watch: float) -> None:
    r = first_index(data, watch)
    before = r.text_done + r.chunks / r.rate
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} with `python -m benchmarks.two_pass speed ../shared/data "
            f"--watch {watch:g}` (2 cores, default settings: e5 main space, `use` cross-language space, "
            "one thread each).",
            "",
            "| | value |",
            "|---|---|",
            f"| notes / chunks | {r.notes:,} / {r.chunks:,} |",
            f"| text phase done (BM25 works) | {r.text_done:.0f} s |",
            f'| fast tier done: dense, hybrid and cross-language search work ("search ready") | **{r.ready:.0f} s** |',
            f"| a hybrid `sunlib search` at that moment (whole process), fast-tier route ranked | {r.search_s:.1f} s |",
            f"| e5 pace behind it, from `sunlib status` | {r.rate:.1f} chunks/s, eta {r.eta_s:.0f} s for "
            f"{r.pending:,} chunks |",
            f"| before the fast tier: dense search waited for e5 on every chunk | {before:.0f} s "
            f"(text + {r.chunks:,} / {r.rate:.1f}) |",
            f"| ratio: time to dense search, before / now | **{before / r.ready:.0f}x** |",
            f"| index process peak RSS (VmHWM) | {r.rss:.0f} MB |" if r.rss else "| index process peak RSS | n/a |",
        ]
    )
    write_block(
        "two-pass-speed",
        body,
        "Two-pass indexing: time to search a big vault",
        "Every document of the corpora under `../shared/data` as its own note: how soon search by meaning "
        "works on a first index.",
    )
    print(body)


def memory(data: Path, watch: float, copies: int) -> None:
    """The index process's peak RSS on the corpora once and ``copies`` times, the same ``watch`` of
    e5 after the fast tier: a pipeline that streams holds the same memory for either."""
    runs = [first_index(data, watch, 1), first_index(data, watch, copies)]
    rows = [
        f"| {r.notes:,} / {r.chunks:,} | {r.ready:.0f} s | {r.rss_ready or 0:.0f} / {r.anon_ready:.0f} MB "
        f"| {r.rss or 0:.0f} / {r.anon:.0f} MB | {r.rate:.1f} chunks/s |"
        for r in runs
    ]
    small, big = runs
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} with `python -m benchmarks.two_pass memory ../shared/data "
            f"--copies {copies} --watch {watch:g}` (2 cores, default settings; each copy's chunks are new texts).",
            "",
            "| notes / chunks | search ready | peak RSS / anonymous then | the same after the e5 watch | e5 pace |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"{big.chunks:,} chunks against {small.chunks:,} ({big.chunks / small.chunks:.1f}x the chunks), after "
            f"the watch: peak RSS **{(big.rss or 0) / (small.rss or 1):.2f}x**, "
            f"anonymous **{big.anon / small.anon:.2f}x** (the rest is pages of mapped files: the libraries, "
            "the models' files and SQLite's memory-mapped index, up to 1 GB).",
        ]
    )
    write_block(
        "two-pass-memory",
        body,
        "Two-pass indexing: memory on a bigger vault",
        "The index process's peak RSS on the corpora and on several copies of them, the same run.",
    )
    print(body)


def backfill(data: Path, watch: float, copies: int, every: float) -> None:
    """The anonymous RSS of the index process while e5 fills in behind the fast tier on ``copies``
    copies of the corpora, every ``every`` seconds for ``watch`` seconds: flat if e5 streams."""
    run = first_index(data, watch, copies, every)
    first = run.samples[0]
    rows = [
        f"| {t / 60:.1f} | {first[1] - pending:,} | {now:.0f} MB | {peak:.0f} MB |"
        for t, pending, now, peak in run.samples
    ]
    done = run.samples[-1]
    embedded = first[1] - done[1]
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} with `python -m benchmarks.two_pass backfill ../shared/data "
            f"--copies {copies} --watch {watch:g} --every {every:g}` (2 cores, default settings): "
            f"{run.notes:,} notes, {run.chunks:,} chunks, the fast tier complete after {run.ready:.0f} s.",
            "",
            "| minutes of e5 | chunks embedded by e5 since the first sample | anonymous RSS then | peak RSS so far |",
            "|---|---|---|---|",
            *rows,
            "",
            f"From the first sample to the last, e5 embedded {embedded:,} chunks and the anonymous RSS went "
            f"from {first[2]:.0f} to {done[2]:.0f} MB ({done[2] - first[2]:+.0f} MB; the highest sample "
            f"{max(s[2] for s in run.samples):.0f} MB).",
        ]
    )
    write_block(
        "two-pass-backfill",
        body,
        "Two-pass indexing: memory while e5 fills in a big vault",
        "The index process's anonymous memory, sampled while e5 embeds behind the fast tier.",
    )
    print(body)


def quality(data: Path, xlang: Path, skip_e5: bool) -> None:
    from sunlib.config import load_settings, merge
    from sunlib.evaluate.beir import load_beir
    from sunlib.evaluate.retrieval import evaluate_retrieval

    sets = [
        ("SciFact test", data / "scifact", "test"),
        ("RGB zh_int test", data / "rgb_zh_int", "test"),
        ("FastAPI zh->en (xlang-en zh-test)", xlang / "fastapi-xlang-en", "zh-test"),
    ]
    arms: list[tuple[str, str, dict[str, object], bool]] = [
        ("BM25", "bm25", {}, False),
        ("fast tier alone", "dense", {"provider": "e5-fast"}, False),
        ("hybrid, fast tier only (e5 not started)", "hybrid", {}, True),
    ]
    if not skip_e5:
        arms += [("e5 alone", "dense", {}, False), ("hybrid with e5 (backfill done)", "hybrid", {}, False)]
    rows = []
    with tempfile.TemporaryDirectory() as home:
        os.environ["SUNLIB_HOME"] = home
        for label, root, split in sets:
            dataset = load_beir(root, split)
            cells = []
            for _, mode, embedding, fast_only in arms:
                settings = merge(load_settings(None, None), embedding=embedding)
                t0 = time.monotonic()
                report = evaluate_retrieval(dataset, settings, mode, fast_only=fast_only)
                ids = {q: set(g for g, s in dataset.qrels[q].items() if s > 0) for q in dataset.qrels}
                r5 = sum(
                    len(set(v["top"][:5]) & ids[q]) / max(len(ids[q]), 1) for q, v in report.per_query.items()
                ) / max(len(report.per_query), 1)
                cells.append(f"{report.metrics['ndcg@10']:.4f} / {r5:.4f}")
                print(label, mode, embedding, fast_only, cells[-1], f"{time.monotonic() - t0:.0f} s", flush=True)
            rows.append(f"| {label} | " + " | ".join(cells) + " |")
    header = "| set | " + " | ".join(a[0] for a in arms) + " |"
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} with `python -m benchmarks.two_pass quality ../shared/data XLANG"
            + (" --skip-e5" if skip_e5 else "")
            + "` (XLANG from `benchmarks/crosslang_pairs.py`). Each cell: nDCG@10 / recall@5.",
            "",
            header,
            "|" + "---|" * (len(arms) + 1),
            *rows,
        ]
    )
    write_block(
        "two-pass-quality",
        body,
        "Two-pass indexing: what the fast tier ranks",
        "Search quality before e5 has filled in (the fast tier only) and after, on sets the fast tier was "
        "neither made nor tuned on.",
    )
    print(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("speed")
    s.add_argument("data", type=Path)
    s.add_argument("--watch", type=float, default=120.0)
    m = sub.add_parser("memory")
    m.add_argument("data", type=Path)
    m.add_argument("--copies", type=int, default=6)
    m.add_argument("--watch", type=float, default=60.0)
    b = sub.add_parser("backfill")
    b.add_argument("data", type=Path)
    b.add_argument("--copies", type=int, default=6)
    b.add_argument("--watch", type=float, default=1200.0)
    b.add_argument("--every", type=float, default=120.0)
    q = sub.add_parser("quality")
    q.add_argument("data", type=Path)
    q.add_argument("xlang", type=Path)
    q.add_argument("--skip-e5", action="store_true")
    args = ap.parse_args()
    if args.what == "speed":
        speed(args.data, args.watch)
    elif args.what == "memory":
        memory(args.data, args.watch, args.copies)
    elif args.what == "backfill":
        backfill(args.data, args.watch, args.copies, args.every)
    else:
        quality(args.data, args.xlang, args.skip_e5)


if __name__ == "__main__":
    main()
