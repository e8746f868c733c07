"""The registry of feature-model operators: one entry per operator the language accepts.

Each ``OpInfo`` holds what every stage needs of an operator: its parameters (``lower``
checks calls against them), its shape rule (registered by ``checks``), its plan rule
(registered by ``codegen.features``) and its label in diagrams. ``tests/test_ops.py``
checks that every operator the grammar accepts has all four.

The front end imports this module without torch; the plan rules are registered when
``taxcompile.codegen`` is imported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

Scalar = bool | int | float | str

ACTS = ("none", "tanh", "relu", "sigmoid", "gelu", "elu")


@dataclass(frozen=True)
class P:
    """One parameter of a feature-model operation."""

    name: str
    type: str  # node | nodes | ref | int | float | prob | bool | enum
    required: bool = True
    default: Scalar | None = None
    choices: tuple[str, ...] = ()


def node(name: str = "x") -> P:
    return P(name, "node")


def pint(name: str, required: bool = True, default: int | None = None) -> P:
    return P(name, "int", required, default)


def enum(name: str, choices: tuple[str, ...], default: str) -> P:
    return P(name, "enum", False, default, choices)


def ref(name: str) -> P:
    """A keyword naming another statement, not a dataflow input: ``feed = ATT`` (its
    previous context), ``share = NODE`` (its module of the same operator), ``tie = NODE``
    (its embedding matrix)."""
    return P(name, "ref", False)


# `share = NODE`: the operation uses the module (the weights) of the operation of the same
# operator in statement NODE; one set of parameters, counted once.
SHARE = ref("share")


@dataclass
class OpInfo:
    name: str
    params: tuple[P, ...]
    label: str  # how a diagram names it
    infix: bool = False  # written as an operator (``a + b``), not a call
    shape: Callable | None = None  # checks.Checker method: (checker, op, arg shapes, node id)
    plan: Callable | None = None  # codegen rule: (planner, op, arg vars, node) -> Var


def _op(name: str, *params: P, label: str | None = None, infix: bool = False) -> OpInfo:
    return OpInfo(name, params, label or name, infix)


_RNN = (node(), pint("hidden"), pint("layers", False, 1), SHARE)

# The feature, query and output models the language offers (Fig. 1: feature model,
# query model, output model), with their parameters.
OPS: dict[str, OpInfo] = {o.name: o for o in (
    # scale: times sqrt(d) (Vaswani et al. 3.4); share: the embedding of statement NODE
    _op("embed", node("tokens"), pint("d"), P("scale", "bool", False, False), SHARE),
    _op("linear", node(), pint("d"), enum("act", ACTS, "none"), P("bias", "bool", False, True),
        SHARE),
    _op("project", node(), pint("d", False), SHARE),
    _op("lstm", *_RNN, ref("feed")),
    _op("gru", *_RNN, ref("feed")),
    _op("bilstm", *_RNN),
    _op("bigru", *_RNN),
    _op("cnn", node(), pint("d"), pint("kernel", False, 3), enum("act", ACTS, "relu"), SHARE),
    _op("identity", node()),
    _op("positional", node(), enum("kind", ("sinusoid", "learned"), "sinusoid")),
    _op("norm", node(), SHARE),
    _op("scale", node(), SHARE),
    _op("ffn", node(), pint("d_ff"), enum("act", ACTS, "relu"), SHARE),
    _op("dropout", node(), P("p", "prob")),  # zero each feature with probability p (training)
    _op("tanh", node()),
    _op("relu", node()),
    _op("sigmoid", node()),
    _op("concat", P("parts", "nodes")),
    _op("stack", P("parts", "nodes")),
    _op("mean", node()),
    _op("max", node()),
    _op("sum", node()),
    _op("flatten", node()),
    _op("resize", node(), node("like")),
    _op("learned", pint("d")),
    # tie: the output layer's weight is the embedding matrix of statement NODE's embed
    _op("classify", node(), pint("classes"), SHARE, ref("tie")),
    _op("affinity", node("a"), node("b"),
        enum("form", ("bilinear", "trilinear", "dot", "scaled_dot"), "bilinear"),
        enum("act", ACTS, "none")),
    _op("add", node("a"), node("b"), label="+", infix=True),
)}

# Operators whose module another statement's operation may use (`share = NODE`).
SHAREABLE = tuple(o.name for o in OPS.values() if SHARE in o.params)

# Operators written as calls, for lower's checks and its "did you mean" hints.
CALLS: dict[str, tuple[P, ...]] = {o.name: o.params for o in OPS.values() if not o.infix}


def shape_rule(*names: str):
    """Register a checks.Checker method as the shape rule of ``names``."""
    def deco(fn):
        for n in names:
            OPS[n].shape = fn
        return fn
    return deco


def plan_rule(*names: str):
    """Register a codegen function as the plan rule of ``names``."""
    def deco(fn):
        for n in names:
            OPS[n].plan = fn
        return fn
    return deco
