"""The everyday blocks outside the survey's vocabulary: ``norm`` (layer norm, Ba et al., or
RMSNorm, Zhang & Sennrich 2019: x / RMS(x) * g, no centring), ``ffn`` (the feed-forward
layer, with the gated variants of Shazeer 2020, SwiGLU / GEGLU) and ``prepend(x, n)``, n
learned vectors (a CLS token, registers) before the first position of a sequence, with the
padding mask extended so that they are never masked."""

from __future__ import annotations

from ..shapes import Shape, expr_name
from .record import ACTS, GATED_ACTS, SHARE, P, act, enum, node, op, pint


def shape_same(self, e, a, nid):
    """The shape of its input: (…, d) -> (…, d)."""
    return a[0]


def shape_prepend(self, e, a, nid):
    """n more positions on the last axis, named ``S+n``: (…, S, d) -> (…, S+n, d)."""
    if not self._seq(e, a[0], "prepends positions to a sequence"):
        return None
    if a[0].dim is None:
        self.err(e.args[0].loc, f"`prepend` adds learned vectors, but `{expr_name(e.args[0])}` "
                 f"holds token ids {a[0]}", "embed them first: `prepend(embed(x, d), 1)`")
        return None
    node_ = self.cm.model.by_id.get(nid)
    if getattr(node_, "hop", None) is not None:
        self.err(e.loc, "`prepend` inside a `repeat` would add its vectors again at every hop",
                 "prepend once, before the repeat: `feature x = prepend(embed(src, d), 1)`")
        return None
    n = int(e.param("n", 1)) if len(a) < 2 else prepended_set(self, e, a)
    if n is None:
        return None
    axis = a[0].axes[-1]
    name = prepended(e, a[0].axes, a[1].axes if len(a) > 1 else None)
    size = self.cm.sizes.get(axis)
    self.cm.sizes[name] = None if size is None else size + n
    self.cm.axis_origin.setdefault(name, self.cm.axis_origin.get(axis, nid))
    return Shape(a[0].axes[:-1] + (name,), a[0].dim)


def prepended_set(self, e, a) -> int | None:
    """``prepend(x, v)``: v one learned vector (d) or a set of them (K, d) of x's size, on an
    axis of fixed length that no mask reaches (``learned(K, d)``, or what is computed from
    it position by position); its count, or None after a located error."""
    x, v = a
    xn, vn = expr_name(e.args[0]), expr_name(e.args[1])
    origin = self.cm.model.by_id.get(self.cm.axis_origin.get(v.axes[0])) if v.axes else None
    hint = f"write `prepend({xn}, learned(K, {x.dim}))` (K learned vectors) or `prepend({xn}, K)`"
    if v.dim != x.dim:
        self.err(e.args[1].loc, f"`prepend` puts `{vn}` before the first position of `{xn}` "
                 f"{x}, but `{vn}` {'holds token ids' if v.dim is None else 'has'} {v}",
                 f"the vectors need `{xn}`'s size {x.dim}: {hint}")
        return None
    if len(v.axes) > 1 or v.axes and (self.cm.sizes.get(v.axes[0]) is None or origin is None
                                      or origin.kind_ == "input"):
        self.err(e.args[1].loc, f"`prepend` puts learned vectors before the first position, "
                 f"but `{vn}` {v} runs over {', '.join(f'`{ax}`' for ax in v.axes)}, "
                 "positions of an input's data", f"{hint}: a fixed number of vectors, the "
                 "same for every example and never masked")
        return None
    return self.cm.sizes[v.axes[0]] if v.axes else 1


def prepended(e, x_axes: tuple[str, ...], v_axes: tuple[str, ...] | None = None) -> str:
    """The axis ``prepend`` makes of x's last axis, for the shape and plan rule alike:
    ``S+n``; with ``learned(K, d)`` given, ``S+K`` (K as the spec writes it); with one vector
    ``S+1``; with another set, ``S+`` its axis."""
    axis = x_axes[-1]
    if len(e.args) < 2:
        return f"{axis}+{int(e.param('n', 1))}"
    v = e.args[1]
    if getattr(v, "fn", None) == "learned" and v.param("n") is not None:
        return f"{axis}+{dict(v.sym).get('n') or v.param('n')}"
    return f"{axis}+{v_axes[0] if v_axes else 1}"


def plan_norm(p, e, a, n):
    k = p.kit
    eps = e.param("eps")  # a checked positive float; none: torch's default
    tail = "" if eps is None else f", eps={float(eps)!r}"
    if e.param("kind", "layer") == "rms":  # x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich)
        mod = k.op_module(p, e, n, "norm", lambda: f"nn.RMSNorm({a[0].dim}{tail})")
    else:
        mod = k.op_module(p, e, n, "norm", lambda: f"nn.LayerNorm({a[0].dim}{tail})")
    return k.same(a[0], f"{mod}({a[0].name})")


def plan_ffn(p, e, a, n):
    k = p.kit
    x, d_ff, act_ = a[0], p.p(e, "d_ff"), e.param("act")
    if act_.fn in GATED_ACTS:  # (act(x W) * x V) W2 (Shazeer 2020)
        p.helpers.add("gated_ffn")
        mod = k.op_module(p, e, n, "ffn", lambda: f"GatedFFN({x.dim}, {d_ff}, \"{act_.fn}\")")
        return k.same(x, f"{mod}({x.name})")
    mod = k.op_module(p, e, n, "ffn",
                      lambda: f"nn.Sequential(nn.Linear({x.dim}, {k.widened(act_, d_ff)}), "
                              f"{k.act_module(p, act_)}, nn.Linear({d_ff}, {x.dim}))")
    return k.same(x, f"{mod}({x.name})")


def plan_prepend(p, e, a, n):
    """[v_1; …; v_n; x_1; …; x_S] over the last axis, the v_i learned (one per position and
    example, the same for every example); the padding mask gets n True positions in front."""
    k = p.kit
    x = a[0]
    axes = x.shape.axes[:-1] + (prepended(e, x.shape.axes, a[1].shape.axes if len(a) > 1
                                          else None),)
    shape = Shape(axes, x.shape.dim)
    h = k.local(p, x)
    if len(a) > 1:  # the given vectors, (B, d) or (B, K, d), over x's other axes
        v = k.local(p, a[1])
        nones = len(x.shape.axes) - (1 if a[1].shape.axes else 0)
        count = f"{v}.shape[-2]" if a[1].shape.axes else "1"
        front = f"{v}[:{', None' * nones}].expand(*{h}.shape[:-2], -1, -1)" if nones else v
    else:
        count = int(e.param("n", 1))
        mod = p.module(n, p.suffix(n, "prepend", e),
                       lambda: f"nn.Parameter(torch.randn({count}, {x.dim}) * 0.02)",
                       "learned vectors before the first position (CLS / registers)")
        front = f"{mod}.expand(*{h}.shape[:-2], -1, -1)"
    code = f"torch.cat([{front}, {h}], -2)"
    mk = p.mask_of(x)
    if mk is None:
        return k.Var(code, shape, None, x.dim)
    m = "".join(mk)
    keep = p.tmp(f"None if {mk[0]} is None else torch.cat([{m}.new_ones(*{m}.shape[:-1], "
                 f"{count}), {m}], -1)", p.want(n) + "_keep",
                 f"{p.shape(Shape(axes, None))}: the padding mask, the new positions kept")
    return k.Var(code, shape, None, x.dim, (keep, ""))


OPS = {o.name: o for o in (
    # layer norm (Ba et al.) or RMSNorm (Zhang & Sennrich 2019: x / RMS(x) * g, no centring)
    # eps: added to the mean square (variance); torch's default when not given
    op("norm", node(), enum("kind", ("layer", "rms"), "layer"), P("eps", "float", False), SHARE,
       shape=shape_same, plan=plan_norm),
    op("ffn", node(), pint("d_ff"), act("relu", ACTS + GATED_ACTS), SHARE,
       shape=shape_same, plan=plan_ffn),
    # n learned vectors before the first position (a CLS token, registers): (S, d) -> (S+n, d);
    # or given ones, `prepend(x, learned(K, d))`: (S, d) -> (S+K, d) (lower takes a
    # feature in n's place as `vectors`)
    op("prepend", node(), pint("n", False, 1), P("vectors", "node", False),
       shape=shape_prepend, plan=plan_prepend),
)}
