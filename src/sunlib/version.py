"""sunlib's version, in the kernel so any layer may report it."""

__version__ = "0.1.0"
