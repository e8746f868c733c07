"""Location weights (issue 25): ``location(x, kind = linear|encoding, hop = k, aspect = A)``,
the fixed weight l_j of each position j of x's last axis, computed from the positions alone
(no parameters), so that a memory is ``x * location(x)``:

- ``kind = linear``: l_j = 1 − L_j / T (Tang et al. 2016's Model 2, seed 002's eq. 11),
  one number per position, (…, L, 1);
- ``kind = encoding``: Sukhbaatar et al. 2015's position encoding
  l_kj = (1 − j/J) − (k/d)(1 − 2j/J), k = 1…d the feature, (…, L, d) (seed 002's eq. 10);
  with ``hop = k`` Tang et al.'s Model 1 as its text reads it, k the hop number: one number
  per position, (…, L, 1).

L_j is position j (from 1) or, with ``aspect = A`` (a ``pointers`` input into x's axis),
Tang et al.'s distance |j − a| to the nearest aspect word; T (J) is each example's real
length, its padding left out (weight 0 there). Registered in ``ops.OPS``; the plan rule is
``codegen/location.py``. No torch here (the front end)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ir, ops
from .check.core import Shape, _name

if TYPE_CHECKING:
    from .check import Checker


def aspect_input(self: "Checker", e: ir.Op, axes: tuple[str, ...]) -> ir.Input | None:
    """The pointers input of ``aspect = A``, checked against x's axes (None on an error)."""
    c, x = e.args[1], _name(e.args[0])
    inp = self.cm.model.by_id.get(c.node) if isinstance(c, ir.Ref) else None
    if not (isinstance(inp, ir.Input) and inp.kind == "pointers"):
        self.err(c.loc, f"`aspect` of `location` holds the aspect's positions, a pointers "
                 f"input, but `{_name(c)}` is not one",
                 f"declare `input {_name(c)}: pointers[A] (into = S)`, the positions of the "
                 "aspect's words in the sentence S")
        return None
    if axes != (inp.into,) or len(inp.axes) != 1:
        self.err(e.loc, f"`location({x}, aspect = {inp.id})`: the aspect positions "
                 f"`{inp.id}` point into axis `{inp.into}`, so `{x}` must be one sequence over "
                 f"`{inp.into}` (it runs over {', '.join(axes) or 'no axis'})",
                 f"weigh the words of one sentence, e.g. `location(e, aspect = {inp.id})` "
                 f"with `e` over `{inp.into}`")
        return None
    return inp


@ops.shape_rule("location")
def shape_location(self: "Checker", e, a, nid):
    """(…, L, d) -> (…, L, d) for the position encoding, else (…, L, 1)."""
    x, kind, hop = a[0], e.param("kind", "linear"), e.param("hop")
    if not self._seq(e, x, "weighs positions"):
        return None
    if hop is not None and kind != "encoding":
        self.err(e.loc, f"`hop = {hop}` is the hop number k of Tang et al.'s Model 1 "
                 f"(`kind = encoding`); `kind = {kind}`, 1 − L_j/T, has no k",
                 "drop `hop`, or write `kind = encoding`")
        return None
    if len(e.args) > 1 and aspect_input(self, e, x.axes) is None:
        return None
    return Shape(x.axes, x.dim if kind == "encoding" and hop is None else 1)
