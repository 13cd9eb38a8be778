"""Where settings come from, besides the caller: ``SUNLIB_*`` environment variables and the TOML file.

The rules are pydantic-settings' (``env_prefix="SUNLIB_"``, ``env_nested_delimiter="__"``, names
not case-sensitive), which sunlib used until importing it cost a cold CLI about 50 ms (it imports
asyncio, email, dotenv and its cloud sources); ``tests/test_config_sources.py`` checks these
functions against pydantic-settings itself:

* ``SUNLIB_<FIELD>`` sets a top-level field; for a section (a model), a list or a dict the value is
  JSON, and ``SUNLIB_<SECTION>__<KEY>[__<KEY>...]`` sets one key inside it (merged into the JSON
  value when there is one too). A key no section has is kept, so that validation names it
  ("unknown setting search.modde").
* A key's value is JSON when its field is a list, a dict or a model; a union with one of those
  (``list[str] | None``) is JSON when it parses and the raw string otherwise.
* The TOML file is the lowest source; the caller's values beat the environment, which beats the
  file, key by key (``deep_update``).
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .errors import ConfigError

PREFIX = "sunlib_"
DELIMITER = "__"
_CONTAINERS = (list, set, frozenset, tuple, dict)


def merged(
    model: type[BaseModel], init: Mapping[str, Any], environ: Mapping[str, str], toml_file: Path | None = None
) -> dict[str, Any]:
    """The values ``model`` is validated with: ``init`` over the environment over the TOML file."""
    state: dict[str, Any] = dict(init)
    state = deep_update(env_values(model, environ), state)
    if toml_file is not None:
        state = deep_update(toml_values(toml_file), state)
    return state


def toml_values(path: Path) -> dict[str, Any]:
    import tomllib

    with path.open("rb") as fh:
        return tomllib.load(fh)


def env_values(model: type[BaseModel], environ: Mapping[str, str]) -> dict[str, Any]:
    """The fields of ``model`` that ``SUNLIB_*`` variables set."""
    env = {k.lower(): v for k, v in environ.items() if k[: len(PREFIX)].lower() == PREFIX}
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        env_name = PREFIX + name
        value: Any = env.get(env_name)
        complex_, lenient = _is_complex(field.annotation)
        if complex_:
            if value is not None:
                value = _decode(value, lenient, env_name)
            nested = _explode(field, env_name + DELIMITER, env)
            if value is None:
                value = nested or None
            elif isinstance(value, dict):
                value = deep_update(value, nested)
        if value is not None:
            out[name] = value
    return out


def _explode(field: FieldInfo, prefix: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``SUNLIB_SECTION__KEY__...`` variables as a nested dict under the section ``field``."""
    result: dict[str, Any] = {}
    for env_name, raw in env.items():
        if not env_name.startswith(prefix):
            continue
        *keys, last = env_name[len(prefix) :].split(DELIMITER)
        target: Any = field.annotation
        node: Any = result
        for key in keys:
            target = _next(target, key)
            if isinstance(node, dict):
                node = node.setdefault(key, {})
        target = _next(target, last)
        value: Any = raw
        if target is not None and raw:
            complex_, lenient = _is_complex(target)
            if complex_:
                value = _decode(raw, lenient, env_name)
        if isinstance(node, dict):
            node[last] = value
    return result


def _next(annotation: Any, key: str) -> Any:
    """The annotation of ``key`` inside ``annotation`` (a model's field, a dict's values); None when
    it has none."""
    if annotation is None:
        return None
    origin = typing.get_origin(annotation)
    if isinstance(origin, type) and issubclass(origin, dict):
        args = typing.get_args(annotation)
        return args[-1] if args else None
    for arg in typing.get_args(annotation):
        found = _next(arg, key)
        if found is not None:
            return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if name.lower() == key:
                return field.annotation
    return None


def _is_complex(annotation: Any) -> tuple[bool, bool]:
    """(its value is JSON, a value that is not JSON is kept as the raw string): a model, a list or a
    dict is JSON; a union with one of those is JSON when it parses."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_complex(typing.get_args(annotation)[0])
    if _complex_type(annotation) or _complex_type(origin):
        return True, False
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if any(_is_complex(a)[0] for a in args):
            return True, True
    return False, False


def _complex_type(tp: Any) -> bool:
    return isinstance(tp, type) and (issubclass(tp, BaseModel) or issubclass(tp, _CONTAINERS))


def _decode(raw: str, lenient: bool, env_name: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        if lenient:
            return raw
        raise ConfigError(f"invalid setting {env_name.upper()}: its value is not JSON ({exc})") from None


def deep_update(mapping: Mapping[str, Any], *updates: Mapping[str, Any]) -> dict[str, Any]:
    """``mapping`` with each of ``updates`` laid over it, dicts merged key by key (pydantic's own)."""
    out = dict(mapping)
    for update in updates:
        for k, v in update.items():
            if k in out and isinstance(out[k], dict) and isinstance(v, dict):
                out[k] = deep_update(out[k], v)
            else:
                out[k] = v
    return out
