"""Weights applied in place: c_l = a_l v_l, each value scaled by its own weight with no sum
over the keys (Wang et al.'s input attention scales each word's window before a convolution;
Oktay et al.'s attention gates scale each pixel's features, one weight per feature). The
survey's weighted sum (eq. 4) is then left to what follows, or never taken; the weights
are the same attention's, so ``recognise`` reads the score, alignment and heads as for a sum.

A product counts as such only where the weights line up with the values' positions: the
product has the values' shape (the weights broadcast into them), and the weights' key axis
(the one normalised, or a sigmoid's last before a feature axis) sits on one of the values'
axes between the batch and the features, same size. A softmax over channels that gates
every position alike (its weights on the features' axis alone) is no attention over
positions and is not read here."""
from __future__ import annotations

from .normalise import op, shape, tensor_args


def key_size(norm) -> int | None:
    """The size of the keys' axis of ``norm``'s weights: the axis a softmax normalises; a
    sigmoid's last (or, one weight per feature, its last but one: read by ``values``)."""
    s = shape(norm)
    if not s:
        return None
    if op(norm) in ("softmax", "log_softmax") and len(norm.args) > 1 \
            and isinstance(norm.args[1], int):
        return s[norm.args[1]]
    return None


def values(norm, mul, mine: set):
    """The values ``mul`` (a product of ``norm``'s weights and another tensor, no sum after)
    weighs in place, or None where the product is no such weighing."""
    args = tensor_args(mul)
    if op(mul) != "mul" or len(args) != 2 or (args[0] in mine) == (args[1] in mine):
        return None
    w, v = (args[0], args[1]) if args[0] in mine else (args[1], args[0])
    sw, sv, so = shape(w), shape(v), shape(mul)
    if not sw or not sv or so != sv or len(sv) < 3 or len(sw) > len(sv):
        return None
    sw = (1,) * (len(sv) - len(sw)) + tuple(sw)  # right-aligned, as broadcasting reads it
    if any(a not in (1, b) for a, b in zip(sw, sv)):
        return None
    multi = sw[-1] == sv[-1] and sv[-1] > 1
    if not multi and sw[-1] != 1:
        return None
    lk = key_size(norm)
    if lk is None:  # a sigmoid: its last axis, or its last but one with one weight per feature
        sn = shape(norm) or ()
        lk = sn[-2] if multi and len(sn) >= 2 else (sn[-1] if sn else None)
    # the keys' axis: between the batch and the features, in both, the same size
    if lk is None or lk < 2 or not any(sw[i] == sv[i] == lk for i in range(1, len(sv) - 1)):
        return None
    return v


def note(a, mul) -> None:
    """Say in ``a``'s reasons that its weights are applied in place."""
    dim = a.values.get("dimensionality")
    if dim is not None:
        a.values["dimensionality"] = (dim[0], f"{dim[1]}; `{mul.name}` scales each value by "
                                      "its weight in place, with no sum over the keys")


def swapped(r, app, values, q, k) -> bool:
    """Whether a score's two streams, read as (q, k), are the other way round: weights
    applied in place scale the values at the keys' own positions, so where the values read
    the inputs of ``q`` and not those of ``k`` (an attention gate's W_x x_i + W_g g_i written
    in either order), ``q`` holds the keys."""
    if q is None or k is None or values is None or op(app) != "mul" or \
            any(op(u) == "sum" for u in app.users):
        return False
    rv, rq, rk = r.roots(values), r.roots(q), r.roots(k)
    # the values read q's inputs and not k's, or exactly q's where k reads more (a query
    # built from the keys' input and something else)
    return bool(rv) and (rv <= rq and not rv <= rk or rq == rv != rk)


def over_queries(node, norm) -> bool:
    """Whether ``node`` averages (or sums) weights over an axis other than their last, the
    keys' (AoA's beta-bar: beta averaged over the document's words, still weights over the
    query's words), where ``norm`` normalises over its last axis."""
    args = tensor_args(node)
    s, sn = shape(args[0]) if args else None, shape(norm)
    if op(node) not in ("mean", "sum") or not s or not sn or len(node.args) < 2:
        return False
    dims = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
    last = op(norm) in ("softmax", "log_softmax") and len(norm.args) > 1 and \
        norm.args[1] % len(sn) == len(sn) - 1
    return last and s[-1] == sn[-1] and bool(dims) and all(
        isinstance(d, int) and d % len(s) != len(s) - 1 for d in dims)
