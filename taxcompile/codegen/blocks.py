"""Plan rules of the everyday blocks outside the survey's vocabulary: layer norm and
RMSNorm (``norm``), the feed-forward layer with its gated variants (``ffn``, SwiGLU / GEGLU),
and ``prepend(x, n)``, n learned vectors (a CLS token, registers) before the first position,
with the padding mask extended so that they are never masked."""

from __future__ import annotations

from .. import checks
from ..ops import GATED_ACTS, plan_rule
from .acts import act_module, widened
from .features import local, op_module, same
from .frame import Var


@plan_rule("norm")
def norm(p, e, a, n):
    if e.param("kind", "layer") == "rms":  # x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich)
        mod = op_module(p, e, n, "norm", f"nn.RMSNorm({a[0].dim})")
    else:
        mod = op_module(p, e, n, "norm", f"nn.LayerNorm({a[0].dim})")
    return same(a[0], f"{mod}({a[0].name})")


@plan_rule("ffn")
def ffn(p, e, a, n):
    x, d_ff, act = a[0], p.p(e, "d_ff"), e.param("act")
    if act.fn in GATED_ACTS:  # (act(x W) * x V) W2 (Shazeer 2020)
        p.helpers.add("gated_ffn")
        mod = op_module(p, e, n, "ffn", f"GatedFFN({x.dim}, {d_ff}, \"{act.fn}\")")
        return same(x, f"{mod}({x.name})")
    mod = op_module(p, e, n, "ffn",
                    f"nn.Sequential(nn.Linear({x.dim}, {widened(act, d_ff)}), {act_module(p, act)}, "
                    f"nn.Linear({d_ff}, {x.dim}))")
    return same(x, f"{mod}({x.name})")


@plan_rule("prepend")
def prepend(p, e, a, n):
    """[v_1; …; v_n; x_1; …; x_S] over the last axis, the v_i learned (one per position and
    example, the same for every example); the padding mask gets n True positions in front."""
    x, count = a[0], int(e.param("n", 1))
    axes = x.shape.axes[:-1] + (f"{x.shape.axes[-1]}+{count}",)  # as checks.blocks names it
    shape = checks.Shape(axes, x.shape.dim)
    mod = p.module(n, p.suffix(n, "prepend", e),
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
