"""Query-key normalisation with learned gains: q and k each divided by its norm (l2, or RMS:
x / |x| times sqrt(d), x times rsqrt of its mean square) and times a learned gain per
feature, before their dot product (x-transformers' qk_norm_dim_scale and qk_rmsnorm, the
registry's `qk_norm` with `dim_scale` or `rms`). The registry reads such a score as the
score as written, not a cosine (taxcompile/mechanisms/others.py `_cosine`): the gains weigh
each feature, so q^T diag(g_q g_k) k is no angle. Read only where both streams are
normalised and both carry gains, as the record builds them; a gain on one stream alone
(q^T diag(w) k over normalised streams) has no record and stays refused."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .normalise import TRANSPARENT, _unit, ancestors, normalised, op, shape, tensor_args


@dataclass
class Normed:
    """A stream read as norm(x) times gains: the normalising node, its kind ('RMS' or
    'l2'), the gains, the constant sqrt(d) an RMS norm multiplies by (None where the norm
    divides by the root mean square itself), and the other constants (the score's scaling)."""
    norm: object
    kind: str
    gains: list = field(default_factory=list)
    rms_const: object = None
    scales: list = field(default_factory=list)


def _value(node) -> float | None:
    """The number a scaling by one constant multiplies by (a division's reciprocal)."""
    num = [a for a in node.args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    if len(num) != 1 or not num[0]:
        return None
    return float(num[0]) if op(node) == "mul" else 1.0 / float(num[0])


def _learned(node, r) -> bool:
    return any(r.is_param(a) for a in [node, *ancestors(node, 4)])


def _factors(node, r):
    """(x, factors, constants): ``node`` as x times factors that read no input (tensors)
    and constants (scalings by a number), through moves; x the first node that is neither."""
    n, factors, consts = node, [], []
    for _ in range(16):
        args = tensor_args(n)
        if op(n) in TRANSPARENT and args:
            n = args[0]
        elif op(n) in ("mul", "div") and len(args) == 1:
            consts += [] if _unit(n) else [n]
            n = args[0]
        elif op(n) == "mul" and len(args) == 2:
            data = [a for a in args if r.roots(a)]
            if len(data) != 1:
                return n, factors, consts  # x times its norm's reciprocal: the norm itself
            factors.append(next(a for a in args if a is not data[0]))
            n = data[0]
        else:
            break
    return n, factors, consts


def stream(node, r) -> Normed | None:
    """``node`` read as a normalised stream times learned gains per feature (and constants);
    None where it is not one, a factor that is no such gain (a learned scalar, a vector
    read from no parameter) included."""
    x, factors, consts = _factors(node, r)
    d = (shape(node) or (None,))[-1]
    x = normalised(x)
    if x is None or not factors or not isinstance(d, int) or d < 2:
        return None
    for g in factors:
        s = shape(g)
        if not s or s[-1] != d or not _learned(g, r):
            return None
    divisor = tensor_args(x)[1]
    rms = any(op(a) == "mean" for a in [divisor, *ancestors(divisor, 5)])
    got = Normed(x, "RMS" if rms else "l2", list(factors))
    for c in consts:
        v = _value(c)
        if not rms and got.rms_const is None and v is not None \
                and math.isclose(v, math.sqrt(d), rel_tol=1e-6):
            got.kind, got.rms_const = "RMS", c  # x / |x| sqrt(d) = x / rms(x)
        else:
            got.scales.append(c)
    return got


def read(qs, ks, r):
    """(reason, constants scaling the score) where q and k are both normalised streams
    times learned gains per feature; None otherwise."""
    q, k = stream(qs, r), stream(ks, r)
    if q is None or k is None:
        return None
    kinds = sorted({q.kind, k.kind})
    how = " and ".join(f"{kind}-normalised" for kind in kinds)
    rms = [s.rms_const for s in (q, k) if s.rms_const is not None]
    times = f", times sqrt(d) ({', '.join(f'`{c.name}`' for c in rms)})" if rms else ""
    gains = ", ".join(f"`{g.name}`" for g in (*q.gains, *k.gains))
    reason = (f"; q and k are each {how} (`{q.norm.name}`, `{k.norm.name}`{times}) and times "
              f"a learned gain per feature ({gains}): query-key normalisation with learned "
              "gains, a dot product of transformed q and k read as written, not a cosine "
              "(the gains weigh each feature)")
    return reason, [*q.scales, *k.scales]
