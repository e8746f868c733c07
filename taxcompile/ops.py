"""The registry of feature-model operators: one entry per operator the language accepts.

Each ``OpInfo`` (``operators/record.py``) holds what every stage needs of an operator: its
parameters (``lower`` checks calls against them), its shape rule, its plan rule and its
label in diagrams. An operator family's records are written in its own module of
``taxcompile/operators/``, rules included, and listed here in their place; the core
operators' rules are registered by ``shape_rule`` (``check/features.py``,
``check/values.py``) and ``plan_rule`` (``codegen/features.py`` and its neighbours) when
those modules are imported. ``tests/test_ops.py`` checks that every operator the grammar
accepts has all four.

The front end imports this module without torch (the operator families import neither
the checker nor codegen)."""

from __future__ import annotations

from .operators import blocks, broadcast, crf_output, feature_ops, location
from .operators.record import (  # noqa: F401  (the vocabulary, as ``ops.P`` and so on)
    ACTIVATIONS, ACTS, GATED_ACTS, SAME_WIDTH_ACTS, SHARE, TIE, WIDTH_ACTS, OpInfo, P, Scalar,
    Act, act, enum, node, op as _op, pint)

# The operator families (taxcompile/operators/): each module's records carry their shape
# and plan rules; the core operators' rules are registered by ``shape_rule``/``plan_rule``
# (check/features.py, check/values.py, codegen/features.py and its neighbours).
FAMILIES = (blocks, broadcast, crf_output, feature_ops, location)

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
    feature_ops.OPS["cnn"],
    _op("identity", node()),
    _op("positional", node(), enum("kind", ("sinusoid", "learned"), "sinusoid")),
    # x's position table alone, (L, d) broadcast over x's other axes (codegen/positions.py)
    _op("positions", node(), enum("kind", ("learned", "sinusoid"), "learned")),
    location.OPS["location"],
    blocks.OPS["norm"],
    _op("scale", node(), SHARE),
    blocks.OPS["ffn"],
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
    feature_ops.OPS["split"],
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
    # learned(d): one learned vector (eq. 34); learned(K, d): K of them, an axis of K
    # positions the same for every example (a query set, latents, CLS / register tokens)
    _op("learned", pint("d"), pint("n", False)),
    blocks.OPS["prepend"],
    # tie: the output layer's weight is the embedding matrix of statement NODE's embed
    _op("classify", node(), pint("classes"), SHARE, TIE),
    crf_output.OPS["crf"],
    _op("affinity", node("a"), node("b"),
        enum("form", ("bilinear", "trilinear", "dot", "scaled_dot"), "bilinear"),
        act("none")),
    broadcast.OPS["add"],
    broadcast.OPS["mul"],
    broadcast.OPS["sub"],
    # c - x (the 1 - g of a fusion gate)
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
    """Register a checks.Checker method as the shape rule of the core operators ``names``."""
    def deco(fn):
        for n in names:
            OPS[n].shape = fn
        return fn
    return deco


def plan_rule(*names: str):
    """Register a codegen function as the plan rule of the core operators ``names``."""
    def deco(fn):
        for n in names:
            OPS[n].plan = fn
        return fn
    return deco
