"""Walk a vault and load notes with their merged metadata.

Only ``*.md`` files are notes. Hidden folders and files (``.git``, ``.obsidian``,
``.sunlib``, anything starting with a dot) and ``node_modules`` are skipped.
Symbolic links, to files or folders, are never followed, so nothing outside the
vault root is indexed and no note is listed twice: a link that leads outside the
vault (or nowhere) is reported by path, one that stays inside is left out quietly
(its target, when it is a note, is indexed under its own path). A sidecar that is a
link counts as no sidecar. A file that cannot be read or parsed is reported with
its path and reason; the walk goes on.

Metadata: YAML frontmatter merged with an optional sidecar
``NAME.metadata.yaml`` next to ``NAME.md`` (seed 000's fields: document_id,
title, category, chapter, version, language, tags, summary, acl). For a key
set in both, the sidecar wins; tags are the union of frontmatter tags, sidecar
tags and inline ``#tags``. A note without ``acl`` gets the configured default
(``["public"]``); an explicit empty ``acl: []`` stays empty and nobody sees it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contracts import Note
from .ids import note_id_for, sha256_hex
from .markdown import FrontmatterError, ParsedMarkdown, parse_markdown

SKIP_DIRS = frozenset({"node_modules", "__pycache__"})
SIDECAR_SUFFIX = ".metadata.yaml"
# The stored metadata of one note (frontmatter + sidecar + tags) as UTF-8 JSON. Each YAML
# document is already bounded (yaml_bounded); this caps what one note adds to the index and
# to every listing that returns metadata.
MAX_METADATA_BYTES = 128 * 1024


@dataclass(frozen=True)
class VaultFile:
    rel_path: str  # POSIX, relative to the vault root
    path: Path
    sidecar: Path | None
    mtime: float
    size: int


@dataclass(frozen=True)
class Skipped:
    rel_path: str
    reason: str


class NoteError(Exception):
    """A note that cannot be loaded; the message says why."""


def walk_vault(root: Path) -> tuple[list[VaultFile], list[Skipped]]:
    """All Markdown files under root, sorted by path, and the files that could not be read.

    Symbolic links are never followed (see the module docstring): one to a place outside the
    vault is reported, one inside it is left out silently (its target is listed by its own path)."""
    root = root.resolve()
    files: list[VaultFile] = []
    problems: list[Skipped] = []

    def on_error(err: OSError) -> None:
        rel = _rel(root, Path(err.filename)) if err.filename else "?"
        problems.append(Skipped(rel, f"cannot read folder: {err.strerror}"))

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=on_error):
        kept = []
        for d in sorted(dirnames):
            path = Path(dirpath) / d
            if d.startswith(".") or d in SKIP_DIRS:
                continue
            if path.is_symlink():
                _report_link(root, path, "folder", problems)
                continue
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            if name.startswith(".") or not name.lower().endswith(".md"):
                continue
            path = Path(dirpath) / name
            if path.is_symlink():
                _report_link(root, path, "file", problems)
                continue
            try:
                st = path.lstat()
            except OSError as exc:
                problems.append(Skipped(_rel(root, path), f"cannot read file: {exc.strerror or exc}"))
                continue
            if not stat.S_ISREG(st.st_mode):
                problems.append(Skipped(_rel(root, path), "not a regular file"))
                continue
            files.append(VaultFile(_rel(root, path), path, sidecar_of(path), st.st_mtime, st.st_size))
    files.sort(key=lambda f: f.rel_path)
    return files, problems


def sidecar_of(path: Path) -> Path | None:
    """The sidecar of a note file when it is a regular file (a link is no sidecar: never followed)."""
    sidecar = path.with_name(path.name[:-3] + SIDECAR_SUFFIX)
    try:
        return sidecar if stat.S_ISREG(sidecar.lstat().st_mode) else None
    except OSError:
        return None


def _report_link(root: Path, path: Path, kind: str, problems: list[Skipped]) -> None:
    """A link the walk does not follow: reported when it is broken or leads out of the vault."""
    target = Path(os.path.realpath(path))
    rel = _rel(root, path)
    if not target.exists():
        problems.append(Skipped(rel, "cannot read file: broken symbolic link"))
    elif not target.is_relative_to(root):
        problems.append(Skipped(rel, f"symbolic link to a {kind} outside the vault: not indexed"))


def _read(path: Path) -> bytes:
    """A file's bytes, refusing a link swapped in since the walk (``O_NOFOLLOW`` where it exists)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _rel(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def file_hash(vf: VaultFile) -> str:
    """Hash of the note bytes and its sidecar bytes: what decides 'changed'."""
    try:
        parts: list[bytes] = [_read(vf.path)]
        if vf.sidecar is not None:
            parts.append(_read(vf.sidecar))
    except OSError as exc:
        raise NoteError(f"cannot read file: {exc.strerror or exc}") from None
    return sha256_hex(*parts)


def load_note(vf: VaultFile, default_acl: Sequence[str]) -> tuple[Note, ParsedMarkdown]:
    """Read, parse and merge metadata for one file. Raises NoteError with a reason."""
    try:
        raw = _read(vf.path)
    except OSError as exc:
        raise NoteError(f"cannot read file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NoteError(f"not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise NoteError("binary content (NUL bytes)")
    text = normalize_newlines(text)
    try:
        parsed = parse_markdown(text)
    except FrontmatterError as exc:
        raise NoteError(str(exc)) from None
    except Exception as exc:  # a parser bug must cost this note only, never the run
        raise NoteError(f"cannot parse the note ({type(exc).__name__}: {_short(exc)})") from None

    sidecar_bytes = b""
    sidecar: dict[str, Any] = {}
    if vf.sidecar is not None:
        import yaml  # on first use, as in markdown.split_frontmatter

        from .yaml_bounded import load_yaml

        try:
            sidecar_bytes = _read(vf.sidecar)
            loaded = load_yaml(sidecar_bytes.decode("utf-8")) or {}
        except (OSError, ValueError, yaml.YAMLError) as exc:  # ValueError: YamlTooLarge, DuplicateKey, bad dates, UTF-8
            raise NoteError(f"invalid sidecar {vf.sidecar.name}: {_short(exc)}") from None
        if not isinstance(loaded, dict):
            raise NoteError(f"invalid sidecar {vf.sidecar.name}: must be a YAML mapping")
        sidecar = loaded

    for key in (*parsed.frontmatter, *sidecar):
        if isinstance(key, str) and key.casefold() == "acl" and key != "acl":
            raise NoteError(f"the metadata key {key!r} is not 'acl': write it in lower case")
    metadata = _json_safe({**parsed.frontmatter, **sidecar})
    tags = _as_list(parsed.frontmatter.get("tags")) + _as_list(sidecar.get("tags")) + list(parsed.tags)
    tags = list(dict.fromkeys(t.lstrip("#").strip().lower() for t in tags if t.strip()))
    metadata["tags"] = tags
    if "acl" in metadata:
        if metadata["acl"] is None:
            acl: list[str] = []
        elif isinstance(metadata["acl"], str | list):
            acl = _as_list(metadata["acl"])
        else:
            raise NoteError("acl must be a list of principal names")
    else:
        acl = list(default_acl)
    metadata["acl"] = acl
    size = len(json.dumps(metadata, ensure_ascii=False).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise NoteError(f"metadata is {size:,} bytes as JSON; the limit is {MAX_METADATA_BYTES:,}")
    title = str(metadata.get("title") or parsed.first_h1 or Path(vf.rel_path).stem)
    note = Note(
        note_id=note_id_for(vf.rel_path),
        path=vf.rel_path,
        title=title,
        text=text,
        metadata=metadata,
        tags=tuple(tags),
        links=parsed.links,
        acl=tuple(dict.fromkeys(acl)),
        content_hash=sha256_hex(raw, sidecar_bytes) if vf.sidecar is not None else sha256_hex(raw),
        mtime=vf.mtime,
    )
    return note, parsed


def normalize_newlines(text: str) -> str:
    """Every line ending as ``\\n``: CRLF becomes LF, and a lone CR (old Mac files) becomes LF.

    A lone CR keeps its position, so offsets into such a file stay exact; CRLF loses its CR, as
    it always has (offsets then count into this text, which the API serves as ``content``)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.replace(",", " ").split() if v.strip()]
    if isinstance(value, list | tuple):
        return [str(v).strip() for v in value if str(v).strip()]
    return [str(value)]


def _json_safe(value: Any) -> Any:
    """YAML can yield dates and other objects: keep metadata JSON-serialisable."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
