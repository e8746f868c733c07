"""Plan rules of Transformer-XL's segment memory (`mem_len = M`, Dai et al. 2019, §3.2) in
forward(): the feature h that the keys and values read is replaced, while they are planned,
by h~ = [SG(m); h] (``segment_memory``: the memory the previous segment left in the
``mems`` record, detached, before this segment's positions), so that the keys and values
(a stacked projection included) cover memory + segment and the query the segment only.
``Model.forward(..., mems=…)`` takes the memories and ``Output.mems`` returns the new ones,
one per module, under the module's key (as ``Output.attention``)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import checks, ir
from .frame import Var


@dataclass
class Segment:
    src: str  # the node the keys and values read (check/segment.py: exactly one)
    x: Var  # its value: this segment's h
    h: str  # the local holding h~ = [SG(m); h]


def extend(p, n: ir.Attention) -> Segment | None:
    """Bind h~ for the keys and values of ``n`` (None without a segment memory); the caller
    plans them, then ``restore``s h for the query."""
    if n.memory is None:
        return None
    src = next(x for x, _ in checks.expr_links(n.keys))
    x = p.ref(src)
    p.frame.records.add("mems")
    p.helpers.add("segment_memory")
    size = p.sym(n.memory, "length", n.memory.length)
    h = p.tmp(f"segment_memory(mems, {p.key_code(n)}, {x.name}, {size})", f"{p.want(n)}_h",
              "(B, M + T, d): h~ = [SG(m); h] (Dai et al. §3.2), keys and values read it")
    p.frame.vars[src] = Var(h, x.shape, None, x.dim)  # no padding over the memory
    return Segment(src, x, h)


def restore(p, seg: Segment | None) -> None:
    if seg is not None:
        p.frame.vars[seg.src] = seg.x


def key_mask(p, seg: Segment, n: ir.Attention, kmask: str) -> str:
    """The keys' padding mask over h~: the segment's, after the memory's kept positions."""
    mask = p.mask_arg(seg.x)
    if mask == "None":
        return kmask
    p.helpers.add("segment_keep")
    return p.tmp(f"None if {mask} is None else segment_keep({mask}, {seg.h})",
                 f"{p.want(n)}_keep", "(B, M + T): the memory's positions are never masked")
