"""Train the reader on this machine's CPU, with checkpoints and resume, then export what ships.

    pip install -e '.[train]'            # torch (CPU) and onnx: the training stack, never the runtime's
    python -m tools.reader.train ../shared/data --out build/reader

The run is resumable: it writes ``OUT/checkpoint.pt`` every ``--checkpoint-minutes`` and, started
again with the same ``--out``, continues from the last one (same example order, same schedule).
Steps:

1. the trimmed tokenizer (``tools.reader.vocab``) and the labelled pairs (``tools.reader.data``),
   unless ``OUT`` holds them already;
2. training: AdamW, linear warm-up and decay, batches of similar length;
3. ``tools.reader.export``: the int8 ONNX file, the tokenizer, the id map and the card into
   ``OUT/package`` (``--ship`` copies them into ``src/sunlib/providers/readers/e5reader``).

Progress is a bar with an ETA on a terminal and a line a minute otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from sunlib.providers.readers import encoding
from sunlib.providers.readers.e5_file import E5File, default_path

from . import data as pairs
from . import vocab
from .model import Reader, from_e5, word_table


@dataclass
class Item:
    ids: list[int]
    start: int  # token index of the answer's start, 0 when none (the first token)
    end: int
    answer: float  # the window answers the question (qa)
    support: float  # the window supports the claim (support)
    task: int  # 0 qa, 1 support


def window_for(
    windows: list[encoding.Window], span: list[int] | None, rng: random.Random
) -> tuple[encoding.Window, int, int]:
    """The window to train on and the answer's token positions in it (0, 0 when it holds none)."""
    if span:
        a, b = span
        holding = []
        for w in windows:
            toks = [i for i, (s, e) in enumerate(w.offsets) if e > a and s < b]
            if toks and w.offsets[toks[0]][0] <= a + 1 and w.offsets[toks[-1]][1] >= b - 1:
                holding.append((w, w.first + toks[0], w.first + toks[-1]))
        if holding:
            return rng.choice(holding)
    return rng.choice(windows), 0, 0


def items(examples: list[pairs.Example], tok: Tokenizer, max_length: int, seed: int) -> list[Item]:
    rng = random.Random(seed)
    out: list[Item] = []
    for e in examples:
        ws = encoding.windows(tok, e.query, e.passage, max_length=max_length)
        span = e.spans[0] if e.spans else None
        w, s, t = window_for(ws, span, rng)
        if e.task == "qa" and not span and e.label:  # an answer with no span (``--notes``): its first window
            out.append(Item(ws[0].ids, 0, 0, 1.0, 0.0, 0))
        elif e.task == "qa":
            has = float(s > 0)
            out.append(Item(w.ids, s, t, has, 0.0, 0))
        else:
            out.append(Item(w.ids, 0, 0, 0.0, float(e.label if (s > 0 or not span) else 0), 1))
    return out


def batches(data: list[Item], size: int, seed: int, epoch: int) -> list[list[int]]:
    """Shuffled batches of similar length (sorted within pools of 50 batches), the order fixed by seed."""
    rng = random.Random(seed * 1000 + epoch)
    order = list(range(len(data)))
    rng.shuffle(order)
    pool = size * 50
    out: list[list[int]] = []
    for i in range(0, len(order), pool):
        chunk = sorted(order[i : i + pool], key=lambda j: len(data[j].ids))
        out.extend(chunk[k : k + size] for k in range(0, len(chunk), size))
    rng.shuffle(out)
    return out


def collate(data: list[Item], idx: list[int], pad: int) -> dict[str, torch.Tensor]:
    width = max(len(data[i].ids) for i in idx)
    ids = torch.full((len(idx), width), pad, dtype=torch.long)
    mask = torch.zeros((len(idx), width), dtype=torch.long)
    for r, i in enumerate(idx):
        ids[r, : len(data[i].ids)] = torch.tensor(data[i].ids)
        mask[r, : len(data[i].ids)] = 1
    return {
        "ids": ids,
        "mask": mask,
        "start": torch.tensor([data[i].start for i in idx]),
        "end": torch.tensor([data[i].end for i in idx]),
        "answer": torch.tensor([data[i].answer for i in idx]),
        "support": torch.tensor([data[i].support for i in idx]),
        "task": torch.tensor([data[i].task for i in idx]),
    }


def loss_of(model: Reader, table: torch.nn.Embedding, b: dict[str, torch.Tensor]) -> torch.Tensor:
    start, end, answer, support = model(table(b["ids"]), b["mask"])
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    qa = b["task"] == 0
    sup = b["task"] == 1
    pos = qa & (b["start"] > 0)  # the answers with a span
    total = torch.zeros(())
    if qa.any():
        total = total + bce(answer[qa], b["answer"][qa])
    if pos.any():
        ce = torch.nn.functional.cross_entropy
        total = total + 0.5 * (ce(start[pos], b["start"][pos]) + ce(end[pos], b["end"][pos]))
    if sup.any():
        total = total + bce(support[sup], b["support"][sup])
    return total


class Progress:
    """A rich bar with an ETA on a terminal; otherwise a plain line at most once a minute."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.done, self.t0, self.last = total, done, time.monotonic(), 0.0
        self.first = done
        self.bar = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(
                TextColumn("training"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TextColumn("loss {task.fields[loss]:.3f}"),
                TimeRemainingColumn(),
            )
            self.task = self.bar.add_task("train", total=total, completed=done, loss=0.0)
            self.bar.start()

    def step(self, loss: float) -> None:
        self.done += 1
        now = time.monotonic()
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, loss=loss)
            return
        if now - self.last >= 60 or self.done == self.total:
            self.last = now
            rate = (self.done - self.first) / max(1e-9, now - self.t0)
            eta = (self.total - self.done) / max(1e-9, rate)
            print(
                f"step {self.done}/{self.total}  loss {loss:.3f}  {rate:.2f} steps/s  eta {eta / 60:.0f} min",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def prepare(data: Path, out: Path, swap_rate: float = 0.0, mix_rate: float = 0.0, notes: Path | None = None) -> None:
    if not (out / "vocab/tokenizer.json").exists():
        tok, id_map = vocab.trimmed(E5File(default_path()).vocabulary, data)
        (out / "vocab").mkdir(parents=True, exist_ok=True)
        tok.save(str(out / "vocab/tokenizer.json"))
        np.save(out / "vocab/id_map.npy", id_map)
    if not (out / "pairs/train.jsonl").exists():
        pairs.write(pairs.build(data, swap_rate=swap_rate, mix_rate=mix_rate, notes=notes), out / "pairs")


def init_weights(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Start from a trained reader's weights. One with fewer layers grows: its layers become the
    lower ones and the layers above keep e5's weights (the heads move up to the top layer)."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    grown = [k for k in missing if k.startswith("layers.") and f"layers.{k.split('.')[1]}.q.weight" not in state]
    if unexpected or sorted(missing) != sorted(grown):
        left = sorted(set(missing) - set(grown))
        raise SystemExit(f"--init does not fit --layers: missing {left}, extra {unexpected}")


def train(args: argparse.Namespace) -> Path:
    out: Path = args.out
    prepare(args.data, out, args.swap_rate, args.mix_rate, args.notes)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    tok = Tokenizer.from_file(str(out / "vocab/tokenizer.json"))
    pad = encoding.specials(tok).pad
    id_map = np.load(out / "vocab/id_map.npy")
    file = E5File(default_path())
    examples = list(pairs.read(out / "pairs/train.jsonl"))
    if args.limit:
        examples = random.Random(args.seed).sample(examples, min(args.limit, len(examples)))
    data = items(examples, tok, args.max_length, args.seed)
    model = from_e5(file, args.layers)
    if args.init:
        init_weights(model, torch.load(args.init, weights_only=False)["model"])
    table = word_table(file, id_map)
    heads = [p for n, p in model.named_parameters() if n.split(".")[0] in ("span", "answer", "support")]
    body = [p for n, p in model.named_parameters() if n.split(".")[0] not in ("span", "answer", "support")]
    opt = torch.optim.AdamW([{"params": body, "lr": args.lr}, {"params": heads, "lr": args.lr * 10}], weight_decay=0.01)
    per_epoch = math.ceil(len(data) / args.batch)
    total = per_epoch * args.epochs if not args.max_steps else min(args.max_steps, per_epoch * args.epochs)
    warm = max(1, int(0.06 * total))

    def lr_at(step: int) -> float:
        return step / warm if step < warm else max(0.0, (total - step) / max(1, total - warm))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    ckpt = out / "checkpoint.pt"
    step = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step = state["step"]
        print(f"resumed at step {step}/{total}", file=sys.stderr)
    meta = {
        "layers": args.layers,
        "max_length": args.max_length,
        "examples": len(data),
        "steps": total,
        "batch": args.batch,
        "lr": args.lr,
        "epochs": args.epochs,
        "seed": args.seed,
        "init": str(args.init) if args.init else None,
        "notes": str(args.notes) if args.notes else None,
    }
    progress = Progress(total, step)
    last_save = time.monotonic()
    model.train()
    while step < total:
        epoch, at = divmod(step, per_epoch)
        order = batches(data, args.batch, args.seed, epoch)
        for idx in order[at:]:
            loss = loss_of(model, table, collate(data, idx, pad))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            progress.step(loss.item())
            if time.monotonic() - last_save > args.checkpoint_minutes * 60 or step == total:
                tmp = ckpt.with_suffix(".tmp")
                torch.save(
                    {
                        "model": model.state_dict(),
                        "opt": opt.state_dict(),
                        "sched": sched.state_dict(),
                        "step": step,
                        "meta": meta,
                    },
                    tmp,
                )
                tmp.replace(ckpt)
                last_save = time.monotonic()
            if step >= total:
                break
    progress.close()
    final = out / "reader.pt"
    torch.save({"model": model.state_dict(), "meta": meta}, final)
    (out / "train.json").write_text(json.dumps(meta, indent=2))
    return final


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="the shared data folder (../shared/data)")
    ap.add_argument("--out", type=Path, default=Path("build/reader"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=encoding.MAX_LENGTH)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=6e-5)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--init",
        type=Path,
        help="start from this reader.pt's weights (a second stage) instead of e5; with fewer layers than --layers,"
        " the layers above come from e5",
    )
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: all epochs)")
    ap.add_argument(
        "--swap-rate",
        type=float,
        default=0.0,
        help="share of answerable training questions that also give a swapped-name negative (data.swapped_questions;"
        " tried at 0.5 and not shipped: docs/reader.md)",
    )
    ap.add_argument(
        "--mix-rate",
        type=float,
        default=0.0,
        help="share of same-language training questions that also give a code-switched one (data.code_switched;"
        " tried at 0.5 and not shipped: docs/reader.md)",
    )
    ap.add_argument(
        "--notes",
        type=Path,
        help="a folder of Markdown docs (PACKAGE/en|zh/...) to derive heading-question pairs from (data.notes_pairs);"
        " never a vault that is reported on (tried and not shipped: docs/reader.md)",
    )
    ap.add_argument("--limit", type=int, default=0, help="train on a sample of this many pairs (0: all)")
    ap.add_argument("--checkpoint-minutes", type=float, default=5.0)
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--ship", action="store_true", help="copy the exported files into the package")
    return ap


def main() -> None:
    args = parser().parse_args()
    final = train(args)
    if not args.no_export:
        from . import export

        export.export(final, args.out, ship=args.ship)


if __name__ == "__main__":
    main()
