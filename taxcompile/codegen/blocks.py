"""Plan rules of the everyday blocks outside the survey's vocabulary (issue 24):
``prepend(x, n)``, n learned vectors (a CLS token, registers) before the first position,
with the padding mask extended so that they are never masked."""

from __future__ import annotations

from .. import checks
from ..ops import plan_rule
from .features import local
from .frame import Var


@plan_rule("prepend")
def prepend(p, e, a, n):
    """[v_1; …; v_n; x_1; …; x_S] over the last axis, the v_i learned (one per position and
    example, the same for every example); the padding mask gets n True positions in front."""
    x, count = a[0], int(e.param("n", 1))
    axes = x.shape.axes[:-1] + (f"{x.shape.axes[-1]}+{count}",)  # as checks.blocks names it
    shape = checks.Shape(axes, x.shape.dim)
    mod = p.module(n, p.suffix(n, "prepend"),
                   f"nn.Parameter(torch.randn({count}, {x.dim}) * 0.02)",
                   "learned vectors before the first position (CLS / registers)")
    h = local(p, x)
    code = f"torch.cat([{mod}.expand(*{h}.shape[:-2], -1, -1), {h}], -2)"
    mk = p.mask_of(x)
    if mk is None:
        return Var(code, shape, None, x.dim)
    m = "".join(mk)
    keep = p.tmp(f"None if {mk[0]} is None else torch.cat([{m}.new_ones(*{m}.shape[:-1], "
                 f"{count}), {m}], -1)", p.want(n) + "_keep",
                 f"{p.shape(checks.Shape(axes, None))}: the padding mask, the new positions kept")
    return Var(code, shape, None, x.dim, (keep, ""))
