"""Plan rule of ``location(x, kind = …, hop = k, aspect = A)``: fixed location weights of
x's positions (Tang et al. 2016's eq. 10-11, Sukhbaatar et al. 2015's position encoding),
computed by the ``location`` helper from x's positions, its padding mask (each example's
real length T) and, with ``aspect``, the aspect's positions (``taxcompile/location.py``)."""

from __future__ import annotations

from .. import checks
from ..ops import plan_rule
from .features import local
from .frame import Var
from .names import Dim


@plan_rule("location")
def location(p, e, a, n):
    x = a[0]
    p.helpers.add("location")
    xin = local(p, x)
    args = [xin, p.mask_arg(x)]
    kind, hop = e.param("kind", "linear"), e.param("hop")
    if kind == "encoding":
        args.append("encoding=True")
    if hop is not None:
        args.append(f"hop={p.p(e, 'hop')}")
    if len(a) > 1:  # the aspect's positions (B, A) and their padding mask
        args += [f"aspect={a[1].name}", f"aspect_mask={p.mask_arg(a[1])}"]
    per_feature = kind == "encoding" and hop is None
    shape = checks.Shape(x.shape.axes, x.shape.dim if per_feature else 1)
    return Var(f"location({', '.join(args)})", shape, x.mask,
               x.dim if per_feature else Dim(1), x.mask_code)
