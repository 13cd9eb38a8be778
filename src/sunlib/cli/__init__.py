"""The ``sunlib`` command line: one module per verb group, errors as one line + exit code.

The verb modules import what ``--help`` and the reading verbs need; the server (FastAPI,
uvicorn) is imported by ``sunlib serve`` only, when it runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..errors import SunlibError
from . import admin, ask, calibrate, chat, evaluate, index, mcp, migrate, search, serve  # noqa: F401 - registers the verbs
from .app import app

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
INTERRUPTED = "interrupted: committed work is kept; run the command again to finish"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); always ends in ``SystemExit``."""
    try:
        app(args=list(argv) if argv is not None else None)
    except SystemExit as exc:
        if _interrupted(exc):  # typer turns Ctrl-C into a plain exit 130: say what was kept
            print(INTERRUPTED, file=sys.stderr)
        raise
    except SunlibError as exc:  # StoreFull, StoreBusy, StoreCorrupt too: their messages say what to do
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # a bug: still one line unless asked for the traceback
        if os.environ.get("SUNLIB_DEBUG"):
            raise
        print(
            f"error: internal error ({type(exc).__name__}: {exc}); set SUNLIB_DEBUG=1 for details",
            file=sys.stderr,
        )
        sys.exit(EXIT_ERROR)


def _interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is behind this exit (typer raises its Exit(130) from it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
