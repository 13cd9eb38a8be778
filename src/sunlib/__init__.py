"""sunlib: a local-first knowledge library over Markdown notes (English and Chinese).

The public API: ``Library`` (open a vault, index, search, ask, ``notes``), its settings, the records
its calls return and the errors they raise. Everything else is internal and may change.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    BadPath,
    ConfigError,
    Conflict,
    IndexUnusable,
    InvalidNote,
    NotFound,
    ProviderError,
    StoreError,
    SunlibError,
    UserError,
    VaultError,
)
from .version import __version__

if TYPE_CHECKING:
    from .answer.result import AskResult
    from .config import Settings, load_settings
    from .contracts import (
        AnswerFrame,
        Chunk,
        Citation,
        Hit,
        Note,
        Refusal,
        RunTrace,
        SearchFilters,
        SearchResult,
        StepTrace,
    )
    from .library import Library
    from .library.notes import NotePage, Notes, NoteView, NoteWrite
    from .library.records import Calibration, Status
    from .sync.indexing import IndexReport

# The rest of the public API is imported on first use (PEP 562): ``import sunlib.cli`` for one
# verb must not import every stage of the pipeline first (a cold start pays for what it runs).
_LAZY = {
    "AskResult": "answer.result",
    "Settings": "config",
    "load_settings": "config",
    "AnswerFrame": "contracts",
    "Chunk": "contracts",
    "Citation": "contracts",
    "Hit": "contracts",
    "Note": "contracts",
    "Refusal": "contracts",
    "RunTrace": "contracts",
    "SearchFilters": "contracts",
    "SearchResult": "contracts",
    "StepTrace": "contracts",
    "Library": "library",
    "NotePage": "library.notes",
    "Notes": "library.notes",
    "NoteView": "library.notes",
    "NoteWrite": "library.notes",
    "Calibration": "library.records",
    "Status": "library.records",
    "IndexReport": "sync.indexing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "AnswerFrame",
    "AskResult",
    "BadPath",
    "Calibration",
    "Chunk",
    "Citation",
    "ConfigError",
    "Conflict",
    "Hit",
    "IndexReport",
    "IndexUnusable",
    "InvalidNote",
    "Library",
    "NotFound",
    "Note",
    "NotePage",
    "NoteView",
    "NoteWrite",
    "Notes",
    "ProviderError",
    "Refusal",
    "RunTrace",
    "SearchFilters",
    "SearchResult",
    "Settings",
    "Status",
    "StepTrace",
    "StoreError",
    "SunlibError",
    "UserError",
    "VaultError",
    "__version__",
    "load_settings",
]
