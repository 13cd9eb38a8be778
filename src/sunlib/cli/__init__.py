"""The ``sunlib`` command line: one module per verb group, errors as one line + exit code."""

from __future__ import annotations

import os
import sys

from ..errors import StoreFull, SunlibError
from . import admin, ask, evaluate, index, search, serve  # noqa: F401 - registers the verbs
from .app import app

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


def main() -> None:
    try:
        app()
    except StoreFull as exc:  # raised at the store boundary; says what is kept and what to do
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except SunlibError as exc:
        print(f"error: {exc}", file=sys.stderr)
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
