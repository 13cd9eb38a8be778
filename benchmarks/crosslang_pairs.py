"""Cross-language retrieval sets from the bilingual FastAPI docs (BEIR format, deterministic, no LLM).

    python -m benchmarks.crosslang_pairs ../shared/data/fastapi_docs OUT
    sunlib eval retrieval OUT/fastapi-xlang-en --split zh-dev --mode hybrid --json   # zh questions, en notes

Every zh note of ``pairs.tsv`` has an en twin, and twin headings carry the same anchor
(``## 默认值 { #defaults }`` / ``## Defaults { #defaults }``), so a section of one language has a
known translation in the other. A query is written from one section of one language:

* ``title``: the note's title ("查询参数" / "Query Parameters");
* ``heading``: the note's title and the section's heading ("查询参数：默认值" / "Query Parameters:
  Defaults"); headings found in more than one note of a language ("Recap", "Technical Details")
  make no query;
* ``sentence``: the section's first sentence of prose (no code, table, list or directive),
  markup stripped, 5 to 45 words (en) or 8 to 90 characters (zh).

A (kind, anchor) query is kept only when both twins give one, so the zh and en query sets are
translations of each other. The gold document is the query's twin note (or, for a control, its
own note). Front matter, the H1 line (it becomes the title) and the anchors (``{ #defaults }``,
English in both languages) are removed from the notes; sunlib's parser drops anchors from chunks
anyway, so the chunks are those of the notes as they are (and their cached vectors can be reused).

Three corpora, each a BEIR folder with one split per query language and half:

* ``fastapi-xlang-en``: the 155 en notes. ``zh-dev``/``zh-test``: zh queries, gold = the en twin
  (zh->en). ``en-dev``/``en-test``: the en twins' queries on their own notes (the en->en control).
* ``fastapi-xlang-zh``: the 124 zh notes. ``en-*``: en->zh; ``zh-*``: the zh->zh control.
* ``fastapi-xlang-mixed``: a bilingual vault. Pairs are split into sides A and B; the corpus is
  the en notes of side A, the zh notes of side B and the en notes without a twin. ``zh-*``
  queries of side A find their en twin (zh->en beside zh notes that are not the answer), ``en-*``
  queries of side B their zh twin; ``zhzh-*`` and ``enen-*`` are the same-language controls
  (queries of side B on zh notes, of side A on en notes).

Dev and test halves split the pairs (all queries of one note are in the same half) by a hash of
the en path, as do sides A and B (another bit of it): nothing is random. Methods are chosen on the
``*-dev`` splits and reported on ``*-test``.

``seed``: copy the embedding cache of other indexes (same text, same hash) into an eval index, after a
``--mode bm25`` run created it and before a hybrid run embeds: the mixed corpus from the en and zh ones,
or any of them from an index of the FastAPI folders themselves:

    python -m benchmarks.crosslang_pairs seed $SUNLIB_HOME/eval/fastapi-xlang-mixed-*/index/sunlib.db \\
        $SUNLIB_HOME/eval/fastapi-xlang-en-*/index/sunlib.db $SUNLIB_HOME/eval/fastapi-xlang-zh-*/index/sunlib.db
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ANCHOR = re.compile(r"\s*\{\s*#([\w.-]+)\s*\}\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)
LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
TAG = re.compile(r"<[^>]+>")
EMPHASIS = re.compile(r"(\*\*|\*|(?<!\w)__|(?<!\w)_)(?=\S)(.+?)(?<=\S)\1(?!\w)")
CODE = re.compile(r"`+([^`]*)`+")
CJK = re.compile(r"[\u3400-\u9fff]")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*`\"(\[])|(?<=[。！？])")
NOT_PROSE = ("{*", "///", "|", "<", "!!!", "* ", "- ", "+ ", ">", "    ", "\t")


@dataclass
class Section:
    anchor: str
    level: int
    heading: str
    first_sentence: str | None


@dataclass
class Note:
    rel: str
    title: str
    body: str  # without front matter, H1 line and anchors
    sections: list[Section]


def plain(text: str) -> str:
    """Inline Markdown and HTML made plain text, on one line."""
    text = LINK.sub(r"\1", text)
    text = TAG.sub("", text)
    parts = CODE.split(text)  # odd items are code spans: kept as they are
    for i in range(0, len(parts), 2):
        for _ in range(2):
            parts[i] = EMPHASIS.sub(r"\2", parts[i])
    return " ".join("".join(parts).split())


def first_sentence(lines: list[str], zh: bool) -> str | None:
    """The first sentence of the first prose paragraph, when it has a good query's length."""
    para: list[str] = []
    in_fence = False
    for line in [*lines, ""]:
        if FENCE.match(line):
            in_fence = not in_fence
            para = []
            continue
        if in_fence:
            continue
        if not line.strip():
            if para:
                break
            continue
        if not para and (line.startswith(NOT_PROSE) or re.match(r"\d+\.\s", line)):
            continue
        para.append(line.strip())
    if not para:
        return None
    text = plain(" ".join(para))
    sentence = SENTENCE_END.split(text, maxsplit=1)[0].strip()
    sentence = sentence.rstrip(":：").strip()
    if zh:
        n = len(CJK.findall(sentence))
        return sentence if n >= 8 and len(sentence) <= 90 else None
    words = len(sentence.split())
    return sentence if 5 <= words <= 45 and not CJK.search(sentence) else None


def parse(root: Path, rel: str) -> Note:
    raw = (root / rel).read_text(encoding="utf-8")
    raw = FRONT_MATTER.sub("", raw, count=1)
    lines = raw.splitlines()
    zh = rel.startswith("zh/")
    title = ""
    heads: list[tuple[int, int, str, str]] = []  # (line, level, heading, anchor)
    in_fence = False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = None if in_fence else HEADING.match(line)
        if not m:
            continue
        anchor_m = ANCHOR.search(m.group(2))
        text = plain(ANCHOR.sub("", m.group(2)))
        if len(m.group(1)) == 1 and not title:
            title = text
        if anchor_m:
            heads.append((i, len(m.group(1)), text, anchor_m.group(1)))
    sections = []
    for n, (i, level, text, anchor) in enumerate(heads):
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        sections.append(Section(anchor, level, text, first_sentence(lines[i + 1 : end], zh)))
    body_lines = []
    dropped_h1 = False
    in_fence = False
    for line in lines:
        if FENCE.match(line):
            in_fence = not in_fence
        if not in_fence and not dropped_h1 and line.startswith("# "):
            dropped_h1 = True
            continue
        body_lines.append(ANCHOR.sub("", line) if not in_fence and HEADING.match(line) else line)
    return Note(rel, title, "\n".join(body_lines).strip() + "\n", sections)


def bucket(en_rel: str) -> tuple[str, str]:
    """(half, side) of a pair: dev/test and A/B, from two bits of a hash of the en path."""
    digest = hashlib.sha256(en_rel.encode("utf-8")).digest()
    return ("dev" if digest[0] & 1 else "test"), ("A" if digest[0] & 2 else "B")


def queries_of(zh: Note, en: Note, generic: dict[str, set[str]]) -> list[tuple[str, str, str]]:
    """(query key, zh query, en query) for the sections both twins have."""
    out: list[tuple[str, str, str]] = []
    if zh.title and en.title:
        out.append(("title", zh.title, en.title))
    en_by_anchor = {s.anchor: s for s in en.sections}
    seen: set[str] = set()
    for s in zh.sections:
        t = en_by_anchor.get(s.anchor)
        if t is None or s.anchor in seen:
            continue
        seen.add(s.anchor)
        if s.level >= 2 and s.anchor not in generic["zh"] | generic["en"] and s.heading and t.heading:
            out.append((f"heading:{s.anchor}", f"{zh.title}：{s.heading}", f"{en.title}: {t.heading}"))
        if s.first_sentence and t.first_sentence:
            out.append((f"sentence:{s.anchor}", s.first_sentence, t.first_sentence))
    return out


def write_set(
    out: Path, corpus: list[Note], splits: dict[str, list[tuple[str, str, str]]], meta: dict[str, object]
) -> None:
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for note in sorted(corpus, key=lambda n: n.rel):
            fh.write(json.dumps({"_id": note.rel, "title": note.title, "text": note.body}, ensure_ascii=False) + "\n")
    counts = {}
    for split, rows in sorted(splits.items()):
        with (out / f"queries_{split}.jsonl").open("w", encoding="utf-8") as fh:
            for qid, text, _ in rows:
                fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
        with (out / "qrels" / f"{split}.tsv").open("w", encoding="utf-8") as fh:
            fh.write("query-id\tcorpus-id\tscore\n")
            for qid, _, gold in rows:
                fh.write(f"{qid}\t{gold}\t1\n")
        counts[split] = len(rows)
    (out / "README.json").write_text(
        json.dumps({**meta, "documents": len(corpus), "queries": counts}, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8",
    )


def build(source: Path, out: Path) -> dict[str, dict[str, int]]:
    pairs = [
        tuple(line.split("\t"))
        for line in (source / "pairs.tsv").read_text(encoding="utf-8").splitlines()[1:]
        if line.strip()
    ]
    en_all = sorted(str(p.relative_to(source)) for p in (source / "en").rglob("*.md"))
    notes = {rel: parse(source, rel) for rel in en_all}
    notes.update({zh: parse(source, zh) for _, zh in pairs})
    generic: dict[str, set[str]] = {}
    for lang in ("en", "zh"):
        count = Counter(
            a for rel, n in notes.items() if rel.startswith(lang + "/") for a in {s.anchor for s in n.sections[1:]}
        )
        generic[lang] = {a for a, c in count.items() if c > 1}
    twinned = {en for en, _ in pairs}
    sets: dict[str, tuple[list[Note], dict[str, list[tuple[str, str, str]]]]] = {
        "en": ([notes[r] for r in en_all], {}),
        "zh": ([notes[zh] for _, zh in pairs], {}),
        "mixed": ([], {}),
    }
    mixed_corpus = sets["mixed"][0]
    mixed_corpus.extend(notes[r] for r in en_all if r not in twinned)
    for en_rel, zh_rel in sorted(pairs):
        half, side = bucket(en_rel)
        mixed_corpus.append(notes[en_rel] if side == "A" else notes[zh_rel])
        for key, zq, eq in queries_of(notes[zh_rel], notes[en_rel], generic):
            qid = f"{en_rel[3:-3]}#{key}"
            add = sets["en"][1].setdefault
            add(f"zh-{half}", []).append((qid, zq, en_rel))  # zh -> en
            add(f"en-{half}", []).append((qid, eq, en_rel))  # en -> en (control)
            add = sets["zh"][1].setdefault
            add(f"en-{half}", []).append((qid, eq, zh_rel))  # en -> zh
            add(f"zh-{half}", []).append((qid, zq, zh_rel))  # zh -> zh (control)
            add = sets["mixed"][1].setdefault
            if side == "A":  # the en twin is in the vault, the zh one is not
                add(f"zh-{half}", []).append((qid, zq, en_rel))
                add(f"enen-{half}", []).append((qid, eq, en_rel))
            else:
                add(f"en-{half}", []).append((qid, eq, zh_rel))
                add(f"zhzh-{half}", []).append((qid, zq, zh_rel))
    summary = {}
    for name, (corpus, splits) in sets.items():
        target = out / f"fastapi-xlang-{name}"
        write_set(target, corpus, splits, {"source": str(source), "corpus": name})
        summary[target.name] = {k: len(v) for k, v in sorted(splits.items())}
        summary[target.name]["documents"] = len(corpus)
    return summary


def seed(target: Path, sources: list[Path]) -> int:
    """Copy embedding-cache rows from other eval indexes into ``target`` (same text, same hash)."""
    con = sqlite3.connect(f"file:{target}", uri=True)
    copied = 0
    try:
        for n, src in enumerate(sources):
            con.execute(f"ATTACH DATABASE ? AS s{n}", (f"file:{src}?mode=ro",))
            cur = con.execute(f"INSERT OR IGNORE INTO embedding_cache SELECT * FROM s{n}.embedding_cache")
            copied += cur.rowcount
        con.commit()
    finally:
        con.close()
    return copied


def main(argv: list[str]) -> None:
    if argv and argv[0] == "seed":
        ap = argparse.ArgumentParser(prog="crosslang_pairs.py seed")
        ap.add_argument("target", type=Path)
        ap.add_argument("sources", type=Path, nargs="+")
        a = ap.parse_args(argv[1:])
        print(f"copied {seed(a.target, a.sources)} cached vectors into {a.target}")
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="the fastapi_docs folder (en/, zh/, pairs.tsv)")
    ap.add_argument("out", type=Path, help="where the three BEIR folders are written")
    a = ap.parse_args(argv)
    print(json.dumps(build(a.source, a.out), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
