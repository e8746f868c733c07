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

from .params import (  # noqa: F401  (the parameter vocabulary, re-exported)
    ACTIVATIONS, ACTS, GATED_ACTS, SAME_WIDTH_ACTS, SHARE, TIE, WIDTH_ACTS, Act, P, Scalar,
    act, enum, node, pint)


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


# dropout: between stacked layers (Zaremba et al.; nn.LSTM's `dropout`), in training only
_RNN = (node(), pint("hidden"), pint("layers", False, 1), P("dropout", "prob", False), SHARE)
# A recurrent decoder (run step by step): the node of the step it reads (`feed`), and the
# node(s) its initial state comes from (`init` = h_0, or an encoder RNN's final states;
# `init_c` = an LSTM's c_0). They name nodes (lower stores the node id, not an argument).
# `state` = an attention over the RNN's earlier states whose context replaces the previous
# state at each step (LSTMN intra-attention, Cheng et al. 2016; check/recurrence.py).
_DECODER = (P("feed", "node", False), P("init", "node", False), P("init_c", "node", False),
            P("state", "node", False))
# Parameters that name a node rather than compute an argument of the operator.
NAMED = ("feed", "init", "init_c", "share", "tie", "state")

# The feature, query and output models the language offers (Fig. 1: feature model,
# query model, output model), with their parameters.
OPS: dict[str, OpInfo] = {o.name: o for o in (
    # scale: times sqrt(d) (Vaswani et al. 3.4); share: the embedding of statement NODE
    _op("embed", node("tokens"), pint("d"), P("scale", "bool", False, False), SHARE),
    _op("linear", node(), pint("d"), act("none", ACTS), P("bias", "bool", False, True), SHARE),
    _op("project", node(), pint("d", False), SHARE),
    _op("lstm", *_RNN, *_DECODER),
    _op("gru", *_RNN, *_DECODER),
    _op("bilstm", *_RNN),
    _op("bigru", *_RNN),
    # groups: g groups of features convolved apart (groups = d: depthwise); separable: a
    # depthwise convolution then a pointwise one to d (QANet; Lite Transformer's branch)
    _op("cnn", node(), pint("d"), pint("kernel", False, 3), act("relu", ACTS), SHARE,
        pint("groups", False, 1), P("separable", "bool", False, False),
        P("bias", "bool", False, True)),
    _op("identity", node()),
    _op("positional", node(), enum("kind", ("sinusoid", "learned"), "sinusoid")),
    # x's position table alone, (L, d) broadcast over x's other axes (codegen/positions.py)
    _op("positions", node(), enum("kind", ("learned", "sinusoid"), "learned")),
    # fixed location weights l_j of x's positions, no parameters (location.py): 1 - L_j/T
    # (Tang et al.'s eq. 11) or Sukhbaatar et al.'s encoding (eq. 10, k = hop or feature);
    # L_j is the position, or the distance to the aspect's positions (a pointers input)
    _op("location", node(), enum("kind", ("linear", "encoding"), "linear"),
        P("hop", "int", False), P("aspect", "node", False)),
    # layer norm (Ba et al.) or RMSNorm (Zhang & Sennrich 2019: x / RMS(x) * g, no centring)
    _op("norm", node(), enum("kind", ("layer", "rms"), "layer"), SHARE),
    _op("scale", node(), SHARE),
    _op("ffn", node(), pint("d_ff"), act("relu", ACTS + GATED_ACTS), SHARE),
    _op("dropout", node(), P("p", "prob")),  # zero each feature with probability p (training)
    _op("tanh", node()),
    _op("relu", node()),
    _op("sigmoid", node()),
    _op("gelu", node()),
    _op("elu", node(), *ACTIVATIONS["elu"]),
    _op("leaky_relu", node(), *ACTIVATIONS["leaky_relu"]),
    _op("softplus", node()),
    _op("scaled_tanh", node(), *ACTIVATIONS["scaled_tanh"]),
    _op("maxout", node(), *ACTIVATIONS["maxout"]),
    _op("concat", P("parts", "nodes")),
    # part `index` (from 0) of `parts` equal parts of the features: torch.chunk(x, n, -1)[i]
    # (Daniluk et al.'s key, value and predict parts of one output)
    _op("split", node(), pint("parts", lo=2), pint("index", lo=0)),
    _op("stack", P("parts", "nodes")),
    _op("mean", node()),
    _op("max", node()),
    _op("sum", node()),
    _op("flatten", node()),
    _op("resize", node(), node("like")),
    # grids (B, H, W, C): a 2-D convolution over H, W, and down- and up-sampling by a factor
    _op("conv2d", node(), pint("d"), pint("kernel", False, 3), pint("stride", False, 1),
        act("relu")),
    _op("maxpool", node(), pint("factor")),
    _op("upsample", node(), pint("factor"), enum("mode", ("bilinear", "nearest"), "bilinear")),
    _op("learned", pint("d")),
    # n learned vectors before the first position (a CLS token, registers): (S, d) -> (S+n, d)
    _op("prepend", node(), pint("n", False, 1)),
    # tie: the output layer's weight is the embedding matrix of statement NODE's embed
    _op("classify", node(), pint("classes"), SHARE, TIE),
    # a linear-chain CRF tagger (Lafferty et al.; Winata et al.'s output layer): emissions
    # W x + b over the last axis's positions, tag transitions, NLL loss and Viterbi decoding
    _op("crf", node(), pint("tags")),
    _op("affinity", node("a"), node("b"),
        enum("form", ("bilinear", "trilinear", "dot", "scaled_dot"), "bilinear"),
        act("none")),
    _op("add", node("a"), node("b"), label="+", infix=True),
    # element-wise: a gate times a feature (a (…, 1) gate scales every feature of its
    # position: Xu's beta), a difference, and c - x (the 1 - g of a fusion gate)
    _op("mul", node("a"), node("b"), label="*", infix=True),
    _op("sub", node("a"), node("b"), label="-", infix=True),
    _op("rsub", node(), P("c", "float", False, 1.0), label="-", infix=True),
    # Decoders (codegen/repeat.py): x at the previous decoder step (s_(t-1)), the first
    # position of a sequence, the backward direction of a bidirectional RNN (Bahdanau's <-h).
    _op("prev", node()),
    _op("first", node()),
    _op("backward", node()),
    # attention weights as values: `att.weights` (written as a name, not a call: `infix`),
    # the (B, Lq, Lk) weights averaged over heads; `context(V, A)` = A V (AoA's s = alpha^T
    # beta-bar, Cui et al. 2017); `pointed(X, C)`: X at the previous target pointer C_(i-1)
    _op("weights", node("attention"), label="weights", infix=True),
    _op("context", node("values"), node("weights")),
    _op("pointed", node(), node("pointers")),
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
