"""The read side of the store contract (tests/contract/test_store_contract.py) run against ``QdrantReplica``.

A primary (``QdrantStore``: the SQLite file, BM25 and vectors in Qdrant, the only writer) indexes the
contract's tiny vault and gives its chunks the hand-made vectors; a replica is then opened on the same
Qdrant location and collection prefix with no SQLite file at all, and the contract's read tests run
against it unchanged (they are imported from the contract module, so the assertions are the
contract's own; the ``store`` and ``make`` fixtures here hand them the replica). Runs and
conversations are written through the replica (replicas write those). The engines are those of the
contract: qdrant-client's local mode and qdrant-edge in-process, and a live server with QDRANT_URL
(skipped otherwise).

One test more compares every document read of the replica with the primary's, for several
principals (one who sees nothing included), filters and paging.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import test_store_contract as contract
from test_store_contract import (
    EVERYONE,
    NOTES,
    PUBLIC,
    SPACE,
    embed_by_hand,
    sync,
    write_vault,
)

from sunlib.contracts import SearchFilters
from sunlib.store import DocumentStore, Store, Visibility
from tests.support.store_helpers import drop_qdrant_prefix

pytest.importorskip("qdrant_client", reason="the Qdrant backend needs qdrant-client (pip install -e '.[dev]')")
from sunlib.store.qdrant import Location, QdrantReplica, QdrantStore

CONTRACT_READS = (  # the contract's read tests, collected here against the replica (this module's fixtures)
    contract.test_a_closer_restricted_vector_never_crowds_out_a_visible_one,
    contract.test_a_conversation_is_readable_only_by_those_who_may_read_every_run,
    contract.test_a_conversation_keeps_its_turns_in_order_with_their_runs,
    contract.test_a_run_is_read_back_whole_by_those_who_hold_its_principals,
    contract.test_a_smaller_k_or_limit_is_a_prefix_of_a_larger_one,
    contract.test_runs_and_conversations_are_their_owners,
    contract.test_an_empty_acl_is_visible_to_nobody,
    contract.test_document_frequencies_count_visible_chunks_only,
    contract.test_every_filter_applies_before_ranking,
    contract.test_note_listing_pages_by_path,
    contract.test_the_note_id_filter,
    contract.test_upsert_stores_every_vector_and_knn_returns_cosines,
)
globals().update({t.__name__: t for t in CONTRACT_READS})


def _local(tmp: Path) -> Location:
    return Location(path=str(tmp / "qdrant-local"))


def _edge(tmp: Path) -> Location:
    pytest.importorskip("qdrant_edge", reason="the in-process engine needs qdrant-edge-py (pip install -e '.[dev]')")
    return Location(path=str(tmp / "qdrant-edge"), engine="qdrant-edge", payload_indexes=False)


def _server(tmp: Path) -> Location:
    url = os.environ.get("QDRANT_URL", "")
    if not url:
        pytest.skip("QDRANT_URL is not set: the live-server cases of the replica contract need a Qdrant server")
    return Location(url=url)


ENGINES: dict[str, Callable[[Path], Location]] = {
    "qdrant-local": _local,
    "qdrant-edge": _edge,
    "qdrant-server": _server,
}


class Cluster:
    """One Qdrant location with one primary per prefix; replicas opened on it, all closed at the end."""

    def __init__(self, location: Location, tmp: Path) -> None:
        self.location, self.tmp = location, tmp
        self.opened: list[QdrantStore | QdrantReplica] = []

    def prefix(self, name: str) -> str:
        return "r" + hashlib.sha256(f"{self.tmp}/{name}".encode()).hexdigest()[:12]

    def primary(self, name: str, vault: Path) -> QdrantStore:
        store = QdrantStore(self.tmp / f"{name}.db", self.location, self.prefix(name))
        self.opened.append(store)
        sync(store, vault)
        embed_by_hand(store.vectors, store)
        return store

    def replica(self, name: str) -> QdrantReplica:
        store = QdrantReplica(self.location, self.prefix(name))
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in reversed(self.opened):
            store.close()
        if self.location.url:
            for name in {s.prefix for s in self.opened}:
                drop_qdrant_prefix(self.location.url, name)


@pytest.fixture(params=sorted(ENGINES))
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(ENGINES[request.param](tmp_path), tmp_path)
    yield c
    c.close()


@pytest.fixture
def contract_vault(tmp_path: Path) -> Path:
    return write_vault(tmp_path / "vault")


@pytest.fixture
def primary(cluster: Cluster, contract_vault: Path) -> QdrantStore:
    return cluster.primary("db", contract_vault)


@pytest.fixture
def store(cluster: Cluster, primary: QdrantStore) -> Store:
    """What the contract's read tests get: a replica of the primary's collections, no SQLite file."""
    return cluster.replica("db")


@pytest.fixture
def make(cluster: Cluster, contract_vault: Path) -> Callable[[str], Store]:
    """The contract's ``make``: a replica over a primary of its own (one per name)."""

    def open_replica(name: str = "db") -> Store:
        cluster.primary(name, contract_vault)
        return cluster.replica(name)

    return open_replica


def test_the_contract_reads_run_here() -> None:
    """The imported tests are collected in this module (with its fixtures), not only referenced."""
    assert all(t.__name__ in globals() for t in CONTRACT_READS)


WHO = [("public",), ("ops",), ("team",), ("public", "ops", "team"), (), ("nobody",)]


def _reads(s: Store, principals: tuple[str, ...]) -> dict[str, object]:
    """Every document read a query or a page makes, for some principals."""
    visibility = Visibility(principals)
    ids = sorted(c.chunk_id for nid, _, _ in s.iter_notes() for c in s.chunks_of_note(nid))
    states = s.note_states()
    return {
        "visible": s.visible_chunk_ids(visibility),
        "count": s.count_visible(visibility),
        "filtered": s.filter_visible(visibility, [*ids, "chk_unknown"]),
        "in_sea": s.count_visible(Visibility(principals, SearchFilters(folders=("sea",), since=1500.0))),
        "listing": s.list_notes(principals, limit=2, offset=1),
        "listing_sea": s.list_notes(principals, folder="sea", tag="#Sea"),
        "files": s.note_files(principals, limit=3, offset=1),
        "files_of": s.note_files(principals, ["team/plan.md", "sea/harbour.md", "missing.md"]),
        "states_of": s.note_states_of(["guide/search.md", "missing.md"]),
        "notes": [s.note_by_id(states[path].note_id) for path in sorted(states)],
        "chunks": s.chunks_by_ids([*reversed(ids), "chk_unknown"]),
        "neighbours": [s.neighbours(c, 1) for c in ids],
        "under": (s.note_paths_under("sea"), s.note_paths_under("")),
        "dense_pending": s.vectors.count_pending(SPACE, visibility),
    }


def test_every_document_read_matches_the_indexing_host(primary: QdrantStore, store: Store) -> None:
    assert isinstance(store, DocumentStore) and isinstance(store, QdrantReplica)
    assert store.note_states() == primary.note_states() and len(store.note_states()) == len(NOTES)
    assert store.iter_notes() == primary.iter_notes()
    assert store.counts() == primary.counts()
    assert store.note_files(None) == primary.note_files(None)
    assert store.generation() == primary.generation() > 0
    assert store.get_meta("index_uuid") == primary.get_meta("index_uuid") != ""
    assert store.vectors.spaces() == primary.vectors.spaces()
    for principals in WHO:
        assert _reads(store, principals) == _reads(primary, principals), principals
    assert _reads(store, ())["count"] == 0 and _reads(store, ("nobody",))["listing"] == ([], 0)
    assert _reads(store, PUBLIC.principals)["count"] == 2 and _reads(store, EVERYONE.principals)["count"] == 4
