"""Fusing ranked lists, with every contribution kept.

Each fused item records, per route, its rank, raw score and what it added to
the fused score; the contributions sum to the score (a test checks this).

* ``rrf``: score = sum_r w_r / (k + rank_r), k = 60 (Cormack, Clarke and
  Buettcher 2009). Uses ranks only, so score scales never matter.
* ``zscore``: each route's scores standardised over its candidate list,
  score = sum_r w_r * z_r. An item a route did not return gets that route's
  lowest z. Measured better than RRF on SciFact/CMRC with BM25 + e5 (docs/).
* ``minmax``: scores scaled to [0, 1] per route; a missing item gets 0.

Not returned is not the same as cannot score. A route that did not return an
item ranked it below its pool, and the item counts at that route's floor (the
lowest z; nothing for rrf and minmax). A route that cannot score an item at all
(the dense route while the item's chunk still waits for its vector) knows
nothing against it: charging it the floor would rank the item below what BM25
alone gives it, for as long as embedding takes. Such an item, named in
``unscored``, gets that route's contribution filled in instead: the route's
weight times the weighted mean of the normalised values (z, 1/(k + rank), or
min-max value) of the routes that can score it, counting their floors where
they did not return it. With BM25 and dense that is the contribution the
dense route would make if it agreed with BM25 about the item; equivalently the
item is ranked by the routes that can score it, their weights rescaled to the
full sum. An item's filled-in routes are listed in ``Fused.filled`` (rank 0,
score 0.0: the route has no score of its own for it). Without ``unscored``,
or when it names nothing, fusion is exactly what it was.

Why agreement and not another guess: on SciFact with 1,888 of 5,280 chunks
embedded it lifts hybrid from below BM25 to just above it, and keeps the
queries whose relevant documents have no vector yet at BM25's level. A
per-query regression of the dense z on the BM25 z ranks better overall but
pushes those queries below BM25; the dense mean (z = 0) is worse on both
counts; the dense route's best z (then no such chunk can fall below its BM25
rank) ranks worse than BM25 overall. Pending chunks
are mostly the notes just added or edited, the ones most likely searched for,
so they should not pay for the missing vector (docs/evaluation.md, "Hybrid
while vectors are missing", has the figures and commands).

Ties are broken deterministically: best single-route rank, then the key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from ..contracts import RouteScore
from ..errors import ConfigError

FUSIONS = ("rrf", "zscore", "minmax")


@dataclass(frozen=True)
class Fused:
    key: str
    score: float
    routes: Mapping[str, RouteScore]
    filled: tuple[str, ...] = ()  # routes whose contribution was filled in (they cannot score the item yet)


def fuse(
    lists: Mapping[str, Sequence[tuple[str, float]]],
    method: str = "rrf",
    weights: Mapping[str, float] | None = None,
    k: int = 60,
    unscored: Mapping[str, Collection[str]] | None = None,
    scopes: Mapping[str, Collection[str]] | None = None,
    references: Mapping[str, Sequence[float]] | None = None,
) -> list[Fused]:
    """Fuse ranked (key, score) lists, best first.

    ``unscored``: per route, keys it cannot score at all (not merely ranked below its pool); those
    it did not return are filled in. ``scopes``: for a route that searches part of the collection
    only (the cross-language routes search the other script), the keys it could have returned.
    With z-score fusion, an item of that scope the route did not return counts at the route's
    lowest z, as usual; an item outside it counts as neutral (z = 0, rank 0, contribution 0): the
    route says nothing about it. ``references``: per route, the scores its list is standardised
    against (zscore, minmax) when they are not the list's own: a route that returns part of what it
    ranked (the fast tier returns the chunks still without a main vector) is scaled as the whole."""
    if method not in FUSIONS:
        raise ConfigError(f"unknown fusion {method!r}; choose one of: {', '.join(FUSIONS)}")
    weights = weights or {}
    per_route: dict[str, dict[str, RouteScore]] = {}
    floors: dict[str, RouteScore] = {}
    norms: dict[str, Callable[[int, float], float]] = {}
    references = references or {}
    for route, items in lists.items():
        w = weights.get(route, 1.0)
        scores = [s for _, s in items]
        norm = norms[route] = _normaliser(method, list(references.get(route, scores)), k)
        for rank, (key, score) in enumerate(items, start=1):
            per_route.setdefault(key, {})[route] = RouteScore(rank, score, w * norm(rank, score))
        if method == "zscore" and scores:
            # An item this route did not return counts at the route's lowest z (rank 0 = absent).
            floors[route] = RouteScore(0, min(scores), w * norm(0, min(scores)))
    scopes = scopes or {}
    for key, routes in per_route.items():
        for route, floor in floors.items():
            scope = scopes.get(route)
            routes.setdefault(route, floor if scope is None or key in scope else RouteScore(0, 0.0, 0.0))
    filled = _fill_in(per_route, norms, unscored, weights, scopes) if unscored else {}
    fused = [
        Fused(key, sum(r.contribution for r in routes.values()), routes, filled.get(key, ()))
        for key, routes in per_route.items()
    ]
    fused.sort(key=lambda f: (-f.score, _best_rank(f), f.key))
    return fused


def _fill_in(
    per_route: dict[str, dict[str, RouteScore]],
    norms: Mapping[str, Callable[[int, float], float]],
    unscored: Mapping[str, Collection[str]],
    weights: Mapping[str, float],
    scopes: Mapping[str, Collection[str]],
) -> dict[str, tuple[str, ...]]:
    """Give each route that cannot score an item (and did not return it) the contribution
    weight x (weighted mean normalised value of the routes that can), in place. A route that
    counts the item as neutral (outside its scope) is neither filled in nor averaged over.
    Returns the filled-in routes per key."""
    ws = {r: weights.get(r, 1.0) for r in norms}
    filled: dict[str, tuple[str, ...]] = {}
    for key in {key for route in norms for key in unscored.get(route, ()) if key in per_route}:
        routes = per_route[key]
        judging = [r for r in norms if r not in scopes or key in scopes[r]]
        blind = tuple(r for r in judging if key in unscored.get(r, ()) and (r not in routes or routes[r].rank == 0))
        seeing = [r for r in judging if r not in blind]
        if not blind or not seeing:
            continue
        # A seeing route that did not return the key counts as it does in the fused score: at
        # its floor (zscore) or as 0 (rrf, minmax: no entry). Its contribution is w x value.
        total = sum(ws[r] for r in seeing)
        if total > 0:
            value = sum(routes[r].contribution for r in seeing if r in routes) / total
        else:  # every seeing route weighs 0; their unweighted mean still places the item
            value = fmean(_normalised(routes.get(r), norms[r]) for r in seeing)
        for r in blind:
            routes[r] = RouteScore(0, 0.0, ws[r] * value)
        filled[key] = blind
    return filled


def _normalised(score: RouteScore | None, norm: Callable[[int, float], float]) -> float:
    return norm(score.rank, score.score) if score is not None else 0.0


def _best_rank(f: Fused) -> int:
    ranks = [r.rank for r in f.routes.values() if r.rank > 0]
    return min(ranks) if ranks else 1 << 30


def _pstdev(scores: list[float], mean: float) -> float:
    """The population standard deviation in floats (``statistics.pstdev`` is exact, in fractions,
    and took 0.7 ms of a hybrid query)."""
    return math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / len(scores))


def _normaliser(method: str, scores: list[float], k: int) -> Callable[[int, float], float]:
    if method == "rrf":
        return lambda rank, score: 1.0 / (k + rank)
    if not scores:
        return lambda rank, score: 0.0
    if method == "zscore":
        mean = fmean(scores)
        std = _pstdev(scores, mean) or 1.0
        return lambda rank, score: (score - mean) / std
    lo, hi = min(scores), max(scores)
    span = (hi - lo) or 1.0
    return lambda rank, score: (score - lo) / span
