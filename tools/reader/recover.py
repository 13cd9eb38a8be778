"""A ``reader.pt`` rebuilt from a shipped package, so that a second stage can start from the model
that ships on a machine that never trained it.

    python -m tools.reader.recover src/sunlib/providers/readers/e5reader build/shipped/reader.pt

The package's ``reader.onnx`` holds every float the export wrote: the LayerNorms, biases and position
table under their torch names, and each Linear's weight as int8 with a scale and a zero point (onnxruntime's
dynamic quantisation). Each ``MatMulInteger`` is followed through the graph to the ``Add`` of its bias,
which names the Linear; its weight is ``scale * (q - zero_point)``, transposed back to torch's layout.
The rounding error of int8 is left for the next stage's training to absorb.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from sunlib.providers.readers.e5_file import E5File, default_path

from .model import from_e5


def _weights(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    out = {name: value for name, value in inits.items() if not name.endswith(("_quantized", "_scale", "_zero_point"))}
    for node in graph.node:
        if node.op_type != "MatMulInteger":
            continue
        q = node.input[1]
        base = q.removesuffix("_quantized")
        weight = (inits[q].astype(np.float32) - inits[base + "_zero_point"].astype(np.float32)) * inits[base + "_scale"]
        frontier, bias = [node.output[0]], None
        while frontier and bias is None:  # Cast -> Mul (the scales) -> Add (the bias), nothing else
            for user in consumers.get(frontier.pop(), []):
                named = [i for i in user.input if i.endswith(".bias") and i in inits]
                if user.op_type == "Add" and named:
                    bias = named[0]
                    break
                if user.op_type in ("Cast", "Mul"):
                    frontier.extend(user.output)
        name = (bias or "").removesuffix(".bias") + ".weight"
        if bias is None or name in out:
            raise ValueError(f"{node.name} meets {'no bias' if bias is None else 'a bias twice'}: not a reader export")
        out[name] = weight.T.copy()
    return out


def recover(package: Path, out: Path) -> Path:
    manifest = json.loads((package / "reader.json").read_text())
    model = from_e5(E5File(default_path()), manifest["layers"])
    found = _weights(onnx.load(str(package / "reader.onnx")).graph)
    state = model.state_dict()
    missing = sorted(set(state) - set(found))
    if missing:
        raise ValueError(f"{package / 'reader.onnx'} lacks {', '.join(missing[:5])}")
    wrong = [name for name in state if tuple(np.shape(found[name])) != tuple(state[name].shape)]
    if wrong:
        raise ValueError(f"{package / 'reader.onnx'}: {', '.join(wrong[:5])} have another shape than the model's")
    model.load_state_dict({name: torch.from_numpy(np.array(found[name])) for name in state})
    meta = dict(manifest["training"], recovered_from=str(package))
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "meta": meta}, out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("package", type=Path, help="a reader package folder (reader.json, reader.onnx)")
    ap.add_argument("out", type=Path, help="the reader.pt to write")
    args = ap.parse_args()
    print(recover(args.package, args.out))


if __name__ == "__main__":
    main()
