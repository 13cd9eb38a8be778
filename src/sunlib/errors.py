"""sunlib's exceptions.

One root, a short tree. Each surface converts them once: the CLI prints one
line and exits non-zero, the HTTP server answers ``{error, message}``.

    SunlibError
    ├── UserError            the caller's mistake: bad option, bad path, bad query filter
    │   ├── NotFound         no such thing the caller may read (a conversation id); HTTP 404
    │   ├── ConfigError      an invalid setting in sunlib.toml or SUNLIB_* env
    │   │   └── UnsupportedCapability  a chat model was asked for JSON mode or tools it lacks
    │   ├── StoreReadOnly    a write (a note, an index run) asked of a read-only replica; HTTP 409
    │   ├── BadPath          a note path the notes service will not write (it says why); HTTP 400
    │   ├── Conflict         a note path is taken, or the note changed on disk and cannot be read; HTTP 409
    │   ├── InvalidNote      a note's new text would not index (frontmatter, ACL, NUL bytes); HTTP 422
    │   └── MissingExtra     a command needs an optional part not installed (`pip install 'sunlib[serve]'`)
    ├── VaultError           a note file could not be written (nothing changed); HTTP 500
    │   └── VaultFull        the disk holding the vault is full; HTTP 507
    ├── IndexUnusable        the index is missing, from a newer version, or unusable
    │   └── StoreError       the store failed underneath (raised at the store boundary only)
    │       ├── StoreFull    the disk or the database file is full (HTTP 507)
    │       ├── StoreBusy    another writer held the index past the busy timeout (HTTP 503)
    │       │   └── IndexerBusy  another process's indexer held the indexer lock too long
    │       └── StoreCorrupt the index file is damaged; `sunlib doctor` says how (HTTP 503)
    ├── ProviderError        an embedding/LLM provider failed (network, bad answer)
    │   ├── MissingCredentials  a provider needs a key that is not set
    │   └── ModelFileError   a shipped model file is missing or damaged (names the file and the fix)
    └── DatasetError         an evaluation dataset is missing files or malformed
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class SunlibError(Exception):
    """Root of every error sunlib raises on purpose."""

    code = "sunlib_error"


class UserError(SunlibError):
    code = "bad_request"


class NotFound(UserError):
    """Missing and not readable by the caller look the same (never a 403, never a count)."""

    code = "not_found"


class ConfigError(UserError):
    code = "bad_config"


class UnsupportedCapability(ConfigError):
    code = "unsupported_capability"


class StoreReadOnly(UserError):
    """A note write or an index run asked of a read-only replica (``[store] replica = true``)."""

    code = "read_only"


class IndexUnusable(SunlibError):
    code = "index_error"


class StoreError(IndexUnusable):
    """A backend failure, converted once at the store boundary (backends' own errors never leak)."""

    code = "store_error"


class StoreFull(StoreError):
    code = "store_full"


class StoreBusy(StoreError):
    code = "store_busy"


class IndexerBusy(StoreBusy):
    code = "indexer_busy"


class StoreCorrupt(StoreError):
    code = "store_corrupt"


class BadPath(UserError, ValueError):
    """A note path that will not be written: the message says why."""

    code = "bad_path"


class Conflict(UserError):
    """The target name is taken (a note, a folder, a file where a folder is needed, an orphan
    sidecar), or the note changed on disk in a way that cannot be indexed."""

    code = "conflict"


class InvalidNote(UserError):
    """A note's new text would not index as it stands."""

    code = "invalid_note"


class MissingExtra(UserError):
    """A command needs one of sunlib's optional parts (``serve``, ``mcp``, ``eval``), not installed."""

    code = "missing_extra"


EXTRAS = {
    "serve": ("fastapi", "uvicorn", "sse_starlette", "starlette"),
    "mcp": ("mcp", "anyio", "fastapi", "uvicorn", "sse_starlette", "starlette"),
    "eval": ("plotly",),
}


@contextmanager
def needs_extra(extra: str, what: str) -> Iterator[None]:
    """Imports inside the block that fail for a module of ``extra`` become one ``MissingExtra``
    naming the install command; any other import error passes through as it is."""
    try:
        yield
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in EXTRAS[extra]:
            raise
        raise MissingExtra(
            f"{what} needs sunlib's {extra} extra ({missing} is not installed): pip install 'sunlib[{extra}]'"
        ) from None


class VaultError(SunlibError):
    """A note file could not be written; nothing changed."""

    code = "write_failed"


class VaultFull(VaultError):
    code = "vault_full"


class ProviderError(SunlibError):
    code = "provider_error"


class MissingCredentials(ProviderError):
    code = "missing_credentials"


class ModelFileError(ProviderError):
    """A model file that sunlib ships or was pointed at is missing, damaged or of another version."""

    code = "model_file"


class DatasetError(UserError):
    code = "bad_dataset"
