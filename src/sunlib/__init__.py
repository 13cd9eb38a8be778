"""sunlib: a local-first knowledge library over Markdown notes (English and Chinese)."""

from .config import Settings, load_settings
from .contracts import Chunk, Citation, Hit, Note, RunTrace, SearchFilters, SearchResult, StepTrace
from .errors import SunlibError
from .library import Library
from .version import __version__

__all__ = [
    "Chunk",
    "Citation",
    "Hit",
    "Library",
    "Note",
    "RunTrace",
    "SearchFilters",
    "SearchResult",
    "Settings",
    "StepTrace",
    "SunlibError",
    "__version__",
    "load_settings",
]
