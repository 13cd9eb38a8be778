"""The ``sunlib`` command line: one module per verb group, errors as one line + exit code.

The verb modules import what ``--help`` and the reading verbs need; the server (FastAPI,
uvicorn) is imported by ``sunlib serve`` only, when it runs. A verb's module is imported alone
when the command line names it (``sunlib search`` never imports the evaluation or admin verbs:
part of a cold start); anything else (``--help``, a typo) imports them all.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..errors import SunlibError
from ..process import mark_short_lived
from .app import app

MODULES = ("admin", "ask", "calibrate", "chat", "evaluate", "index", "mcp", "migrate", "search", "serve")
VERBS = {  # verb -> the module that registers it (tests/unit/cli/test_cli.py checks it against the app)
    "init": "admin",
    "status": "admin",
    "doctor": "admin",
    "ask": "ask",
    "runs": "ask",
    "calibrate": "calibrate",
    "chat": "chat",
    "eval": "evaluate",
    "index": "index",
    "mcp": "mcp",
    "migrate": "migrate",
    "search": "search",
    "serve": "serve",
}


def load_verbs(argv: Sequence[str] | None = None) -> None:
    """Register the verb that ``argv`` names, or every verb when it names none we know."""
    first = argv[0] if argv else None
    for name in (VERBS[first],) if first in VERBS else MODULES:
        importlib.import_module(f"{__name__}.{name}")


EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
INTERRUPTED = "interrupted: committed work is kept; run the command again to finish"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); always ends in ``SystemExit``."""
    args = list(argv) if argv is not None else sys.argv[1:]
    try:
        load_verbs(args)
        app(args=args)
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


# The verbs whose process ends as soon as its output is written: ``run`` turns the cyclic GC off
# while they run (it scanned every object the imports made, about 40 ms; a search or an ask leaves
# a few MB of cycles) and ends the process with ``os._exit`` once stdout and stderr are flushed, so
# the interpreter does not free every module's objects one by one (60 to 100 ms). They write
# nothing after their output (an ask's run is saved and the index closed before it prints); every
# other verb (an index run, a server) ends as usual.
FAST_EXIT = frozenset({"search", "ask"})
# ... and they run numpy's BLAS on one thread unless the caller chose a count: one question's
# matrices are small, and starting OpenBLAS's pool of threads cost more than it saved (30 to 60 ms
# of a cold search on two cores). The models run one thread each by default ([embedding] threads),
# and e5's onnxruntime session opens without pre-packing its weights (``sunlib.process``).
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def run() -> NoReturn:
    """The ``sunlib`` program (the console script, ``python -m sunlib``): ``main`` on ``sys.argv``,
    then for a ``FAST_EXIT`` verb the process ends at once with ``main``'s exit status."""
    args = sys.argv[1:]
    if not args or args[0] not in FAST_EXIT:
        main(args)
    if not any(name in os.environ for name in BLAS_THREADS):  # read when numpy loads, after this
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    mark_short_lived()
    gc.disable()
    status = 0  # main always ends in SystemExit; this only keeps the name bound
    try:
        main(args)
    except SystemExit as exc:
        status = _status(exc.code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # a closed pipe (``sunlib search x | head -1``): the interpreter reports it as ever
        gc.enable()
        raise SystemExit(status) from None
    os._exit(status)


def _status(code: object) -> int:
    """The exit status Python gives ``SystemExit(code)`` (a message is printed, with status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is behind this exit (typer raises its Exit(130) from it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
