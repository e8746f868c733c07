"""Plan rules of ``split(x, n, i)`` and ``cnn`` (with ``groups`` or ``separable``): the
operators of ``taxcompile/feature_ops.py``."""

from __future__ import annotations

import re

from .. import checks
from ..ops import plan_rule
from .acts import act_call, widened
from .features import local, op_module, resized, same
from .names import Dim, atom


@plan_rule("split")
def split(p, e, a, n):
    """Part i of n equal parts of the features: (…, n·d) -> (…, d) (Daniluk et al.)."""
    x, parts, i = a[0], int(e.param("parts")), int(e.param("index"))
    p.divides.append((x.dim, str(parts)))
    return resized(x, f"{atom(x.name)}.chunk({parts}, -1)[{i}]", x.shape.dim // parts,
                   divided(x.dim, parts))


def divided(dim: Dim, n: int) -> Dim:
    """dim / n as a size: ``(3 * cfg.d)`` / 3 reads ``cfg.d``."""
    if not dim.terms:
        return Dim(dim.const // n)
    text = str(dim)
    m = re.fullmatch(rf"\(?{n} \* (cfg\.\w+)\)?", text)
    if m:
        return Dim(0, (m.group(1),))
    return Dim(0, (f"{text if len(dim.terms) == 1 and not dim.const else f'({text})'} // {n}",))


def conv_module(p, e, n, x, d, act) -> str:
    """nn.Conv1d over x's features; with ``groups = g`` g groups convolved apart, with
    ``separable`` a depthwise convolution (no bias: the pointwise one's bias follows) and a
    pointwise one (Chollet 2017; QANet)."""
    k, out = int(e.param("kernel", 3)), widened(act, d)
    bias = "" if e.param("bias", True) else ", bias=False"
    # causal: k - 1 zeros on both sides, and ``cnn`` keeps the first L outputs
    pad = k - 1 if e.param("causal", False) else '"same"'
    if e.param("separable", False):
        return op_module(p, e, n, "conv", f"nn.Sequential(nn.Conv1d({x.dim}, {x.dim}, "
                         f"kernel_size={k}, padding={pad}, groups={x.dim}, bias=False), "
                         f"nn.Conv1d({x.dim}, {out}, kernel_size=1{bias}))",
                         "depthwise, then pointwise")
    groups = ""
    if int(e.param("groups", 1)) > 1:
        g = p.p(e, "groups")
        p.divides.extend([(x.dim, str(g)), (out, str(g))])
        groups = f", groups={g}"
    return op_module(p, e, n, "conv", f"nn.Conv1d({x.dim}, {out}, kernel_size={k}, "
                     f"padding={pad}{groups}{bias})")


@plan_rule("cnn")
def cnn(p, e, a, n):
    x, d, act = a[0], p.p(e, "d"), e.param("act")
    mod = conv_module(p, e, n, x, d, act)
    out_shape = p.shape(checks.Shape(x.shape.axes, e.param("d")), dim=widened(act, d))
    mk = p.mask_of(x)
    if mk is not None:  # padding must not leak into real positions through the kernel
        name, suffix = mk
        xin = local(p, x)
        padded = p.tmp(f"{xin} if {name} is None else "
                       f"{xin}.masked_fill(~{name}{suffix}.unsqueeze(-1), 0.0)",
                       "h", "padded positions set to zero")
        x = same(x, padded)
    # causal: of the L + k - 1 outputs, the first L read no later position
    causal = e.param("causal", False)
    what = ": convolve over earlier positions" if causal else ": convolve over positions"
    if len(x.shape.axes) == 1:  # (B, L, d): Conv1d wants (B, d, L)
        cut = f"[:, :{atom(x.name)}.shape[1]]" if causal else ""
        y = p.tmp(f"{mod}({atom(x.name)}.transpose(1, 2)).transpose(1, 2){cut}", "y",
                  out_shape + what)
    else:
        xin = local(p, x)
        cut = f"[:, :{xin}.shape[-2]]" if causal else ""
        xs = p.tmp(f"{xin}.reshape(-1, {xin}.shape[-2], {xin}.shape[-1])", "xs",
                   "(N, L, d): leading axes folded into the batch")
        y = p.tmp(f"{mod}({xs}.transpose(1, 2)).transpose(1, 2){cut}"
                  f".reshape(*{xin}.shape[:-1], -1)", "y", out_shape + what)
    return resized(x, act_call(act, y), e.param("d"), d)
