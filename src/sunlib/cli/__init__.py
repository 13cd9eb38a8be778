"""The ``sunlib`` command line: one module per verb group, errors as one line + exit code.

The verb modules import what ``--help`` and the reading verbs need; the server (FastAPI,
uvicorn) is imported by ``sunlib serve`` only, when it runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import apsw

from ..errors import StoreBusy, StoreCorrupt, StoreError, StoreFull, SunlibError
from . import admin, ask, evaluate, index, search, serve  # noqa: F401 - registers the verbs
from .app import app

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130

DISK_FULL = (
    "the disk holding the index is full; everything committed before is kept: free some space and run the command again"
)


def store_error_line(exc: StoreError) -> str:
    """The one line a store failure prints: what happened and what to do about it."""
    if isinstance(exc, StoreFull):
        return f"error: {DISK_FULL} ({exc})"
    if isinstance(exc, StoreBusy):
        return f"error: the index is busy: {exc}; wait for the other writer to finish and run the command again"
    if isinstance(exc, StoreCorrupt):
        return f"error: the index is damaged: {exc}; run `sunlib doctor` to check it"
    return f"error: {exc}"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); always ends in ``SystemExit``."""
    try:
        app(args=list(argv) if argv is not None else None)
    except StoreError as exc:
        print(store_error_line(exc), file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except SunlibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except apsw.FullError:  # until every write converts it to StoreFull at the store boundary
        print(f"error: {DISK_FULL}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        print("interrupted: committed work is kept; run the command again to finish", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # a bug: still one line unless asked for the traceback
        if os.environ.get("SUNLIB_DEBUG"):
            raise
        print(
            f"error: internal error ({type(exc).__name__}: {exc}); set SUNLIB_DEBUG=1 for details",
            file=sys.stderr,
        )
        sys.exit(EXIT_ERROR)
