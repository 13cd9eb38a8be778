"""What ``Library.status()`` and ``Library.calibration()`` return: frozen records, with ``as_dict()``
for the JSON that ``sunlib status --json`` prints and ``/api/index/status`` serves."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..store import Counts, SpaceInfo

CalibrationState = Literal["off", "settings", "calibrated", "stale", "uncalibrated"]
SpaceRole = Literal["fast", "main", "crosslang", "rescore"]


@dataclass(frozen=True)
class Calibration:
    """Which threshold the learned gate uses here and why. ``state``: ``settings`` (an explicit
    threshold), ``calibrated`` (this vault's own, stored in the index), ``stale`` (stored with other
    scorer parameters), ``uncalibrated`` (the shipped one), or ``off`` (another gate: ``gate`` names it)."""

    state: CalibrationState
    key: str  # the index meta key of this embedding space's calibration
    gate: str | None = None  # set when state is "off"
    threshold: float | None = None
    shipped_threshold: float | None = None
    source: str | None = None
    stored: Mapping[str, Any] | None = None  # what `sunlib calibrate` stored, if anything

    def as_dict(self) -> dict[str, Any]:
        if self.state == "off":
            return {"state": self.state, "key": self.key, "gate": self.gate}
        return {
            "state": self.state,
            "key": self.key,
            "threshold": self.threshold,
            "shipped_threshold": self.shipped_threshold,
            "source": self.source,
            "stored": None if self.stored is None else dict(self.stored),
        }


@dataclass(frozen=True)
class Embedding:
    """One vector space this library fills, in the order indexing fills them: ``fast`` (the fast
    tier, first), ``main`` (the provider's, the active space), ``crosslang`` and ``rescore``. While
    a run embeds it, ``running`` is true and ``rate`` (chunks a second) and ``eta_s`` say how long
    the rest will take; ``rate`` stays the last run's after it ends."""

    role: SpaceRole
    space: str
    embedded: int
    total: int
    running: bool = False
    rate: float | None = None
    eta_s: float | None = None

    @property
    def pending(self) -> int:
        return self.total - self.embedded


@dataclass(frozen=True)
class Status:
    """The index as it stands: where it is, what it holds, its vector spaces and the gate's threshold."""

    vault: str
    index: str  # the SQLite file, or the Qdrant collections a replica reads
    counts: Counts
    chunker: str | None
    active_space: str
    vectors_pending: int  # chunks of the active space still without a vector
    vectors_total: int  # chunks of the active space with one
    spaces: tuple[SpaceInfo, ...]
    text_indexed_at: str | None
    calibration: Calibration
    embedding: tuple[Embedding, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "vault": self.vault,
            "index": self.index,
            "counts": dataclasses.asdict(self.counts),
            "chunker": self.chunker,
            "active_space": self.active_space,
            "vectors_pending": self.vectors_pending,
            "vectors_total": self.vectors_total,
            "spaces": [dataclasses.asdict(s) for s in self.spaces],
            "text_indexed_at": self.text_indexed_at,
            "calibration": self.calibration.as_dict(),
            "embedding": [{**dataclasses.asdict(e), "pending": e.pending} for e in self.embedding],
        }
