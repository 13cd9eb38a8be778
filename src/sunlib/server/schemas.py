"""Request bodies (pydantic). Responses are the contracts as JSON (see `sunlib.contracts`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..contracts import SearchFilters


class Filters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    folders: list[str] = Field(default_factory=list, max_length=50)
    tags: list[str] = Field(default_factory=list, max_length=50)
    note_ids: list[str] = Field(default_factory=list, max_length=200)
    since: float | None = None  # epoch seconds
    until: float | None = None
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("folders", "tags", "note_ids", "metadata")
    @classmethod
    def _encodable(cls, value: list[str] | dict[str, str]) -> list[str] | dict[str, str]:
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        for item in items:
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("text is not valid Unicode (a lone surrogate)") from None
        return value

    def contract(self) -> SearchFilters:
        return SearchFilters(
            tuple(self.folders),
            tuple(self.tags),
            tuple(self.note_ids),
            self.since,
            self.until,
            tuple(self.metadata.items()),
        )


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=4000)
    mode: Literal["bm25", "dense", "hybrid"] | None = None
    filters: Filters = Field(default_factory=Filters)
    limit: int = Field(10, ge=1, le=100)
    offset: int = Field(0, ge=0, le=10_000)


class AskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000)
    filters: Filters = Field(default_factory=Filters)


class RagRunBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    qa_set: str = Field(
        "sample_vault",
        description="a bundled QA set (sample_vault, sample_vault_calibration) or a .jsonl path in the vault",
    )
    limit: int | None = Field(None, ge=1, le=10_000)
