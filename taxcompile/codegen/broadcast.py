"""Plan rules of ``a + b``, ``a - b`` and ``a * b``: the reading ``taxcompile.broadcast``
chose for the shapes (equal, a gate, weights over positions, or a vector tiled over the
wide side's inner positions), written with torch's broadcasting."""

from __future__ import annotations

from .. import broadcast, checks
from ..ops import plan_rule
from .frame import Var
from .names import atom

OP = {"add": "+", "sub": "-", "mul": "*"}


@plan_rule("add", "sub", "mul")
def elementwise(p, e, a, n):
    x, y = a
    r = broadcast.reading(e.fn, [v.shape for v in a],
                          [broadcast.weights_axis(p.cm, arg) for arg in e.args])
    assert r is not None, "checks refuses shapes that do not combine"
    if r.how in ("same", "tile"):
        p.equal.append((x.dim, y.dim))
    if r.how in ("same", "gate"):
        out = a[r.wide]
        if e.fn == "add":
            return Var(f"{x.name} + {y.name}", x.shape, x.mask or y.mask, x.dim, x.mask_code)
        left = atom(x.name) if e.fn == "mul" else x.name
        return Var(f"{left} {OP[e.fn]} {atom(y.name)}", out.shape, x.mask or y.mask, out.dim,
                   out.mask_code)
    wide, narrow = a[r.wide], a[1 - r.wide]
    if r.how == "weigh":
        code = p.tmp(f"{atom(narrow.name)}.unsqueeze(-1)", "weight",
                     f"{p.shape(checks.Shape(wide.shape.axes, 1))}: one weight per position "
                     f"of {wide.shape.axes[-1]}")
    else:
        ones = checks.Shape(narrow.shape.axes + ("1",) * len(r.extra), narrow.shape.dim)
        code = p.tmp(atom(narrow.name) + ".unsqueeze(-2)" * len(r.extra), "tiled",
                     f"{p.shape(ones, dim=narrow.dim)}: the same at every position of "
                     f"{', '.join(r.extra)}")
    left, right = (wide.name, code) if r.wide == 0 else (code, wide.name)
    if e.fn == "mul":
        left = atom(left)
    if e.fn != "add":
        right = atom(right)
    return Var(f"{left} {OP[e.fn]} {right}", wide.shape, wide.mask, wide.dim, wide.mask_code)
