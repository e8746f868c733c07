"""Activations (``ops.ACTIVATIONS``) as code: applied to an expression, as a callable,
as a module; and the width a layer makes for one."""

from __future__ import annotations

from .. import ir
from .imports import F
from .expr import ATOM
from .names import PRODUCT, paren

# the function applying each activation: (module, name), the module written when it is used
_ACT_FN = {"tanh": ("torch", "tanh"), "relu": (F, "relu"), "sigmoid": ("torch", "sigmoid"),
           "gelu": (F, "gelu"), "elu": (F, "elu"), "softplus": (F, "softplus")}
_ACT_MODULE = {"relu": "nn.ReLU()", "tanh": "nn.Tanh()", "sigmoid": "nn.Sigmoid()",
               "gelu": "nn.GELU()", "elu": "nn.ELU()", "softplus": "nn.Softplus()",
               "none": "nn.Identity()"}


def _fn(name: str) -> str:
    module, fn = _ACT_FN[name]
    return f"{module}.{fn}"


def _num(v) -> str:
    return repr(float(v))


def applied(act: ir.Act | None, x: str, prec: int = ATOM) -> tuple[str, int]:
    """act(x) as an expression and how tightly it binds, x binding as tightly as ``prec``:
    ``torch.tanh(x)``, ``F.leaky_relu(x, negative_slope=0.2)``, ``5.0 * torch.tanh(x / 5.0)``
    (c tanh(x / c): a product), ``x.unflatten(-1, (-1, 2)).amax(-1)`` (maxout: the max over
    each run of k consecutive features, Goodfellow et al.); x itself for no activation."""
    if act is None or act.fn == "none":
        return x, prec
    if act.fn == "elu" and act.param("alpha", 1.0) != 1.0:
        return f"{F}.elu({x}, alpha={_num(act.param('alpha'))})", ATOM
    if act.fn in _ACT_FN:
        return f"{_fn(act.fn)}({x})", ATOM
    if act.fn == "leaky_relu":
        return f"{F}.leaky_relu({x}, negative_slope={_num(act.param('slope', 0.01))})", ATOM
    if act.fn == "scaled_tanh":
        c = _num(act.param("c"))
        return f"{c} * torch.tanh({paren(x, prec)} / {c})", PRODUCT
    if act.fn == "maxout":
        return f"{paren(x, prec)}.unflatten(-1, (-1, {int(act.param('k'))})).amax(-1)", ATOM
    raise AssertionError(act.fn)


def act_call(act: ir.Act | None, x: str, prec: int = ATOM) -> str:
    """act(x) as an expression (``applied``), for code that binds it to a name or passes it
    as an argument."""
    return applied(act, x, prec)[0]


def act_fn(act: ir.Act | None) -> str:
    """act as a callable (or None for the identity), for helpers that apply it blockwise."""
    if act is None or act.fn == "none":
        return "None"
    if act.fn in _ACT_FN and not (act.fn == "elu" and act.param("alpha", 1.0) != 1.0):
        return _fn(act.fn)
    return f"lambda h: {act_call(act, 'h')}"


def act_module(p, act: ir.Act) -> str:
    """act as an nn.Module (for nn.Sequential); scaled tanh and maxout are small helper
    classes of the generated file."""
    if act.fn == "elu" and act.param("alpha", 1.0) != 1.0:
        return f"nn.ELU(alpha={_num(act.param('alpha'))})"
    if act.fn == "leaky_relu":
        return f"nn.LeakyReLU({_num(act.param('slope', 0.01))})"
    if act.fn == "scaled_tanh":
        p.helpers.add("scaled_tanh")
        return f"ScaledTanh({_num(act.param('c'))})"
    if act.fn == "maxout":
        p.helpers.add("maxout")
        return f"Maxout({int(act.param('k'))})"
    return _ACT_MODULE[act.fn]


def widened(act: ir.Act, d):
    """The width a layer makes for ``act``: k·d before a maxout over k pieces, else d."""
    return d.times(int(act.param("k"))) if act.fn == "maxout" else d
