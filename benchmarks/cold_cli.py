"""A cold CLI: the whole-process wall time of ``sunlib search`` and ``sunlib ask``, against a baseline commit.

    python -m benchmarks.cold_cli ../shared/data/fastapi_docs/zh [--baseline bbd72d1] [--rounds 7] [--work DIR]

The vault (the FastAPI docs in Chinese by default: 124 notes, about 1,100 chunks, half of them code
and English text, so the cross-language route runs) is copied to ``WORK/vault`` and indexed once
with default settings (e5 and the ``use`` space complete: later runs reuse it). The baseline is a
git worktree of ``--baseline`` at ``WORK/baseline``, run from the same virtualenv (its ``src`` first
on ``PYTHONPATH``), over the same home and a copy of the same index taken back to the schema its code
knows (``WORK/index-baseline``, ``DOWNGRADES``). Each arm runs once first
so that its caches exist, as on any run after a user's first (Python's bytecode caches too:
``PYTHONDONTWRITEBYTECODE`` is dropped, as ``pip install`` writes them for an installed package);
that first run of this code, when it builds its caches, is reported apart. Then the arms
alternate, ``--rounds`` times per verb, no server running; the median and the peak RSS
(``wait4``) of each are written to docs/benchmarks.md.
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

from benchmarks.common import ROOT, write_block

SEARCH = "how do I declare a dependency in a path operation"
ASK = "如何声明查询参数的默认值？"
VERBS = {"search": ["search", SEARCH], "ask": ["ask", ASK, "--no-save"]}


def run(src: Path, argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of one whole ``python -m sunlib`` process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sunlib", *argv],
        env={**env, "PYTHONPATH": str(src)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


# How to take an index back to an older schema (what each migration added, undone), so that the
# baseline's code can open a copy of the same index: schema -> its statement
DOWNGRADES = {8: "ALTER TABLE chunks DROP COLUMN script"}


def baseline_index(index: Path, dest: Path, baseline: Path) -> Path:
    """A copy of the index (SQLite's backup: whole, WAL included) at the schema the baseline's
    code knows, in ``dest``; the same data, so both arms search the same chunks and vectors."""
    from sunlib.store import connect

    code = "from sunlib.store.migrations import SCHEMA_VERSION; print(SCHEMA_VERSION)"
    env = {**os.environ, "PYTHONPATH": str(baseline / "src")}
    known = int(subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True).stdout)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    source, copy = connect(index / "sunlib.db"), connect(dest / "sunlib.db")
    try:
        with copy.backup("main", source, "main") as step:
            step.step()
        row = copy.execute("PRAGMA user_version").fetchone()
        version = int(row[0]) if row else 0
        for schema in range(version, known, -1):
            copy.execute(DOWNGRADES[schema])
        copy.execute(f"PRAGMA user_version={min(version, known)}")
    finally:
        source.close()
        copy.close()
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path)
    ap.add_argument(
        "--baseline", default="bbd72d1", help="the commit to compare with (default: before the cold-start caches)"
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "cold_cli")
    args = ap.parse_args()
    work = args.work.resolve()
    vault, home, index = work / "vault", work / "home", work / "index"
    if not vault.is_dir():
        shutil.copytree(args.vault, vault)
    # no SUNLIB_* setting of the caller's; bytecode written, as an installed package has it
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUNLIB_") and k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"SUNLIB_HOME": str(home), "SUNLIB_INDEX_DIR": str(index), "SUNLIB_VAULT": str(vault)}
    baseline = work / "baseline"
    if not baseline.is_dir():
        git = ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), args.baseline]
        subprocess.run(git, check=True)
    arms = {"before": baseline / "src", "now": ROOT / "src"}
    subprocess.run([sys.executable, "-m", "sunlib", "index", str(vault), "-q"], env=env, check=True)
    chunks = subprocess.run(
        [sys.executable, "-m", "sunlib", "status", "--json"], env=env, check=True, capture_output=True, text=True
    ).stdout
    n_chunks = int(chunks.split('"chunks":', 1)[1].split(",", 1)[0])
    old_index = baseline_index(index, work / "index-baseline", baseline)
    envs = {"before": env | {"SUNLIB_INDEX_DIR": str(old_index)}, "now": env}

    had_cache = (home / "cache").is_dir() and any(p.name.startswith("usem3-") for p in (home / "cache").iterdir())
    first = {verb: run(arms["now"], argv, env) for verb, argv in VERBS.items()}  # builds the caches if missing
    for argv in VERBS.values():
        run(arms["before"], argv, envs["before"])
    times: dict[tuple[str, str], list[float]] = {}
    rss: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for verb, argv in VERBS.items():
            for arm, src in arms.items():
                wall, mb, code = run(src, argv, envs[arm])
                assert code in (0, 2), f"{arm} {verb} exited {code}"  # 2: a refusal, still an answer
                times.setdefault((arm, verb), []).append(wall)
                rss.setdefault((arm, verb), []).append(mb)

    rows = [f"| | before (`{args.baseline}`) | now | ratio | peak RSS before / now |", "|---|---|---|---|---|"]
    for verb in VERBS:
        b, n = statistics.median(times[("before", verb)]), statistics.median(times[("now", verb)])
        rows.append(
            f"| `sunlib {verb}` | {b:.2f} s | **{n:.2f} s** | {b / n:.1f}x "
            f"| {max(rss[('before', verb)]):.0f} / {max(rss[('now', verb)]):.0f} MB |"
        )
    lines = [
        f"`python -m benchmarks.cold_cli {args.vault} --baseline {args.baseline} --rounds {args.rounds}`: "
        f"{n_chunks} chunks, whole process, no server, median of {args.rounds} alternating runs "
        f"(search: `{SEARCH}`; ask: `{ASK}`).",
        "",
        *rows,
    ]
    if not had_cache:
        lines += [
            "",
            "The first run of this code on a new `SUNLIB_HOME` builds its caches: "
            + ", ".join(f"`{verb}` {first[verb][0]:.2f} s" for verb in VERBS)
            + ".",
        ]
    body = "\n".join(lines)
    print(body)
    write_block(
        "cold-cli",
        body,
        "A cold CLI",
        "Every `sunlib search` and `sunlib ask` is a new process: the time a user waits includes "
        "Python's start, the imports and the models' loading.",
    )


if __name__ == "__main__":
    main()
