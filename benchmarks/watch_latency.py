"""Watch mode on a synthetic 10k-note vault: save -> searchable latency, and a 1,000-file checkout.

    OMP_NUM_THREADS=1 python -m benchmarks.watch_latency [--notes 10000] [--saves 40] [--checkout 1000]

One process: the vault is indexed with the default settings (e5, sqlite-vec), then a ``Watcher``
(sunlib.sync.watch, vectors inline as in ``sunlib index --watch``) runs on its own thread, and:

1. **Saves.** ``--saves`` times, one note is saved the way an editor does (a temp file renamed
   over it) with a new word. Measured: from the rename to a BM25 search finding the word
   (``Library.search``, polled every 5 ms), and to the note's chunks all having an e5 vector
   (dense-searchable: KNN sees a chunk once its vector is stored). Saves are sequential.
2. **Checkout.** The vault is a git repository; a branch changes ``--checkout`` files (half
   edited, 30% added, 20% deleted). ``git checkout`` of that branch is timed from its start
   until every touched path in the index matches its file (text caught up), then until no
   chunk waits for a vector. The watcher's memory: the process's peak RSS during the checkout
   (``VmHWM`` reset just before it through ``/proc/self/clear_refs``) against its RSS before.

The bodies are drawn from 60 distinct texts so that building the 10k-note index embeds 60
texts, not 10k (the embedding cache serves the rest): the index still holds 10k notes, their
chunks and their vectors. Every saved text is new, so the dense figure includes a real e5
embedding. The checkout's files take their texts from the same 60, so its vectors figure is
the vectors phase (reconcile, cache look-ups, stamped upserts) without model time; at e5's
speed per chunk (the dense save figure less the BM25 one), add that per new chunk.
Writes its section of docs/benchmarks.md between markers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import write_block
from sunlib import Library
from sunlib.ingest.ids import sha256_hex
from sunlib.sync.watch import Watcher

VOCABULARY = (
    "river stone garden lantern harbor meadow copper signal archive ledger orbit canvas timber beacon "
    "quartz summit valley ember thicket compass glacier prairie tunnel anchor falcon marble pillar"
)
WORDS = VOCABULARY.split()
TEMPLATES = 60


def body(rng: random.Random, words: int = 90) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + ".\n"


def templates() -> list[str]:
    rng = random.Random(7)
    return [body(rng) for _ in range(TEMPLATES)]


def write_notes(vault: Path, start: int, stop: int) -> list[str]:
    texts = templates()
    paths = []
    for i in range(start, stop):
        rel = f"f{i // 100:03}/note{i:05}.md"
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(f"# Note\n\n{texts[i % TEMPLATES]}", encoding="utf-8")
        paths.append(rel)
    return paths


def build_index(lib: Library, notes: int) -> tuple[list[str], float]:
    """The first TEMPLATES notes (every distinct text) are indexed first, so that their vectors are
    in the embedding cache before the rest arrive (a first page of pending chunks would otherwise
    embed its repeated texts again); then the whole vault. Returns the paths and the seconds."""
    t0 = time.perf_counter()
    paths = write_notes(lib.vault, 0, min(TEMPLATES, notes))
    lib.index()
    paths += write_notes(lib.vault, len(paths), notes)
    lib.index()
    return paths, time.perf_counter() - t0


def editor_save(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".swx")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def wait(check, timeout: float = 600.0, every: float = 0.005) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    while not check():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the watcher did not catch up")
        time.sleep(every)
    return time.perf_counter()


def embedded(lib: Library, rel: str) -> bool:
    state = lib.store.note_states_of([rel]).get(rel)
    if state is None:
        return False
    ids = [c.chunk_id for c in lib.store.chunks_of_note(state.note_id)]
    return not lib.store.vectors.without_vectors(lib.space, ids)


def saves(lib: Library, paths: list[str], n: int) -> tuple[list[float], list[float]]:
    rng = random.Random(11)
    bm25, dense = [], []
    for i in range(n):
        rel = rng.choice(paths)
        word = f"zqx{i:04}w"
        path = lib.vault / rel
        text = path.read_text(encoding="utf-8") + f"\nA new line with {word} and {body(rng, 12)}"
        t0 = time.perf_counter()
        editor_save(path, text)
        t_bm25 = wait(lambda w=word, r=rel: any(h.path == r for h in lib.search(w, mode="bm25", limit=3).hits))
        t_dense = wait(lambda r=rel: embedded(lib, r))
        bm25.append((t_bm25 - t0) * 1000.0)
        dense.append((t_dense - t0) * 1000.0)
    return bm25, dense


def rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def git(vault: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@x"
    subprocess.run(["git", "-C", str(vault), *args], check=True, capture_output=True, env=env)


def caught_up(lib: Library, present: list[str], absent: list[str]) -> bool:
    """Every path in ``present`` indexed with its file's current hash, none of ``absent`` indexed."""
    states = lib.store.note_states_of(present + absent)
    if any(r in states for r in absent):
        return False
    for rel in present:
        try:
            digest = sha256_hex((lib.vault / rel).read_bytes())
        except OSError:
            return False
        if rel not in states or states[rel].content_hash != digest:
            return False
    return True


def checkout(lib: Library, paths: list[str], n: int) -> dict[str, float]:
    vault, rng = lib.vault, random.Random(13)
    git(vault, "init", "-q", "-b", "main")
    git(vault, "add", "-A")
    git(vault, "commit", "-q", "-m", "a")
    # the branch is made in a worktree outside the vault: the vault's files change only at the checkout
    other = vault.parent / "other"
    git(vault, "worktree", "add", "-q", "-b", "other", str(other))
    touched = rng.sample(paths, n * 7 // 10)
    edited, deleted = touched[: n // 2], touched[n // 2 :]
    texts = templates()  # other notes' texts: new files, vectors from the embedding cache
    for rel in edited:
        (other / rel).write_text(f"# Note\n\n{rng.choice(texts)}", encoding="utf-8")
    for rel in deleted:
        (other / rel).unlink()
    added = [f"new/n{i:04}.md" for i in range(n - len(touched))]
    (other / "new").mkdir()
    for rel in added:
        (other / rel).write_text(f"# Note\n\n{rng.choice(texts)}", encoding="utf-8")
    git(other, "add", "-A")
    git(other, "commit", "-q", "-m", "b")
    git(vault, "worktree", "remove", "--force", str(other))
    wait(lambda: lib.store.vectors.count_pending(lib.space)[0] == 0, every=0.05)

    before_rss = rss_kb("VmRSS")
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    t0 = time.perf_counter()
    git(vault, "checkout", "-q", "other")
    t_text = wait(lambda: caught_up(lib, edited + added, deleted), every=0.05)
    t_vec = wait(lambda: lib.store.vectors.count_pending(lib.space)[0] == 0, every=0.05)
    return {
        "files": float(n),
        "text_s": t_text - t0,
        "vectors_s": t_vec - t0,
        "rss_before_mb": before_rss / 1024,
        "rss_peak_mb": rss_kb("VmHWM") / 1024,
    }


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--saves", type=int, default=40)
    ap.add_argument("--checkout", type=int, default=1000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sunlib-watch-"))
    os.environ["SUNLIB_HOME"] = str(work / "home")
    try:
        vault = work / "vault"
        vault.mkdir()
        lib = Library.open(vault, index_dir=work / "index")
        paths, index_s = build_index(lib, args.notes)
        lib.search("warm up the models", mode="hybrid")
        watcher = Watcher(lib, vectors=lambda embed: embed(), catch_up=False)
        threading.Thread(target=watcher.run, daemon=True).start()
        watcher.ready.wait(30)
        bm25, dense = saves(lib, paths, args.saves)
        co = checkout(lib, paths, args.checkout)
        watcher._stop.set()
        lib.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = "\n".join(
        [
            f"A synthetic vault of {args.notes:,} notes (one chunk each), e5 + sqlite-vec, one process, "
            f"OMP_NUM_THREADS=1; the first index took {index_s:.0f} s.",
            "",
            f"| save -> searchable ({args.saves} editor saves, temp file + rename) | p50 ms | p95 ms |",
            "|---|---|---|",
            f"| BM25 (text phase) | {statistics.median(bm25):.0f} | {p(bm25, 95):.0f} |",
            f"| dense, e5 (vectors phase) | {statistics.median(dense):.0f} | {p(dense, 95):.0f} |",
            "",
            f"`git checkout` of {co['files']:.0f} files (50% edited, 30% added, 20% deleted): text caught up in "
            f"**{co['text_s']:.1f} s**, vectors in **{co['vectors_s']:.1f} s** (texts already in the embedding "
            "cache: no model time); the process's peak RSS during it "
            f"{co['rss_peak_mb']:.0f} MB (before: {co['rss_before_mb']:.0f} MB, so the watcher's batches took "
            f"{co['rss_peak_mb'] - co['rss_before_mb']:.0f} MB more).",
        ]
    )
    print(table)
    write_block(
        "watch_latency",
        table,
        "Watch mode latency",
        "Command: `OMP_NUM_THREADS=1 python -m benchmarks.watch_latency` (see its docstring for the method).",
    )


if __name__ == "__main__":
    main()
