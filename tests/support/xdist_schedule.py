"""How ``make test`` spreads the suite over pytest-xdist workers (``-n 2 --dist loadfile``).

Every file runs whole on one worker, so its module-scoped fixtures (a browser, a live server,
a model) are set up once. The files that use the session's ``e5_library`` form one unit, so the
e5 index (the suite's slowest fixture) is built once per run, not once per worker. Units start
longest first (their seconds at the last run, kept in pytest's cache; by test count before any
run), so no long file starts last while the other worker idles.

pytest-xdist's own ``--dist loadgroup`` cannot do this here: it renames node ids through an
attribute that pytest 9 no longer reads, so its groups are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

E5_UNIT = "e5"
CACHE_KEY = "sunlib/seconds_per_unit"
SECONDS_PER_UNKNOWN_TEST = 0.3


def e5_files(tests_dir: Path) -> frozenset[str]:
    """Test files (as node id prefixes, ``tests/unit/answer/test_x.py``) that use the ``e5_library`` fixture."""
    root = tests_dir.parent
    return frozenset(
        p.relative_to(root).as_posix()
        for p in tests_dir.rglob("test_*.py")
        if "e5_library" in p.read_text(encoding="utf-8")
    )


def unit_of(nodeid: str, e5: frozenset[str]) -> str:
    """The scheduling unit of a test: ``e5`` for a file that uses the e5 index, else its file."""
    file = nodeid.split("::", 1)[0]
    return E5_UNIT if file in e5 else file


def longest_first(units: dict[str, dict[str, bool]], seconds: dict[str, float]) -> list[str]:
    """Units by expected duration, longest first: the last run's seconds, else a guess from the
    number of tests (the ``e5`` unit, which builds a model index, counts as longest)."""

    def expected(unit: str) -> float:
        if unit in seconds:
            return seconds[unit]
        guess = len(units[unit]) * SECONDS_PER_UNKNOWN_TEST
        return guess + (1e6 if unit == E5_UNIT and not seconds else 0.0)

    return sorted(units, key=expected, reverse=True)


def make_scheduler(config: Any, log: Any, tests_dir: Path) -> Any:
    """A ``LoadFileScheduling`` whose units are ``unit_of`` and that starts the longest first."""
    from xdist.scheduler import LoadFileScheduling

    e5 = e5_files(tests_dir)
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    seconds: dict[str, float] = cache.get(CACHE_KEY, {}) if cache is not None else {}

    class UnitScheduling(LoadFileScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid, e5)

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:  # the work queue is complete before the first unit goes out
                self._ordered = True
                for unit in longest_first(self.workqueue, seconds):
                    self.workqueue.move_to_end(unit)
            super()._assign_work_unit(node)

    return UnitScheduling(config, log)


class UnitTimer:
    """Adds up each unit's seconds (setup, call, teardown of its tests) on the controller and
    stores them in pytest's cache at the end, for the next run's ordering."""

    def __init__(self, tests_dir: Path) -> None:
        e5 = e5_files(tests_dir)
        self._unit: Callable[[str], str] = lambda nodeid: unit_of(nodeid, e5)
        self.seconds: dict[str, float] = {}

    def add(self, nodeid: str, duration: float) -> None:
        unit = self._unit(nodeid)
        self.seconds[unit] = self.seconds.get(unit, 0.0) + duration

    def store(self, cache: Any) -> None:
        if cache is None or not self.seconds:
            return
        known: dict[str, float] = dict(cache.get(CACHE_KEY, {}))
        known.update({unit: round(s, 1) for unit, s in self.seconds.items()})
        cache.set(CACHE_KEY, known)
