"""Shape rules of the feature operators that cut or group a feature's last axis (issue 25):
``split(x, n, i)``, the i-th of n equal parts of each feature vector (Daniluk et al.'s
key-value(-predict) attention: one output h_t = [k_t; v_t; p_t]), and ``cnn`` with
``groups = g`` or ``separable = true`` (a depthwise convolution, then a pointwise one:
QANet's encoder blocks, Lite Transformer's convolution branch). Registered in ``ops.OPS``
by ``ops.shape_rule``; ``checks`` imports this module. No torch here (the front end)."""

from __future__ import annotations

import math

from . import ops
from typing import TYPE_CHECKING

from .check.core import Shape, _name

if TYPE_CHECKING:
    from .check import Checker


@ops.shape_rule("split")
def shape_split(self: "Checker", e, a, nid):
    """(…, n·d) -> (…, d): part i of n."""
    n, i, x = int(e.param("parts")), int(e.param("index")), _name(e.args[0])
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


@ops.shape_rule("cnn")
def shape_cnn(self: "Checker", e, a, nid):
    if not self._seq(e, a[0], "convolves over positions"):
        return None
    d, g, x = int(e.param("d")), int(e.param("groups", 1)), _name(e.args[0])
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

