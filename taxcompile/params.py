"""The parameter vocabulary of operators and mechanisms: ``P`` (one parameter of a
feature-model operation or of an attention mechanism), the activation functions and
``Act``. A leaf of the package (it imports only frozen.py), so that the operator registry
(ops.py), the mechanism registry (mechanisms/) and the IR (ir.py), which validates its
mechanisms against that registry, import it without importing one another in a circle."""

from __future__ import annotations

from typing import Union

from .frozen import Frozen, Positional


class Act(Frozen, checked=True):
    """An activation function, as ``act = …`` names it: ``tanh``, ``leaky_relu(0.2)``,
    ``scaled_tanh(5)``, ``maxout(2)``. ``params`` holds every parameter of the function
    (defaults filled in, ``ACTIVATIONS``), so equal activations compare equal."""

    fn: str
    params: tuple[tuple[str, Union[int, float]], ...] = ()

    def param(self, name: str, default: int | float | None = None) -> int | float | None:
        for key, value in reversed(self.params):
            if key == name:
                return value
        return default

    def __str__(self) -> str:
        if not self.params:
            return self.fn
        return f"{self.fn}({', '.join(f'{k} = {v:g}' for k, v in self.params)})"


Scalar = bool | int | float | str


class P(Positional):
    """One parameter of a feature-model operation."""

    name: str
    type: str  # node | nodes | int | float | prob | bool | enum | act
    required: bool = True
    default: Scalar | Act | None = None
    choices: tuple[str, ...] = ()
    lo: int = 1  # int: the least value
    below: float | None = None  # float: values must be below this
    hi: int | None = None  # int: the largest value (None: no bound of its own)
    # float: "positive" (> 0) or "any" (any sign, zero included: sigmoid attention's
    # b = -log n); a parameter's Config expression is checked against it too
    sign: str = "positive"

    def refuses(self, value) -> str:
        """Why ``value`` is no value of this parameter ('' when it is one): the check a
        mechanism's IR record makes of each parameter when it is built."""
        if value is None:
            return "is required" if self.required else ""
        t = self.type
        if t == "int":
            if type(value) is not int:
                return "is not an int"
            if value < self.lo or self.hi is not None and value > self.hi:
                return f"is out of range [{self.lo}, {self.hi if self.hi is not None else ''}]"
        elif t in ("float", "prob", "scale"):
            if t == "scale" and value == "learned":
                return ""
            if type(value) is not float:
                return "is not a float"
            if t == "prob" and not 0 <= value < 1:
                return "is no probability"
            if t != "prob" and self.sign == "positive" and value <= 0:
                return "is not positive"
            if self.below is not None and value >= self.below:
                return f"is not below {self.below:g}"
        elif t == "bool":
            return "" if type(value) is bool else "is not true or false"
        elif t == "enum":
            return "" if value in self.choices else f"is not one of {', '.join(self.choices)}"
        elif t == "node":
            return "" if type(value) is str else "is not a node id"
        elif t == "act":
            return "" if isinstance(value, Act) else "is not an activation"
        return ""


def node(name: str = "x") -> P:
    return P(name, "node")


def pint(name: str, required: bool = True, default: int | None = None, lo: int = 1,
         hi: int | None = None) -> P:
    return P(name, "int", required, default, lo=lo, hi=hi)


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
