"""sunlib: a local-first knowledge library over Markdown notes (English and Chinese).

The public API: ``Library`` (open a vault, index, search, ask, ``notes``), its settings, the records
its calls return and the errors they raise. Everything else is internal and may change.
"""

from .answer import AskResult
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
from .library import Library
from .library.notes import NotePage, Notes, NoteView, NoteWrite
from .library.records import Calibration, Status
from .sync.indexing import IndexReport
from .version import __version__

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
