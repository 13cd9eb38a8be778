"""The e5 fixture's saved vectors (tests/data/sample_vault_vectors.npz): reading, seeding and writing them."""

from __future__ import annotations

from typing import Any

import numpy as np

from sunlib import Library
from sunlib.store import Space, VectorItem

from .paths import TESTS_DIR

# The sample vault's passage vectors as the bundled models computed them (e5, and the cross-language
# route's embedder), by embed hash: the e5 fixture seeds its index with them, as sunlib's own embedding
# cache seeds a re-index, and the models embed only what the file lacks. Embedding the vault with e5 on
# one thread is most of a minute, the suite's slowest setup. test_answer.py checks that the file is the
# models' output for the current notes; `SUNLIB_SAVE_E5_VECTORS=1 pytest tests/unit/answer/test_answer.py` rewrites it.
E5_VECTORS = TESTS_DIR / "data" / "sample_vault_vectors.npz"


def e5_spaces(lib: Library) -> list[tuple[Any, Space]]:
    """(embedder, space) of every space the e5 fixture's index embeds."""
    return [(lib.embedder, lib.space), *([lib.crosslang] if lib.crosslang is not None else [])]


def load_saved_vectors() -> dict[str, tuple[list[str], list[str], np.ndarray]]:
    """space name -> (embed hashes, embed texts, vectors) from ``E5_VECTORS`` ({} when it is absent)."""
    if not E5_VECTORS.is_file():
        return {}
    with np.load(E5_VECTORS, allow_pickle=False) as saved:
        names = [str(n) for n in saved["spaces"]]
        return {
            name: ([str(h) for h in saved[f"hashes{i}"]], [str(t) for t in saved[f"texts{i}"]], saved[f"vectors{i}"])
            for i, name in enumerate(names)
        }


def seed_saved_vectors(lib: Library) -> int:
    """Write the saved vectors of the chunks waiting for one (matched by embed hash); returns how many."""
    saved, written = load_saved_vectors(), 0
    for _, space in e5_spaces(lib):
        hashes, _, vectors = saved.get(space.name, ([], [], np.zeros((0, space.dim))))
        by_hash = dict(zip(hashes, vectors, strict=True))
        lib.store.vectors.ensure_space(space)
        items = [
            VectorItem(p.chunk_id, p.stamp, p.embed_hash, by_hash[p.embed_hash])
            for p in lib.store.vectors.pending(space)
            if p.embed_hash in by_hash
        ]
        written += lib.store.vectors.upsert(space, items)
    return written


def save_vectors(lib: Library, waiting: dict[str, dict[str, str]]) -> None:
    """Write ``E5_VECTORS``: for each space, the vectors of the chunks that were ``waiting``
    (space name -> embed hash -> embed text), read back from the fully embedded index."""
    arrays: dict[str, Any] = {}
    for i, (_, space) in enumerate(e5_spaces(lib)):
        texts = waiting[space.name]
        found = lib.store.vectors.cached_vectors(space, list(texts))
        hashes = sorted(found)
        arrays[f"hashes{i}"] = np.array(hashes)
        arrays[f"texts{i}"] = np.array([texts[h] for h in hashes])
        arrays[f"vectors{i}"] = np.stack([found[h] for h in hashes]).astype(np.float32)
    E5_VECTORS.parent.mkdir(exist_ok=True)
    np.savez_compressed(E5_VECTORS, spaces=np.array([space.name for _, space in e5_spaces(lib)]), **arrays)


def waiting_chunks(lib: Library) -> dict[str, dict[str, str]]:
    """space name -> embed hash -> embed text of the chunks without a vector."""
    out = {}
    for _, space in e5_spaces(lib):
        lib.store.vectors.ensure_space(space)
        out[space.name] = {p.embed_hash: p.embed_text for p in lib.store.vectors.pending(space)}
    return out
