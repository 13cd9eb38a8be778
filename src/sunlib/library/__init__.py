"""The library: a vault and its index, the composition root of every part (``core.Library``), with
what it shares between the libraries derived from it (``shared``) and its per-vault gate
calibration (``calibration``, ``probes``)."""

from .core import Library, build_asker
from .location import DB_NAME, has_index, home_index_dir

__all__ = ["DB_NAME", "Library", "build_asker", "has_index", "home_index_dir"]
