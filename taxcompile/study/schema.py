"""What a study file holds, as pydantic models: its protocol record and its result and skip
rows as stored. ``store`` validates everything it reads against them, so that a file
SQLite still opens but whose content is damaged (a JSON that does not parse, a text where
a number belongs) is one located error naming the row and the field, never a traceback
from deep in the report.

Imported only by ``store`` when it reads (pydantic stays out of the front end)."""

from __future__ import annotations

from pydantic import (BaseModel, ConfigDict, Field, Json, ValidationError, field_validator,
                      model_validator)

from ..classification import DIMENSIONS


class Batch(BaseModel):
    """One of the protocol's batches: the generator stream of each seed's batch and its
    examples (``protocol.Profile.batches``)."""

    model_config = ConfigDict(extra="allow")
    stream: int
    size: int = Field(gt=0)


class Batches(BaseModel):
    """Training, validation (early stop, learning rate) and test (reported only): three
    streams, never one batch in two roles."""

    model_config = ConfigDict(extra="allow")
    train: Batch
    validation: Batch
    test: Batch

    @model_validator(mode="after")
    def _apart(self) -> Batches:
        if len({self.train.stream, self.validation.stream, self.test.stream}) != 3:
            raise ValueError("the training, validation and test batches share a stream")
        return self


class Settings(BaseModel):
    model_config = ConfigDict(extra="allow")
    batches: Batches | None = None


class Protocol(BaseModel):
    """``meta.protocol``: what ``cli.protocol_record`` wrote (other keys are kept, and
    ``Store._check`` compares the whole record). From protocol 2 on, the settings name
    the validation and test batches."""

    model_config = ConfigDict(extra="allow")
    version: str
    profile: str | None = None
    settings: Settings | None = None

    @model_validator(mode="after")
    def _names_its_batches(self) -> Protocol:
        if self.version != "1" and self.settings is not None and self.settings.batches is None:
            raise ValueError(f"protocol {self.version} names no validation and test batches "
                             "(settings.batches)")
        return self


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
    val_accuracy: float | None = None  # layout 1 files have none
    row: Json[dict[str, str]]
    attention: Json[dict[str, float | None]]
    curve: Json[list[tuple[int, float]]] | None = None  # layout 1 files have none
    engine: str
    finished: float
    budget: int | None = Field(default=None, gt=0)  # layout 2 files have none
    width: int | None = Field(default=None, gt=0)

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
