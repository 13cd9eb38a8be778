"""Retrieval routes: each turns (query, visibility, pool) into ranked (chunk_id, score).

A route is anything with a ``name`` (its key in fusion and in ``Hit.routes``), a fusion
``weight``, ``retrieve`` and ``unscored``. ``retrieve`` records its own trace step and returns
None when it cannot run at all (no embedder, no vectors yet), which is not the same as finding
nothing. ``unscored`` names, among chunks another route found, those this route cannot score at
all (the dense route: chunks still waiting for their vector), as opposed to chunks it ranked
below its pool; fusion fills their contribution in rather than charging them the route's floor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import ProviderError
from ..providers.chat import ChatMessage, ChatModel, ChatRequest
from ..store import DocumentStore, LexicalIndex, Space, VectorIndex, Visibility
from ..text import fts_query, fts_tokens
from ..text.tokens import CJK_RUN as CJK_RUN
from ..text.tokens import other_script, query_script
from ..trace import StepRecorder, Tracer
from ..trace.steps import Step

Ranked = list[tuple[str, float]]


class PartOfRanking(Ranked):
    """A route's list that is part of what it ranked: ``reference`` holds the scores of the whole
    ranking, which fusion standardises the part against (so one item is not its own mean)."""

    def __init__(self, items: Ranked, reference: Sequence[float]) -> None:
        super().__init__(items)
        self.reference = list(reference)


class Route(Protocol):
    name: str
    weight: float

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        """Up to ``pool`` visible chunks, best first; None when the route is unavailable."""
        ...

    def unscored(self, chunk_ids: Sequence[str]) -> set[str]:
        """Those of ``chunk_ids`` (visible chunks other routes returned) this route cannot score yet."""
        ...


class LexicalRoute:
    """BM25 over the full-text index (step "BM25 Retrieval")."""

    def __init__(self, lexical: LexicalIndex, weight: float, name: str = "bm25") -> None:
        self.lexical = lexical
        self.weight = weight
        self.name = name

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        with tracer.step(Step.BM25, f"query={query!r} pool={pool}") as step:
            match = fts_query(query)
            if match is None:
                step.skip("query has no searchable words")
                return []
            items = self.lexical.bm25(match, visibility, pool)
            step.done(
                f"{len(items)} chunks" + (f", top score {items[0][1]:.3f}" if items else ""),
                fts_match=match,
                principals=list(visibility.principals),
                filters=visibility.filters.describe(),
                top=[{"chunk_id": c, "score": round(s, 4)} for c, s in items[:10]],
            )
            return items

    def unscored(self, chunk_ids: Sequence[str]) -> set[str]:
        """None: a chunk's text is in the full-text index as soon as the chunk is stored."""
        return set()


class DenseRoute:
    """KNN in one embedding space (step "Dense Retrieval"); says how many visible chunks still
    wait for vectors, and skips (never silently compares a partial route) when none has one."""

    step = Step.DENSE
    label = "dense route"

    def __init__(
        self,
        vectors: VectorIndex,
        space: Space | None,
        embed_query: Callable[[str], np.ndarray] | None,
        weight: float,
        name: str = "dense",
        backup: str | None = None,
    ) -> None:
        self.vectors = vectors
        self.space = space
        self.embed_query = embed_query
        self.weight = weight
        self.name = name
        self.backup = backup  # the fast tier's provider, when it ranks what this route cannot score yet

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        with tracer.step(self.step, f"query={query!r} pool={pool}") as step:
            if self.space is None or self.embed_query is None:
                step.skip("no embedding provider configured")
                tracer.warn(f"{self.label} unavailable: no embedding provider configured")
                return None
            return self._knn(self.space, self.embed_query, query, visibility, pool, tracer, step)

    def _knn(
        self,
        space: Space,
        embed_query: Callable[[str], np.ndarray],
        query: str,
        visibility: Visibility,
        pool: int,
        tracer: Tracer,
        step: StepRecorder,
        **details: Any,
    ) -> Ranked | None:
        missing = self._missing_vectors(space, visibility, tracer)
        if missing is None:
            step.skip(f"no vectors yet in space {space.name}", **details)
            return None
        items = self.vectors.knn(space, embed_query(query), visibility, pool)
        step.done(
            f"{len(items)} chunks" + (f", top cosine {items[0][1]:.3f}" if items else ""),
            space=space.name,
            missing_vectors=missing,
            **details,
            top=[{"chunk_id": c, "cosine": round(s, 4)} for c, s in items[:10]],
        )
        return items

    def unscored(self, chunk_ids: Sequence[str]) -> set[str]:
        """The chunks without a vector in the space yet: a lookup of these ids only (never a
        count over the index), so it costs the same however large the vault is; none when every
        chunk has one (the coverage check the route made, kept until the next write)."""
        if self.space is None:
            return set(chunk_ids)
        if self.vectors.fully_embedded(self.space):
            return set()
        return self.vectors.without_vectors(self.space, chunk_ids)

    def _missing_vectors(self, space: Space, visibility: Visibility, tracer: Tracer) -> int | None:
        """Visible chunks without a vector (warned about, never silent); None when there are no vectors at all."""
        if self.vectors.fully_embedded(space):  # two counts; skips the per-filter scan in the common case
            return 0
        if not self.vectors.has_space(space):
            meanwhile = f"the fast tier ({self.backup}) ranks meanwhile" if self.backup else "run `sunlib index`"
            tracer.warn(f"{self.label} skipped: no vectors in {space.provider}:{space.model} yet; {meanwhile}")
            return None
        missing, total = self.vectors.count_pending(space, visibility)
        if total and missing == total and self.backup:
            tracer.warn(
                f"{self.label}: none of the {total} visible chunks has its {space.provider} vector yet; "
                f"the fast tier ({self.backup}) ranks them meanwhile"
            )
            return None
        if total and missing == total:
            others = {sp.provider for sp in self.vectors.spaces() if sp.vectors and sp.name != space.name}
            hint = f" (this index has vectors from: {', '.join(sorted(others))})" if others else ""
            tracer.warn(
                f"{self.label} skipped: none of the {total} visible chunks has a vector in "
                f"{space.provider}:{space.model}{hint}; run `sunlib index` to embed them"
            )
            return None
        if missing:
            meanwhile = f"the fast tier ({self.backup}) and BM25 rank them" if self.backup else "BM25 covers them"
            tracer.warn(
                f"{self.label} covers {total - missing}/{total} visible chunks; {missing} still wait "
                f"for vectors ({meanwhile}; run `sunlib index` to finish)"
            )
        return missing


class FastTierRoute(DenseRoute):
    """While the main space fills in, KNN in the fast tier's space for the chunks that still wait
    for their main vector (step "Fast-tier Retrieval", route "dense-fast").

    Each chunk is ranked by the best vectors it has: the dense route scores those with a main
    vector, this route those without one, and fusion fills in for each route the chunks the other
    one scores (``unscored``), so every chunk counts once per tier and the scores of two models are
    never compared raw. Once every chunk has its main vector the route stays silent (no step, no
    list) and search is what it is without a fast tier. The gate and the answer scorer read the
    "dense" route's cosine only: the fast tier's never reaches what they were calibrated on."""

    step = Step.DENSE_FAST
    label = "fast-tier route"

    def __init__(
        self,
        vectors: VectorIndex,
        main: Space | None,
        space: Space,
        embed_query: Callable[[str], np.ndarray],
        weight: float,
    ) -> None:
        super().__init__(vectors, space, embed_query, weight, "dense-fast")
        self.main = main

    def active(self) -> bool:
        return self.main is None or not self.vectors.fully_embedded(self.main)

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        if not self.active():
            return None
        assert self.space is not None and self.embed_query is not None
        with tracer.step(self.step, f"query={query!r} pool={pool}") as step:
            if not self.vectors.has_space(self.space):
                step.skip(f"no vectors yet in space {self.space.name}")
                return None
            # The chunks with a main vector are the dense route's; a wider pool leaves enough without.
            # The scores are standardised against the fast tier's whole top ``pool``, as the dense
            # route's are against its own, so that the two routes' z-scores compare.
            ranked = self.vectors.knn(self.space, self.embed_query(query), visibility, pool * FAST_POOL_FACTOR)
            waiting = self._waiting([c for c, _ in ranked])
            items = PartOfRanking([item for item in ranked if item[0] in waiting][:pool], [s for _, s in ranked[:pool]])
            step.done(
                f"{len(items)} chunks still without a {self.main.provider if self.main else 'main'} vector"
                + (f", top cosine {items[0][1]:.3f}" if items else ""),
                space=self.space.name,
                main_space=self.main.name if self.main else None,
                top=[{"chunk_id": c, "cosine": round(s, 4)} for c, s in items[:10]],
            )
            return items

    def _waiting(self, chunk_ids: Sequence[str]) -> set[str]:
        return set(chunk_ids) if self.main is None else self.vectors.without_vectors(self.main, chunk_ids)

    def unscored(self, chunk_ids: Sequence[str]) -> set[str]:
        """The chunks the dense route scores (they have a main vector), and those with no fast vector."""
        assert self.space is not None
        waiting = self._waiting(chunk_ids)
        return (set(chunk_ids) - waiting) | self.vectors.without_vectors(self.space, list(waiting))


FAST_POOL_FACTOR = 4


SCRIPT_NAMES = {"cjk": "Chinese, Japanese or Korean", "other": "languages without CJK characters"}


@dataclass(frozen=True)
class OtherScript:
    """Where a cross-language route searches: the visible chunks in the script the question is not in."""

    asked: str  # the question's script
    target: str  # the other one
    visibility: Visibility  # the caller's, narrowed to ``target``
    chunks: int  # visible chunks in ``target``
    share: float  # ... as a share of all visible chunks

    @classmethod
    def of(cls, documents: DocumentStore, query: str, visibility: Visibility) -> OtherScript:
        asked = query_script(query)
        target = other_script(asked)
        narrowed = visibility.in_script(target)
        chunks = documents.count_visible(narrowed)
        share = chunks / max(documents.count_visible(visibility), 1) if chunks else 0.0
        return cls(asked, target, narrowed, chunks, share)

    def skip_reason(self, min_share: float) -> str | None:
        """Why a route does not run here (None: it runs). A handful of chunks in the other script
        (an English changelog line naming a Chinese article) is no reason to search it."""
        if not self.chunks:
            return f"no visible chunk in {SCRIPT_NAMES[self.target]}"
        if self.share < min_share:
            return (
                f"{self.chunks} visible chunks in {SCRIPT_NAMES[self.target]} are {self.share:.1%} of the visible"
                f" chunks (below crosslang_min_share {min_share:.1%})"
            )
        return None

    def details(self) -> dict[str, Any]:
        return {
            "question_script": self.asked,
            "searched_script": self.target,
            "searched_chunks": self.chunks,
            "searched_share": round(self.share, 4),
        }


class CrossLanguageRoute(DenseRoute):
    """KNN among the visible chunks of the other script than the question's (step
    "Cross-language Retrieval"): a Chinese question searches the chunks that are not mostly
    CJK characters, any other question the chunks that are (``text.tokens.text_script``).

    Multilingual models still rank passages in the question's language first (e5's top
    cosines for a Chinese question are a few hundredths higher on Chinese passages), so a
    note in the other language rarely reaches the fused top ten through the dense route. This
    route gives the other script its own ranked list in fusion, in its own embedding space
    (the bundled ``use`` model by default, the strongest across languages). It does not run
    when the other script holds under ``min_share`` of the visible chunks, so a vault in one
    language ranks as without it; the narrowing is a ``Visibility``, applied before ranking like
    the ACL and the filters."""

    step = Step.CROSSLANG
    label = "cross-language route"

    def __init__(
        self,
        documents: DocumentStore,
        vectors: VectorIndex,
        space: Space | None,
        embed_query: Callable[[str], np.ndarray] | None,
        weight: float,
        name: str = "crosslang",
        min_share: float = 0.0,
    ) -> None:
        super().__init__(vectors, space, embed_query, weight, name)
        self.documents = documents
        self.min_share = min_share

    def in_scope(self, query: str, visibility: Visibility, keys: list[str]) -> set[str]:
        """The keys this route could have returned: the visible chunks in the other script."""
        return in_other_script(self.documents, query, visibility, keys)

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        with tracer.step(self.step, f"query={query!r} pool={pool}") as step:
            if self.space is None or self.embed_query is None:
                step.skip("no cross-language embedding configured")
                return None
            where = OtherScript.of(self.documents, query, visibility)
            reason = where.skip_reason(self.min_share)
            if reason is not None:
                step.skip(reason, **where.details())
                return None
            return self._knn(
                self.space, self.embed_query, query, where.visibility, pool, tracer, step, **where.details()
            )


Translate = Callable[[str, str], "Translation | None"]  # (question, script to search) -> its translation


@dataclass(frozen=True)
class Translation:
    text: str  # what the trace shows: the translated question, or the dictionary's words
    tokens: list[str]  # index tokens of the searched script, for BM25


class TranslatedRoute:
    """BM25 among the visible chunks of the other script than the question's, with the question
    translated into index tokens of that script (step "Translated BM25"): by the bundled
    bilingual dictionary (CC-CEDICT; route "translated"), or by the chat model when one is
    configured (route "translated-llm"). Names written in Latin letters (``APIRouter``) are
    kept as they are. It does not run when the other script holds under ``min_share`` of the
    visible chunks, nor when nothing of the question translates; a failed LLM call is a
    warning, never an error."""

    step = Step.TRANSLATED

    def __init__(
        self,
        documents: DocumentStore,
        lexical: LexicalIndex,
        translate: Translate,
        weight: float,
        name: str = "translated",
        source: str = "CC-CEDICT",
        min_share: float = 0.0,
    ) -> None:
        self.documents = documents
        self.lexical = lexical
        self.translate = translate
        self.weight = weight
        self.name = name
        self.source = source
        self.min_share = min_share

    def in_scope(self, query: str, visibility: Visibility, keys: list[str]) -> set[str]:
        """The keys this route could have returned: the visible chunks in the other script."""
        return in_other_script(self.documents, query, visibility, keys)

    def unscored(self, chunk_ids: Sequence[str]) -> set[str]:
        return set()  # BM25 scores every chunk: nothing waits for a vector

    def retrieve(self, query: str, visibility: Visibility, pool: int, tracer: Tracer) -> Ranked | None:
        with tracer.step(self.step, f"query={query!r} pool={pool}") as step:
            other = OtherScript.of(self.documents, query, visibility)
            where: dict[str, Any] = {"route": self.name, "source": self.source, **other.details()}
            reason = other.skip_reason(self.min_share)
            if reason is not None:
                step.skip(reason, **where)
                return None
            try:
                translation = self.translate(query, other.target)
            except ProviderError as exc:
                step.skip(f"translation failed: {exc}", **where)
                tracer.warn(f"{self.source} translation failed ({exc}); searched without it")
                return None
            if translation is None:
                step.skip(f"{self.source} is not installed", **where)
                return None
            if not translation.tokens:
                step.skip("nothing of the question translates", **where)
                return None
            match = " OR ".join('"' + t.replace('"', '""') + '"' for t in translation.tokens)
            items = self.lexical.bm25(match, other.visibility, pool)
            step.done(
                f"{len(items)} chunks" + (f", top score {items[0][1]:.3f}" if items else ""),
                **where,
                translation=translation.text,
                terms=translation.tokens[:40],
                principals=list(visibility.principals),
                filters=visibility.filters.describe(),
                top=[{"chunk_id": c, "score": round(s, 4)} for c, s in items[:10]],
            )
            return items


def in_other_script(documents: DocumentStore, query: str, visibility: Visibility, keys: list[str]) -> set[str]:
    """The keys a cross-language route could have returned for ``query``: those in the other script."""
    return documents.filter_visible(visibility.in_script(other_script(query_script(query))), keys)


def _latin(query: str) -> list[str]:
    """The index tokens of a question's words in Latin letters: names and code read the same in
    either language."""
    return fts_tokens(CJK_RUN.sub(" ", query))


def dictionary_translation(query: str, target: str) -> Translation | None:
    """The question as index tokens of ``target``'s script, through CC-CEDICT (None: not installed)."""
    from ..text.dictionary import load_dictionary

    dictionary = load_dictionary()
    if dictionary is None:
        return None
    if target == "other":
        words = dictionary.english_terms(query)
        return Translation(" ".join(words), list(dict.fromkeys(_latin(query) + words)) if words else [])
    chinese = dictionary.chinese_words(query)
    tokens = [t for w in chinese for t in fts_tokens(w) if len(t) == 2 or len(w) == 1]
    return Translation(" ".join(chinese), list(dict.fromkeys(fts_tokens(query) + tokens)) if tokens else [])


TRANSLATE_PROMPT = (
    "Translate the user's search question into {language}. Keep names, code and identifiers as they are. "
    "Reply with the translation only, on one line."
)


def llm_translator(chat: ChatModel) -> Translate:
    """Translation by a chat model: one short call per question that needs it."""

    def translate(query: str, target: str) -> Translation:
        language = "English" if target == "other" else "Simplified Chinese"
        request = ChatRequest(
            (ChatMessage.system(TRANSLATE_PROMPT.format(language=language)), ChatMessage.user(query)),
            temperature=0.0,
            max_tokens=200,
        )
        text = " ".join(chat.chat(request).text.split())[:1000]
        return Translation(text, list(dict.fromkeys(fts_tokens(text) + _latin(query))) if text else [])

    return translate
