"""What a study file holds, as pydantic models: its protocol record and its result and skip
rows as stored. ``store`` validates everything it reads against them, so that a file
SQLite still opens but whose content is damaged (a JSON that does not parse, a text where
a number belongs) is one located error naming the row and the field, never a traceback
from deep in the report.

Imported only by ``store`` when it reads (pydantic stays out of the front end)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Json, ValidationError, field_validator

from ..classify import DIMENSIONS


class Protocol(BaseModel):
    """``meta.protocol``: what ``cli.protocol_record`` wrote (other keys are kept, and
    ``Store._check`` compares the whole record)."""

    model_config = ConfigDict(extra="allow")
    version: str
    profile: str | None = None
    settings: dict[str, Any] | None = None


class Result(BaseModel):
    """One row of ``results`` (SQLite gives NaN back as NULL: a metric may be None)."""

    key: str
    model_hash: str
    task: str
    seed: int
    protocol_version: str
    supervised: bool
    source: str
    spec: str
    model: str
    profile: str
    lr: float | None
    params: int | None
    steps: int | None
    steps_to_threshold: int | None
    seconds: float | None
    seconds_per_step: float | None
    accuracy: float | None
    final_loss: float | None
    row: Json[dict[str, str]]
    attention: Json[dict[str, float | None]]
    engine: str
    finished: float

    @field_validator("row")
    @classmethod
    def _every_dimension(cls, row: dict[str, str]) -> dict[str, str]:
        # the report compares models dimension by dimension: a label missing is damage
        missing = [d for d in DIMENSIONS if d not in row]
        if missing:
            raise ValueError(f"no label of the dimension `{missing[0]}`")
        return row


class Skip(BaseModel):
    """One row of ``skips``."""

    source: str
    model: str
    task: str | None
    why: str


def first_problem(e: ValidationError) -> str:
    """The first field a validation refused and why: ``\\`accuracy\\`: Input should be a
    valid number, …``."""
    err = e.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"`{where}`: {err['msg']}" if where else err["msg"]


def protocol(text: str) -> dict:
    """The protocol record of ``meta.protocol``'s text, as JSON gives it back."""
    import json

    Protocol.model_validate_json(text)  # raises ValidationError, located
    return json.loads(text)


def result(values: dict) -> dict:
    """A ``results`` row (column -> value) checked and with its JSON parsed."""
    return Result.model_validate(values).model_dump()


def skip(values: dict) -> dict:
    return Skip.model_validate(values).model_dump()
