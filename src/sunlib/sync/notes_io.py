"""Writing notes into the vault: safe paths, atomic writes, moves that carry the sidecar.

Paths (``check_path``) are vault-relative POSIX paths, given as plain text. Rejected with
``BadPath`` (the API answers 400 ``bad_path``):

- empty, over 1024 characters, or a name over 255 bytes;
- absolute (``/x.md``), ``.`` or ``..`` components, empty components (``a//b.md``, ``a/``);
- a backslash or a colon anywhere: Windows separators and drive letters (``..\\x``,
  ``C:\\x``, ``C:x``) and NTFS streams (``x.md:s``) never reach the file system;
- percent-escapes: a path is taken literally and never URL-decoded, so a path that one
  round of decoding would change (``%2e%2e%2f``, ``%252e``, ``%41``) is refused rather than
  guessed at; a lone ``%`` that starts no escape (``100% done.md``) is an ordinary character;
- NUL and other control characters;
- hidden or tool folders and files: any name starting with ``.`` (``.sunlib``, ``.obsidian``,
  ``.git``), and ``node_modules`` / ``__pycache__`` (the vault walk skips them all);
- names with leading or trailing spaces or a trailing dot (Windows would alias them);
- characters that make a path look like another one: bidirectional controls (U+202E and the other
  embeddings, overrides and isolates), zero-width characters, and dot look-alikes (one-dot leader
  ``․``, full-width ``．``, and others), which a reader takes for ``.`` or ``..``;
- Windows device names (``CON``, ``NUL``, ``COM1``... with or without an extension);
- a file name that does not end with ``.md`` exactly (``x.MD`` is refused: the vault walk and
  every tool would see a second, differently cased kind of note);
- on disk: any existing component that is a symbolic link (folder or file), so a write can
  never leave the vault, and a note file that is a link cannot be written through.

On POSIX the folders are opened one by one from the vault's real path with ``O_NOFOLLOW``
and every operation is relative to those descriptors (``dir_fd``), so swapping a folder for
a link after the check cannot redirect a write. Where ``dir_fd`` is missing (Windows) the
same checks run on paths, with ``lstat`` before each step.

Writes are atomic: the text goes to a hidden temp file (``.NAME.<random>.sunlib-tmp``, which
the vault walk skips) in the note's own folder, is fsynced, checked by the caller's
``validate`` hook, and then published with ``os.replace`` (update) or a hard link that fails
when the name exists (create: no window in which a collision goes unnoticed); the folder is
fsynced after. A failed write removes its temp file; one left by a killed process is removed by
``remove_stale_temps`` when ``sunlib index`` or ``sunlib serve`` starts. Missing parent folders are
created. Reads (``read_note``) open folders and file the same way, so a link is never read through.

A note's sidecar (``NAME.metadata.yaml``) is part of the note: a move carries it (linked to
the new name first, then the old names removed, so at no moment is the note file on disk
without its metadata, ACL included), a delete removes it after the note, and a create where
a sidecar without its note already sits is a ``Conflict`` (the new note would silently take
that metadata and ACL).

Each verb takes an ``index`` hook, called once the change is on disk (the server indexes
the paths there, in one transaction). When the hook raises, the change is undone before the
error goes on: a created note is removed, an updated note gets its old file back (kept as a
second hard link, or a copy, while the hook runs), a deleted note and its sidecar come back,
and a moved note moves back. So the file and the index change together or not at all (a
full disk, a busy index), and the caller can answer "nothing changed".

Callers serialize writes (the server holds its state lock around each one).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from ..errors import BadPath, Conflict
from ..ingest.ids import sha256_hex
from ..ingest.vault import SIDECAR_SUFFIX, SKIP_DIRS, normalize_newlines

MAX_PATH_CHARS = 1024
MAX_NAME_BYTES = 255
TEMP_SUFFIX = ".sunlib-tmp"
_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{12}" + re.escape(TEMP_SUFFIX))
# A write holds its temp file for the time of one fsync and one parse: a temp file older than
# this was left by a process that died, not by a write still under way (in another server).
STALE_TEMP_SECONDS = 60.0

# (temp file path, sidecar path or None) -> None; raises to refuse the new text
Validate = Callable[[Path, Path | None], None]
# called once a change is on disk; raises to have it undone
Index = Callable[[], None]


def _nothing() -> None:
    pass


# dots a reader takes for "." (one-dot leader, full-width and small full stops, the middle dots and
# bullets of fonts that draw them on the baseline), and the fraction and division slashes for "/"
_LOOKALIKE = set("\u2024\u2025\uff0e\ufe52\uff61\u2027\u2215\u2044\uff0f\u29f8")
_DEVICES = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}


@dataclass(frozen=True)
class NoteFile:
    """A note file as read now: its text as the indexer sees it and the hash the index keeps."""

    text: str  # BOM dropped, CRLF and lone CR -> LF: the text chunk offsets count into
    content_hash: str


# -- paths ---------------------------------------------------------------------------------


def check_path(raw: str) -> str:
    """The vault-relative note path, or BadPath. Purely lexical; see the module docstring."""
    if not raw:
        raise BadPath("empty path")
    if len(raw) > MAX_PATH_CHARS:
        raise BadPath(f"path longer than {MAX_PATH_CHARS} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
        raise BadPath("control characters (NUL included) are not allowed in a path")
    if "\\" in raw:
        raise BadPath("backslashes are not allowed: use '/' between folders")
    if ":" in raw:
        raise BadPath("':' is not allowed in a path (drive letters, streams)")
    if unquote(raw) != raw:
        raise BadPath("percent-escapes are not decoded: send the path as plain text")
    look = sorted({f"U+{ord(ch):04X}" for ch in raw if ch in _LOOKALIKE or unicodedata.category(ch) == "Cf"})
    if look:
        raise BadPath(f"characters that make a path look like another are not allowed: {', '.join(look)}")
    if raw.startswith("/"):
        raise BadPath("absolute paths are not allowed: give a path relative to the vault")
    parts = raw.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise BadPath("empty, '.' and '..' path components are not allowed")
        if part.startswith("."):
            raise BadPath(f"hidden or tool folders and files are not writable: {part!r}")
        if part in SKIP_DIRS:
            raise BadPath(f"{part!r} folders are not part of the vault")
        if part != part.strip() or part.endswith("."):
            raise BadPath(f"names may not start or end with spaces or end with a dot: {part!r}")
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise BadPath(f"a name is longer than {MAX_NAME_BYTES} bytes")
        if part.split(".", 1)[0].upper() in _DEVICES:
            raise BadPath(f"{part!r} is a device name on Windows")
    name = parts[-1]
    if not name.endswith(".md") or len(name) <= 3:
        raise BadPath("a note path must end with .md (in lower case)")
    return "/".join(parts)


def sidecar_name(name: str) -> str:
    return name[:-3] + SIDECAR_SUFFIX


# -- folders held open -----------------------------------------------------------------------

_FD_OPS = {os.open, os.mkdir, os.rmdir, os.link, os.unlink, os.rename, os.stat}
USE_DIR_FD = os.supports_dir_fd >= _FD_OPS and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)


class _Dir:
    """A vault folder: a descriptor opened without following links (POSIX), or its checked path."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd

    @classmethod
    def root(cls, vault: Path) -> _Dir:
        real = Path(os.path.realpath(vault))
        if not USE_DIR_FD:
            return cls(real, None)
        return cls(real, os.open(real, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> _Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            if self.fd is not None:
                return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            return os.lstat(self.path / name)
        except FileNotFoundError:
            return None

    def child(self, name: str, create: bool) -> tuple[_Dir, bool]:
        """(the subfolder ``name``, whether this call made it); made only if missing and ``create``,
        never opened through a link."""
        st = self.lstat(name)
        made = False
        if st is None:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such folder", str(self.path / name))
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked below like any other
                if self.fd is not None:
                    os.mkdir(name, 0o777, dir_fd=self.fd)
                else:
                    os.mkdir(self.path / name)
                made = True
                self.sync()  # the new folder's entry survives a crash along with what goes in it
            st = self.lstat(name)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, "folder vanished", str(self.path / name))
        if stat.S_ISLNK(st.st_mode):
            raise BadPath(f"{name!r} is a symbolic link: writes never follow links")
        if not stat.S_ISDIR(st.st_mode):
            raise Conflict(f"{name!r} is a file, not a folder")
        if self.fd is None:
            return _Dir(self.path / name, None), made
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=self.fd)
        except OSError as exc:  # swapped for a link or a file after the lstat above
            raise BadPath(f"{name!r} is not a plain folder") from exc
        return _Dir(self.path / name, fd), made

    def rmdir(self, name: str) -> None:
        """Remove an empty subfolder; a folder that is not empty (or gone) stays as it is."""
        with contextlib.suppress(OSError):
            if self.fd is not None:
                os.rmdir(name, dir_fd=self.fd)
            else:
                os.rmdir(self.path / name)

    def open_new(self, name: str, mode: int = 0o666) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
        if self.fd is not None:
            return os.open(name, flags, mode, dir_fd=self.fd)
        return os.open(self.path / name, flags, mode)

    def read(self, name: str) -> bytes:
        flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _BINARY
        fd = os.open(name, flags, dir_fd=self.fd) if self.fd is not None else os.open(self.path / name, flags)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def replace(self, src: str, dst: str) -> None:
        if self.fd is not None:
            os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        else:
            os.replace(self.path / src, self.path / dst)

    def link_to(self, src: str, other: _Dir, dst: str) -> None:
        """Hard-link ``src`` here as ``dst`` in ``other``; FileExistsError when ``dst`` exists."""
        if self.fd is not None and other.fd is not None:
            os.link(src, dst, src_dir_fd=self.fd, dst_dir_fd=other.fd, follow_symlinks=False)
        else:
            os.link(self.path / src, other.path / dst)

    def unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            if self.fd is not None:
                os.unlink(name, dir_fd=self.fd)
            else:
                os.unlink(self.path / name)

    def sync(self) -> None:
        """fsync the folder so renames and links survive a crash (not possible on Windows)."""
        if self.fd is not None:
            os.fsync(self.fd)
            return
        with contextlib.suppress(OSError):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


@contextlib.contextmanager
def _parent(vault: Path, rel: str, create: bool) -> Iterator[tuple[_Dir, str]]:
    """(folder, file name) of a checked path; folders opened from the vault root down. When the
    work fails, the folders this call made are removed again (if still empty)."""
    parts = rel.split("/")
    chain = [_Dir.root(vault)]
    made: list[int] = []  # positions in chain of the folders made here
    try:
        for name in parts[:-1]:
            below, new = chain[-1].child(name, create)
            chain.append(below)
            if new:
                made.append(len(chain) - 1)
        yield chain[-1], parts[-1]
    except BaseException:
        for i in reversed(made):
            chain[i - 1].rmdir(parts[i - 1])
        raise
    finally:
        for folder in reversed(chain):
            folder.close()


def _regular(folder: _Dir, name: str, required: bool) -> os.stat_result | None:
    st = folder.lstat(name)
    if st is None:
        if required:
            raise FileNotFoundError(errno.ENOENT, "no such note file", str(folder.path / name))
        return None
    if stat.S_ISLNK(st.st_mode):
        raise BadPath(f"{name!r} is a symbolic link: writes never follow links")
    if not stat.S_ISREG(st.st_mode):
        raise Conflict(f"{name!r} exists and is not a file")
    return st


def remove_stale_temps(vault: Path) -> list[str]:
    """Remove the temp files (``.NAME.<hex>.sunlib-tmp``) that killed writers left in the
    vault's note folders, if older than ``STALE_TEMP_SECONDS``; their vault paths. Run at the
    start of ``sunlib index`` and ``sunlib serve``. Links are never followed, and hidden and
    tool folders (where no note is written) are not visited."""
    root = Path(os.path.realpath(vault))
    cutoff = time.time() - STALE_TEMP_SECONDS
    removed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not descend into links
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS]
        for name in filenames:
            if not _TEMP_NAME.fullmatch(name):
                continue
            path = Path(dirpath) / name
            with contextlib.suppress(OSError):
                st = path.lstat()
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                    path.unlink()
                    removed.append(path.relative_to(root).as_posix())
    return sorted(removed)


def _temp_name(name: str) -> str:
    stem = name[:80]
    return f".{stem}.{secrets.token_hex(6)}{TEMP_SUFFIX}"


def _write_temp(folder: _Dir, name: str, data: bytes, mode: int | None) -> str:
    tmp = _temp_name(name)
    fd = folder.open_new(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None and hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        folder.unlink(tmp)
        raise
    return tmp


def _publish_new(folder: _Dir, tmp: str, name: str) -> None:
    """Give ``tmp`` the name ``name`` unless it is taken (Conflict), atomically where links work."""
    try:
        folder.link_to(tmp, folder, name)
    except FileExistsError:
        raise Conflict(f"{name!r} already exists") from None
    except OSError:  # no hard links here (some network or FAT file systems): check, then rename
        if folder.lstat(name) is not None:
            raise Conflict(f"{name!r} already exists") from None
        folder.replace(tmp, name)
        return
    folder.unlink(tmp)


def _place(src: _Dir, src_name: str, dst: _Dir, dst_name: str) -> None:
    """Make ``dst_name`` a second name of ``src_name`` (hard link), or a fresh atomic copy."""
    try:
        src.link_to(src_name, dst, dst_name)
        return
    except FileExistsError:
        raise Conflict(f"{dst_name!r} already exists") from None
    except OSError:
        pass
    mode = stat.S_IMODE(os.stat(src.path / src_name).st_mode)
    tmp = _write_temp(dst, dst_name, src.read(src_name), mode)
    try:
        _publish_new(dst, tmp, dst_name)
    finally:
        dst.unlink(tmp)


def _keep(folder: _Dir, name: str) -> str:
    """A hidden second name for the file ``name`` (a hard link, else a copy), to restore it from."""
    keep = _temp_name(name)
    try:
        folder.link_to(name, folder, keep)
    except OSError:
        mode = stat.S_IMODE(os.stat(folder.path / name).st_mode)
        tmp = _write_temp(folder, name, folder.read(name), mode)
        folder.replace(tmp, keep)
    return keep


# -- the verbs -----------------------------------------------------------------------------


def write_note(
    vault: Path, rel: str, text: str, create: bool, validate: Validate | None = None, index: Index = _nothing
) -> None:
    """Write a note's text atomically. ``create``: fail with Conflict when the name (or an orphan
    sidecar) exists; otherwise replace the file, keeping its permission bits. ``validate`` sees
    the fsynced temp file (and the sidecar that will apply) before it is published; ``index``
    runs once it is published, and when it raises the old state comes back."""
    rel = check_path(rel)
    with _parent(vault, rel, create=True) as (folder, name):
        current = _regular(folder, name, required=False)
        side = sidecar_name(name)
        side_st = folder.lstat(side)
        if create:
            if current is not None:
                raise Conflict(f"{rel!r} already exists")
            if side_st is not None:
                raise Conflict(f"{side!r} exists without its note: remove it or write the note elsewhere")
        elif side_st is not None and stat.S_ISLNK(side_st.st_mode):
            raise BadPath(f"{side!r} is a symbolic link: writes never follow links")
        mode = stat.S_IMODE(current.st_mode) if current is not None else None
        tmp = _write_temp(folder, name, text.encode("utf-8"), mode)
        old: str | None = None
        try:
            if validate is not None:
                validate(folder.path / tmp, folder.path / side if side_st is not None else None)
            if create:
                _publish_new(folder, tmp, name)
            else:
                old = _keep(folder, name) if current is not None else None
                folder.replace(tmp, name)
            folder.sync()
            try:
                index()
            except BaseException:
                if old is not None:
                    folder.replace(old, name)  # the old text is back, whole
                    old = None
                else:
                    folder.unlink(name)
                folder.sync()
                raise
        finally:
            folder.unlink(tmp)
            if old is not None:
                folder.unlink(old)


def move_note(vault: Path, old: str, new: str, index: Index = _nothing) -> None:
    """Move a note (and its sidecar) to a free name, creating folders; Conflict when taken.
    ``index`` runs once it is moved; when it raises, the note moves back."""
    old, new = check_path(old), check_path(new)
    with _parent(vault, old, create=False) as (src, src_name), _parent(vault, new, create=True) as (dst, dst_name):
        _regular(src, src_name, required=True)
        src_side, dst_side = sidecar_name(src_name), sidecar_name(dst_name)
        has_side = _regular(src, src_side, required=False) is not None
        if dst.lstat(dst_name) is not None:
            raise Conflict(f"{new!r} already exists")
        if dst.lstat(dst_side) is not None:
            raise Conflict(f"{dst_side!r} already exists at the destination")
        if has_side:
            _place(src, src_side, dst, dst_side)
        try:
            _place(src, src_name, dst, dst_name)
        except BaseException:
            if has_side:
                dst.unlink(dst_side)
            raise
        dst.sync()
        src.unlink(src_name)  # the note first: what is left for a moment is an orphan sidecar
        if has_side:
            src.unlink(src_side)
        src.sync()
        try:
            index()
        except BaseException:
            if has_side:
                _place(dst, dst_side, src, src_side)
            _place(dst, dst_name, src, src_name)
            src.sync()
            dst.unlink(dst_name)
            if has_side:
                dst.unlink(dst_side)
            dst.sync()
            raise


def delete_note(vault: Path, rel: str, index: Index = _nothing) -> None:
    """Remove a note file, then its sidecar (so the note never exists without its metadata).
    ``index`` runs once they are gone; when it raises, both come back (the sidecar first)."""
    rel = check_path(rel)
    try:
        with _parent(vault, rel, create=False) as (folder, name):
            _delete_in(folder, name, index)
    except FileNotFoundError:
        index()  # a folder on the way is gone: so is the note


def _delete_in(folder: _Dir, name: str, index: Index) -> None:
    side = sidecar_name(name)
    kept: list[tuple[str, str]] = []  # (name, kept as): the sidecar first, to restore in this order
    try:
        if folder.lstat(side) is not None:
            kept.append((side, _keep(folder, side)))
        if _regular(folder, name, required=False) is not None:
            kept.append((name, _keep(folder, name)))
            folder.unlink(name)
        if kept and kept[0][0] == side:
            folder.unlink(side)
        folder.sync()
        try:
            index()
        except BaseException:
            for original, keep in kept:
                folder.replace(keep, original)
            kept.clear()
            folder.sync()
            raise
    finally:
        for _, keep in kept:
            folder.unlink(keep)


def read_note(vault: Path, rel: str) -> NoteFile | None:
    """The note file's text and hash as the indexer would compute them; None when unreadable
    or reached through a symbolic link (folders opened as for writes; the walk skips links too)."""
    try:
        with _parent(vault, rel, create=False) as (folder, name):
            raw = folder.read(name)
            side_name = sidecar_name(name)
            side_st = folder.lstat(side_name)
            side = folder.read(side_name) if side_st is not None and stat.S_ISREG(side_st.st_mode) else None
        text = raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError, BadPath, Conflict):
        return None
    digest = sha256_hex(raw, side) if side is not None else sha256_hex(raw)
    return NoteFile(normalize_newlines(text), digest)
