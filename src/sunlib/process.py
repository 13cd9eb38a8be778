"""What kind of process this is, as the program's entry point knows it before anything loads.

``cli.run`` marks the verbs that answer one query and end (``sunlib search``, ``sunlib ask``) as
short-lived. Models read it when they open: such a process is faster with a session that opens at
once than with one that opens slowly and then runs many inputs faster (``e5_onnx``). It changes
no result beyond float rounding. Nothing else reads it; a library user's process is long-lived.
"""

from __future__ import annotations

_short_lived = False


def mark_short_lived() -> None:
    """This process embeds and reads little and then ends."""
    global _short_lived
    _short_lived = True


def short_lived() -> bool:
    return _short_lived
