"""The feature operators that cut or group a feature's last axis: ``split(x, n, i)``, the
i-th of n equal parts of each feature vector (Daniluk et al.'s key-value(-predict)
attention: one output h_t = [k_t; v_t; p_t]), and ``cnn`` with ``groups = g`` or
``separable = true`` (a depthwise convolution, then a pointwise one: QANet's encoder
blocks, Lite Transformer's convolution branch)."""

from __future__ import annotations

import math

from ..shapes import Shape, expr_name
from .record import ACTS, SHARE, P, act, node, op, pint


def shape_split(self, e, a, nid):
    """(…, n·d) -> (…, d): part i of n."""
    n, i, x = int(e.param("parts")), int(e.param("index")), expr_name(e.args[0])
    if i >= n:
        self.err(e.loc, f"`split({x}, {n}, {i})` takes part {i} of {n}, but the parts are "
                 f"numbered 0 to {n - 1}", f"e.g. `split({x}, {n}, {n - 1})` for the last part")
        return None
    if a[0].dim % n:
        self.err(e.loc, f"`split` cuts the features of `{x}` {a[0]} into {n} equal parts, "
                 f"but {n} does not divide {a[0].dim}", f"make the layer before it a multiple "
                 f"of {n} wide, e.g. `lstm(x, {n} * d)`")
        return None
    return Shape(a[0].axes, a[0].dim // n)


def shape_cnn(self, e, a, nid):
    if not self._seq(e, a[0], "convolves over positions"):
        return None
    d, g, x = int(e.param("d")), int(e.param("groups", 1)), expr_name(e.args[0])
    if e.param("separable", False) and g != 1:
        self.err(e.loc, "`separable = true` is a depthwise convolution (one group per input "
                 "feature) followed by a pointwise one, so it takes no `groups`",
                 "drop `groups`, or write the two convolutions: "
                 f"`linear(cnn({x}, d_in, k, groups = d_in, act = none), d)`")
        return None
    if g > 1 and (a[0].dim % g or d % g):
        self.err(e.loc, f"`cnn` with groups = {g} convolves {g} groups of features apart, but "
                 f"{g} does not divide both the {a[0].dim} features of `{x}` and the {d} it "
                 "makes", f"choose a group count that divides both, e.g. groups = "
                 f"{math.gcd(a[0].dim, d)}")
        return None
    return Shape(a[0].axes, d)


def plan_split(p, e, a, n):
    """Part i of n equal parts of the features: (…, n·d) -> (…, d) (Daniluk et al.)."""
    k = p.kit
    x, parts, i = a[0], int(e.param("parts")), int(e.param("index"))
    p.divides.append((x.dim, parts))
    return k.resized(x, f"{k.atom(x)}.chunk({parts}, -1)[{i}]", x.shape.dim // parts,
                     x.dim.divided(parts))


def conv_module(p, e, n, x, d, act_) -> str:
    """nn.Conv1d over x's features; with ``groups = g`` g groups convolved apart, with
    ``separable`` a depthwise convolution (no bias: the pointwise one's bias follows) and a
    pointwise one (Chollet 2017; QANet)."""
    k = p.kit
    size, out = int(e.param("kernel", 3)), k.widened(act_, d)
    bias = "" if e.param("bias", True) else ", bias=False"
    # causal: k - 1 zeros on both sides, and ``cnn`` keeps the first L outputs
    pad = size - 1 if e.param("causal", False) else '"same"'
    if e.param("separable", False):
        return k.op_module(p, e, n, "conv",
                           lambda: f"nn.Sequential(nn.Conv1d({x.dim}, {x.dim}, "
                                   f"kernel_size={size}, padding={pad}, groups={x.dim}, "
                                   f"bias=False), nn.Conv1d({x.dim}, {out}, kernel_size=1{bias}))",
                           "depthwise, then pointwise")
    g = None
    if int(e.param("groups", 1)) > 1:
        g = p.p(e, "groups")
        p.divides.extend([(x.dim, g), (out, g)])
    return k.op_module(p, e, n, "conv", lambda: f"nn.Conv1d({x.dim}, {out}, kernel_size={size}, "
                       f"padding={pad}{'' if g is None else f', groups={g}'}{bias})")


def plan_cnn(p, e, a, n):
    k = p.kit
    x, d, act_ = a[0], p.p(e, "d"), e.param("act")
    mod = conv_module(p, e, n, x, d, act_)
    out_shape = p.shape(Shape(x.shape.axes, e.param("d")), dim=k.widened(act_, d))
    mk = p.mask_of(x)
    if mk is not None:  # padding must not leak into real positions through the kernel
        name, suffix = mk
        xin = k.local(p, x)
        padded = p.tmp(f"{xin} if {name} is None else "
                       f"{xin}.masked_fill(~{name}{suffix}.unsqueeze(-1), 0.0)",
                       "h", "padded positions set to zero")
        x = k.same(x, padded)
    # causal: of the L + k - 1 outputs, the first L read no later position
    causal = e.param("causal", False)
    what = ": convolve over earlier positions" if causal else ": convolve over positions"
    if len(x.shape.axes) == 1:  # (B, L, d): Conv1d wants (B, d, L)
        cut = f"[:, :{k.atom(x)}.shape[1]]" if causal else ""
        y = p.tmp(f"{mod}({k.atom(x)}.transpose(1, 2)).transpose(1, 2){cut}", "y",
                  out_shape + what)
    else:
        xin = k.local(p, x)
        cut = f"[:, :{xin}.shape[-2]]" if causal else ""
        xs = p.tmp(f"{xin}.reshape(-1, {xin}.shape[-2], {xin}.shape[-1])", "xs",
                   "(N, L, d): leading axes folded into the batch")
        y = p.tmp(f"{mod}({xs}.transpose(1, 2)).transpose(1, 2){cut}"
                  f".reshape(*{xin}.shape[:-1], -1)", "y", out_shape + what)
    code, prec = k.applied(act_, y)
    return k.resized(x, code, e.param("d"), d, prec)


OPS = {o.name: o for o in (
    # groups: g groups of features convolved apart (groups = d: depthwise); separable: a
    # depthwise convolution then a pointwise one to d (QANet; Lite Transformer's branch);
    # causal: position l reads l-k+1 .. l only (a language model's convolution)
    op("cnn", node(), pint("d"), pint("kernel", False, 3), act("relu", ACTS), SHARE,
       pint("groups", False, 1), P("separable", "bool", False, False),
       P("bias", "bool", False, True), P("causal", "bool", False, False), shape=shape_cnn,
       plan=plan_cnn),
    # part `index` (from 0) of `parts` equal parts of the features: torch.chunk(x, n, -1)[i]
    # (Daniluk et al.'s key, value and predict parts of one output)
    op("split", node(), pint("parts", lo=2), pint("index", lo=0),
       shape=shape_split, plan=plan_split),
)}
