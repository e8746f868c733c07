"""The JSON that taxcompile writes for other programs, as pydantic models: what
``taxcompile classify --format json`` prints (``ClassifyOutput``) and what ``taxcompile
study report --format json`` prints and writes as report.json (``StudyReport``).

The writers check what they write against the model (``dump``), so the published JSON
Schema (``taxcompile schema classify|study``; copies in docs/schema/) is what they write.
(The report directory's manifest, read back by the next report, is ``report_manifest``'s;
the study file's rows are ``study/schema``'s.) Imported only where such JSON is written:
pydantic stays out of the front end's other commands."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from .classification import DIMENSIONS
from .study.schema import Protocol, first_problem

__all__ = ["ClassifyOutput", "SCHEMAS", "StudyReport", "command", "dump", "json_schema",
           "problem"]

Dimension = Literal[tuple(DIMENSIONS)]


class _Out(BaseModel):
    """Exactly these fields, each of exactly its type (no text where a number belongs)."""

    model_config = ConfigDict(extra="forbid", strict=True)


# ---- classify --format json ------------------------------------------------------------------


class Label(_Out):
    value: str = Field(description="a Table III label of the dimension")
    because: list[str] = Field(description="the statements that give it, in words")


class Variant(_Out):
    model: str = Field(description="the model variant's name")
    dimensions: dict[Dimension, list[Label]] = Field(
        description="each dimension's labels (several where the modules differ)")
    notes: dict[Dimension, list[str]] = Field(
        description="what the classifier noted beside a dimension's labels")


class ClassifiedSpec(_Out):
    file: str = Field(description="the spec file as given")
    paper: str = Field(description="the paper's cite")
    ref: int | str | None = Field(description="the paper's reference in the survey")
    row: dict[str, str] = Field(description="the spec's Table III row: paper, ref and the "
                                "eight dimensions, its variants' labels joined")
    variants: list[Variant]


class ClassifyOutput(RootModel[list[ClassifiedSpec]]):
    """``taxcompile classify --format json``: one object per spec file."""


# ---- study report --format json --------------------------------------------------------------

Number = float | None
Interval = Annotated[list[float], Field(min_length=2, max_length=2)] | None


class Run(_Out):
    """One trained model on one seed, as the study file stores it."""

    spec: str
    model: str
    model_hash: str
    row: dict[Dimension, str]
    task: str
    supervised: bool
    seed: int
    lr: Number
    params: int | None
    steps: int | None
    seconds: Number
    seconds_per_step: Number
    accuracy: Number
    final_loss: Number
    val_accuracy: Number
    steps_to_threshold: int | None
    budget: int | None
    width: int | None
    curve: list[Annotated[list[Number], Field(min_length=2, max_length=2)]] | None = Field(
        description="(step, test accuracy) per evaluation")
    attention: dict[str, Number] = Field(description="the attention measures, then any "
                                         "per-module detail")
    engine: str


class Skip(_Out):
    source: str
    model: str
    task: str | None
    why: str


class Statistics(_Out):
    method: str
    alpha: float
    effects: int
    interactions: int
    test: str
    interval: str


class Summary(_Out):
    """The seeds of one group of models."""

    n: int
    accuracy_mean: Number
    ci95: Interval
    gold_mass_mean: Number
    gold_mass_ci95: Interval
    n_gold: int
    gold_mass_answer_mean: Number
    solved_fraction: Number
    steps_to_threshold_mean: Number


class Effect(Summary):
    """A value of a dimension against the task's base, paired by seed."""

    dimension: Dimension
    value: str
    task: str
    budget: int | None
    width: int | None
    models: int
    comparison: Literal["others at base", "marginal"]
    n_pairs: int
    diff_mean: Number
    diff_ci95: Interval
    p: Number
    n_solved_pairs: int
    steps_diff_mean: Number
    steps_diff_ci95: Interval
    p_adjusted: Number
    p_adjusted_method: str | None
    verdict: str
    learning: str | None = Field(description="the step budgets' verdict; None: none to give")
    learning_why: str
    learning_factor: float
    base_steps_to_threshold: Number
    budgets: list[int]


class Interaction(_Out):
    task: str
    dimensions: Annotated[list[Dimension], Field(min_length=2, max_length=2)]
    values: Annotated[list[str], Field(min_length=2, max_length=2)]
    n: int
    interaction: Number
    ci95: Interval
    p: Number
    budget: int | None
    width: int | None
    p_adjusted: Number
    p_adjusted_method: str | None
    verdict: str


class Supervision(_Out):
    task: str
    spec: str
    model: str
    budget: int | None
    width: int | None
    plain: Summary
    supervised: Summary


class ModelRow(_Out):
    """One model's seeds on one task, step budget, width and training (``per_model``)."""

    task: str
    budget: int | None
    width: int | None
    model: str
    spec: str
    model_hash: str
    supervised: bool
    row: dict[Dimension, str]
    n: int
    accuracy_mean: Number
    ci95: Interval
    solved_fraction: Number
    steps_to_threshold_mean: Number
    gold_mass_mean: Number


class Paired(_Out):
    """A model's paired difference in accuracy from another, seed by seed."""

    model: str
    against: str
    n: int
    diff_mean: Number
    diff_ci95: Interval
    p: Number


class ScoreControl(_Out):
    """A slice model trained with another score than the base's, against the base trained
    with that score (``with_score``) beside its twin against the base (``with_base_score``):
    described, not in the Holm family."""

    task: str
    budget: int | None
    width: int | None
    dimension: Dimension
    value: str
    score: str
    with_base_score: Paired | None
    with_score: Paired | None


class StudyReport(_Out):
    """``taxcompile study report --format json`` (and report.json)."""

    protocol: Protocol
    statistics: Statistics
    runs: list[Run]
    skips: list[Skip]
    base: dict[str, dict[Dimension, str]] = Field(description="each task's base model's row")
    effects: list[Effect]
    interactions: list[Interaction]
    supervision: list[Supervision]
    per_model: list[ModelRow] = Field(description="one row per model, named")
    score_controls: list[ScoreControl]


# ---- use -------------------------------------------------------------------------------------

SCHEMAS: dict[str, type[BaseModel]] = {"classify": ClassifyOutput, "study": StudyReport}


def problem(e: ValidationError) -> str:
    """The first field a validation refused and why (``\\`files.a\\`: …``)."""
    return first_problem(e)


def dump(name: str, doc) -> str:
    """``doc`` as the JSON text its command writes, checked against ``SCHEMAS[name]``
    (a ``ValidationError`` is a fault of the writer: the schema says what it writes)."""
    text = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)
    SCHEMAS[name].model_validate_json(text)
    return text


def json_schema(name: str) -> str:
    """The JSON Schema of what command ``name`` writes, as text."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              **SCHEMAS[name].model_json_schema()}
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def command(name: str, output: str | None) -> int:
    """``taxcompile schema NAME [-o FILE]``: 0, or 2 with one line for a wrong name or a
    file that cannot be written (nothing half-written: the file is replaced whole)."""
    import sys

    from .files import write_atomic

    if name not in SCHEMAS:
        print(f"taxcompile: error: no schema named `{name}`: choose "
              f"{' or '.join(SCHEMAS)}", file=sys.stderr)
        return 2
    text = json_schema(name)
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        write_atomic(output, text)
    except OSError as e:
        print(f"taxcompile: error: cannot write {output}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {output}")
    return 0
