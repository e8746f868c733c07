"""One attention found in a captured graph: what ``recognise`` and ``patterns`` fill in."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)  # one attention is one graph place: compared by identity
class Attention:
    norm: str  # the alignment node
    applied_by: str  # the node that weighs the values
    values: dict = field(default_factory=dict)  # dimension -> (label, reason)
    nodes: list = field(default_factory=list)  # the graph nodes read
    source: list = field(default_factory=list)  # source lines from stack traces
    recognised: bool = True
    why_not: str = ""
    names: dict = field(default_factory=dict)  # "score"/"align" -> the registry's name
    # the alignment's parameters read from the graph where they differ from the record's
    # defaults (a CRF's normalize = True): the lifted sketch writes them
    align_args: dict = field(default_factory=dict)
    heads: int = 1  # query heads, and key/value heads where shared between them (lift)
    kv_heads: int | None = None
    # graph nodes for the passes over every attention (queries): not part of the answer
    query: object = field(default=None, repr=False, compare=False)
    keys: object = field(default=None, repr=False, compare=False)
    app: object = field(default=None, repr=False, compare=False)
    weighed: object = field(default=None, repr=False, compare=False)  # the values operand
    masks: list = field(default_factory=list, repr=False, compare=False)
