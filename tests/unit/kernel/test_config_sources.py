"""sunlib's own settings sources (``sunlib.config_sources``) read the environment and the TOML
file as pydantic-settings does: each case is run through both, and the settings (or the
validation errors) must be the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError, create_model
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from sunlib.config import Settings, load_settings
from sunlib.config_sources import merged
from sunlib.errors import ConfigError


class _Sources(BaseSettings):
    """pydantic-settings' rules as sunlib declared them: the prefix, the nested delimiter, the file."""

    model_config = SettingsConfigDict(env_prefix="SUNLIB_", env_nested_delimiter="__", extra="forbid", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


# Settings' own fields (every section, as declared) on pydantic-settings: a section added to
# Settings is compared here without being listed twice
Reference: type[_Sources] = create_model(
    "Reference",
    __base__=_Sources,
    **{name: (field.annotation, field) for name, field in Settings.model_fields.items()},
)


def reference(path: Path | None, overrides: dict[str, Any]) -> Any:
    cls: type[Reference] = Reference
    if path is not None:
        cls = type("FileReference", (Reference,), {"model_config": {**Reference.model_config, "toml_file": path}})
    return outcome(lambda: cls(**overrides))


def ours(path: Path | None, overrides: dict[str, Any]) -> Any:
    import os

    return outcome(lambda: Settings.model_validate(merged(Settings, overrides, os.environ, path)))


def outcome(build: Any) -> Any:
    """The settings as a dict, or the validation errors' places and kinds, or "error" when the
    sources themselves refuse a value (a section's value that is not JSON)."""
    try:
        return build().model_dump()
    except ValidationError as exc:
        return [(e["loc"], e["type"]) for e in exc.errors()]
    except (ConfigError, ValueError):  # pydantic-settings' SettingsError is a ValueError
        return "error"


ENV_CASES: list[dict[str, str]] = [
    {},
    {"SUNLIB_EMBEDDING__PROVIDER": "hash", "SUNLIB_EMBEDDING__THREADS": "2"},
    {"sunlib_search__mode": "dense", "Sunlib_Search__Fusion": "rrf"},
    {"SUNLIB_SEARCH__PRINCIPALS": '["public", "team"]'},
    {"SUNLIB_SEARCH__PRINCIPALS": "not json"},
    {"SUNLIB_SEARCH": '{"mode": "bm25", "rrf_k": 10}', "SUNLIB_SEARCH__FUSION": "rrf"},
    {"SUNLIB_SEARCH": "not json"},
    {"SUNLIB_SEARCH__MODDE": "bm25"},
    {"SUNLIB_SEARCH__CROSSLANG": "false", "SUNLIB_SEARCH__FAST_WEIGHT": "0.3"},
    {"SUNLIB_SERVER__TOKENS": '{"tok": ["ops"]}'},
    {"SUNLIB_SERVER__TOKENS__TOK": '["ops", "hr"]', "SUNLIB_SERVER__PORT": "9000"},
    {"SUNLIB_ANSWER__GATE_LANGUAGES__EN__THRESHOLD": "0.3", "SUNLIB_ANSWER__GATE_LANGUAGES__EN__COSINE_WEIGHT": "0.5"},
    {"SUNLIB_ANSWER__GATE_LANGUAGES": '{"zh": {"threshold": 0.2, "cosine_weight": 0.4}}'},
    {"SUNLIB_ANSWER__READER_THRESHOLD": "0.4", "SUNLIB_ANSWER__READER_MODEL_DIR": "/models/r"},
    {"SUNLIB_MCP__PRINCIPALS": '["hr"]'},
    {"SUNLIB_MCP__PRINCIPALS": "hr"},
    {"SUNLIB_EMBEDDING__WORKERS": "2"},
    {"SUNLIB_EMBEDDING__WORKERS": "auto"},
    {"SUNLIB_EMBEDDING__WORKERS": "many"},
    {"SUNLIB_INDEX_DIR": "/tmp/elsewhere", "SUNLIB_INDEX__DEFAULT_ACL": "[]"},
    {"SUNLIB_HOME": "/h", "SUNLIB_VAULT": "/v", "SUNLIB_DEBUG": "1", "SUNLIB_NOPE": "1"},
    {"SUNLIB_LLM__MAX_TOKENS": ""},
    {"SUNLIB_STORE__REPLICA": "true"},
    {"SUNLIB_STORE__BACKEND": "qdrant", "SUNLIB_STORE__REPLICA": "true", "SUNLIB_STORE__COLLECTION": "lib"},
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for name in list(os.environ):
        if name.lower().startswith("sunlib_"):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize("env", ENV_CASES, ids=lambda env: ",".join(env) or "none")
def test_the_environment_reads_as_pydantic_settings_reads_it(
    clean_env: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert ours(None, {}) == reference(None, {})
    overrides = {"search": {"mode": "bm25"}, "answer": {"writer": "openai"}}
    assert ours(None, overrides) == reference(None, overrides)


TOML_CASES = [
    ('[search]\nmode = "bm25"\n[answer]\nreader = "none"\n', {"SUNLIB_SEARCH__MODE": "dense"}, {}),
    ('[search]\nmode = "bm25"\n[answer]\nreader = "none"\n', {}, {"search": {"mode": "hybrid"}}),
    ('index_dir = "/x"\n[server]\ntokens = { a = ["b"] }\n', {"SUNLIB_SERVER__TOKENS__C": '["d"]'}, {}),
    ('[answer]\nreadr = "none"\n', {}, {}),
    ("bogus = 1\n", {}, {}),
    ("[answer.gate_languages.en]\nthreshold = 0.3\ncosine_weight = 0.6\n", {}, {"answer": {"top_k": 3}}),
]


@pytest.mark.parametrize("case", range(len(TOML_CASES)))
def test_the_config_file_reads_as_pydantic_settings_reads_it(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, case: int
) -> None:
    text, env, overrides = TOML_CASES[case]
    path = tmp_path / "sunlib.toml"
    path.write_text(text, encoding="utf-8")
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert ours(path, overrides) == reference(path, overrides)


def test_settings_built_directly_read_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("SUNLIB_SEARCH__MODE", "bm25")
    assert Settings().search.mode == "bm25"
    assert Settings(search={"mode": "dense"}).search.mode == "dense"  # the caller's value wins
    assert load_settings().search.mode == "bm25"


def test_a_value_that_is_not_json_is_an_error_naming_the_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("SUNLIB_SEARCH__PRINCIPALS", "public,team")
    with pytest.raises(ConfigError, match="SUNLIB_SEARCH__PRINCIPALS"):
        load_settings()
