"""Probe questions written from a vault itself, for its self-calibration (``evaluate.selfcal``).

No labels from the user: the vault's own headings and sentences give questions it answers,
and the same questions with their key term swapped for one it never mentions give questions
it cannot answer.

* **Answerable probes.** A heading becomes a question in its language: "How do I configure
  the server?" from "Configure the server", "How do I go about installing packages?" from
  "Installing packages", "What are search modes?", "混合搜索是什么？", "如何安装？". A sentence
  that states a value becomes a question for it: in English the clause up to the value and
  "which year?" / "how much?" / "how many?" ("The price of oil had risen from how much?"), in
  Chinese the value replaced where it stands ("本作中共有多少张战场地图？"); a sentence of the form
  "X is a ..." becomes "What is X?" ("X是……" becomes "X是什么？").
* **Unanswerable probes.** Each answerable probe keeps its frame and loses its distinguishing
  term: a number it mentions becomes another one, else its rarest word (by how many chunks
  hold it) becomes a plausible word from a fixed list (a name for an identifier or acronym,
  which the name check then misses in the evidence; else a plain lower-case noun, a plural for
  a plural, so that the answerability probability has to refuse it; for Chinese, its rarest
  two-character span that the vault has becomes a Chinese term). A swapped-in term is used
  only when the vault's vocabulary never has it: none of its index tokens occurs in any chunk,
  title or heading (for a Chinese term, the term never occurs as a substring), and never as a
  substring of the vault's text.

Notes are taken over the whole vault in a seeded random order, one probe per note per round
(a heading probe and a sentence probe alternate from note to note), so the probes spread over
the vault and the same vault and seed give the same probes. Only notes the asking principals
can see give probes.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..store import ChunkRow, DocumentStore
from ..text import fts_tokens, is_cjk
from ..text.sentences import clean_sentence
from ..text.terms import fold
from ..text.tokens import CJK_CLASS, STOPWORDS

# Words and terms a vault may well never mention, from many fields: the stand-ins of unanswerable probes.
EN_NAMES = (
    "Kilimanjaro",
    "Zanzibar",
    "Reykjavik",
    "Patagonia",
    "Tasmania",
    "Kyoto",
    "Marrakesh",
    "Oaxaca",
    "Nairobi",
    "Bratislava",
    "Montevideo",
    "Ulaanbaatar",
    "Copernicus",
    "Tchaikovsky",
    "Hemingway",
    "Nefertiti",
    "Kepler",
    "Rembrandt",
    "Schrodinger",
    "Fibonacci",
    "Zeppelin",
    "Kubernetes",
    "Terraform",
    "Haskell",
    "Fortran",
    "Cobol",
    "Erlang",
    "Photoshop",
    "Excel",
    "Kafka",
    "Cassandra",
    "Nginx",
)
EN_NOUNS = (
    "glacier",
    "violin",
    "mortgage",
    "tornado",
    "sourdough",
    "penguin",
    "telescope",
    "saxophone",
    "volcano",
    "harpsichord",
    "avalanche",
    "lighthouse",
    "pendulum",
    "walrus",
    "cathedral",
    "vineyard",
    "submarine",
    "meteorite",
    "trombone",
    "origami",
    "lantern",
    "cactus",
    "chandelier",
    "hammock",
    "kayak",
    "mosaic",
    "parachute",
    "quarry",
    "raccoon",
    "tapestry",
    "windmill",
    "yacht",
)
ZH_TERMS = (
    "冰川",
    "火山",
    "企鹅",
    "小提琴",
    "灯塔",
    "潜水艇",
    "陨石",
    "仙人掌",
    "风车",
    "刺绣",
    "瀑布",
    "骆驼",
    "珊瑚礁",
    "琵琶",
    "蜂蜜",
    "围棋",
    "茶馆",
    "熊猫",
    "龙卷风",
    "磁悬浮",
    "沙漏",
    "萤火虫",
    "敦煌",
    "拉萨",
    "哈尔滨",
    "桂林",
    "喀什",
    "吐鲁番",
    "长白山",
    "鄱阳湖",
    "孔雀",
    "蒸汽机",
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


MIN_WORDS = 3  # a sentence probe's clause needs this many words before its value
MAX_PREFIX_WORDS = 18
HOW_VERBS = _words(
    "add ask build call change choose configure connect create customize debug declare define delete deploy"
    " disable download enable export extend filter generate get handle import include index install make"
    " migrate override pick read remove return run search secure send serve set start stop test update"
    " upgrade upload use validate write"
)
# Verbs that are seldom nouns: a heading that starts with one is an instruction ("Configure sunlib");
# another verb of HOW_VERBS must be followed by a determiner ("Search the vault", not "Search modes").
VERBS_ONLY = _words(
    "add ask choose configure connect create customize debug declare define delete deploy disable enable extend"
    " generate get include install make migrate override remove secure send serve validate"
)
DETERMINERS = _words("the a an your my our this that these those it them its all every each one some")
GENERIC_HEADINGS = _words(
    "overview introduction summary example examples notes note usage references reference contents recap"
    " conclusion about faq details more tips background see also next steps 概述 简介 示例 例子 总结 小结 参考"
    " 目录 说明 注意 下一步 介绍 前言"
)
ZH_HOW_VERBS = (
    "安装",
    "配置",
    "使用",
    "创建",
    "设置",
    "添加",
    "运行",
    "部署",
    "定义",
    "声明",
    "处理",
    "测试",
    "启用",
    "更新",
    "升级",
    "编写",
    "导入",
    "连接",
    "上传",
    "下载",
    "生成",
    "验证",
    "调用",
)
FRAME_WORDS = _words("what which who whom how when where why do does did go about year many much is are was were i you")
ZH_FRAME = ("多少", "哪一年", "是什么", "什么", "如何", "怎么", "怎样", "为什么")
MONTHS = _words("january february march april may june july august september october november december")
CONJUNCTIONS = _words("and but or although though because while whereas since so yet also however")
PRONOUNS = _words("it this that these those they he she there which one we you i its his her their")

_VALUE = re.compile(r"(?<![\w.$])(?P<cur>US\$|\$|€|£)?(?P<num>\d[\d,]*(?:\.\d+)?)(?P<pct>\s?%| percent)?(?![\w.]\w)")
_ZH_VALUE = re.compile(r"(?P<num>\d+(?:\.\d+)?)(?P<unit>年)?")
_CLAUSES = re.compile(r"[,;:()\[\]]|\s[-–—]\s")
_ZH_CLAUSES = re.compile(r"[，。；：、（）()！？!?,;:]")
_DEFINITION = re.compile(
    r"^(?P<subj>(?:(?:The|A|An) )?[A-Za-z][\w\-']*(?: [\w\-']+){0,5}) (?P<verb>is|are|was|were) (?:a|an|the|one) \S"
)
_ZH_DEFINITION = re.compile(rf"^(?P<subj>[{CJK_CLASS}A-Za-z0-9《》·]{{2,12}}?)(?:是|为)(?P<rest>[^，。；]{{4,}})")
_WORD = re.compile(r"[A-Za-z][\w'\-]*|\d[\d,]*(?:\.\d+)?")
CJK_RUN = re.compile(f"[{CJK_CLASS}]+")
_BRACKETS = re.compile(r"[（(]\s*[）)]")


@dataclass(frozen=True)
class Probe:
    """One probe question, whether the vault answers it, and where it came from."""

    question: str
    answerable: bool
    kind: str  # heading | value | definition (answerable); swap-term | swap-number (unanswerable)
    lang: str  # en | zh
    source: str  # the path of the note it was written from
    replaced: str | None = None  # unanswerable: the term taken out ...
    swapped: str | None = None  # ... and the one put in, which the vault never mentions


class Vocabulary:
    """What the vault mentions: the index tokens of every chunk, title and heading (with how many
    chunks hold each), and its folded, lower-cased text for substring checks."""

    def __init__(self, chunks: Iterable[ChunkRow]) -> None:
        self.df: Counter[str] = Counter()
        parts: list[str] = []
        for c in chunks:
            text = "\n".join([c.title, *c.heading_path, c.text])
            self.df.update(set(fts_tokens(fold(text))))
            parts.append(fold(text).lower())
        self.text = "\n".join(parts)

    def mentions(self, term: str) -> bool:
        """Whether the vault has the term: a token of it (for CJK, the whole term) or its text."""
        folded = fold(term).lower()
        if folded in self.text:
            return True
        if any(is_cjk(ch) for ch in folded):
            return False  # CJK tokens are characters and pairs: only the whole term counts
        return any(self.df.get(t, 0) for t in fts_tokens(folded))

    def number_taken(self, number: str) -> bool:
        return bool(self.df.get(number.replace(",", ""), 0)) or bool(self.df.get(number, 0))


def _lang(text: str) -> str:
    chars = [ch for ch in text if not ch.isspace()]
    return "zh" if chars and sum(1 for ch in chars if is_cjk(ch)) * 5 >= len(chars) else "en"


def _first_lower(text: str) -> str:
    """The text with its first word lower-cased when that word is merely capitalised ("Search" -> "search")."""
    first = text.split(" ", 1)[0]
    if len(first) > 1 and first[0].isupper() and first[1:].islower():
        return first.lower() + text[len(first) :]
    return text


# -- answerable probes --------------------------------------------------------------------------


def heading_probe(heading: str) -> str | None:
    """A question a section answers, from its heading; None for a heading too generic or odd to ask about."""
    h = " ".join(clean_sentence(heading).split()).strip(" .:：#")
    if not h or len(h) > 80 or h.lower() in GENERIC_HEADINGS or "`" in h:
        return None
    if _lang(h) == "zh":
        core = h.rstrip("？?")
        if len(core) < 2 or core in GENERIC_HEADINGS:
            return None
        if h[-1] in "？?" or any(w in core for w in ("如何", "怎么", "怎样", "为什么")):
            return core + "？"
        if core.startswith(ZH_HOW_VERBS):
            return f"如何{core}？"
        return f"{core}是什么？"
    words = _WORD.findall(h)
    if len(words) < 1 or not any(len(w) > 2 and w.lower() not in STOPWORDS for w in words):
        return None
    if h.endswith("?"):
        return h
    parts = h.lower().split()
    first = parts[0]
    if first in HOW_VERBS and (first in VERBS_ONLY or (len(parts) > 1 and parts[1] in DETERMINERS)):
        return f"How do I {_first_lower(h)}?"
    if first.endswith("ing") and len(first) > 5:
        return f"How do I go about {_first_lower(h)}?"
    last = words[-1].lower()
    plural = last.endswith("s") and not last.endswith(("ss", "is", "us")) and len(last) > 3
    return f"What {'are' if plural else 'is'} {h}?"


def value_probes(sentence: str) -> list[str]:
    """Questions for the values a sentence states (see the module doc); none when it states none."""
    if _lang(sentence) == "zh":
        return _zh_value_probes(sentence)
    out = []
    m = _DEFINITION.match(sentence)
    if m and m.group("subj").split()[0].lower() not in PRONOUNS:
        subj = m.group("subj")
        if subj.split()[0] in ("The", "A", "An"):
            subj = subj[0].lower() + subj[1:]
        out.append(f"What {m.group('verb')} {subj}?")
    for clause in _CLAUSES.split(sentence):
        question = _value_question(clause.strip())
        if question:
            out.append(question)
            break  # one value a sentence
    return out


def _value_question(clause: str) -> str | None:
    """The clause up to its first value with enough words before it, and the question word for the value."""
    for v in _VALUE.finditer(clause):
        prefix = clause[: v.start()].split()[-MAX_PREFIX_WORDS:]
        while prefix and prefix[0].lower() in CONJUNCTIONS:
            prefix = prefix[1:]
        num = v.group("num").replace(",", "")
        year = not (v.group("cur") or v.group("pct")) and len(num) == 4 and num.isdecimal() and 1000 <= int(num) <= 2099
        if year and prefix and prefix[-1].lower() in MONTHS:
            prefix = prefix[:-1]  # "in October 1973" asks "in which year"
        content = [w for w in prefix if w.lower() not in STOPWORDS and w.isalpha()]
        if len(prefix) < MIN_WORDS + 1 or len(content) < 2 or prefix[0].lower() in PRONOUNS:
            continue
        wh = "how much" if v.group("cur") or v.group("pct") else "which year" if year else "how many"
        text = " ".join(prefix)
        return text[0].upper() + text[1:] + f" {wh}?"
    return None


def _zh_value_probes(sentence: str) -> list[str]:
    sentence = _BRACKETS.sub("", sentence)
    out = []
    m = _ZH_DEFINITION.match(sentence)
    if m and not m.group("subj").startswith(("这", "那", "它", "他", "她", "其", "此")):
        out.append(f"{m.group('subj')}是什么？")
    for clause in _ZH_CLAUSES.split(sentence):
        v = _ZH_VALUE.search(clause)
        if v is None:
            continue
        before, after = clause[: v.start()], clause[v.end() :]
        if sum(1 for ch in before if is_cjk(ch)) < 4 or len(clause) > 60:
            continue
        wh = "哪一年" if v.group("unit") and 3 <= len(v.group("num")) <= 4 else "多少"
        out.append(f"{before}{wh}{after}？")
        break
    return out


def note_candidates(chunks: Sequence[ChunkRow], title: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(heading probes, sentence probes) of one note, as (kind, question), in reading order."""
    headings: list[tuple[str, str]] = []
    sentences: list[tuple[str, str]] = []
    seen: set[str] = set()
    for c in chunks:
        heading = c.heading_path[-1] if c.heading_path else title
        q = heading_probe(heading) if heading else None
        if q and q not in seen:
            seen.add(q)
            headings.append(("heading", q))
        for raw in _sentences(c.text):
            for q in value_probes(raw):
                if q not in seen:
                    seen.add(q)
                    sentences.append(("definition" if q.startswith("What") or q.endswith("是什么？") else "value", q))
    return headings, sentences


def _sentences(text: str) -> list[str]:
    from ..text.sentences import sentence_spans

    out = []
    for s, e in sentence_spans(text):
        raw = text[s:e]
        if raw.lstrip().startswith(("#", "```", "|", ">")):
            continue  # headings ask themselves; code, tables and quotes state no plain value
        sentence = clean_sentence(raw)
        if 20 <= len(sentence) <= 400:
            out.append(sentence)
    return out


# -- unanswerable probes ------------------------------------------------------------------------


def swap_probe(probe: Probe, vocab: Vocabulary, rng: random.Random) -> Probe | None:
    """The probe with its distinguishing term swapped for one the vault never mentions (None: no swap found)."""
    q = probe.question
    swapped = _swap_number(q, vocab, rng)
    kind = "swap-number"
    if swapped is None:
        swapped = _swap_zh(q, vocab, rng) if probe.lang == "zh" else _swap_word(q, vocab, rng)
        kind = "swap-term"
    if swapped is None:
        return None
    question, old, new = swapped
    return Probe(question, False, kind, probe.lang, probe.source, old, new)


def _swap_number(q: str, vocab: Vocabulary, rng: random.Random) -> tuple[str, str, str] | None:
    m = re.search(r"(?<![\w.])\d{2,}(?![\w.]\w)", q)
    if m is None:
        return None
    n = int(m.group(0))
    steps = list(range(3, 60))
    rng.shuffle(steps)
    for step in steps:
        for cand in (n + step, n - step):
            new = str(cand)
            if cand > 0 and len(new) == len(m.group(0)) and not vocab.number_taken(new) and new not in vocab.text:
                return q[: m.start()] + new + q[m.end() :], m.group(0), new
    return None


def _swap_word(q: str, vocab: Vocabulary, rng: random.Random) -> tuple[str, str, str] | None:
    words = [
        m
        for m in _WORD.finditer(q)
        if m.group(0).lower() not in FRAME_WORDS and m.group(0).lower() not in STOPWORDS and len(m.group(0)) > 2
    ]
    if not words:
        return None

    def df(m: re.Match[str]) -> tuple[int, int]:
        tokens = fts_tokens(m.group(0))
        return (min((vocab.df.get(t, 0) for t in tokens), default=0), -len(m.group(0)))

    target = min(words, key=df)
    old = target.group(0)
    # An identifier or acronym ("TFEU", "GPT4") gives way to a name, which the name check then
    # misses in the evidence; a word merely capitalised ("Steam engine") to a plain lower-case
    # noun, so that the answerability probability, not the name check, has to refuse it.
    name = any(ch.isupper() for ch in old[1:]) or any(ch.isdigit() for ch in old)
    pool = list(EN_NAMES if name else EN_NOUNS)
    rng.shuffle(pool)
    plural = old.endswith("s") and not old.endswith("ss") and len(old) > 3 and not name
    for cand in pool:
        new = cand + ("s" if plural and not cand.endswith(("s", "y", "h", "x")) else "")
        if not vocab.mentions(cand) and not vocab.mentions(new):
            if target.start() == 0:
                new = new[0].upper() + new[1:]
            return q[: target.start()] + new + q[target.end() :], old, new
    return None


def _swap_zh(q: str, vocab: Vocabulary, rng: random.Random) -> tuple[str, str, str] | None:
    """Swap the rarest two-character span of the question that the vault has (a piece of its key
    name, most often), outside the question frame (是什么, 多少, 哪一年, 如何)."""
    masked = [False] * len(q)
    for frame in ZH_FRAME:
        for m in re.finditer(frame, q):
            masked[m.start() : m.end()] = [True] * (m.end() - m.start())
    spans = []
    for run in CJK_RUN.finditer(q):
        for start in range(run.start(), run.end() - 1):
            pair = q[start : start + 2]
            if not masked[start] and not masked[start + 1] and vocab.df.get(pair, 0):
                spans.append((vocab.df[pair], start, pair))
    if not spans:
        return None
    _, start, old = min(spans)
    pool = list(ZH_TERMS)
    rng.shuffle(pool)
    for new in pool:
        if not vocab.mentions(new):
            return q[:start] + new + q[start + 2 :], old, new
    return None


# -- the probe set ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeSet:
    probes: tuple[Probe, ...]
    notes: int  # notes the answerable probes came from
    seed: int

    @property
    def answerable(self) -> list[Probe]:
        return [p for p in self.probes if p.answerable]

    @property
    def unanswerable(self) -> list[Probe]:
        return [p for p in self.probes if not p.answerable]


def make_probes(store: DocumentStore, principals: Sequence[str], count: int, seed: int = 0) -> ProbeSet:
    """About ``count`` probes, half answerable and half unanswerable, from the notes ``principals`` may see."""
    every = [c for note_id, _, _ in store.iter_notes() for c in store.chunks_of_note(note_id)]
    vocab = Vocabulary(every)
    visible, _ = store.list_notes(principals, limit=10**9)
    by_note: dict[str, list[ChunkRow]] = {}
    for c in every:
        by_note.setdefault(c.note_id, []).append(c)
    rng = random.Random(seed)
    notes = sorted(visible, key=lambda n: n.path)
    rng.shuffle(notes)
    queues: list[tuple[str, list[tuple[str, str]]]] = []
    for i, note in enumerate(notes):
        chunks = by_note.get(note.note_id, [])
        headings, sentences = note_candidates(chunks, note.title)
        rng.shuffle(headings)
        rng.shuffle(sentences)
        first, second = (headings, sentences) if i % 2 == 0 else (sentences, headings)
        mixed = [x for pair in _zip_longest(first, second) for x in pair]
        if mixed:
            queues.append((note.path, mixed))
    wanted = (count + 1) // 2
    answerable: list[Probe] = []
    taken: set[str] = set()
    rounds = max((len(q) for _, q in queues), default=0)
    for r in range(rounds):
        for path, queue in queues:
            if len(answerable) >= wanted:
                break
            if r < len(queue) and queue[r][1] not in taken:
                kind, question = queue[r]
                taken.add(question)
                answerable.append(Probe(question, True, kind, _lang(question), path))
        if len(answerable) >= wanted:
            break
    unanswerable: list[Probe] = []
    for probe in answerable:
        if len(unanswerable) >= count - wanted:
            break
        swapped = swap_probe(probe, vocab, rng)
        if swapped is not None and swapped.question not in taken:
            taken.add(swapped.question)
            unanswerable.append(swapped)
    return ProbeSet(tuple(answerable + unanswerable), len({p.source for p in answerable}), seed)


def _zip_longest(a: Sequence[tuple[str, str]], b: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    out = []
    for i in range(max(len(a), len(b))):
        out.append([x[i] for x in (a, b) if i < len(x)])
    return out
