"""The rules' plan for the agentic loop, and the plan records: per sub-question, its queries, routes, k
and filters (``Plan``, ``PartPlan``, ``Scope``). The plan stage (``answer.agentic.plan_stage``) returns them.

Rules (offline, always available):

* **queries**, in the order the rounds ask them: the sub-question; its keyword form; the other
  language's variant (``answer.agentic.rewrite``). A round that leaves a gap asks the gap's query first
  (the missing names and terms), then the next planned form.
* **filters** the question implies (``infer_scope``), each kept only when it names something the
  asker can see in the index:
  - a language ("in the Chinese docs", "英文文档里"): the vault's folder of that language when it
    has one (``zh/``, ``en/``), else a narrowing of the hits to chunks written in that script;
  - a folder ("in the guide folder", "under reference/", "guide 目录下") and a tag ("tagged
    search", "#search", "标签 search"): SQL filters, added to the caller's (a folder only when it
    lies inside the caller's folders, so an inferred filter never widens a search);
  - a chapter or heading ("in chapter 2", "in the section 'Search modes'", "第2章"): a narrowing
    of the hits to chunks under a matching heading, dropped when no hit has one.
  Phrases that set a filter are removed from the queries.
* **routes**: the routes ``[search] mode`` runs, plus the cross-language routes when the vault holds
  chunks in the other script; **k**: ``[answer] candidates``, doubled when hits are narrowed after
  retrieval (so enough remain).

With a chat model (``[answer] planner``: ``llm``, or ``auto`` with an LLM writer), the plan stage
asks the model for a JSON plan (``answer.agentic.plan_stage``); a plan that fails, is not JSON or does not
validate falls back to these rules, and the step says why.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...config import Settings
from ...contracts import Hit, SearchFilters
from ...store import Store
from ...text.tokens import text_script
from .decompose import Decomposition, SubQuestion
from .rewrite import Rewrites, keyword_form, other_language

LANGUAGE_FOLDERS = {"zh": ("zh", "cn", "zh-cn", "中文"), "en": ("en", "english")}
_LANG_WORDS = {"chinese": "zh", "english": "en", "中文": "zh", "英文": "en", "汉语": "zh", "英语": "en"}
_EN_LANG = re.compile(
    r"\b(?:in|from|of|on)\s+the\s+(chinese|english)\s*(?:docs?|documentation|notes?|version|pages?|translation)?\b"
    r"|\b(?:in|from)\s+(chinese|english)\s+(?:docs?|documentation|notes?|pages?)\b",
    re.I,
)
_ZH_LANG = re.compile(r"(?:在|从)?(中文|英文|汉语|英语)(?:版)?(?:文档|笔记|资料|版本|页面)(?:里|中|里面)?")
_EN_FOLDER = re.compile(
    r"\b(?:in|under|inside|within)\s+(?:the\s+)?(?:folder\s+[`'\"]?(?P<a>[\w./-]+)[`'\"]?"
    r"|[`'\"]?(?P<b>[\w./-]+?)[`'\"]?\s+(?:folder|directory)"
    r"|[`'\"]?(?P<c>[\w.-]+(?:/[\w.-]+)*/)[`'\"]?)",
    re.I,
)
_ZH_FOLDER = re.compile(r"(?:在)?[`'\"“]?(?P<a>[\w./-]+?)[`'\"”]?\s*(?:目录|文件夹)(?:下|里|中)?")
_TAG = re.compile(
    r"(?:\btagged\s+(?:with\s+)?|\bwith\s+(?:the\s+)?tag\s+|标签(?:为|是)?\s*)[#`'\"“]?(?P<a>[\w-]+)[`'\"”]?"
    r"|(?<![\w#])#(?P<b>[\w-]+)",
    re.I,
)
_CHAPTER = re.compile(
    r"\b(?:in\s+)?chapter\s+(?P<a>\d+)\b|(?:在)?第\s*(?P<b>\d+|[一二三四五六七八九十]+)\s*章(?:里|中)?", re.I
)
_SECTION = re.compile(
    r"\b(?:in|under)\s+the\s+(?:section|heading|chapter)\s+[\"'“`](?P<a>[^\"'”`]+)[\"'”`]"
    r"|[“\"'](?P<b>[^”\"']+)[”\"']\s*(?:一节|这一节|小节|章节|部分)(?:里|中)?",
    re.I,
)
_ZH_NUMBERS = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}


@dataclass(frozen=True)
class Scope:
    """What the question narrows its search to, and how each part of that was found."""

    folders: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    script: str | None = None  # "cjk" or "other": hits narrowed to chunks in that script
    heading: str | None = None  # a regex over a chunk's headings: hits narrowed to matching chunks
    notes: tuple[str, ...] = ()  # "'in the Chinese docs' -> folder zh/", "... dropped: ..."
    spans: tuple[str, ...] = ()  # the phrases that set a filter (removed from the queries)

    def narrows(self) -> bool:
        return self.script is not None or self.heading is not None


@dataclass(frozen=True)
class PartPlan:
    """One sub-question's plan."""

    part: SubQuestion
    queries: tuple[str, ...]  # in the order the rounds ask them
    routes: tuple[str, ...]
    k: int  # candidates retrieved per round
    filters: SearchFilters | None
    scope: Scope


@dataclass(frozen=True)
class Plan:
    parts: tuple[PartPlan, ...]
    planner: str  # "rules" or "llm"
    rule: str  # the decomposition rule, or "llm"
    dropped: int  # sub-questions left out by the cap
    fallback: str | None = None  # why an LLM plan was not used


# -- filters the question implies --------------------------------------------------------------


def infer_scope(question: str, store: Store, principals: Sequence[str], caller: SearchFilters | None) -> Scope:
    """The filters ``question`` names that exist among the chunks ``principals`` may see."""
    folders: list[str] = []
    tags: list[str] = []
    notes: list[str] = []
    spans: list[str] = []
    script: str | None = None
    lang = _language(question)
    if lang is not None:
        phrase, code = lang
        spans.append(phrase)
        folder = next((f for f in LANGUAGE_FOLDERS[code] if _visible(store, principals, folder=f)), None)
        if folder is not None and _inside(folder, caller):
            folders.append(folder)
            notes.append(f"{phrase!r} -> folder {folder}/")
        else:
            script = "cjk" if code == "zh" else "other"
            notes.append(f"{phrase!r} -> chunks written in {'Chinese' if code == 'zh' else 'English'}")
    for phrase, folder in _folders(question):
        if not _visible(store, principals, folder=folder):
            notes.append(f"{phrase!r}: no folder {folder}/ among the visible notes; ignored")
        elif not _inside(folder, caller):
            notes.append(f"{phrase!r}: folder {folder}/ is outside the search's folders; ignored")
        else:
            folders.append(folder)
            spans.append(phrase)
            notes.append(f"{phrase!r} -> folder {folder}/")
    for phrase, tag in _tags(question):
        if _visible(store, principals, tag=tag):
            tags.append(tag)
            spans.append(phrase)
            notes.append(f"{phrase!r} -> tag {tag}")
        else:
            notes.append(f"{phrase!r}: no visible note is tagged {tag}; ignored")
    heading = _heading(question)
    if heading is not None:
        spans.append(heading[0])
        notes.append(f"{heading[0]!r} -> chunks under a heading matching {heading[1]!r}")
    return Scope(
        tuple(dict.fromkeys(folders)),
        tuple(dict.fromkeys(tags)),
        script,
        heading[1] if heading else None,
        tuple(notes),
        tuple(spans),
    )


def scope_from(
    store: Store,
    principals: Sequence[str],
    caller: SearchFilters | None,
    language: str | None = None,
    folder: str | None = None,
    tag: str | None = None,
    heading: str | None = None,
) -> Scope:
    """A scope from named filters (an LLM plan's), each checked as ``infer_scope`` checks its own."""
    parts = []
    if language in ("zh", "en"):
        parts.append(f"in the {'Chinese' if language == 'zh' else 'English'} docs")
    if folder:
        parts.append(f"in the {folder.strip('/')} folder")
    if tag:
        parts.append(f"tagged {tag.lstrip('#')}")
    if heading:
        parts.append(f"in the section '{heading}'")
    scope = infer_scope(" ".join(parts), store, principals, caller)
    return dataclasses.replace(scope, spans=())


def _visible(store: Store, principals: Sequence[str], folder: str | None = None, tag: str | None = None) -> bool:
    _, total = store.list_notes(list(principals), folder=folder, tag=tag, limit=1)
    return total > 0


def _inside(folder: str, caller: SearchFilters | None) -> bool:
    if caller is None or not caller.folders:
        return True
    return any(folder.strip("/").startswith(f.strip("/")) for f in caller.folders)


def _language(question: str) -> tuple[str, str] | None:
    m = _EN_LANG.search(question) or _ZH_LANG.search(question)
    if m is None:
        return None
    word = next(g for g in m.groups() if g)
    return m.group(0).strip(), _LANG_WORDS[word.lower()]


def _folders(question: str) -> list[tuple[str, str]]:
    out = []
    for pattern in (_EN_FOLDER, _ZH_FOLDER):
        for m in pattern.finditer(question):
            name = next((g for g in m.groups() if g), "")
            folder = name.strip("/`'\" ")
            if folder and not folder.isdigit():
                out.append((m.group(0).strip(), folder))
    return out


def _tags(question: str) -> list[tuple[str, str]]:
    return [(m.group(0).strip(), (m.group("a") or m.group("b")).lower()) for m in _TAG.finditer(question)]


def _heading(question: str) -> tuple[str, str] | None:
    m = _CHAPTER.search(question)
    if m is not None:
        raw = m.group("a") or m.group("b")
        n = int(raw) if raw.isdigit() else _zh_number(raw)
        return m.group(0).strip(), rf"^(?:chapter\s*{n}\b|{n}(?:[.、:：\s]|$)|第\s*{n}\s*章)"
    m = _SECTION.search(question)
    if m is not None:
        return m.group(0).strip(), re.escape((m.group("a") or m.group("b")).strip().lower())
    return None


def _zh_number(raw: str) -> int:
    if raw.startswith("十"):
        return 10 + _ZH_NUMBERS.get(raw[1:], 0)
    if "十" in raw:
        tens, _, ones = raw.partition("十")
        return _ZH_NUMBERS.get(tens, 1) * 10 + _ZH_NUMBERS.get(ones, 0)
    return _ZH_NUMBERS.get(raw, 0)


def merged(caller: SearchFilters | None, scope: Scope) -> SearchFilters | None:
    """The caller's filters with the scope's folders and tags added (never widened)."""
    if not scope.folders and not scope.tags:
        return caller
    base = caller or SearchFilters()
    folders = scope.folders if scope.folders else base.folders
    return dataclasses.replace(base, folders=folders, tags=tuple(dict.fromkeys([*base.tags, *scope.tags])))


def narrowed(hits: Sequence[Hit], scope: Scope) -> tuple[tuple[Hit, ...], str | None]:
    """The hits the scope's script and heading keep; all of them (and why) when none would be left."""
    if not scope.narrows():
        return tuple(hits), None
    pattern = re.compile(scope.heading, re.I) if scope.heading else None
    kept = tuple(
        h
        for h in hits
        if (scope.script is None or text_script(h.text) == scope.script)
        and (pattern is None or any(pattern.search(x.strip().lower()) for x in h.heading_path))
    )
    if not kept:
        return tuple(hits), "no hit matches the inferred language or heading; kept them all"
    return kept, None


# -- the rules' plan ---------------------------------------------------------------------------


def strip_spans(text: str, spans: Sequence[str]) -> str:
    out = text
    for span in spans:
        out = out.replace(span, " ")
    out = re.sub(r"\s+([?？,，.。])", r"\1", " ".join(out.split())).strip(" ,，")
    if not out:
        return text
    return out[:1].upper() + out[1:] if text[:1].isupper() else out


def part_queries(text: str, scope: Scope, variant: bool) -> tuple[str, ...]:
    """The sub-question, its keyword form, and (when the vault is bilingual) its other-language form."""
    base = strip_spans(text, scope.spans)
    forms = [base, keyword_form(base)]
    if variant:
        forms.append(other_language(base))
    return tuple(dict.fromkeys(f for f in forms if f))


def routes_for(settings: Settings, bilingual: bool) -> tuple[str, ...]:
    mode = settings.search.mode
    routes = {"bm25": ("bm25",), "dense": ("dense",), "hybrid": ("bm25", "dense")}[mode]
    if mode == "hybrid" and settings.search.crosslang and bilingual:
        routes += ("crosslang", "translated")
    return routes


_ANAPHOR_EN = re.compile(r"\b(?:it|its|it's|they|them|their|this|that|these|those)\b", re.I)
_ANAPHOR_ZH = re.compile("它们|它|其|这个|那个|该")


def resolved(parts: Sequence[SubQuestion]) -> tuple[SubQuestion, ...]:
    """Later sub-questions that point back ("What is its default?", "它的导演是谁？") get what the
    first one is about, in brackets, so that each can be retrieved and judged alone."""
    if len(parts) < 2:
        return tuple(parts)
    first = parts[0]
    titles = re.findall(r"《[^》]+》", first.text)
    about = " ".join(first.focus) or " ".join(titles) or keyword_form(first.text) or ""
    out = [first]
    for p in parts[1:]:
        zh = bool(_ANAPHOR_ZH.search(p.text)) and text_script(p.text) == "cjk"
        if not about or p.focus or not (zh or _ANAPHOR_EN.search(p.text)):
            out.append(p)
            continue
        body = p.text.rstrip("?？")
        text = f"{body}（{about}）？" if zh else f"{body} ({about})?"
        out.append(dataclasses.replace(p, text=text, focus=first.focus))
    return tuple(out)


def rule_plan(
    settings: Settings,
    decomposition: Decomposition,
    rewrites: Rewrites,
    scope: Scope,
    caller: SearchFilters | None,
) -> Plan:
    bilingual = rewrites.variant is not None
    k = settings.answer.candidates * (2 if scope.narrows() else 1)
    parts = tuple(
        PartPlan(
            p,
            part_queries(p.text, scope, bilingual),
            routes_for(settings, bilingual),
            min(k, 200),
            merged(caller, scope),
            scope,
        )
        for p in resolved(decomposition.parts)
    )
    return Plan(parts, "rules", decomposition.rule, decomposition.dropped)
