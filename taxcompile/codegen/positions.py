"""Position tables: ``positional(x, kind = …)`` adds one to x; ``positions(x, kind = …)`` is
the table alone, (L, d) for x's L positions broadcast over x's other axes (a learned
absolute position embedding, e.g. for a model that combines it with x itself)."""

from __future__ import annotations

from ..ops import plan_rule
from .expr import CfgField
from .features import local, same
from .names import SUM
from .generate import start as generate_start


def table(p, e, x, n) -> tuple[str, str]:
    """(the module name of x's learned position table, the slice of it for x's positions):
    ``nn.Embedding(L, d)`` over x's last axis (``Config.max_len`` rows when the axis has no
    fixed length); in generate() the positions after the tokens already decoded."""
    axis = x.shape.axes[-1]
    if p.cm.sizes.get(axis):
        length = p.axis_size(axis)
    else:
        length, p.need_max_len = CfgField("max_len"), True
        p.max_len_axes.add(axis)  # inputs along this axis are checked against max_len
    mod = p.module(n, p.suffix(n, "pos", e), lambda: f"nn.Embedding({length}, {x.dim})",
                   "learned positions")
    xin = local(p, x)
    past = generate_start(p, x)
    rows = f"{past} : {past} + {xin}.shape[-2]" if past else f": {xin}.shape[-2]"
    return xin, f"{mod}.weight[{rows}]"


@plan_rule("positional")
def positional(p, e, a, n):
    x = a[0]
    if e.param("kind", "sinusoid") == "sinusoid":
        p.helpers.add("sinusoid")
        past = generate_start(p, x)  # generate(): positions after the tokens already decoded
        return same(x, f"sinusoid({x.name}{f', start={past}' if past else ''})")
    xin, rows = table(p, e, x, n)
    return same(x, f"{xin} + {rows}", SUM)


@plan_rule("positions")
def positions(p, e, a, n):
    x = a[0]
    if e.param("kind", "learned") == "sinusoid":  # the encoding of x's positions alone
        p.helpers.add("sinusoid")
        past = generate_start(p, x)
        return same(x, f"sinusoid(torch.zeros_like({x.name}){f', start={past}' if past else ''})")
    xin, rows = table(p, e, x, n)
    return same(x, f"{rows}.expand_as({xin})")
