"""Location weights: ``location(x, kind = linear|encoding, hop = k, aspect = A)``, the fixed
weight l_j of each position j of x's last axis, computed from the positions alone (no
parameters), so that a memory is ``x * location(x)``:

- ``kind = linear``: l_j = 1 − L_j / T (Tang et al. 2016's Model 2, seed 002's eq. 11),
  one number per position, (…, L, 1);
- ``kind = encoding``: Sukhbaatar et al. 2015's position encoding
  l_kj = (1 − j/J) − (k/d)(1 − 2j/J), k = 1…d the feature, (…, L, d) (seed 002's eq. 10);
  with ``hop = k`` Tang et al.'s Model 1 as its text reads it, k the hop number: one number
  per position, (…, L, 1).

L_j is position j (from 1) or, with ``aspect = A`` (a ``pointers`` input into x's axis),
Tang et al.'s distance |j − a| to the nearest aspect word; T (J) is each example's real
length, its padding left out (weight 0 there). The generated code calls the ``location``
helper with x's positions, its padding mask and the aspect's positions."""

from __future__ import annotations

from .. import ir
from ..shapes import Shape, expr_name
from .record import P, enum, node, op


def aspect_input(self, e: ir.Op, axes: tuple[str, ...]) -> ir.Input | None:
    """The pointers input of ``aspect = A``, checked against x's axes (None on an error)."""
    c, x = e.args[1], expr_name(e.args[0])
    inp = self.cm.model.by_id.get(c.node) if isinstance(c, ir.Ref) else None
    if not (isinstance(inp, ir.Input) and inp.kind == "pointers"):
        self.err(c.loc, f"`aspect` of `location` holds the aspect's positions, a pointers "
                 f"input, but `{expr_name(c)}` is not one",
                 f"declare `input {expr_name(c)}: pointers[A] (into = S)`, the positions of "
                 "the aspect's words in the sentence S")
        return None
    if axes != (inp.into,) or len(inp.axes) != 1:
        self.err(e.loc, f"`location({x}, aspect = {inp.id})`: the aspect positions "
                 f"`{inp.id}` point into axis `{inp.into}`, so `{x}` must be one sequence over "
                 f"`{inp.into}` (it runs over {', '.join(axes) or 'no axis'})",
                 f"weigh the words of one sentence, e.g. `location(e, aspect = {inp.id})` "
                 f"with `e` over `{inp.into}`")
        return None
    return inp


def shape_location(self, e, a, nid):
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


def plan_location(p, e, a, n):
    k = p.kit
    x = a[0]
    p.helpers.add("location")
    xin = k.local(p, x)
    args = [xin, p.mask_arg(x)]
    kind, hop = e.param("kind", "linear"), e.param("hop")
    if kind == "encoding":
        args.append("encoding=True")
    if hop is not None:
        args.append(f"hop={p.p(e, 'hop')}")
    if len(a) > 1:  # the aspect's positions (B, A) and their padding mask
        args += [f"aspect={a[1].name}", f"aspect_mask={p.mask_arg(a[1])}"]
    per_feature = kind == "encoding" and hop is None
    shape = Shape(x.shape.axes, x.shape.dim if per_feature else 1)
    return k.Var(f"location({', '.join(args)})", shape, x.mask,
                 x.dim if per_feature else k.Dim(1), x.mask_code)


OPS = {o.name: o for o in (
    # fixed location weights l_j of x's positions, no parameters: 1 - L_j/T (Tang et al.'s
    # eq. 11) or Sukhbaatar et al.'s encoding (eq. 10, k = hop or feature); L_j is the
    # position, or the distance to the aspect's positions (a pointers input)
    op("location", node(), enum("kind", ("linear", "encoding"), "linear"),
       P("hop", "int", False), P("aspect", "node", False),
       shape=shape_location, plan=plan_location),
)}
