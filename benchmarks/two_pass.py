"""Two-pass indexing: how soon a big vault is searchable by meaning, and what the fast tier ranks.

    python -m benchmarks.two_pass speed ../shared/data [--watch 120]
    python -m benchmarks.two_pass quality ../shared/data XLANG [--skip-e5]

``speed`` writes every document of the corpora under ``../shared/data`` as its own note (SciFact,
RGB, CMRC2018, DRCD, SQuAD 2.0 half-dev, XQuAD en and zh, plus the FastAPI docs as they are), runs
``sunlib index`` on it in a child process (default settings, fresh ``SUNLIB_HOME``) and notes when
the text phase ends and when the fast tier is complete (the "search ready" line). At that moment a
second process runs a hybrid ``sunlib search`` and checks that the fast-tier route ranked. Then e5
runs for ``--watch`` seconds, its pace is read from ``sunlib status --json``, and the child is
stopped. The baseline is the same run's own e5 pace: before the fast tier, dense search waited for
e5 to embed every chunk. Peak RSS is the index process's ``VmHWM``.

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
import time
from pathlib import Path

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


def build_vault(data: Path, vault: Path) -> int:
    n = 0
    for folder, name in CORPORA:
        with (data / folder / name).open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                title = " ".join(str(row.get("title") or "").split())
                path = vault / folder / name.removesuffix(".jsonl") / f"{n // 1000:03d}" / f"{n:06d}.md"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text((f"# {title}\n\n" if title else "") + str(row["text"]).strip() + "\n", encoding="utf-8")
                n += 1
    for md in sorted((data / "fastapi_docs").rglob("*.md")):
        dest = vault / "fastapi" / md.relative_to(data / "fastapi_docs")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(md.read_bytes())
        n += 1
    return n


def _rss_peak_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def speed(data: Path, watch: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        vault = root / "vault"
        notes = build_vault(data, vault)
        env = {**os.environ, "SUNLIB_HOME": str(root / "home")}
        t0 = time.monotonic()
        child = subprocess.Popen(
            [*SUNLIB, "index", str(vault)], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        assert child.stderr is not None
        text_done = ready = None
        for line in child.stderr:
            if text_done is None and re.match(r"notes -> text index: (\d+)/\1 ", line):
                text_done = time.monotonic() - t0
            if line.startswith("search ready"):
                ready = time.monotonic() - t0
                break
        if ready is None:
            raise SystemExit(f"sunlib index ended before the fast tier was complete (exit {child.wait()})")
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
        time.sleep(watch)
        status = json.loads(
            subprocess.run(
                [*SUNLIB, "status", "--vault", str(vault), "--json"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        rss = _rss_peak_mb(child.pid)
        child.terminate()
        child.wait()
    main = next(e for e in status["embedding"] if e["role"] == "main")
    chunks = status["counts"]["chunks"]
    rate = main["rate"] or float("nan")
    e5_all = chunks / rate
    before = (text_done or 0) + e5_all
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} with `python -m benchmarks.two_pass speed ../shared/data "
            f"--watch {watch:g}` (2 cores, default settings: e5 main space, `use` cross-language space, "
            "one thread each).",
            "",
            "| | value |",
            "|---|---|",
            f"| notes / chunks | {notes:,} / {chunks:,} |",
            f"| text phase done (BM25 works) | {text_done:.0f} s |",
            f'| fast tier done: dense, hybrid and cross-language search work ("search ready") | **{ready:.0f} s** |',
            f"| a hybrid `sunlib search` at that moment (whole process), fast-tier route ranked | {search_s:.1f} s |",
            f"| e5 pace behind it, from `sunlib status` | {rate:.1f} chunks/s, eta {main['eta_s'] or 0:.0f} s for "
            f"{main['pending']:,} chunks |",
            f"| before the fast tier: dense search waited for e5 on every chunk | {before:.0f} s "
            f"(text + {chunks:,} / {rate:.1f}) |",
            f"| ratio: time to dense search, before / now | **{before / ready:.0f}x** |",
            f"| index process peak RSS (VmHWM) | {rss:.0f} MB |" if rss else "| index process peak RSS | n/a |",
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
    q = sub.add_parser("quality")
    q.add_argument("data", type=Path)
    q.add_argument("xlang", type=Path)
    q.add_argument("--skip-e5", action="store_true")
    args = ap.parse_args()
    if args.what == "speed":
        speed(args.data, args.watch)
    else:
        quality(args.data, args.xlang, args.skip_e5)


if __name__ == "__main__":
    main()
