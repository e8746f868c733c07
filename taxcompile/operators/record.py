"""An operator's record (``OpInfo``) and its parameters (``P``), the vocabulary every operator
record is written in: ``taxcompile.ops`` (the registry) and the operator families beside
this module. Imports nothing of the stages that read the records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir import Act

Scalar = bool | int | float | str


@dataclass(frozen=True)
class P:
    """One parameter of a feature-model operation."""

    name: str
    type: str  # node | nodes | int | float | prob | bool | enum | act
    required: bool = True
    default: Scalar | Act | None = None
    choices: tuple[str, ...] = ()
    lo: int = 1  # int: the least value
    below: float | None = None  # float: values must be below this


def node(name: str = "x") -> P:
    return P(name, "node")


def pint(name: str, required: bool = True, default: int | None = None, lo: int = 1) -> P:
    return P(name, "int", required, default, lo=lo)


def enum(name: str, choices: tuple[str, ...], default: str) -> P:
    return P(name, "enum", False, default, choices)


# Activation functions, ``act = NAME`` or ``act = NAME(params)``, with their parameters
# (defaults as torch's). maxout(k) takes the max over k pieces: d·k features in, d out
# (Goodfellow et al.), so only a layer that sets its own width takes it as its `act`.
ACTIVATIONS: dict[str, tuple[P, ...]] = {
    "none": (),
    "tanh": (),
    "relu": (),
    "sigmoid": (),
    "gelu": (),
    "elu": (P("alpha", "float", False, 1.0),),
    "leaky_relu": (P("slope", "float", False, 0.01, below=1.0),),
    "softplus": (),
    "scaled_tanh": (P("c", "float"),),  # c tanh(x / c) (DiSAN)
    "maxout": (pint("k", lo=2),),
    # gated linear units, ffn only (Shazeer 2020): (act(x W) * x V) W2, Swish = SiLU or GELU
    "swiglu": (),
    "geglu": (),
}
GATED_ACTS = ("swiglu", "geglu")  # multiply by a second projection of the layer's input
ACTS = tuple(a for a in ACTIVATIONS if a not in GATED_ACTS)
WIDTH_ACTS = ("maxout",)  # change the feature size
SAME_WIDTH_ACTS = tuple(a for a in ACTS if a not in WIDTH_ACTS)


def act(default: str, choices: tuple[str, ...] = SAME_WIDTH_ACTS) -> P:
    """An ``act = …`` parameter: an activation from ``choices`` (all but maxout unless the
    operator widens its layer for it)."""
    return P("act", "act", False, Act(fn=default), choices)


# `share = NODE`: the operation uses the module (the weights) of the operation of the same
# operator in statement NODE; one set of parameters, counted once.
SHARE = P("share", "node", False)
# `tie = NODE`: the output layer's weight is the embedding matrix of statement NODE's embed.
TIE = P("tie", "node", False)


@dataclass
class OpInfo:
    name: str
    params: tuple[P, ...]
    label: str  # how a diagram names it
    infix: bool = False  # written as an operator (``a + b``), not a call
    shape: Callable | None = None  # (checker, op, arg shapes, node id) -> Shape | None
    plan: Callable | None = None  # (planner, op, arg vars, node) -> codegen Var


def op(name: str, *params: P, label: str | None = None, infix: bool = False,
       shape: Callable | None = None, plan: Callable | None = None) -> OpInfo:
    """One operator's record; an operator family (``taxcompile/operators/``) gives its own
    records their shape and plan rules here."""
    return OpInfo(name, params, label or name, infix, shape, plan)
