"""A library = a vault folder + its index. The small public Python API.

    from sunlib import Library
    lib = Library.open("~/notes")
    lib.index()
    for hit in lib.search("how do I filter by tag", mode="hybrid").hits:
        print(hit.path, hit.heading_path, hit.score)

Where the index lives: ``index_dir`` from settings if set (relative: inside the vault); otherwise
a folder under ``$SUNLIB_HOME/indexes/`` (default ``~/.local/share/sunlib``) named after the
vault, outside it so that a sync tool never copies a live database (``sunlib.library.location``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..config import Settings, load_settings, merge
from ..contracts import SearchFilters, SearchResult, Turn
from ..errors import NotFound, StoreReadOnly, UserError
from ..providers import (
    Embedder,
    Reranker,
    Writer,
    create_embedder,
    create_reader,
    create_reranker,
    create_writer,
    sentence_model,
)
from ..providers.chat import ChatModel
from ..providers.registry import chat_model_names, create_chat_model
from ..retrieve import SearchEngine, SearchRequest
from ..store import LOCAL_OWNER, ConversationRecord, DerivedLexical, Reconciled, Space, Store
from ..store.lock import IndexerLock, OnWait, indexer_lock
from ..sync.freshness import Freshness, FreshRead, fresh_read
from ..sync.indexing import (
    IndexReport,
    Progress,
    Wanted,
    bulk_workers,
    crosslang_space,
    embed_pending,
    fast_space,
    pace_of,
    rescore_space,
    space_for,
    sync_text,
)
from ..trace import Listener, Tracer
from .location import DB_NAME, Location, locate
from .notes import Notes
from .records import Calibration, CalibrationState, Embedding, SpaceRole, Status
from .shared import Shared, ThreadStores

if TYPE_CHECKING:
    from ..answer import AskResult
    from ..answer.asker import Asker
    from .shared import IndexStore


PACE_STALE_S = 60.0  # an embedding run silent this long is taken to have stopped
FAST_BATCH = 512  # fast-tier vectors per write: a lookup and a mean each, so thousands a second


def _quiet(phase: str, done: int, total: int) -> None:
    pass


class Library:
    """A vault and its index; the composition root of its parts (see ``sunlib.library.shared``).

    Settings are frozen and ``settings`` cannot be reassigned: ``with_settings`` gives a
    new Library. Each part (connections, embedder, ask pipeline) is built once from the
    settings, on first use; a Library may be used from many threads at once.

    The API: ``open``, ``settings``, ``with_settings``, ``index``, ``embed``, ``reconcile``, ``search``,
    ``ask``, ``conversation``, ``notes``, ``status``, ``calibration``, ``calibrate``, ``close``.
    Plumbing, for sunlib's own layers and for plugins that need it, stable only within a release:
    ``stores``/``store`` (the index connections), ``write_lock``, ``indexer_lock``, ``freshness``,
    ``embedder``, ``space``, ``crosslang``, ``translator``, ``rescore``, ``asker``, ``release_thread``."""

    def __init__(self, vault: Path, settings: Settings, *, shared: Shared | None = None) -> None:
        self.vault = vault
        self._settings = settings
        try:
            configured = settings.index_dir.expanduser() if settings.index_dir is not None else None
        except RuntimeError:
            raise UserError(f"index_dir {settings.index_dir}: cannot expand '~' (no such user or home)") from None
        if shared is not None and configured is None:
            where = Location(shared.db_path.parent)  # with_settings: the same vault, already located
        else:
            where = locate(vault, configured)
        self.index_dir = where.path
        self.index_note = where.note  # one line for the user: the index moved out of the vault, or could not
        self.db_path = self.index_dir / DB_NAME
        self._shared = shared if shared is not None and shared.db_path == self.db_path else Shared(self.db_path)
        self._lock = threading.Lock()
        self._asker: Asker | None = None

    @classmethod
    def open(cls, vault: str | Path, config: str | Path | None = None, **overrides: Any) -> Library:
        try:
            root = Path(vault).expanduser()
        except RuntimeError:  # "~nouser/x": no such user, or no home folder to expand "~" to
            raise UserError(f"vault folder not found: {vault} (cannot expand '~': no such user or home)") from None
        if not root.is_dir():
            raise UserError(f"vault folder not found: {root}")
        root = root.resolve()
        settings = load_settings(root, Path(config) if config else None, **overrides)
        return cls(root, settings)

    @property
    def settings(self) -> Settings:
        return self._settings

    def with_settings(self, settings: Settings | None = None, **sections: dict[str, Any]) -> Library:
        """A Library over the same vault with other settings: a whole ``Settings``, or some
        section fields replaced (``answer={"reranker": "none"}``; None values are ignored).

        It shares this library's connections, write lock and every part whose settings are
        unchanged (a model loaded once stays loaded); the parts that depend on a changed
        setting are built anew. This library is left as it is."""
        changed = merge(settings or self._settings, **sections) if sections else settings or self._settings
        if changed == self._settings:
            return self
        derived = Library(self.vault, changed, shared=self._shared)
        derived.index_note = self.index_note
        return derived

    # -- parts ---------------------------------------------------------------------------

    @property
    def stores(self) -> ThreadStores:
        """The per-thread connections to the index (hand this to a part that outlives a thread)."""
        search = self._settings.search
        return self._shared.stores(search.dense_engine, self._settings.store, search.lexical_engine)

    @property
    def store(self) -> IndexStore:
        """The calling thread's own connection to the index."""
        return self.stores.current()

    @property
    def write_lock(self) -> threading.RLock:
        """Held by note writes, syncs and the text phase of indexing; never across a provider call."""
        return self._shared.write_lock

    @property
    def indexer_lock(self) -> IndexerLock:
        """One indexer per index across processes (``sunlib.store.lock``): held by ``index``,
        ``embed``, ``reconcile`` and the notes API's writes; refused on a read-only replica, before
        anything is written (a note file included)."""
        self._refuse_on_replica("write notes or index")
        self.stores.current()  # opening the index makes its folder, where the lock file goes
        return indexer_lock(self.db_path)

    @property
    def wanted(self) -> Wanted:
        """The chunks searches ranked while they waited for their vector; the backfill takes them first."""
        return self._shared.part(("wanted",), Wanted)

    @property
    def freshness(self) -> FreshRead:
        """What the read paths check their notes' files with (``sunlib.sync.freshness``), on the calling
        thread's connection; the verified-signature cache is shared per index file."""
        cache = self._shared.part(("freshness",), Freshness)
        replica = self._settings.store.replica
        return FreshRead(self.store, self.vault, self._settings.index, self.write_lock, cache, check=not replica)

    def _refuse_on_replica(self, verb: str) -> None:
        """Refuse an indexing verb on a read-only replica, before anything is opened or locked."""
        if self._settings.store.replica:
            raise StoreReadOnly(
                f"replicas do not {verb}: this index is a read-only replica ([store] replica = true) of the"
                f" Qdrant collections {self._settings.store.collection!r}; run `sunlib index` on the indexing host"
            )

    @property
    def embedder(self) -> Embedder:
        embedding = self._settings.embedding
        return self._shared.part(("embedder", embedding.model_dump_json()), lambda: create_embedder(embedding))

    @property
    def space(self) -> Space:
        return space_for(self.embedder, self._settings.index)

    @property
    def crosslang(self) -> tuple[Embedder, Space] | None:
        """The cross-language route's embedder and space (``[search] crosslang``); None when it is off."""
        s = self._settings
        key = (
            "crosslang",
            s.search.crosslang,
            s.search.crosslang_provider,
            s.embedding.model_dump_json(),
            s.index.model_dump_json(),
        )
        return self._shared.part(key, lambda: crosslang_space(s, self.embedder, self.space))

    @property
    def fast(self) -> tuple[Embedder, Space] | None:
        """The fast tier's embedder and space (``[embedding] fast_tier``); None when there is none."""
        s = self._settings
        key = ("fast", s.embedding.model_dump_json(), s.index.model_dump_json())
        return self._shared.part(key, lambda: fast_space(s, self.embedder))

    @property
    def translator(self) -> ChatModel | None:
        """The chat model that translates cross-language questions for BM25: the writer's LLM
        (``[answer] writer`` openai or llama-cpp, configured by ``[llm]``) when ``[search]
        crosslang_llm`` is "auto"; None otherwise. Created on first use, never called unless a
        question and some visible chunks are in different scripts."""
        s = self._settings
        if not s.search.crosslang or s.search.crosslang_llm == "off" or s.answer.writer not in chat_model_names():
            return None
        key = ("chat", s.answer.writer, s.llm.model_dump_json())
        return self._shared.part(key, lambda: create_chat_model(s.answer.writer, s.llm))

    @property
    def rescore(self) -> tuple[Embedder, Space] | None:
        """The fusion reranker's second embedder and its space (``answer.rescore_provider``), built once."""
        s = self._settings
        key = ("rescore", s.answer.rescore_provider, s.embedding.model_dump_json(), s.index.model_dump_json())
        return self._shared.part(key, lambda: rescore_space(s))

    def release_thread(self) -> None:
        """Close the calling thread's connections now (a worker thread going idle or ending)."""
        self._shared.release_thread()

    def close(self) -> None:
        """Close the calling thread's connections and those of threads that ended (for every
        library derived with ``with_settings``); using the library again reopens one. A live
        thread's connection closes when that thread releases it or ends."""
        self._shared.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- verbs ---------------------------------------------------------------------------

    def index(
        self,
        *,
        embed: bool | None = None,
        backfill: bool = True,
        progress: Progress | None = None,
        on_wait: OnWait | None = None,
    ) -> IndexReport:
        """Bring the index up to date with the vault: text first, then (optionally) vectors: the
        fast tier's, then the provider's and the second spaces' (``backfill=False``: the fast tier's
        only, the rest on a later run). Holds the indexer lock throughout; while another process
        holds it, waits (``on_wait`` is told once, with that process's pid). Vectors of every space
        are reconciled with the text, so what an earlier crash or race left out of step is repaired."""
        self._refuse_on_replica("index")
        store = self.store
        with self.indexer_lock.held(on_wait=on_wait):
            with self.write_lock:
                report = sync_text(store, self.vault, self.settings.index, progress or _quiet)
            if isinstance(store.lexical, DerivedLexical):  # an engine with derived data (postings) saves it now
                store.lexical.refresh()
            store.reconcile()
            if self.settings.index.embed if embed is None else embed:
                self._embed(report, progress, backfill)
            else:
                report.vectors_pending = store.vectors.count_pending(self.space)[0]
        return report

    def reconcile(self, on_wait: OnWait | None = None) -> list[Reconciled]:
        """Drop vectors out of step with the text in every space, and rewrite the postings when their
        files are not whole and current (``sunlib doctor --repair``)."""
        self._refuse_on_replica("reconcile")
        store = self.store
        with self.indexer_lock.held(on_wait=on_wait):
            done = store.reconcile()
            store.repair_postings()
            return done

    def embed(self, report: IndexReport | None = None, progress: Progress | None = None) -> IndexReport:
        """Embed every chunk without a vector: the active space, then the fusion reranker's, if any
        (under the indexer lock)."""
        self._refuse_on_replica("embed")
        with self.indexer_lock.held():
            return self._embed(report or IndexReport(), progress)

    def _embed(self, report: IndexReport, progress: Progress | None, backfill: bool = True) -> IndexReport:
        """Every space this library fills, in ``filled_spaces`` order: the fast tier first (every chunk
        searchable by meaning within minutes), then the provider's space, then the second spaces (the
        cross-language route's, the fusion reranker's). ``backfill=False``: the fast tier only."""
        batch = self.settings.embedding.batch_size
        workers = bulk_workers(self.settings.embedding.workers)  # the cores idle as the run starts
        nice = self.settings.embedding.bulk_nice
        for role, embedder, space in self.filled_spaces():
            if role == "fast":
                first = embed_pending(
                    self.store,
                    embedder,
                    space,
                    FAST_BATCH,
                    IndexReport(),
                    progress or _quiet,
                    active=False,
                    phase="fast",
                )
                report.fast_vectors = first.vectors_embedded + first.vectors_from_cache
                report.fast_seconds = first.embed_seconds
                if not backfill:
                    report.vectors_pending = self.store.vectors.count_pending(self.space)[0]
                    return report
            else:
                main = role == "main"
                urgent = self.wanted.drain if main else None  # chunks searched for while they waited
                embed_pending(
                    self.store,
                    embedder,
                    space,
                    batch,
                    report,
                    progress or _quiet,
                    active=main,
                    first=urgent,
                    workers=workers,
                    nice=nice,
                )
        return report

    def search(
        self,
        query: str,
        *,
        mode: str | None = None,
        filters: SearchFilters | None = None,
        principals: Sequence[str] | None = None,
        limit: int = 10,
        offset: int = 0,
        tracer: Tracer | None = None,
    ) -> SearchResult:
        mode = mode or self.settings.search.mode
        needs_vectors = mode in ("dense", "hybrid")
        crosslang = self.crosslang if mode == "hybrid" else None
        fast = self.fast if needs_vectors else None
        engine = SearchEngine(
            self.store,
            self.settings.search,
            self.space if needs_vectors else None,
            self.embedder.embed_query if needs_vectors else None,
            crosslang=(crosslang[1], crosslang[0].embed_query) if crosslang is not None else None,
            chat=self.translator if mode == "hybrid" else None,
            fast=(fast[1], fast[0].embed_query) if fast is not None else None,
        )
        request = SearchRequest(
            query=query,
            mode=mode,
            filters=filters or SearchFilters(),
            principals=tuple(principals if principals is not None else self.settings.search.principals),
            limit=limit,
            offset=offset,
        )
        # A note whose file changed on disk is re-indexed first and the search runs again, or the
        # note is left out (sunlib.sync.freshness). Each attempt traces privately; only the last one's
        # steps reach the caller's tracer, so no step of a discarded attempt is ever shown.
        result, withheld = fresh_read(
            self.freshness,
            lambda: engine.search(request, Tracer("search", run_id=tracer.run_id if tracer else None)),
            lambda r: [h.path for h in r.hits],
        )
        hits = tuple(h for h in result.hits if h.path not in withheld)
        if fast is not None:  # while a backfill runs, what searches show is embedded next
            self.wanted.add(h.chunk_id for h in hits)
        if tracer is not None:
            tracer.adopt(result.trace.steps, result.trace.warnings)
            return dataclasses.replace(result, hits=hits, trace=tracer.finish())
        return dataclasses.replace(result, hits=hits) if withheld else result

    @property
    def notes(self) -> Notes:
        """The notes service: list, read and safe writes under the ACL and the locks (``library.notes``)."""
        return Notes(self)

    @property
    def asker(self) -> Asker:
        """The ask pipeline (writer, reranker and router created once; the one place that builds it)."""
        with self._lock:
            if self._asker is None:
                self._asker = build_asker(self)
            return self._asker

    def ask(
        self,
        question: str,
        *,
        filters: SearchFilters | None = None,
        principals: Sequence[str] | None = None,
        listener: Listener | None = None,
        on_token: Callable[[str], None] | None = None,
        save: bool | None = None,
        history: Sequence[Turn] = (),
        agentic: bool | None = None,
        conversation_id: str | None = None,
        start_conversation: bool = True,
        owner: str = LOCAL_OWNER,
    ) -> AskResult:
        """A cited answer or a refusal with its reason; the run is saved in the index. ``history``:
        the conversation's earlier turns (an obvious follow-up is asked standalone). ``agentic``:
        True/False forces the agentic loop or the single shot; None follows ``[answer] mode``.

        ``owner``: who asks (``"local"``, this process, unless a server names its caller): the
        saved run and a new conversation are the owner's, and only the owner continues them.
        ``conversation_id``: a saved conversation of ``owner`` whose turns are the history;
        ``NotFound`` when it does not exist, is another owner's (an admin's too) or the principals
        may not read it, and then nothing is asked or written. A saved run becomes the
        conversation's next turn (a new conversation when none was given) and
        ``result.conversation_id`` names it. Nothing is stored, and ``conversation_id`` is None,
        when the run is not saved (``save=False``, ``[answer] save_runs = false``) or when the
        caller keeps the conversation itself (``history`` given, or ``start_conversation=False``:
        /v1 and the MCP tools)."""
        from ..answer.conversation import history_of, new_conversation_id

        who = tuple(principals if principals is not None else self.settings.search.principals)
        if conversation_id is not None:
            if history:
                raise UserError("give the earlier turns as history or as a conversation_id, not both")
            history = history_of(self.conversation(conversation_id, who, owner=owner))
        result = self.asker.ask(question, filters, who, listener, on_token, save, history, agentic, owner=owner)
        keep = self.settings.answer.save_runs if save is None else save
        if not keep or (conversation_id is None and (history or not start_conversation)):
            return result
        said = question.strip()
        standalone = result.frame.question if result.frame.question != said else None
        cid = conversation_id or new_conversation_id()
        self.store.add_turn(cid, result.run_id, said, standalone, time.time(), owner=owner)  # NotFound: not owner's
        return dataclasses.replace(result, conversation_id=cid)

    def conversation(
        self, conversation_id: str, principals: Sequence[str] | None = None, *, owner: str | None = LOCAL_OWNER
    ) -> ConversationRecord:
        """A saved conversation of ``owner`` (None: of any owner, an admin's read) with its turns in
        order. ``NotFound`` when it does not exist, is another owner's or one of its runs is not
        readable by the principals (they all look the same)."""
        who = tuple(principals if principals is not None else self.settings.search.principals)
        found = self.store.get_conversation(conversation_id, who, owner=owner)
        if found is None:
            raise NotFound(f"no conversation {conversation_id!r} that you may read")
        return found

    def calibrate(
        self,
        *,
        probes: int | None = None,
        seed: int = 0,
        store: bool = True,
        on_probe: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Self-calibrate the refusal gate on probe questions written from this vault (no labels):
        the learned gate's threshold for this vault, stored in the index (``store``) for the
        active embedding space. See ``sunlib.library.calibration``; returns its report."""
        from .calibration import DEFAULT_PROBES, self_calibrate

        return self_calibrate(self, DEFAULT_PROBES if probes is None else probes, seed, store, on_probe)

    def calibration(self) -> Calibration:
        """Which threshold the learned gate uses here and why: ``state`` is ``settings``,
        ``calibrated``, ``stale`` (made with other scorer parameters: run ``sunlib calibrate``
        again), ``uncalibrated`` or ``off`` (the score gate, or no scorer parameters)."""
        from ..answer.gate.gate import calibration_applies, learned_threshold, selfcal_key
        from ..answer.gate.scorer import load_params

        answer = self.settings.answer
        space = self.space.name if self.settings.search.mode != "bm25" else None
        params = load_params()
        if answer.gate != "learned" or params is None:
            return Calibration("off", selfcal_key(space), gate=answer.gate)
        threshold, source, stored = learned_threshold(answer, self.store, space, params)
        state: CalibrationState
        if answer.answerable_threshold is not None:
            state = "settings"
        elif stored is None:
            state = "uncalibrated"
        else:
            state = "calibrated" if calibration_applies(stored, answer, params) else "stale"
        return Calibration(
            state,
            selfcal_key(space),
            threshold=threshold,
            shipped_threshold=params.threshold,
            source=source,
            stored=stored,
        )

    def _where(self) -> str:
        """Where the index is: its SQLite file, or for a replica the Qdrant collections it reads."""
        store = self._settings.store
        if store.replica:
            at = store.url or store.path or str(self.index_dir / "qdrant")
            return f"read-only replica of the Qdrant collections {store.collection!r} at {at}"
        return str(self.db_path)

    def status(self) -> Status:
        """Where the index is, what it holds, its vector spaces and the gate's threshold (``as_dict()``: the JSON)."""
        store = self.store
        active = self.space
        pending, total = store.vectors.count_pending(active)
        return Status(
            vault=str(self.vault),
            index=self._where(),
            counts=store.counts(),
            chunker=store.get_meta("chunker"),
            active_space=active.name,
            vectors_pending=pending,
            vectors_total=total - pending,
            spaces=tuple(store.vectors.spaces()),
            text_indexed_at=store.get_meta("text_indexed_at"),
            calibration=self.calibration(),
            embedding=self._embedding_progress(),
        )

    def filled_spaces(self) -> list[tuple[SpaceRole, Embedder, Space]]:
        """(role, embedder, space) of each vector space indexing fills, in its order: ``fast``, ``main``
        (the active space), ``crosslang``, ``rescore``; a space two roles share is listed once."""
        tiers: list[tuple[SpaceRole, Embedder, Space]] = []
        if self.fast is not None:
            tiers.append(("fast", *self.fast))
        tiers.append(("main", self.embedder, self.space))
        for role, second in (("crosslang", self.crosslang), ("rescore", self.rescore)):
            if second is not None and all(second[1].name != sp.name for _, _, sp in tiers):
                tiers.append((role, *second))  # type: ignore[arg-type]
        return tiers

    def _embedding_progress(self) -> tuple[Embedding, ...]:
        """Each space this library fills: how far it is, and while a run embeds it, its pace and ETA."""
        store = self.store
        out = []
        now = time.time()
        for role, _, space in self.filled_spaces():
            pending, total = store.vectors.count_pending(space)
            pace = pace_of(store, space) or {}
            rate = pace.get("rate")
            updated = pace.get("updated")
            # a run that wrote nothing for a while is gone (stopped, or killed mid-batch)
            running = bool(pace.get("running")) and isinstance(updated, float) and now - updated < PACE_STALE_S
            speed = float(rate) if isinstance(rate, (int, float)) and rate > 0 else None
            eta = round(pending / speed, 1) if running and speed and pending else None
            out.append(Embedding(role, space.name, total - pending, total, running and pending > 0, speed, eta))
        return tuple(out)


def preload_reader(settings: Settings) -> None:
    """Start loading the reader in the background: the first question's retrieval runs meanwhile, and
    selection waits for it (``create_reader`` loads once under a lock). A failure is not lost: the
    selection's own call loads again and raises it there."""

    def load() -> None:
        with contextlib.suppress(Exception):
            create_reader(settings.answer)

    if settings.answer.reader != "none":
        threading.Thread(target=load, name="sunlib-reader-load", daemon=True).start()


def build_asker(library: Library, writer: Writer | None = None, reranker: Reranker | None = None) -> Asker:
    """The ask pipeline of a library: its settings, its search as the retrieval seam, its store,
    and providers created from its settings (the LLM router and the answerability judge when the
    writer is an LLM; the judge also with ``[answer] judge = "llm"``)."""
    from ..answer.asker import Asker  # the answer stages load with the first question, not with the library
    from ..answer.single.judge import create_judge
    from ..answer.single.router import create_router

    settings = library.settings
    # The Asker outlives any one request thread: it reads through the library's per-thread
    # stores, whose attributes are those of the calling thread's own connection.
    store = cast(Store, library.stores)
    writer = writer or create_writer(settings)
    reranker = reranker if reranker is not None else create_reranker(settings.answer)
    if reranker is not None:
        reranker.bind(store, settings, library.rescore)
    router = create_router(settings.answer.router, writer)
    judge, judge_off = create_judge(settings, writer)
    preload_reader(settings)
    return Asker(
        settings,
        library.search,
        store,
        writer,
        reranker,
        router,
        lambda: library.space.name,
        sentence_model(settings),  # a loader; the gate and the writer share it
        judge,
        judge_off,
        lambda: create_reader(settings.answer),  # loaded on the first question (a search never loads it)
        # translated pages are told apart by e5's cosine (its threshold is e5's); another provider keeps both
        (lambda ids: store.vectors.vectors_for(library.space, ids)) if settings.embedding.provider == "e5" else None,
    )
