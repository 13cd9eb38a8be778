"""The ``sunlib`` command line: one module per verb group, errors as one line + exit code.

The verb modules import what ``--help`` and the reading verbs need; the server (FastAPI,
uvicorn) is imported by ``sunlib serve`` only, when it runs. A verb's module is imported alone
when the command line names it (``sunlib search`` never imports the evaluation or admin verbs:
part of a cold start); anything else (``--help``, a typo) imports them all.
"""

from __future__ import annotations

import _thread
import gc
import importlib
import os
import signal
import sys
import threading
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
    keep_lost_interrupts()
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
        if _Interrupts.seen or _interrupted(exc):  # a library wrapped the Ctrl-C in an error of its own
            print(INTERRUPTED, file=sys.stderr)
            sys.exit(EXIT_INTERRUPTED)
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


class _Interrupts:
    """Whether a Ctrl-C reached this process. Libraries wrap an interrupt that lands inside them in
    errors of their own, at times as text only (pydantic building a schema, Python making a class);
    with this a command still ends as interrupted, with its message and status 130."""

    seen = False

    @classmethod
    def handler(cls, signum: int, frame: object) -> None:
        cls.seen = True
        raise KeyboardInterrupt


def keep_lost_interrupts() -> None:
    """Note every Ctrl-C (``_Interrupts``), and raise again one that Python dropped: an exception
    raised in a callback Python runs for its own housekeeping (a weakref callback, a ``__del__``) is
    printed as "Exception ignored in ..." and lost, and the command would run on."""
    _Interrupts.seen = False
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not if ignored
        signal.signal(signal.SIGINT, _Interrupts.handler)
    default = sys.unraisablehook

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # as if the signal came again a moment later: raised in this hook, it would be lost again
            again = threading.Timer(0.005, _thread.interrupt_main)
            again.daemon = True
            again.start()
        else:
            default(unraisable)

    if getattr(default, "__qualname__", "") != hook.__qualname__:  # main() may run twice in one process
        sys.unraisablehook = hook


def run() -> NoReturn:
    """The ``sunlib`` program (the console script, ``python -m sunlib``): ``main`` on ``sys.argv``,
    then for a ``FAST_EXIT`` verb the process ends at once with ``main``'s exit status.

    An interrupted command ends with status 130 through ``os._exit`` too: a Ctrl-C that Python saw
    unhandled anywhere (inside an import, say) makes the interpreter end by SIGINT instead, whatever
    the status, and a shell or a supervisor then reads neither 130 nor the message as one event."""
    args = sys.argv[1:]
    if not args or args[0] not in FAST_EXIT:
        try:
            main(args)
        except SystemExit as exc:
            if exc.code != EXIT_INTERRUPTED:
                raise
            _flushed_exit(EXIT_INTERRUPTED)
    if not any(name in os.environ for name in BLAS_THREADS):  # read when numpy loads, after this
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    mark_short_lived()
    gc.disable()
    status = 0  # main always ends in SystemExit; this only keeps the name bound
    try:
        main(args)
    except SystemExit as exc:
        status = _status(exc.code)
    _flushed_exit(status)


def _flushed_exit(status: int) -> NoReturn:
    """End the process now with ``status``, once stdout and stderr are written."""
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
    """Whether a KeyboardInterrupt is behind this exception (typer raises its Exit(130) from it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
