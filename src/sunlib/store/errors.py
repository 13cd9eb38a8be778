"""Backend errors become sunlib errors here, once, at the store boundary.

    apsw.FullError                      -> StoreFull     (disk or database full)
    apsw.BusyError (after the timeout)  -> StoreBusy     (another writer held the index)
    apsw.CorruptError, apsw.NotADBError -> StoreCorrupt  (a damaged file)

Nothing above ``sunlib.store`` catches or imports apsw.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import apsw

from ..errors import StoreBusy, StoreCorrupt, StoreFull

T = TypeVar("T")

FULL = (
    "the disk holding the index is full; everything committed before is kept: free some space and run the command again"
)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Run a block, turning apsw's storage failures into StoreFull, StoreBusy or StoreCorrupt."""
    try:
        yield
    except apsw.FullError:
        raise StoreFull(FULL) from None
    except apsw.BusyError as exc:
        raise StoreBusy(f"the index is busy: another process held it too long ({exc}); try again") from None
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        raise StoreCorrupt(f"the index file is damaged ({exc}); run `sunlib doctor` for details") from None


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with translated():
            return fn(*args, **kwargs)

    return call


def at_boundary(cls: type[T]) -> type[T]:
    """Class decorator: every public method of a backend class raises sunlib errors only.
    (Methods returning context managers or generators translate inside themselves.)"""
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        if inspect.isgeneratorfunction(member) or getattr(member, "__wrapped__", None) is not None:
            continue
        setattr(cls, name, _wrap(member))
    return cls
