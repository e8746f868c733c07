"""What `taxcompile classify --torch ... --format json` prints, as a pydantic model: the
writer validates what it writes against it (``dump``), as taxcompile/schemas.py does for
spec files."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..classification import DIMENSIONS


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Reading(_Out):
    value: str = Field(description="a Table III label ('' where the mechanism has none: "
                       "the score of an alignment whose weights are its own)")
    because: str = Field(description="the graph nodes that give it, in words")


class FoundAttention(_Out):
    norm: str = Field(description="the graph node that makes the weights")
    applied_by: str = Field(description="the graph node that weighs the values")
    recognised: bool
    why_not: str = Field(description="why no pattern matched ('' when recognised)")
    values: dict[str, Reading] = Field(description="each dimension read from code")
    registry: dict[str, str] = Field(description="'score', 'align' and, where one is read, "
                                     "'trait' (a mechanism on the heads): the names of "
                                     "taxcompile's mechanism registry")
    parameters: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="the alignment's parameters read from the graph "
        "where they are not the registry's defaults (a CRF's `normalize`)")
    nodes: list[str]
    source: list[str] = Field(description="source lines, where the graph keeps them")


class TorchClassification(_Out):
    """`taxcompile classify --torch MODULE:FACTORY --format json`."""

    captured_with: str = Field(description="torch.export, make_fx or torch.fx")
    note: str
    attentions: list[FoundAttention]
    features: dict[str, Reading] = Field(description="the model's feature multiplicity, "
                                         "levels and representations, read over all its "
                                         "attentions; empty when none was recognised")
    row: dict[str, str] = Field(description="the model's row over every recognised "
                                f"attention ({', '.join(DIMENSIONS)}); empty when none was")


def dump(res) -> str:
    out = TorchClassification(
        captured_with=res.method, note=res.note, row=res.row(),
        features={d: Reading(value=v, because=w) for d, (v, w) in res.features.items()},
        attentions=[FoundAttention(
            norm=a.norm, applied_by=a.applied_by, recognised=a.recognised, why_not=a.why_not,
            values={d: Reading(value=v, because=w) for d, (v, w) in a.values.items()},
            registry=dict(a.names), parameters=dict(a.align_args), nodes=list(a.nodes),
            source=list(a.source))
            for a in res.attentions])
    return out.model_dump_json(indent=2)
