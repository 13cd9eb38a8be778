"""The reader's labelled pairs, built from ``../shared/data`` and split by article.

Every example is one (question or claim, passage) pair:

- ``task="qa"``: ``spans`` are the character spans of the answer in ``passage``; empty means the
  passage does not answer the question;
- ``task="support"``: ``label`` says whether ``passage`` supports the claim; ``spans``, when given, is
  where in the passage the claim's fact is (or should be), so training reads the window holding it.

Sources (the licence of each is in the model card):

- squad2_dev_half (16 articles): answerable questions on their paragraph; the real adversarial
  unanswerable questions on the paragraph they were written against; answerable questions on another
  paragraph of the same article that holds none of their answers;
- cmrc2018 dev + trial: spans; each passage is its own article, so its negative is the passage that
  shares most character bigrams with it and holds none of the answers;
- drcd dev + test (Traditional Chinese): spans, and negatives from other paragraphs of the article;
- xquad: the paragraphs of the squad2 training articles, in both languages and across them (a zh
  question on the en paragraph and back); its 160 paragraphs outside squad2_dev_half are test only;
- support: scifact's evidence (SUPPORT 1; CONTRADICT and NOT_ENOUGH_INFO 0) and, from the QA
  training articles, the sentence holding an answer (or "question + answer") against its paragraph
  (1), against an on-topic paragraph without the answer (0), and with its answer swapped for another
  answer from the same article (0), across languages for xquad.
- optionally (``--mix-rate``, ``--swap-rate``): code-switched questions (``code_switched``) and
  swapped-name negatives (``swapped_questions``), from the training articles only;
- optionally (``--notes DIR``): heading questions over Markdown docs (``notes_pairs``), without labels,
  from the bilingual component docs that ``tools/reader/fetch_notes.sh`` fetches from npm.

Articles go to ``test`` by a hash of (source, article): about 20% of squad2 and drcd, 15% of cmrc.
No paragraph is in both splits: the support pairs are built from training articles only.

    python -m tools.reader.data ../shared/data OUT_DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sunlib.text import dictionary
from sunlib.text.dictionary import Dictionary
from sunlib.text.terms import QUESTION_WORDS
from sunlib.text.tokens import STOPWORDS, stem_word


@dataclass
class Example:
    task: str  # "qa" | "support"
    source: str
    split: str  # "train" | "test"
    article: str
    query: str
    passage: str
    spans: list[list[int]] = field(default_factory=list)
    label: int = 0
    lang: str = ""  # question language -> passage language, e.g. "zh-en"
    id: str = ""


def rows(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def held_out(source: str, article: str, percent: int) -> bool:
    h = int(hashlib.sha256(f"{source}\x00{article}".encode()).hexdigest()[:8], 16)
    return h % 100 < percent


def find_spans(passage: str, answers: Iterable[str], starts: Iterable[int] | None = None) -> list[list[int]]:
    out: list[list[int]] = []
    for i, ans in enumerate(answers):
        if not ans:
            continue
        start = list(starts)[i] if starts is not None else -1
        if start < 0 or passage[start : start + len(ans)] != ans:
            start = passage.find(ans)
        if start >= 0 and [start, start + len(ans)] not in out:
            out.append([start, start + len(ans)])
    return out


_SENTENCE = re.compile(r"[^.!?。！？]*(?:[.!?。！？]+[\"'”」』）)]*|$)")


def sentence_at(text: str, start: int, end: int) -> str:
    """The sentence of ``text`` that holds ``[start, end)`` (whole sentences joined if it spans several)."""
    bounds = [(m.start(), m.end()) for m in _SENTENCE.finditer(text) if m.group().strip()]
    hit = [(a, b) for a, b in bounds if a < end and b > start]
    if not hit:
        return text[start:end]
    return text[hit[0][0] : hit[-1][1]].strip()


def bigrams(text: str) -> set[str]:
    return {text[i : i + 2] for i in range(len(text) - 1)}


def squad(data: Path, rng: random.Random) -> tuple[list[Example], set[str]]:
    corpus = {d["_id"]: d for d in rows(data / "squad2_dev_half/corpus.jsonl")}
    by_article: dict[str, list[str]] = defaultdict(list)
    for pid, d in corpus.items():
        by_article[d["title"]].append(pid)
    train_articles = {a for a in by_article if not held_out("squad2", a, 20)}
    out: list[Example] = []
    for q in rows(data / "squad2_dev_half/rag_qa.jsonl"):
        p = corpus[q["doc_id"]]
        split = "train" if p["title"] in train_articles else "test"
        if q["answerable"]:
            spans = find_spans(p["text"], q["answers"])
            if not spans:
                continue
            out.append(
                Example("qa", "squad2", split, p["title"], q["question"], p["text"], spans, 1, "en-en", q["_id"])
            )
            others = [o for o in by_article[p["title"]] if o != q["doc_id"]]
            other = corpus[rng.choice(others)]["text"] if others else ""
            if other and not find_spans(other, q["answers"]) and rng.random() < 0.5:
                out.append(
                    Example(
                        "qa", "squad2", split, p["title"], q["question"], other, [], 0, "en-en", q["_id"] + "-other"
                    )
                )
        else:
            out.append(Example("qa", "squad2", split, p["title"], q["question"], p["text"], [], 0, "en-en", q["_id"]))
    return out, {a.replace(" ", "_") for a in train_articles}


def cmrc(data: Path, rng: random.Random) -> list[Example]:
    corpus = {d["_id"]: d for d in rows(data / "cmrc2018/corpus.jsonl")}
    grams = {pid: bigrams(d["text"]) for pid, d in corpus.items()}
    ids = list(corpus)

    def neighbour(pid: str) -> str:
        mine = grams[pid]
        return max((o for o in ids if o != pid), key=lambda o: len(mine & grams[o]) / (1 + len(grams[o])) ** 0.5)

    near: dict[str, str] = {}
    out: list[Example] = []
    for qfile, afile in (("queries.jsonl", "answers.jsonl"), ("queries_trial.jsonl", "answers_trial.jsonl")):
        answers = {a["_id"]: a for a in rows(data / "cmrc2018" / afile)}
        for q in rows(data / "cmrc2018" / qfile):
            a = answers.get(q["_id"])
            if a is None:
                continue
            pid = a["doc_id"]
            p = corpus[pid]
            split = "test" if held_out("cmrc2018", pid, 15) else "train"
            spans = find_spans(p["text"], a["answers"])
            if not spans:
                continue
            out.append(Example("qa", "cmrc2018", split, pid, q["text"], p["text"], spans, 1, "zh-zh", q["_id"]))
            if rng.random() < 0.6:
                if pid not in near:
                    near[pid] = neighbour(pid)
                other = corpus[near[pid]]["text"]
                if not find_spans(other, a["answers"]):
                    # the neighbour is scored with its own split's questions only: a test passage's
                    # neighbour may be a training passage, which is text, not a label
                    out.append(
                        Example("qa", "cmrc2018", split, pid, q["text"], other, [], 0, "zh-zh", q["_id"] + "-near")
                    )
    return out


def drcd(data: Path, rng: random.Random) -> list[Example]:
    corpus: dict[str, dict[str, Any]] = {}
    for name in ("corpus_dev.jsonl", "corpus_test.jsonl"):
        corpus.update({d["_id"]: d for d in rows(data / "drcd" / name)})
    by_article: dict[str, list[str]] = defaultdict(list)
    for pid in corpus:
        by_article[pid.rsplit("#", 1)[0]].append(pid)
    out: list[Example] = []
    for name in ("rc_dev.jsonl", "rc_test.jsonl"):
        for q in rows(data / "drcd" / name):
            p = corpus[q["doc_id"]]
            article = q["doc_id"].rsplit("#", 1)[0]
            split = "test" if held_out("drcd", article, 20) else "train"
            spans = find_spans(p["text"], q["answers"], q.get("answer_starts"))
            if not spans:
                continue
            out.append(Example("qa", "drcd", split, article, q["question"], p["text"], spans, 1, "zh-zh", q["_id"]))
            others = [o for o in by_article[article] if o != q["doc_id"]]
            if others and rng.random() < 0.5:
                other = corpus[rng.choice(others)]["text"]
                if not find_spans(other, q["answers"]):
                    out.append(
                        Example("qa", "drcd", split, article, q["question"], other, [], 0, "zh-zh", q["_id"] + "-other")
                    )
    return out


def xquad(data: Path, squad_train: set[str], rng: random.Random) -> list[Example]:
    corpus = {lang: {d["_id"]: d for d in rows(data / f"xquad/corpus_{lang}.jsonl")} for lang in ("en", "zh")}
    qs = {lang: {q["_id"].split("-", 1)[1]: q for q in rows(data / f"xquad/rc_{lang}.jsonl")} for lang in ("en", "zh")}
    by_article: dict[str, list[str]] = defaultdict(list)
    for pid in corpus["en"]:
        by_article[pid.rsplit("#", 1)[0]].append(pid)
    out: list[Example] = []
    for sid, q_en in qs["en"].items():
        q_zh = qs["zh"].get(sid)
        if q_zh is None:
            continue
        pid = q_en["doc_id"]
        article = pid.rsplit("#", 1)[0]
        in_squad = bool(corpus["en"][pid].get("in_squad2_dev_half"))
        if in_squad and article not in squad_train:
            continue  # a paragraph of a squad2 test article: neither train nor the xquad test
        split = "train" if in_squad else "test"
        question = {"en": q_en, "zh": q_zh}
        for ql in ("en", "zh"):
            for pl in ("en", "zh"):
                ans = question[pl]
                text = corpus[pl][pid]["text"]
                spans = find_spans(text, ans["answers"], ans.get("answer_starts"))
                if not spans:
                    continue
                ex_id = f"{ql}-{pl}-{sid}"
                out.append(
                    Example(
                        "qa", "xquad", split, article, question[ql]["question"], text, spans, 1, f"{ql}-{pl}", ex_id
                    )
                )
                if split == "train" and rng.random() < 0.5:
                    others = [o for o in by_article[article] if o != pid]
                    other = corpus[pl][rng.choice(others)]["text"] if others else ""
                    if other and not find_spans(other, ans["answers"]):
                        out.append(
                            Example(
                                "qa",
                                "xquad",
                                split,
                                article,
                                question[ql]["question"],
                                other,
                                [],
                                0,
                                f"{ql}-{pl}",
                                ex_id + "-other",
                            )
                        )
    return out


def scifact(data: Path) -> list[Example]:
    corpus = {d["_id"]: d for d in rows(data / "scifact/corpus.jsonl")}
    out: list[Example] = []
    for c in rows(data / "scifact/evidence_train.jsonl"):
        for doc in c.get("cited_doc_ids", []):
            d = corpus.get(str(doc))
            if d is None:
                continue
            sets = c.get("evidence", {}).get(str(doc), [])
            label = int(any(s["label"] == "SUPPORT" for s in sets))
            text = d["text"]
            if sets:  # the rationale and its neighbourhood, so the window holds the evidence
                first = text.find(sets[0]["sentence_texts"][0])
                start = max(0, text.rfind(". ", 0, max(0, first - 300)) + 2) if first > 300 else 0
                text = text[start:]
            out.append(
                Example(
                    "support", "scifact", "train", str(doc), c["claim"], text, [], label, "en-en", f"{c['_id']}-{doc}"
                )
            )
    return out


def support_from_qa(qa: list[Example], rng: random.Random, per_source: int) -> list[Example]:
    """Claims from the training QA pairs: the answer's sentence, or the question with its answer."""
    positives = [e for e in qa if e.split == "train" and e.spans and e.label == 1]
    by_article: dict[tuple[str, str], list[Example]] = defaultdict(list)
    for e in positives:
        by_article[(e.source, e.article)].append(e)
    out: list[Example] = []
    picked: dict[str, int] = defaultdict(int)
    rng.shuffle(positives)
    for e in positives:
        if picked[e.source] >= per_source:
            continue
        picked[e.source] += 1
        a, b = e.spans[0]
        answer = e.passage[a:b]
        siblings = [s for s in by_article[(e.source, e.article)] if s.passage[s.spans[0][0] : s.spans[0][1]] != answer]
        if not siblings:
            continue
        wrong = rng.choice(siblings)
        wrong_answer = wrong.passage[wrong.spans[0][0] : wrong.spans[0][1]]
        if wrong_answer in e.passage:
            continue
        if rng.random() < 0.5:
            claim = sentence_at(e.passage, a, b)
            false_claim = claim.replace(answer, wrong_answer, 1)
        else:
            joiner = "" if e.lang.startswith("zh") else " "
            claim = e.query + joiner + answer
            false_claim = e.query + joiner + wrong_answer
        # cross-language claims: xquad's parallel paragraph of the other language holds the fact
        base: dict[str, Any] = dict(source="support-" + e.source, split="train", article=e.article, lang=e.lang)
        # the answer's place: training reads the window that holds it, where the fact is or should be
        where = [e.spans[0]]
        out.append(Example("support", query=claim, passage=e.passage, spans=where, label=1, id=e.id + "-s1", **base))
        out.append(
            Example("support", query=false_claim, passage=e.passage, spans=where, label=0, id=e.id + "-s0", **base)
        )
        off = [
            s for s in by_article[(e.source, e.article)] if answer not in s.passage and wrong_answer not in s.passage
        ]
        if off:
            out.append(
                Example("support", query=claim, passage=rng.choice(off).passage, label=0, id=e.id + "-s2", **base)
            )
    return out


_NAME_EN = re.compile(r"[A-Z0-9]")
_CAPITALISED = re.compile(r"(?<=[a-z,;] )([A-Z][a-z]+(?: (?:of |de |the )?[A-Z][a-z]+)*)")


def _kind(text: str) -> str:
    return "number" if any(c.isdigit() for c in text) else "name"


def swapped_questions(qa: list[Example], rng: random.Random, rate: float) -> list[Example]:
    """Unanswerable questions made from answerable ones, on the very paragraph they were asked of.

    In a question, the longest answer of another question of its article (or, in English, a
    capitalised name of its paragraphs) that the paragraph also holds (a name, a place, a year:
    what the question is about) is replaced by one of the same kind (with or without a digit) from
    another article that the paragraph does not hold.
    The question then asks about something the paragraph never mentions, in the paragraph's own
    words otherwise: the hard case of SQuAD 2.0's adversarial questions and of a vault asked about
    an option it does not have. Training articles, one language on both sides, only."""
    positives = [e for e in qa if e.split == "train" and e.label == 1 and e.spans and e.lang[:2] == e.lang[-2:]]
    names: dict[tuple[str, str], set[str]] = defaultdict(set)
    pool: dict[tuple[str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for e in positives:
        zh = e.lang.startswith("zh")
        found = [e.passage[a:b].strip() for a, b in e.spans]
        if not zh:  # and the capitalised names of an English paragraph, past a sentence's first word
            found += [m.group(1) for m in _CAPITALISED.finditer(e.passage)]
        for name in found:
            fits = (2 if zh else 3) <= len(name) <= (8 if zh else 30) and (zh or _NAME_EN.match(name))
            if fits and name not in names[(e.source, e.article)]:
                names[(e.source, e.article)].add(name)
                pool[(e.source, e.lang, _kind(name))].append((e.article, name))
    out: list[Example] = []
    for e in positives:
        if rng.random() >= rate:
            continue
        own = {e.passage[a:b].strip() for a, b in e.spans}
        shared = [n for n in names[(e.source, e.article)] if n not in own and n in e.query and n in e.passage]
        if not shared:
            continue
        name = max(shared, key=len)
        candidates = pool[(e.source, e.lang, _kind(name))]
        for _ in range(8):  # a few draws for one from another article that the paragraph lacks
            article, other = rng.choice(candidates)
            if article != e.article and other not in e.passage and other not in e.query:
                query = e.query.replace(name, other, 1)
                out.append(Example("qa", e.source, "train", e.article, query, e.passage, [], 0, e.lang, e.id + "-swap"))
                break
    return out


_EN_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_HAN_RUN = re.compile(r"[\u3400-\u9fff]+")


def _mix_english(question: str, words: Dictionary, share: float, rng: random.Random) -> str:
    """``question`` with about ``share`` of its dictionary words said in Chinese (CC-CEDICT's
    simplified word whose sense it is)."""
    reverse = words.reverse()

    def swap(m: re.Match[str]) -> str:
        word = m.group()
        if word.lower() in STOPWORDS or word.lower() in QUESTION_WORDS or rng.random() >= share:
            return word
        found = reverse.get(stem_word(word.lower()))
        return found[0] if found else word

    return _EN_WORD.sub(swap, question)


def _mix_chinese(question: str, words: Dictionary, share: float, rng: random.Random) -> str:
    """``question`` with about ``share`` of its dictionary words (two characters or more, longest
    match first) said in English (the word's first short sense)."""

    def english(word: str) -> str | None:
        for sense in words.senses(word)[:2]:
            parts = sense.split()
            if 1 <= len(parts) <= 3 and all(p.isascii() for p in parts):
                return sense
        return None

    def swap(m: re.Match[str]) -> str:
        run, out, i = m.group(), [], 0
        while i < len(run):
            for j in range(min(len(run), i + dictionary.MAX_WORD), i + 1, -1):
                sense = english(run[i:j]) if run[i:j] in words.raw else None
                if sense is not None:
                    out.append(f" {sense} " if rng.random() < share else run[i:j])
                    i = j
                    break
            else:
                out.append(run[i])
                i += 1
        return "".join(out)

    return " ".join(_HAN_RUN.sub(swap, question).split())


def code_switched(qa: list[Example], words: Dictionary, rng: random.Random, rate: float) -> list[Example]:
    """Training questions with some of their words in the other language, on the same passage and
    with the same label and spans: English questions partly in Chinese, Chinese ones partly in
    English. Word-for-word from CC-CEDICT, so the question is not fluent, but its content words
    meet the passage only across languages. The shared data holds few real cross-language pairs
    (xquad's 80 training paragraphs), and code-switching (Qin et al., 2020, CoSDA-ML) is a known
    way to teach a multilingual model to read across languages without translations. Each
    same-language training question gives one with probability ``rate``; a question keeps between
    half and all of its dictionary words switched."""
    out: list[Example] = []
    for e in qa:
        if e.split != "train" or e.lang[:2] != e.lang[-2:] or rng.random() >= rate:
            continue
        share = rng.uniform(0.5, 1.0)
        zh = e.lang.startswith("zh")
        query = (_mix_chinese if zh else _mix_english)(e.query, words, share, rng)
        if query == e.query:
            continue
        lang = f"{'en' if zh else 'zh'}-{e.lang[-2:]}"
        out.append(replace(e, query=query, lang=lang, id=e.id + "-mix"))
    return out


# Heading -> question. A heading that starts with a verb asks how; any other asks what.
_EN_VERB_WORDS = (
    "add build change check choose configure connect create customize define deploy disable enable "
    "extend get handle import install integrate listen load make migrate pass read register remove "
    "render return run send set show start stop test update upgrade upload use validate write"
)
_EN_VERBS = frozenset(_EN_VERB_WORDS.split())
_ZH_VERB_WORDS = "使用 安装 配置 设置 创建 添加 定义 引入 自定义 修改 启用 禁用 处理 运行 部署 更新 获取 上传 编写 实现"
_ZH_VERBS = tuple(_ZH_VERB_WORDS.split())
_GENERIC = frozenset(("api", "usage", "props", "events", "代码演示", "用法", "使用", "介绍"))  # no page title
_PLACEHOLDER = re.compile(r"\{\{[^{}]*\}\}|<!--.*?-->", re.DOTALL)  # demo slots of a docs site: no text
_NOTE_BYTES = (40, 2400)  # a section's text is kept between these UTF-8 lengths (a Chinese character is 3)


def heading_question(title: str, heading: str, lang: str, rng: random.Random) -> str:
    """A question a reader of the docs might ask, made from a section's heading and its page's title by
    one of a few templates. The title is always in it: a heading such as "Props" is answered by every
    page that has one."""
    h, t = heading.strip().rstrip(":："), title.strip()
    if lang == "zh":
        forms = [f"{t} {h}", f"{t}的{h}"]
        forms += (
            [f"{t}如何{h}？", f"{t}怎么{h}？"] if h.startswith(_ZH_VERBS) else [f"{t}的{h}是什么？", f"{t}有哪些{h}？"]
        )
    else:
        forms = [f"{t} {h}", f"{t}: {h}"]
        first = h.split()[0].lower() if h.split() else ""
        if first in _EN_VERBS or first.endswith("ing"):
            low = h[0].lower() + h[1:]
            forms += [f"How do I {low} in {t}?", f"{t}: how do I {low}?"]
        else:
            forms += [f"What is {h} in {t}?", f"What are the {h} of {t}?"]
    return rng.choice(forms)


@dataclass
class _Section:
    page: str  # "package/relative path", without its language
    lang: str
    path: tuple[str, ...]
    text: str


def _note_sections(root: Path) -> list[_Section]:
    from sunlib.ingest.chunkers import StructureChunker
    from sunlib.ingest.vault import NoteError, load_note, walk_vault

    out: list[_Section] = []
    chunker = StructureChunker()
    files, _ = walk_vault(root)
    for vf in files:
        parts = vf.rel_path.split("/")
        lang = next((p for p in parts if p in ("en", "zh")), "")
        if not lang:
            continue
        page = "/".join(p for p in parts if p != lang)
        page = re.sub(r"([._-](en|en-US|zh|zh-CN))?\.md$", "", page, flags=re.IGNORECASE)
        try:
            note, parsed = load_note(vf, [])
        except NoteError:
            continue
        seen: set[tuple[str, ...]] = set()
        for c in chunker.chunk(note, parsed):
            text = _PLACEHOLDER.sub("", c.text).strip()
            if (
                len(c.heading_path) < 2
                or c.heading_path in seen
                or not _NOTE_BYTES[0] <= len(text.encode()) <= _NOTE_BYTES[1]
            ):
                continue
            seen.add(c.heading_path)  # the first chunk of a section: where its heading is answered
            out.append(_Section(page, lang, tuple(c.heading_path), text))
    return out


def notes_pairs(root: Path, rng: random.Random) -> list[Example]:
    """Pairs derived from Markdown docs without labels (``--notes``): a section's heading, made a
    question (``heading_question``), answered by that section (label 1, no span), and not by a
    sibling section of its page nor by a section of another page under the same heading (label 0:
    the other page's title, on the passage's first line, is the name that does not match). The
    passage is what sunlib's reader reads of a chunk, its heading path on a first line, with the
    section's own heading left out, so the text must be read. Where a page exists in both
    languages with the same outline (as many sections, at the same depths), its questions also meet
    the other language's sections. Pages go to ``test`` by the same hash as the articles (15%), and a
    pair never joins sections of both splits."""
    sections = _note_sections(root)
    by_page: dict[tuple[str, str], list[_Section]] = defaultdict(list)
    by_heading: dict[tuple[str, str], list[_Section]] = defaultdict(list)
    where: list[int] = []  # each section's place in its page
    for s in sections:
        where.append(len(by_page[(s.page, s.lang)]))
        by_page[(s.page, s.lang)].append(s)
        by_heading[(s.lang, s.path[-1].strip().lower())].append(s)

    def passage(s: _Section) -> str:
        return " > ".join(s.path[:-1]) + "\n" + s.text

    out: list[Example] = []
    for n, s in enumerate(sections):
        split = "test" if held_out("notes", s.page, 15) else "train"
        title = s.path[0] if s.path[0].lower() not in _GENERIC else s.page.split("/")[-2].title()
        q = heading_question(title, s.path[-1], s.lang, rng)

        reads = [(s, 1, "")]
        siblings = [o for o in by_page[(s.page, s.lang)] if o.path[:-1] == s.path[:-1] and o.path[-1] != s.path[-1]]
        if siblings:
            reads.append((rng.choice(siblings), 0, "-sib"))
        namesakes = [
            o
            for o in by_heading[(s.lang, s.path[-1].strip().lower())]
            if o.page != s.page
            and o.path[0] != s.path[0]
            and o.path[0].lower() not in _GENERIC
            and held_out("notes", o.page, 15) == (split == "test")
        ]
        if namesakes:
            reads.append((rng.choice(namesakes), 0, "-name"))
        mine, theirs = by_page[(s.page, s.lang)], by_page.get((s.page, "zh" if s.lang == "en" else "en"), [])
        if len(mine) == len(theirs) and [len(x.path) for x in mine] == [len(x.path) for x in theirs]:
            reads.append((theirs[where[n]], 1, "-x"))
        for to, label, tag in reads:
            lang = f"{s.lang}-{to.lang}"
            out.append(Example("qa", "notes", split, s.page, q, passage(to), [], label, lang, f"notes{n}{tag}"))
    return out


def build(
    data: Path, seed: int = 13, swap_rate: float = 0.0, mix_rate: float = 0.0, notes: Path | None = None
) -> list[Example]:
    """Every pair. ``swap_rate``: the share of answerable training questions that also give a
    ``swapped_questions`` negative; ``mix_rate``: the share of same-language training questions
    that also give a ``code_switched`` one (0, none: both keep the pairs of the readers trained
    before them, and the test pairs never change)."""
    rng = random.Random(seed)
    sq, squad_train = squad(data, rng)
    qa = sq + cmrc(data, rng) + drcd(data, rng) + xquad(data, squad_train, rng)
    out = qa + scifact(data) + support_from_qa(qa, rng, per_source=1200)
    if swap_rate:
        out += swapped_questions(qa, rng, swap_rate)
    if mix_rate:
        out += code_switched(qa, dictionary.read_package(), random.Random(seed + 1), mix_rate)
    if notes:
        out += notes_pairs(notes, random.Random(seed + 2))
    return out


def write(examples: list[Example], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        with (out / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            for e in examples:
                if e.split == split:
                    f.write(json.dumps(asdict(e), ensure_ascii=False) + "\n")


def read(path: Path) -> Iterator[Example]:
    for row in rows(path):
        yield Example(**row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    examples = build(args.data)
    write(examples, args.out)
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for e in examples:
        counts[(e.split, e.task, e.source)] += 1
    for key in sorted(counts):
        print(*key, counts[key])


if __name__ == "__main__":
    main()
