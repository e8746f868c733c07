"""Parameters a statement takes from its layer: a mechanism's record lists them in
``by_depth`` (a constant a paper schedules by layer, as a pattern over ``{l}``), and the IR
holds None for such a parameter in a `repeat`'s hop the spec leaves it unset in. The
constructor call computes it from the hop's number: the literal one where the repeat is
written out hop by hop, the block's ``depth`` (its constructor's argument, 1 to the hop
count) where the repeat is one block class instantiated per hop; a drop-in layer of the
statement (``codegen/layer.py``) from its Config's ``depth``."""

from __future__ import annotations

from .. import ir
from ..mechanisms.record import CtorArg
from .imports import MATH


def pattern(n, arg: CtorArg) -> str:
    """The code pattern over ``{l}`` of constructor argument ``arg`` where statement ``n``
    leaves it to its layer, '' for an argument that is no such parameter or has a value."""
    if not arg.field or getattr(n, "hop", None) is None or arg.value(n) is not None:
        return ""
    owner = arg.owner_of(n)
    return owner.record.depth_code(arg.field) if isinstance(owner, ir.Mech) else ""


def depth_code(p, n, arg: CtorArg) -> str:
    """The code of constructor argument ``arg`` of statement ``n`` computed from its layer,
    '' for an argument that is no such parameter or has a value of its own."""
    code = pattern(n, arg)
    if not code:
        return ""
    if p.frame.depth == len(n.hop.outer) + 1:  # planned in the block of its own repeat
        p.frame.takes_depth = True
        return at_layer(code, "depth")
    return at_layer(code, n.hop.index)


def at_layer(code: str, layer: "str | int") -> str:
    """A ``by_depth`` pattern written for layer ``layer`` (code or a number)."""
    return code.format(l=layer, math=MATH)
