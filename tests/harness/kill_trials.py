"""Kill trials: SIGKILL `sunlib index` at random moments; the index must stay sound.

Builds a vault of generated notes (English and Chinese, frontmatter, some sidecars,
varied lengths), measures how long a full `python -m sunlib index VAULT --provider hash -q`
takes, then runs N trials. Each trial starts the indexer in a subprocess on the trial's
index (from scratch, or after random edits, deletions and additions in the vault),
SIGKILLs it after a delay drawn uniformly over the full run's duration, and then

1. checks the killed index with ``sunlib.store.check.check_index`` (must pass: SQLite's
   integrity_check, FTS5's integrity-check, every chunk with one full-text row, no vector,
   ACL, tag or metadata row without its chunk or note);
2. runs `sunlib index` again to completion and compares the result with a clean build of
   the same vault state (note ids, chunk ids and texts, the full-text vocabulary, every
   BM25 match of a few queries, vector counts and vectors per space): it must be equal.

Prints a table, writes a JSON summary (--json-out) and replaces the section between
``<!-- kill:start -->`` and ``<!-- kill:end -->`` in docs/reliability.md.

``--races N`` runs N trials of each race instead (section ``<!-- race:start -->``):

- *two indexers*: two `sunlib index` processes start at once on one index (the second waits
  for the indexer lock), and one of them, drawn at random, is SIGKILLed after a random delay;
  the other must exit 0.
- *PATCHes racing a rebuild*: a live `sunlib serve` starts `POST /api/index/rebuild` while a
  client PATCHes random notes without pause, and the server is SIGKILLed after a random delay.
  Every answer before the kill must be 2xx, and the job's progress never past its total.

Both then check the index (the full check) and complete it to equality with a clean build.

    python -m tests.harness.kill_trials            # 100 trials, 320 notes
    python -m tests.harness.kill_trials --trials 10 --no-doc
    python -m tests.harness.kill_trials --races 12 --notes 160
    python -m tests.harness.kill_trials --trials 10 --no-doc --lexical-engine postings   # kills hit its saves too
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sunlib import Library
from sunlib.store import PostingsLexical, Space, SqliteStore, UsearchVectors
from sunlib.store.check import check_index, differences, fingerprint
from sunlib.text.tokens import fts_query

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- kill:start -->", "<!-- kill:end -->"
RACE_BEGIN, RACE_END = "<!-- race:start -->", "<!-- race:end -->"
DB = "sunlib.db"
QUERIES = ["vector index recovery", "crash journal", "garden tomato", "向量 索引", "数据库 崩溃", "river bridge"]

EN_WORDS = (  # noqa: SIM905
    "index vector journal crash recovery garden tomato river bridge mountain coffee kernel thread lock "
    "page cache write ahead log commit rollback checkpoint segment merge token query ranking window "
    "chapter meeting budget travel recipe onion garlic pepper salt lemon weather cloud rain summer "
    "winter library shelf paper note draft review release version schema table column field record "
    "network socket packet route server client timeout retry backoff metric trace span latency "
    "memory disk flash sector block inode folder path symlink backup restore archive snapshot"
).split()
ZH_WORDS = (  # noqa: SIM905
    "向量 索引 数据库 崩溃 恢复 日志 提交 回滚 检查点 查询 排序 分词 中文 笔记 文件夹 标签 元数据 "
    "花园 番茄 河流 桥梁 山峰 咖啡 会议 预算 旅行 菜谱 天气 夏天 冬天 图书馆 书架 草稿 版本 表格 "
    "网络 服务器 客户端 超时 重试 内存 磁盘 备份 快照 权限 用户 团队 项目 计划 进度 问题 答案"
).split()
TAGS = ["db", "garden", "travel", "cooking", "ops", "research", "draft", "zh", "infra", "reading"]
FOLDERS = ["", "work", "work/db", "home", "home/garden", "travel", "reading", "zh", "zh/笔记", "archive/2024"]


# -- the vault -------------------------------------------------------------------------------


def _sentence(rng: random.Random, zh: bool) -> str:
    if zh:
        return "".join(rng.choice(ZH_WORDS) for _ in range(rng.randint(4, 12))) + "。"
    words = [rng.choice(EN_WORDS) for _ in range(rng.randint(6, 16))]
    return " ".join(words).capitalize() + "."


def _paragraph(rng: random.Random, zh: bool) -> str:
    return " ".join(_sentence(rng, zh) for _ in range(rng.randint(1, 6)))


def note_text(rng: random.Random, serial: int, zh: bool) -> str:
    """One note: frontmatter (mostly), a title, then 0-6 sections of 1-8 paragraphs (varied lengths)."""
    title = f"{'笔记' if zh else 'Note'} {serial} " + " ".join(
        rng.choice(ZH_WORDS if zh else EN_WORDS) for _ in range(2)
    )
    parts: list[str] = []
    if rng.random() < 0.8:
        front = [f"title: {title}", f"tags: [{', '.join(rng.sample(TAGS, rng.randint(0, 3)))}]"]
        if rng.random() < 0.3:
            front.append(f"acl: [{', '.join(rng.sample(['public', 'team', 'ops'], rng.randint(1, 2)))}]")
        if rng.random() < 0.4:
            front.append(f"category: {rng.choice(['howto', 'log', 'idea', 'reference'])}")
        parts.append("---\n" + "\n".join(front) + "\n---\n")
    parts.append(f"# {title}\n")
    parts.append(f"serial{serial} " + _paragraph(rng, zh) + "\n")
    for s in range(rng.choice([0, 1, 1, 2, 3, 4, 6])):
        heading = " ".join(rng.choice(ZH_WORDS if zh else EN_WORDS) for _ in range(2))
        parts.append(f"## {heading} {s}\n")
        for _ in range(rng.randint(1, 8)):
            parts.append(_paragraph(rng, zh or rng.random() < 0.05) + "\n")
            if rng.random() < 0.1:
                parts.append("- " + "\n- ".join(_sentence(rng, zh) for _ in range(rng.randint(2, 5))) + "\n")
    return "\n".join(parts)


def sidecar_text(rng: random.Random) -> str:
    lines = [f"category: {rng.choice(['howto', 'log', 'idea', 'reference'])}", f"version: {rng.randint(1, 9)}"]
    if rng.random() < 0.5:
        lines.append(f"tags: [{rng.choice(TAGS)}]")
    if rng.random() < 0.2:
        lines.append("acl: [team]")
    return "\n".join(lines) + "\n"


@dataclass
class Vault:
    root: Path
    rng: random.Random
    serial: int = 0
    state: int = 0  # bumped on every change: a clean build is reused while it stays the same

    def notes(self) -> list[Path]:
        return sorted(self.root.rglob("*.md"))

    def add(self) -> Path:
        self.serial += 1
        zh = self.rng.random() < 0.25
        folder = self.root / self.rng.choice(FOLDERS)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{'笔记' if zh and self.rng.random() < 0.5 else 'note'}-{self.serial:05d}.md"
        path.write_text(note_text(self.rng, self.serial, zh), encoding="utf-8")
        if self.rng.random() < 0.2:
            path.with_name(path.name[:-3] + ".metadata.yaml").write_text(sidecar_text(self.rng), encoding="utf-8")
        self.state += 1
        return path

    def edit(self) -> Path:
        path = self.rng.choice(self.notes())
        text = path.read_text(encoding="utf-8")
        roll = self.rng.random()
        if roll < 0.4:  # append a section
            text += f"\n## {self.rng.choice(EN_WORDS)} added\n\n" + _paragraph(self.rng, False) + "\n"
        elif roll < 0.7:  # rewrite a paragraph somewhere in the middle
            lines = text.split("\n")
            body = lines.index("---", 1) + 1 if lines[0] == "---" else 0  # keep the frontmatter valid:
            i = self.rng.randrange(body, len(lines))  # an unparsable note keeps its last good version
            lines[i] = _paragraph(self.rng, self.rng.random() < 0.3)
            text = "\n".join(lines)
        elif roll < 0.85:  # cut the body in half
            head = text.index("\n---\n", 3) + 5 if text.startswith("---\n") else 0
            text = text[: head + max(20, (len(text) - head) // 2)] + "\n"
        else:  # change or add a sidecar instead
            path.with_name(path.name[:-3] + ".metadata.yaml").write_text(sidecar_text(self.rng), encoding="utf-8")
            self.state += 1
            return path
        path.write_text(text, encoding="utf-8")
        self.state += 1
        return path

    def delete(self) -> Path:
        path = self.rng.choice(self.notes())
        path.unlink()
        path.with_name(path.name[:-3] + ".metadata.yaml").unlink(missing_ok=True)
        self.state += 1
        return path

    def mutate(self, ops: int) -> Counter[str]:
        done: Counter[str] = Counter()
        for _ in range(ops):
            kind = self.rng.choices(["edit", "add", "delete"], weights=[5, 3, 2])[0]
            getattr(self, kind)()
            done[kind] += 1
        return done


def build_vault(root: Path, notes: int, seed: int) -> Vault:
    vault = Vault(root, random.Random(seed))
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(notes):
        vault.add()
    return vault


# -- running the indexer -----------------------------------------------------------------------


def index_command(vault: Path) -> list[str]:
    return [sys.executable, "-m", "sunlib", "index", str(vault), "--provider", "hash", "-q"]


def index_env(index_dir: Path, home: Path, engine: str | None = None, lexical: str | None = None) -> dict[str, str]:
    """The indexer's environment; ``engine`` is a ``[search] dense_engine`` (an HNSW engine saves
    its graph at the end of the vector phase, so the kills also hit its saves), ``lexical`` a
    ``[search] lexical_engine`` (the postings are saved after the text phase)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUNLIB_")}
    env.update(
        SUNLIB_INDEX_DIR=str(index_dir), SUNLIB_HOME=str(home), SUNLIB_EMBEDDING__PROVIDER="hash", OMP_NUM_THREADS="1"
    )
    if engine is not None:
        env["SUNLIB_SEARCH__DENSE_ENGINE"] = engine
    if lexical is not None:
        env["SUNLIB_SEARCH__LEXICAL_ENGINE"] = lexical
    return env


def run_index(
    vault: Path,
    index_dir: Path,
    home: Path,
    kill_after: float | None = None,
    engine: str | None = None,
    lexical: str | None = None,
) -> tuple[bool, float]:
    """Run the indexer; SIGKILL it after ``kill_after`` seconds. Returns (killed, seconds it ran)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        index_command(vault),
        env=index_env(index_dir, home, engine, lexical),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        return True, time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"sunlib index failed ({proc.returncode}): {stderr[-2000:]}")
    return False, time.perf_counter() - t0


def wipe(index_dir: Path) -> None:
    shutil.rmtree(index_dir, ignore_errors=True)


def clean_build(vault: Path, index_dir: Path) -> None:
    """A from-scratch build with the settings the CLI uses (`--provider hash`), in this process."""
    wipe(index_dir)
    with Library.open(vault, embedding={"provider": "hash"}, index_dir=index_dir) as lib:
        lib.index()


def matches() -> list[str]:
    return [m for q in QUERIES if (m := fts_query(q)) is not None]


def has_schema(db: Path) -> bool:
    """Whether the index file holds sunlib's tables (a kill can land once the file is made, before
    the schema is committed)."""
    if not db.is_file() or db.stat().st_size == 0:
        return False
    with contextlib.closing(sqlite3.connect(db)) as conn:  # runs WAL recovery as any opener does
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'notes'").fetchone()
    return found is not None


def state_of(db: Path) -> Any:
    """A cheap summary of an index's content (None without one): a kill that changed nothing leaves it equal."""
    if not has_schema(db):
        return None
    got = fingerprint(db)
    return (
        sorted((k, v["content_hash"]) for k, v in got["notes"].items()),
        len(got["chunks"]),
        sorted((k, v["vectors"]) for k, v in got["spaces"].items()),
    )


def postings_problems(db: Path, lexical: str | None) -> list[str]:
    """What is wrong with the postings files of a completed index (nothing for FTS5 alone)."""
    if lexical != "postings":
        return []
    with SqliteStore(db, lexical_engine="postings") as store:
        engine = store.lexical
        assert isinstance(engine, PostingsLexical)
        return engine.verify()


def graph_problems(db: Path, engine: str | None) -> list[str]:
    """What is wrong with the HNSW graph files of a completed index (nothing for other engines)."""
    if engine is None or not engine.startswith("usearch"):
        return []
    with SqliteStore(db, engine) as store:
        vectors = store.vectors
        assert isinstance(vectors, UsearchVectors)
        return [p for s in vectors.spaces() for p in vectors.verify(Space(s.provider, s.model, s.dim, s.chunker))]


def stage_at_kill(db: Path, clean: dict[str, Any], before: Any) -> str:
    """Where the killed run was: how far the killed index is from the clean build's content."""
    if not has_schema(db):
        return "no index file yet" if not db.is_file() else "index file made, no schema yet"
    if before is not None and state_of(db) == before:
        return "index not changed yet"
    got = fingerprint(db)
    if not got["notes"] and clean["notes"]:
        return "schema only, no notes yet"
    same_notes = {k: v["content_hash"] for k, v in got["notes"].items()} == {
        k: v["content_hash"] for k, v in clean["notes"].items()
    }
    if not same_notes:
        return "text not (fully) synced"
    vectors = sum(s["vectors"] for s in got["spaces"].values())
    if vectors < len(got["chunks"]):
        return "text synced, vectors partial"
    return "text and vectors synced"


# -- trials --------------------------------------------------------------------------------


@dataclass
class Trial:
    n: int
    kind: str
    mutations: dict[str, int]
    kills: list[float] = field(default_factory=list)  # the drawn kill delays (s)
    windows: list[float] = field(default_factory=list)  # each delay was drawn from [0, window)
    killed: list[bool] = field(default_factory=list)  # False: the run ended before its kill
    stages: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    mismatch: list[str] = field(default_factory=list)
    notes: int = 0
    chunks: int = 0
    seconds: float = 0.0


EDIT_OPS = (1, 20)  # random vault changes before an edit trial


def measure_runs(
    vault: Vault, work: Path, runs: int = 3, engine: str | None = None, lexical: str | None = None
) -> tuple[list[float], list[float]]:
    """Wall seconds (interpreter start included) of full from-scratch `sunlib index` runs, and
    of incremental runs after as many vault changes as an edit trial makes on average."""
    full, edit = [], []
    for _ in range(runs):
        wipe(work / "measure")
        full.append(run_index(vault.root, work / "measure", work / "home", engine=engine, lexical=lexical)[1])
    for _ in range(runs):
        vault.mutate(sum(EDIT_OPS) // 2)
        edit.append(run_index(vault.root, work / "measure", work / "home", engine=engine, lexical=lexical)[1])
    wipe(work / "measure")
    return full, edit


def run_trials(
    trials: int,
    notes: int,
    seed: int,
    work: Path,
    say: Callable[[str], None] = print,
    window: str = "kind",
    measure: int = 3,
    engine: str | None = None,
    lexical: str | None = None,
) -> dict[str, Any]:
    """``window``: kill delays are uniform over a full run's measured duration ("full"), or over
    the measured duration of the trial's kind of run ("kind": full for scratch trials, an
    incremental run for edit trials, most of which would otherwise end before their kill).
    ``engine``: the indexer's dense engine; with an HNSW engine the completed index's graph
    files are checked against SQLite's vectors too (``UsearchVectors.verify``); ``lexical``: the
    indexer's lexical engine; with the postings their files are checked against a build from the
    chunks and FTS5's row lengths (``PostingsLexical.verify``)."""
    t_start = time.perf_counter()
    rng = random.Random(seed)
    vault = build_vault(work / "vault", notes, seed)
    index_dir, clean_dir, home = work / "index", work / "clean", work / "home"
    measured_full, measured_edit = measure_runs(vault, work, measure, engine, lexical)
    full, edit = statistics.median(measured_full), statistics.median(measured_edit)
    say(
        f"vault: {len(vault.notes())} notes; full run {full:.2f}s ({', '.join(f'{t:.2f}' for t in measured_full)}),"
        f" incremental run {edit:.2f}s ({', '.join(f'{t:.2f}' for t in measured_edit)}); kill window: {window}"
    )
    queries = matches()
    clean_state, clean_fp = -1, {}
    results: list[Trial] = []

    for n in range(1, trials + 1):
        t0 = time.perf_counter()
        kind = rng.choices(["scratch", "edit", "edit+double-kill"], weights=[3, 5, 2])[0] if n > 1 else "scratch"
        if kind == "scratch":
            wipe(index_dir)
            mutations: Counter[str] = Counter()
        else:
            mutations = vault.mutate(rng.randint(*EDIT_OPS))
        if vault.state != clean_state:
            clean_build(vault.root, clean_dir)
            clean_fp, clean_state = fingerprint(clean_dir / DB, queries), vault.state
        trial = Trial(n, kind, dict(mutations))
        for _ in range(2 if kind == "edit+double-kill" else 1):
            span = full if window == "full" or kind == "scratch" else edit
            delay = rng.uniform(0, span)
            trial.windows.append(round(span, 4))
            before = state_of(index_dir / DB)
            killed, _ = run_index(vault.root, index_dir, home, kill_after=delay, engine=engine, lexical=lexical)
            trial.kills.append(round(delay, 4))
            trial.killed.append(killed)
            trial.stages.append(
                stage_at_kill(index_dir / DB, clean_fp, before) if killed else "run ended before the kill"
            )
            if (index_dir / DB).is_file():
                report = check_index(index_dir / DB)
                if not report["ok"]:
                    trial.corrupt.extend(report["problems"])
        if not trial.corrupt:
            run_index(vault.root, index_dir, home, engine=engine, lexical=lexical)  # to completion
            after = check_index(index_dir / DB)
            if not after["ok"]:
                trial.corrupt.extend(f"after completion: {p}" for p in after["problems"])
            got = fingerprint(index_dir / DB, queries)
            trial.mismatch = differences(got, clean_fp) + graph_problems(index_dir / DB, engine)
            trial.mismatch += postings_problems(index_dir / DB, lexical)
            trial.notes, trial.chunks = len(got["notes"]), len(got["chunks"])
        trial.seconds = round(time.perf_counter() - t0, 3)
        results.append(trial)
        flag = "CORRUPT" if trial.corrupt else "MISMATCH" if trial.mismatch else "ok"
        say(
            f"trial {n:3d} {kind:17s} kill@{'/'.join(f'{k:.2f}' for k in trial.kills)}s "
            f"{'/'.join(trial.stages):45s} {flag}"
        )
        if trial.corrupt or trial.mismatch:
            for line in trial.corrupt + trial.mismatch:
                say(f"    {line}")
    return summarise(results, window, measured_full, measured_edit, notes, seed, time.perf_counter() - t_start)


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {
        "min": round(min(values), 3),
        "p25": round(q[0], 3),
        "median": round(q[1], 3),
        "p75": round(q[2], 3),
        "max": round(max(values), 3),
    }


def summarise(
    results: list[Trial],
    window: str,
    measured_full: list[float],
    measured_edit: list[float],
    notes: int,
    seed: int,
    seconds: float,
) -> dict[str, Any]:
    full, edit = statistics.median(measured_full), statistics.median(measured_edit)
    kills = [k for t in results for k in t.kills]
    killed = [k for t in results for k, hit in zip(t.kills, t.killed, strict=True) if hit]
    bins = 5
    histogram = Counter(
        min(int(k / w * bins), bins - 1) for t in results for k, w in zip(t.kills, t.windows, strict=True)
    )
    return {
        "trials": len(results),
        "kills": len(kills),
        "killed_mid_run": len(killed),
        "ended_before_kill": len(kills) - len(killed),
        "corrupt": sum(1 for t in results if t.corrupt),
        "mismatches": sum(1 for t in results if t.mismatch),
        "kinds": dict(Counter(t.kind for t in results)),
        "stages_at_kill": dict(Counter(s for t in results for s in t.stages).most_common()),
        "kill_window": window,
        "full_run_seconds": round(full, 3),
        "full_run_measurements": [round(m, 3) for m in measured_full],
        "incremental_run_seconds": round(edit, 3),
        "incremental_run_measurements": [round(m, 3) for m in measured_edit],
        "kill_seconds": _quantiles(kills),
        "kill_histogram": {
            f"{i * 100 // bins}-{(i + 1) * 100 // bins}% of the window": histogram.get(i, 0) for i in range(bins)
        },
        "kill_seconds_scratch": _quantiles([k for t in results if t.kind == "scratch" for k in t.kills]),
        "kill_seconds_edit": _quantiles([k for t in results if t.kind != "scratch" for k in t.kills]),
        "initial_notes": notes,
        "final_notes": results[-1].notes if results else 0,
        "final_chunks": results[-1].chunks if results else 0,
        "seed": seed,
        "runtime_seconds": round(seconds, 1),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "failures": [asdict(t) for t in results if t.corrupt or t.mismatch],
    }


# -- races: two indexers, PATCHes racing a rebuild ------------------------------------------------


@dataclass
class Race:
    n: int
    kind: str  # "two indexers" | "patches vs rebuild"
    kill: float
    killed: bool = False
    waited: bool = False  # a second indexer printed its waiting line
    patches: int = 0  # PATCHes answered before the kill
    server_errors: list[str] = field(default_factory=list)  # 5xx answers, survivor's failures
    over_total: list[str] = field(default_factory=list)  # job progress with done > total
    corrupt: list[str] = field(default_factory=list)
    mismatch: list[str] = field(default_factory=list)


def race_indexers(vault: Vault, index_dir: Path, home: Path, kill_after: float, race: Race) -> None:
    """Two indexers at once; SIGKILL one (drawn at random) after ``kill_after``; the other finishes."""
    procs = [
        subprocess.Popen(
            index_command(vault.root),
            env=index_env(index_dir, home),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    victim = vault.rng.randrange(2)
    try:
        procs[victim].communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].communicate()
        race.killed = True
    _, stderr = procs[1 - victim].communicate(timeout=600)
    race.waited = "waiting: another indexer" in stderr
    if procs[1 - victim].returncode != 0:
        race.server_errors.append(f"the surviving indexer failed ({procs[1 - victim].returncode}): {stderr[-500:]}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(vault: Path, index_dir: Path, home: Path) -> tuple[subprocess.Popen[str], httpx.Client]:
    port = _free_port()
    cmd = [sys.executable, "-m", "sunlib", "serve", "-V", str(vault), "--port", str(port), "--no-index"]
    proc = subprocess.Popen(
        cmd, env=index_env(index_dir, home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.get("/api/notes", params={"limit": 1}).status_code == 200:
                return proc, client
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"sunlib serve did not start: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.1)


def _patch_until(client: httpx.Client, vault: Vault, stop: threading.Event, race: Race) -> None:
    """PATCH random notes (new generated text), one after the other, until ``stop`` or the kill."""
    listed = client.get("/api/notes", params={"limit": 500}).json()["notes"]
    rng = random.Random(vault.rng.random())
    while not stop.is_set() and listed:
        note = rng.choice(listed)
        vault.serial += 1
        text = note_text(rng, vault.serial, rng.random() < 0.25)
        try:
            r = client.patch(f"/api/notes/{note['note_id']}", json={"content": text})
        except httpx.TransportError:
            return  # killed
        if r.status_code >= 500:
            race.server_errors.append(f"PATCH {note['path']}: {r.status_code} {r.text[:200]}")
        elif r.status_code == 200:
            race.patches += 1


def race_rebuild(vault: Vault, index_dir: Path, home: Path, kill_after: float, race: Race) -> None:
    """A live server: a rebuild job, PATCHes without pause, a SIGKILL after ``kill_after``."""
    proc, client = _serve(vault.root, index_dir, home)
    stop = threading.Event()
    try:
        job = client.post("/api/index/rebuild").json()["job_id"]
        patcher = threading.Thread(target=_patch_until, args=(client, vault, stop, race))
        patcher.start()
        deadline = time.monotonic() + kill_after
        while time.monotonic() < deadline:
            try:
                view = client.get(f"/api/index/jobs/{job}").json()
            except httpx.TransportError:
                break
            progress = view.get("progress", {})
            if progress.get("done", 0) > progress.get("total", 0):
                race.over_total.append(f"{progress['phase']} {progress['done']}/{progress['total']}")
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        race.killed = True
        proc.communicate()
        stop.set()
        patcher.join(60)
    finally:
        stop.set()
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    vault.state += 1  # the PATCHes changed the vault


def run_races(races: int, notes: int, seed: int, work: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    t_start = time.perf_counter()
    rng = random.Random(seed)
    vault = build_vault(work / "vault", notes, seed)
    index_dir, clean_dir, home = work / "index", work / "clean", work / "home"
    measured_full, _ = measure_runs(vault, work, runs=1)
    window = measured_full[0]
    say(f"vault: {len(vault.notes())} notes; full run {window:.2f}s: kill delays uniform over [0, {window:.2f})s")
    queries = matches()
    results: list[Race] = []
    for n in range(1, 2 * races + 1):
        kind = "two indexers" if n % 2 else "patches vs rebuild"
        if rng.random() < 0.3:
            wipe(index_dir)
        else:
            vault.mutate(rng.randint(*EDIT_OPS))
        race = Race(n, kind, round(rng.uniform(0, window), 3))
        if kind == "two indexers":
            race_indexers(vault, index_dir, home, race.kill, race)
        else:
            race_rebuild(vault, index_dir, home, race.kill, race)
        if (index_dir / DB).is_file():
            report = check_index(index_dir / DB)
            race.corrupt.extend(report["problems"])
        run_index(vault.root, index_dir, home)  # to completion
        after = check_index(index_dir / DB)
        race.corrupt.extend(f"after completion: {p}" for p in after["problems"])
        clean_build(vault.root, clean_dir)
        race.mismatch = differences(fingerprint(index_dir / DB, queries), fingerprint(clean_dir / DB, queries))
        results.append(race)
        bad = race.corrupt or race.mismatch or race.server_errors or race.over_total
        say(
            f"race {n:3d} {kind:18s} kill@{race.kill:.2f}s {'killed' if race.killed else 'ended first':11s}"
            f" patches {race.patches:3d} waited {'yes' if race.waited else 'no ':3s} {'FAIL' if bad else 'ok'}"
        )
        for line in race.corrupt + race.mismatch + race.server_errors + race.over_total:
            say(f"    {line}")
    by_kind: dict[str, dict[str, int]] = {}
    for kind in ("two indexers", "patches vs rebuild"):
        mine = [r for r in results if r.kind == kind]
        by_kind[kind] = {
            "trials": len(mine),
            "killed": sum(r.killed for r in mine),
            "corrupt": sum(1 for r in mine if r.corrupt),
            "mismatches": sum(1 for r in mine if r.mismatch),
            "server_errors": sum(len(r.server_errors) for r in mine),
            "over_total": sum(len(r.over_total) for r in mine),
            "waited": sum(r.waited for r in mine),
            "patches": sum(r.patches for r in mine),
        }
    return {
        "races": by_kind,
        "full_run_seconds": round(window, 3),
        "notes": notes,
        "seed": seed,
        "runtime_seconds": round(time.perf_counter() - t_start, 1),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "failures": [asdict(r) for r in results if r.corrupt or r.mismatch or r.server_errors or r.over_total],
    }


def race_markdown(summary: dict[str, Any], command: str) -> str:
    two, patch = summary["races"]["two indexers"], summary["races"]["patches vs rebuild"]
    return f"""{RACE_BEGIN}
## Races under SIGKILL: two indexers, PATCHes racing a rebuild

`{command}` — generated vault of {summary["notes"]} notes, hash embedder, {summary["cpus"]} CPUs,
Python {summary["python"]}, seed {summary["seed"]}; kill delays uniform over a full run
({summary["full_run_seconds"]:.2f} s). Each trial starts from a wiped index (3 in 10) or after 1-20 random
vault changes. *Two indexers*: two `sunlib index` processes at once, one of them (at random) SIGKILLed; the
other must exit 0. *PATCHes racing a rebuild*: a live `sunlib serve`, `POST /api/index/rebuild`, PATCHes of
random notes one after another, then SIGKILL of the server. After each trial the index must pass the full
check (`sunlib doctor`'s: integrity, FTS, orphans, stamps, vectors per space), and `sunlib index` must
complete it to an index equal to a clean build of the vault as the trial left it.

| result | two indexers | PATCHes vs rebuild |
|---|---|---|
| trials (SIGKILL sent) | {two["trials"]} ({two["killed"]}) | {patch["trials"]} ({patch["killed"]}) |
| **inconsistent indexes (full check)** | **{two["corrupt"]}** | **{patch["corrupt"]}** |
| **completed indexes unequal to a clean build** | **{two["mismatches"]}** | **{patch["mismatches"]}** |
| 5xx answers / a surviving indexer failing | {two["server_errors"]} | {patch["server_errors"]} |
| job progress seen with done > total | — | {patch["over_total"]} |
| second indexer waited for the lock (one line) | {two["waited"]} | — |
| PATCHes answered 200 before the kill | — | {patch["patches"]} |

Runtime {summary["runtime_seconds"]:.0f} s.
{RACE_END}"""


# -- output --------------------------------------------------------------------------------


def table(summary: dict[str, Any]) -> str:
    k = summary["kill_seconds"]
    rows = [
        ("trials", summary["trials"]),
        ("kills (SIGKILL sent / run ended first)", f"{summary['killed_mid_run']} / {summary['ended_before_kill']}"),
        ("corrupt indexes after a kill", summary["corrupt"]),
        ("mismatches with a clean build", summary["mismatches"]),
        ("trial kinds", ", ".join(f"{n} {kind}" for kind, n in summary["kinds"].items())),
        (
            "full / incremental run (median)",
            f"{summary['full_run_seconds']:.2f} / {summary['incremental_run_seconds']:.2f} s",
        ),
        ("kill window", summary["kill_window"]),
        (
            "kill delay min / p25 / median / p75 / max",
            f"{k['min']:.2f} / {k['p25']:.2f} / {k['median']:.2f} / {k['p75']:.2f} / {k['max']:.2f} s",
        ),
        ("kill delays per fifth of the window", " · ".join(str(v) for v in summary["kill_histogram"].values())),
        ("vault notes (first / last trial)", f"{summary['initial_notes']} / {summary['final_notes']}"),
        ("chunks (last trial)", summary["final_chunks"]),
        ("runtime", f"{summary['runtime_seconds']:.0f} s"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)


def markdown(summary: dict[str, Any], command: str) -> str:
    k, ks, ke = summary["kill_seconds"], summary["kill_seconds_scratch"], summary["kill_seconds_edit"]
    stages = "\n".join(f"| {stage} | {n} |" for stage, n in summary["stages_at_kill"].items())
    kinds = ", ".join(f"{n} {kind}" for kind, n in summary["kinds"].items())
    full, edit = summary["full_run_seconds"], summary["incremental_run_seconds"]
    window_text = f"the measured duration of a full from-scratch run ({full:.2f} s, interpreter start included)"
    if summary["kill_window"] == "kind":
        window_text = (
            f"the measured duration of the trial's kind of run: a full from-scratch run ({full:.2f} s, interpreter"
            f" start included) for scratch trials, an incremental run after 10 changes ({edit:.2f} s) for the others"
        )
    return f"""{BEGIN}
## Kill trials (`sunlib index` under SIGKILL)

`{command}` — {summary["trials"]} trials on a generated vault of {summary["initial_notes"]} notes
(English and Chinese, frontmatter, sidecars; {summary["final_notes"]} notes and {summary["final_chunks"]} chunks
by the last trial), hash embedder, {summary["cpus"]} CPUs, Python {summary["python"]}, seed {summary["seed"]}.

Each trial starts `python -m sunlib index VAULT --provider hash -q` in a subprocess and SIGKILLs it
after a delay drawn uniformly over {window_text}. Kinds: {kinds} (*scratch*: no index; *edit*: 1-20 random
edits, deletions and additions since the last complete index; *double-kill*: edits, then two kills in a row,
the second on the index the first left, before completing).
After each kill `sunlib.store.check.check_index` must pass (SQLite `integrity_check`, FTS5
`integrity-check`, one full-text row per chunk, no vector, ACL, tag or metadata row without its chunk or note,
sqlite-vec's rowid map in step with its vector chunks); then `sunlib index` runs to completion and its
index must equal a clean build of the same vault state (note ids and metadata, chunk ids, texts and
offsets, the full-text vocabulary, every BM25 match of {len(QUERIES)} queries, vectors per space).

| result | value |
|---|---|
| trials | {summary["trials"]} |
| kills (SIGKILL sent / run had already ended) | {summary["killed_mid_run"]} / {summary["ended_before_kill"]} |
| **corrupt indexes after a kill** | **{summary["corrupt"]}** |
| **completed indexes unequal to a clean build** | **{summary["mismatches"]}** |
| kill delay min / p25 / median / p75 / max | {" / ".join(f"{v:.2f}" for v in k.values())} s |
| kill delay, scratch trials: min / median / max | {ks["min"]:.2f} / {ks["median"]:.2f} / {ks["max"]:.2f} s |
| kill delay, edit trials: min / median / max | {ke["min"]:.2f} / {ke["median"]:.2f} / {ke["max"]:.2f} s |
| kill delays per fifth of the window | {" · ".join(str(v) for v in summary["kill_histogram"].values())} |
| runtime | {summary["runtime_seconds"]:.0f} s |

Where the killed runs were, judged from the killed index (against the index before the run, then
against the clean build):

| index state at the kill | kills |
|---|---|
{stages}
{END}"""


def update_doc(section: str, doc: Path = DOC, begin: str = BEGIN, end: str = END) -> None:
    text = doc.read_text(encoding="utf-8") if doc.is_file() else "# Reliability\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--notes", type=int, default=320)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--json-out", type=Path, default=None, help="write the JSON summary here")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/reliability.md")
    parser.add_argument(
        "--kill-window",
        choices=["kind", "full"],
        default="kind",
        help="draw kill delays over a full run (full) or over the trial's kind of run (kind, default)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (vault and indexes)")
    parser.add_argument("--races", type=int, default=0, help="run N trials of each race instead (see above)")
    parser.add_argument("--dense-engine", default=None, help="the indexer's [search] dense_engine (e.g. usearch)")
    parser.add_argument("--lexical-engine", default=None, help="the indexer's [search] lexical_engine (postings)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sunlib-kill-"))
    os.environ["SUNLIB_HOME"] = str(work / "home")  # the in-process clean builds touch nothing of the user's
    if args.races:
        main_races(args, work)
        return
    try:
        summary = run_trials(
            args.trials,
            args.notes,
            args.seed,
            work,
            window=args.kill_window,
            engine=args.dense_engine,
            lexical=args.lexical_engine,
        )
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(summary))
    if args.json_out:
        args.json_out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if not args.no_doc and not args.dense_engine and not args.lexical_engine:  # the doc's section: default engines
        shown = [f"--trials {args.trials}"] if args.trials != 100 else []
        shown += [f"--notes {args.notes}"] if args.notes != 320 else []
        shown += [f"--kill-window {args.kill_window}"] if args.kill_window != "kind" else []
        command = " ".join(["python -m tests.harness.kill_trials", *shown])
        update_doc(markdown(summary, command))
    if summary["corrupt"] or summary["mismatches"]:
        sys.exit(1)


def main_races(args: argparse.Namespace, work: Path) -> None:
    try:
        summary = run_races(args.races, args.notes, args.seed, work)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(summary["races"], indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if not args.no_doc:
        shown = [f"--races {args.races}"] + ([f"--notes {args.notes}"] if args.notes != 320 else [])
        command = " ".join(["OMP_NUM_THREADS=1 python -m tests.harness.kill_trials", *shown])
        update_doc(race_markdown(summary, command), begin=RACE_BEGIN, end=RACE_END)
    if summary["failures"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
