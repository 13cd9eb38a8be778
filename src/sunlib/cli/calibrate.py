"""``sunlib calibrate``: the refusal gate's threshold for this vault, from probe questions written from it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..library.calibration import DEFAULT_PROBES, reset_calibration
from .app import app
from .common import VAULT_HELP, open_library, out, print_json, require_index
from .progress import ProgressBars


@app.command()
def calibrate(
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    probes: Annotated[int, typer.Option(help="probe questions to write (half answerable, half not)")] = DEFAULT_PROBES,
    seed: Annotated[int, typer.Option(help="seed of the probes' choice of notes")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="measure and print; store nothing")] = False,
    reset: Annotated[
        bool, typer.Option("--reset", help="forget this vault's calibration (the shipped threshold again)")
    ] = False,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the calibration (and every probe) as JSON")] = False,
) -> None:
    """Self-calibrate the refusal gate on this vault, without labels: probe questions from its own
    headings and sentences (and the same with a term it never mentions), run through the ask
    pipeline, move the learned gate's threshold for this vault when they say so."""
    with open_library(vault, config) as lib:
        require_index(lib)
        if reset:
            key = reset_calibration(lib)
            if as_json:
                print_json({"key": key, "reset": True, "calibration": lib.calibration().as_dict()})
            else:
                out.print(f"forgot {key}: the gate uses {lib.calibration().source}")
            return
        with ProgressBars(enabled=not as_json) as bars:
            lib.index(progress=bars)
            result = lib.calibrate(
                probes=probes, seed=seed, store=not dry_run, on_probe=lambda n, t: bars("probes", n, t)
            )
    if as_json:
        print_json(result)
        return
    print_report(result)


def print_report(result: dict[str, Any]) -> None:
    p, b, a, o = result["probes"], result["before"], result["after"], result["at_optimum"]
    out.print(
        f"probes    {p['answerable']} answerable, {p['unanswerable']} unanswerable from {p['notes']} notes"
        f" (seed {p['seed']})"
    )
    out.print(
        f"shipped   threshold {result['shipped_threshold']:.4f}: refusal {b['refusal_rate']}, false refusal"
        f" {b['false_refusal_rate']}, balanced accuracy {b['balanced_accuracy']} on the probes"
    )
    out.print(f"probes'   best threshold {result['optimum']:.4f}: balanced accuracy {o['balanced_accuracy']}")
    verb = "stored" if result["stored"] else "would store (dry run)"
    change = "moved" if result["moved"] else "kept the shipped threshold"
    out.print(
        f"{verb} {result['key']}: threshold {result['threshold']:.4f} ({change}); on the probes refusal"
        f" {a['refusal_rate']}, false refusal {a['false_refusal_rate']}"
    )
