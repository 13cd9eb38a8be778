"""Walk a vault and load notes with their merged metadata.

Only ``*.md`` files are notes. Hidden folders and files (``.git``, ``.obsidian``,
``.sunlib``, anything starting with a dot) and ``node_modules`` are skipped.
Folder symlinks are followed once: a folder already visited (by real path) is
skipped, so symlink loops end; a link to a folder the walk reaches by its real
path anyway is not followed, so a note keeps its real path whatever the link
names. A file that cannot be read or parsed is reported with its path and
reason; the walk goes on.

Metadata: YAML frontmatter merged with an optional sidecar
``NAME.metadata.yaml`` next to ``NAME.md`` (seed 000's fields: document_id,
title, category, chapter, version, language, tags, summary, acl). For a key
set in both, the sidecar wins; tags are the union of frontmatter tags, sidecar
tags and inline ``#tags``. A note without ``acl`` gets the configured default
(``["public"]``); an explicit empty ``acl: []`` stays empty and nobody sees it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..contracts import Note
from .ids import note_id_for, sha256_hex
from .markdown import FrontmatterError, ParsedMarkdown, parse_markdown

SKIP_DIRS = frozenset({"node_modules", "__pycache__"})
SIDECAR_SUFFIX = ".metadata.yaml"


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
    """All Markdown files under root, sorted by path, and the files that could not be read."""
    root = root.resolve()
    files: list[VaultFile] = []
    problems: list[Skipped] = []
    seen_dirs: set[str] = set()

    def on_error(err: OSError) -> None:
        rel = _rel(root, Path(err.filename)) if err.filename else "?"
        problems.append(Skipped(rel, f"cannot read folder: {err.strerror}"))

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=on_error):
        real = os.path.realpath(dirpath)
        if real in seen_dirs:
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not _link_into_walked(root, Path(dirpath) / d)
        )
        for name in sorted(filenames):
            if name.startswith(".") or not name.lower().endswith(".md"):
                continue
            path = Path(dirpath) / name
            rel = _rel(root, path)
            try:
                st = path.stat()
            except OSError as exc:
                problems.append(Skipped(rel, f"cannot read file: {exc.strerror or exc}"))
                continue
            sidecar = path.with_name(path.name[:-3] + SIDECAR_SUFFIX)
            files.append(VaultFile(rel, path, sidecar if sidecar.is_file() else None, st.st_mtime, st.st_size))
    files.sort(key=lambda f: f.rel_path)
    return files, problems


def _link_into_walked(root: Path, path: Path) -> bool:
    """A folder symlink to a folder the walk reaches by its real path anyway (loops included).

    Skipping it keeps a note's path (and so its id) independent of link names and walk order.
    """
    if not path.is_symlink():
        return False
    try:
        rel = Path(os.path.realpath(path)).relative_to(root)
    except ValueError:
        return False  # outside the vault: followed once, see seen_dirs
    return not any(part.startswith(".") or part in SKIP_DIRS for part in rel.parts)


def _rel(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def file_hash(vf: VaultFile) -> str:
    """Hash of the note bytes and its sidecar bytes: what decides 'changed'."""
    try:
        parts: list[bytes] = [vf.path.read_bytes()]
        if vf.sidecar is not None:
            parts.append(vf.sidecar.read_bytes())
    except OSError as exc:
        raise NoteError(f"cannot read file: {exc.strerror or exc}") from None
    return sha256_hex(*parts)


def load_note(vf: VaultFile, default_acl: Sequence[str]) -> tuple[Note, ParsedMarkdown]:
    """Read, parse and merge metadata for one file. Raises NoteError with a reason."""
    try:
        raw = vf.path.read_bytes()
    except OSError as exc:
        raise NoteError(f"cannot read file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NoteError(f"not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise NoteError("binary content (NUL bytes)")
    text = text.replace("\r\n", "\n")
    try:
        parsed = parse_markdown(text)
    except FrontmatterError as exc:
        raise NoteError(str(exc)) from None

    sidecar_bytes = b""
    sidecar: dict[str, Any] = {}
    if vf.sidecar is not None:
        try:
            sidecar_bytes = vf.sidecar.read_bytes()
            loaded = yaml.safe_load(sidecar_bytes.decode("utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise NoteError(f"invalid sidecar {vf.sidecar.name}: {_short(exc)}") from None
        if not isinstance(loaded, dict):
            raise NoteError(f"invalid sidecar {vf.sidecar.name}: must be a YAML mapping")
        sidecar = loaded

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
