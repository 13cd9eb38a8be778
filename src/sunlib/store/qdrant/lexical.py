"""The Qdrant LexicalIndex: BM25 as sparse vectors with the IDF modifier, ACL inside the search.

One point per chunk in the ``<prefix>_chunks`` collection: the sparse vector ``bm25`` holds the
chunk's term-frequency weights (``points.doc_vector``), the payload what a query needs to
answer. Qdrant multiplies each query term by its IDF (``Modifier.IDF``,
``ln(1 + (N - n + 0.5) / (n + 0.5))``) at query time.

Scores say nothing about hidden text (docs/security.md). A caller who may see every chunk gets
the collection's IDF. Any other caller's IDF is computed over the chunks its principals may see
(``SearchParams.idf = IdfCorpusParams(corpus=<its ACL filter>)``: N and n counted among those
points only), and the length normalisation uses ``avgdl``, a parameter fixed when the collection
is first filled (the mean length of the chunks written by then, FTS5's own mean; ``sunlib
migrate`` sets it to the mean of the whole corpus it copies): later writes, hidden ones
included, never move it, so they never move a visible score. Search filters narrow the hits
but never the statistics, as in the SQLite backend.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence

from qdrant_client import models

from ..fts5 import phrases_of
from ..protocols import Visibility
from .client import Shared, scroll_all
from .points import TERMS_FIELD, ChunkSource, acl_filter, chunk_payload, compile_filter, doc_vector, point_id
from .points import query_vector as make_query

LEXICAL_VECTOR = "bm25"
WRITE_BATCH = 256  # points per upsert request
TIE_MARGIN = 16  # extra hits fetched so that equal scores at the cut are ordered the same way every time


class QdrantLexical:
    def __init__(
        self, shared: Shared, collection: str, stamps: Callable[[], Mapping[str, int]], generation: Callable[[], int]
    ) -> None:
        self.shared, self.collection = shared, collection
        self._stamps = stamps  # current chunk stamps (cached per write generation by the store)
        self._generation = generation
        self._everything: dict[tuple[object, ...], bool] = {}

    # -- reads ---------------------------------------------------------------------------------

    def bm25(self, match: str, visibility: Visibility, limit: int) -> list[tuple[str, float]]:
        """(chunk_id, score) best first among the visible chunks; see the module docstring."""
        terms = phrases_of(match)
        if terms is None:
            raise ValueError(f"not a query of quoted words (text.fts_query): {match!r}")
        where, acl = compile_filter(visibility), acl_filter(visibility.principals)
        if where is None or acl is None or limit <= 0:
            return []
        idf = None if self.sees_everything(visibility) else models.SearchParams(idf=models.IdfCorpusParams(corpus=acl))
        with self.shared.call() as client, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = client.query_points(
                self.collection,
                query=make_query(terms),
                using=LEXICAL_VECTOR,
                query_filter=where,
                search_params=idf,
                limit=limit + TIE_MARGIN,
                with_payload=["chunk_id", "stamp"],
            ).points
        return current_hits(found, self._stamps(), limit)

    def sees_everything(self, visibility: Visibility) -> bool:
        """Whether the principals may see every chunk (then the collection's IDF is theirs)."""
        key = (self._generation(), *Visibility.of(visibility.principals).key)
        found = self._everything.get(key)
        if found is None:
            acl = acl_filter(visibility.principals)
            found = acl is not None and self.count(acl) == self.count(None)
            if len(self._everything) > 64:
                self._everything.clear()
            self._everything[key] = found
        return found

    def count(self, where: models.Filter | None) -> int:
        with self.shared.call() as client:
            return int(client.count(self.collection, count_filter=where, exact=True).count)

    def doc_freqs(self, terms: Sequence[str], visibility: Visibility) -> tuple[int, dict[str, int]]:
        """(visible chunks, how many of them hold each term): counts under the visibility's filter."""
        where = compile_filter(visibility)
        if where is None:
            return 0, {}
        found: dict[str, int] = {}
        for term in dict.fromkeys(terms):
            has = models.FieldCondition(key=TERMS_FIELD, match=models.MatchValue(value=term))
            count = self.count(models.Filter(must=[*list(where.must or []), has]))
            if count:
                found[term] = count
        return self.count(where), found

    # -- writes (the store calls these after its SQLite transaction commits) -------------------

    def write(self, sources: Sequence[ChunkSource], avgdl: float) -> None:
        points = [
            models.PointStruct(
                id=point_id(s.chunk_id),
                vector={LEXICAL_VECTOR: doc_vector(s.tokens, avgdl)} if s.tokens else {},
                payload=chunk_payload(s),
            )
            for s in sources
        ]
        for start in range(0, len(points), WRITE_BATCH):
            with self.shared.call() as client:
                client.upsert(self.collection, points=points[start : start + WRITE_BATCH], wait=True)

    def delete(self, chunk_ids: Sequence[str]) -> None:
        if not chunk_ids:
            return
        with self.shared.call() as client:
            client.delete(self.collection, points_selector=models.PointIdsList(points=[point_id(c) for c in chunk_ids]))

    def ledger(self) -> dict[str, int]:
        """(chunk_id -> stamp) of every point: what the collection holds, to diff with SQLite."""
        out: dict[str, int] = {}
        for p in scroll_all(self.shared, self.collection, ["chunk_id", "stamp"]):
            payload = p.payload or {}
            out[str(payload.get("chunk_id"))] = int(payload.get("stamp", -1))
        return out


def current_hits(
    points: Sequence[models.ScoredPoint], stamps: Mapping[str, int], limit: int
) -> list[tuple[str, float]]:
    """The best ``limit`` (chunk_id, score) of the points computed from the chunk as it is now, ties
    by chunk id. A point left behind by a crash between the SQLite commit and the Qdrant write
    (another stamp, or its chunk gone) may carry an older ACL, so it never reaches a caller;
    reconcile removes it. Qdrant orders equal scores as its segments come (threads), so the searches
    ask for ``TIE_MARGIN`` more and the order here is the one answer: a smaller limit is a prefix."""
    out: list[tuple[str, float]] = []
    for p in points:
        payload = p.payload or {}
        chunk_id = str(payload.get("chunk_id"))
        if stamps.get(chunk_id) == payload.get("stamp"):
            out.append((chunk_id, float(p.score)))
    out.sort(key=lambda hit: (-hit[1], hit[0]))
    return out[:limit]
