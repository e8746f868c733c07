"""Plan rules of the operators that read attention weights as values:
``att.weights``, ``context(V, A)`` and a pointer network's ``pointed(X, C)``."""

from __future__ import annotations

from .. import checks
from ..ops import plan_rule
from .features import local
from .frame import Var
from .expr import ATOM
from .names import PRODUCT, atom


@plan_rule("weights")
def weights(p, e, a, n):
    """``att.weights``: bound by the attention's plan (attention.weights_value)."""
    return p.frame.vars[e.args[0].node + ".weights"]


@plan_rule("context")
def context(p, e, a, n):
    """A V: the values weighted by given weights over the values' last axis (Cui et al.'s
    s = alpha^T beta-bar); padded positions of the values count nothing."""
    v, w = a
    mk = p.mask_of(v)
    vin = local(p, v, "v")
    if mk is not None:
        name, suffix = mk
        vin = p.tmp(f"{vin} if {name} is None else {vin}.masked_fill(~{name}{suffix}"
                    ".unsqueeze(-1), 0.0)", "v", "padded positions set to zero")
    shape = checks.Shape(w.shape.axes, v.shape.dim)
    if len(w.shape.axes) == len(v.shape.axes) - 1:  # one weight vector per group
        code, prec = f"({atom(w)}.unsqueeze(-2) @ {vin}).squeeze(-2)", ATOM
    else:  # (…, Lq, Lk) @ (…, Lk, d)
        code, prec = f"{atom(w)} @ {vin}", PRODUCT
    return Var(code, shape, w.mask, v.dim, w.mask_code, prec=prec)


@plan_rule("pointed")
def pointed(p, e, a, n):
    """A pointer network's decoder input (Vinyals et al. 2015): step i reads x at the
    previous target pointer C_(i-1) (teacher forcing), step 0 a zero vector (the start
    symbol)."""
    x, c = a
    p.helpers.add("pointed")
    return Var(f"pointed({x.name}, {c.name})", checks.Shape(c.shape.axes, x.shape.dim), c.mask,
               x.dim, c.mask_code)
