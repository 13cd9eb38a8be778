"""The Retriever: any number of named routes, fused by ``fuse``.

Its default configuration is BM25 ("bm25") and dense ("dense"), and, with ``[search] crosslang``
(on by default), the cross-language routes: dense in a second space ("crosslang") and BM25 on a
translated question ("translated", "translated-llm"), both among the chunks in the other script
than the question's. A mode picks routes by name: "hybrid" runs them all, any other mode the
route of that name. While the dense route's space is filling in, the fast-tier route ("dense-fast")
ranks the chunks still without a vector there, from the fast tier's vectors (``FastTierRoute``).
With two lists or more, "Hybrid Fusion" fuses them (every item keeps each
route's rank, score and contribution); a single list is ranked as it is, equal scores ordered by
chunk id.

While vectors are still being computed, the dense route cannot score some of the chunks BM25
finds. Before fusing, each route is asked which of the chunks it did not return it cannot score
at all (``Route.unscored``; for the dense route, a lookup of those ids' vectors), and fusion
fills those contributions in (see ``fusion``) instead of charging them the route's floor: until
a chunk has its vector, hybrid ranks it as if the dense route agreed with BM25 about it. The
question is only ever about chunks a route returned under the caller's visibility, so it
reveals nothing about others. When every chunk has its vector nothing is filled in and fusion
is exactly what it was; ``[search] fill_missing = false`` turns the fill-in off. The Fusion
step says how many fused chunks were filled in (``filled_in``; in ``top``, a filled-in route
is marked ``"filled": true``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..config import SearchSettings
from ..contracts import RouteScore
from ..providers.chat import ChatModel
from ..store import Space, Store, Visibility
from ..trace import Tracer
from ..trace.steps import Step
from .fusion import fuse
from .routes import (
    CrossLanguageRoute,
    DenseRoute,
    FastTierRoute,
    LexicalRoute,
    PartOfRanking,
    Route,
    TranslatedRoute,
    dictionary_translation,
    llm_translator,
)


@dataclass(frozen=True)
class Candidate:
    """One fused result: a chunk, its score, and what each route saw of it."""

    chunk_id: str
    score: float
    routes: Mapping[str, RouteScore]


class Retriever:
    def __init__(self, routes: Sequence[Route], settings: SearchSettings) -> None:
        names = [r.name for r in routes]
        if len(set(names)) != len(names):
            raise ValueError(f"route names must be unique: {names}")
        self.routes = tuple(routes)
        self.settings = settings

    @classmethod
    def default(
        cls,
        store: Store,
        settings: SearchSettings,
        space: Space | None,
        embed_query: Callable[[str], np.ndarray] | None,
        crosslang: tuple[Space, Callable[[str], np.ndarray]] | None = None,
        chat: ChatModel | None = None,
        fast: tuple[Space, Callable[[str], np.ndarray]] | None = None,
    ) -> Retriever:
        """BM25 and dense, weighted by ``bm25_weight`` and ``dense_weight``. With ``[search]
        crosslang``: the cross-language route when ``crosslang`` (a space and its query embedder) is
        given (``crosslang_weight``), BM25 on the dictionary's translation (``dictionary_weight``),
        and BM25 on the chat model's translation when ``chat`` is given (``llm_weight``). With
        ``fast`` (the fast tier's space and query embedder): the fast-tier route, which ranks the
        chunks still waiting for their vector in ``space`` (``fast_weight``)."""
        fast = fast if fast is not None and space is not None and fast[0].name != space.name else None
        routes: list[Route] = [
            LexicalRoute(store.lexical, settings.bm25_weight),
            DenseRoute(
                store.vectors, space, embed_query, settings.dense_weight, backup=fast[0].provider if fast else None
            ),
        ]
        if fast is not None:
            routes.append(FastTierRoute(store.vectors, space, fast[0], fast[1], settings.fast_weight))
        if crosslang is not None and settings.crosslang:
            routes.append(
                CrossLanguageRoute(
                    store,
                    store.vectors,
                    crosslang[0],
                    crosslang[1],
                    settings.crosslang_weight,
                    min_share=settings.crosslang_min_share,
                )
            )
        if settings.crosslang and settings.crosslang_dictionary:
            routes.append(
                TranslatedRoute(
                    store,
                    store.lexical,
                    dictionary_translation,
                    settings.dictionary_weight,
                    min_share=settings.crosslang_min_share,
                )
            )
        if settings.crosslang and chat is not None:
            routes.append(
                TranslatedRoute(
                    store,
                    store.lexical,
                    llm_translator(chat),
                    settings.llm_weight,
                    "translated-llm",
                    chat.model,
                    min_share=settings.crosslang_min_share,
                )
            )
        return cls(routes, settings)

    def routes_for(self, mode: str) -> tuple[Route, ...]:
        """Hybrid: every route; another mode: the route of that name (dense: with the fast tier's)."""
        names = {mode, "dense-fast"} if mode == "dense" else {mode}
        return self.routes if mode == "hybrid" else tuple(r for r in self.routes if r.name in names)

    def retrieve(
        self, query: str, visibility: Visibility, mode: str, pool: int, tracer: Tracer, shown: int = 10
    ) -> list[Candidate]:
        """Run the mode's routes (``pool`` candidates each) and fuse them, best first.
        ``shown``: how many fused items the trace lists."""
        routes = self.routes_for(mode)
        lists: dict[str, list[tuple[str, float]]] = {}
        for route in routes:
            items = route.retrieve(query, visibility, pool, tracer)
            if items is not None:
                lists[route.name] = items
        if len(lists) < 2:
            return _single(lists)
        s = self.settings
        weights = {r.name: r.weight for r in routes}
        scopes: dict[str, set[str]] = {}
        if s.crosslang_fusion == "neutral":
            everything = list(dict.fromkeys(key for items in lists.values() for key, _ in items))
            for route in routes:
                in_scope = getattr(route, "in_scope", None)
                if in_scope is not None and route.name in lists:
                    returned = {key for key, _ in lists[route.name]}
                    scopes[route.name] = returned | in_scope(
                        query, visibility, [k for k in everything if k not in returned]
                    )
        with tracer.step(Step.FUSION, " + ".join(f"{len(v)} {k}" for k, v in lists.items())) as step:
            unscored = _unscored(routes, lists) if s.fill_missing else {}
            references = {name: items.reference for name, items in lists.items() if isinstance(items, PartOfRanking)}
            fused = fuse(lists, s.fusion, weights, s.rrf_k, unscored, scopes, references)
            filled = sum(1 for f in fused if f.filled)
            step.done(
                f"{len(fused)} unique chunks" + (f", {filled} filled in for missing vectors" if filled else ""),
                method=s.fusion,
                k=s.rrf_k if s.fusion == "rrf" else None,
                weights=weights,
                filled_in=filled,
                top=[
                    {
                        "chunk_id": f.key,
                        "score": round(f.score, 5),
                        "routes": {r: _route_detail(v, r in f.filled) for r, v in f.routes.items()},
                    }
                    for f in fused[: max(10, shown)]
                ],
            )
        return [Candidate(f.key, f.score, dict(f.routes)) for f in fused]


def _unscored(routes: Sequence[Route], lists: Mapping[str, list[tuple[str, float]]]) -> dict[str, set[str]]:
    """Per route that produced a list: the chunks other routes returned that it cannot score."""
    found = dict.fromkeys(key for items in lists.values() for key, _ in items)
    out: dict[str, set[str]] = {}
    for route in routes:
        if route.name not in lists:
            continue
        returned = {key for key, _ in lists[route.name]}
        missing = route.unscored([key for key in found if key not in returned])
        if missing:
            out[route.name] = missing
    return out


def _route_detail(v: RouteScore, filled: bool) -> dict[str, object]:
    detail: dict[str, object] = {"rank": v.rank, "score": round(v.score, 4), "contribution": round(v.contribution, 5)}
    if filled:
        detail["filled"] = True
    return detail


def _single(lists: Mapping[str, list[tuple[str, float]]]) -> list[Candidate]:
    route = next(iter(lists), None)
    if route is None:
        return []
    # equal scores are ordered by chunk id, as fusion does, so every engine ranks alike
    items = sorted(lists[route], key=lambda item: (-round(item[1], 6), item[0]))
    return [Candidate(k, s, {route: RouteScore(i, s, s)}) for i, (k, s) in enumerate(items, 1)]
