"""Stage 3: the immutable IR (frozen records, frozen.py). Every object carries its
``Location``.

Names here are resolved node ids: ``x``, ``x@2`` (second version of ``x`` after an
``update``), ``encoder[3].self`` (the third hop of ``self`` inside ``repeat encoder``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal, Union

from .diagnostics import Location
from .frozen import Frozen as _Frozen

Scalar = Union[bool, int, float, str]


# ---- dataflow expressions -----------------------------------------------------


def _param(params: tuple, name: str, default):
    """``dict(params).get(name, default)`` without building the dict: the checks ask an
    operation for its parameters some 30,000 times in a table of specs/."""
    for key, value in reversed(params):  # the last of a repeated name, as dict() keeps
        if key == name:
            return value
    return default


class Act(_Frozen):
    """An activation function, as ``act = …`` names it: ``tanh``, ``leaky_relu(0.2)``,
    ``scaled_tanh(5)``, ``maxout(2)``. ``params`` holds every parameter of the function
    (defaults filled in, ``ops.ACTIVATIONS``), so equal activations compare equal."""

    fn: str
    params: tuple[tuple[str, Union[int, float]], ...] = ()

    def param(self, name: str, default: int | float | None = None) -> int | float | None:
        return _param(self.params, name, default)

    def __str__(self) -> str:
        if not self.params:
            return self.fn
        return f"{self.fn}({', '.join(f'{k} = {v:g}' for k, v in self.params)})"


class Ref(_Frozen):
    """A reference to a node: an input, a feature/query/output, an attention
    module (its context vector) or an affinity matrix."""

    kind: Literal["ref"] = "ref"
    node: str
    loc: Location


class Op(_Frozen):
    """A feature-model operation such as ``linear(x, 64)`` or ``x + c``."""

    kind: Literal["op"] = "op"
    fn: str
    args: tuple["Expr", ...] = ()
    params: tuple[tuple[str, Union[Scalar, Act]], ...] = ()
    sym: tuple[tuple[str, str], ...] = ()  # parameter -> its constant expression (Config)
    loc: Location

    def param(self, name: str, default: Scalar | Act | None = None) -> Scalar | Act | None:
        return _param(self.params, name, default)


Expr = Union[Ref, Op]


def refs(expr: Expr) -> list[str]:
    """Node ids an expression reads, in order."""
    if isinstance(expr, Ref):
        return [expr.node]
    out: list[str] = []
    for a in expr.args:
        out.extend(refs(a))
    return out


# ---- mechanisms ---------------------------------------------------------------


class Score(_Frozen):
    """score(q, k_l) (eq. 2; Table II)."""

    fn: Literal["additive", "concat", "multiplicative", "scaled_multiplicative", "general",
                "biased_general", "activated_general", "similarity", "location",
                "affinity", "max_pool", "activated_concat"]
    d_w: int | None = None  # additive / concat: hidden size of W1 q + W2 k
    act: Act | None = None  # additive / activated_general
    bias: bool = True
    similarity: str | None = None  # cosine | l2
    # similarity: beta in beta * cos(q, k_l) (NTM's key strength); None is 1, the survey's
    # plain score; "learned" is exp(s), s a parameter starting at ln 10
    scale: float | Literal["learned"] | None = None
    sym: tuple[tuple[str, str], ...] = ()  # parameter -> its constant expression (Config)
    loc: Location


class Align(_Frozen):
    """align(e_l; e) (eq. 3, 25-29)."""

    fn: Literal["global", "hard", "local", "reinforced", "sparsemax", "entmax", "sigmoid", "crf",
                "topk", "lsh"]
    window: int | None = None  # local: D
    position: Literal["monotonic", "predictive"] | None = None
    gaussian: bool = False  # eq. 29
    sigma: float | None = None  # eq. 29, default D/2
    sym: tuple[tuple[str, str], ...] = ()  # parameter -> its constant expression (Config)
    loc: Location
    normalize: bool = False  # crf: a_l / sum_l a_l (Kim et al.'s lambda)
    k: int | None = None  # topk: the scores each query keeps (Zhao et al. 2019)
    # reinforced: the node its policy reads beside each key (`policy = s`, RBAN's aspect)
    policy: str | None = None
    # lsh (Kitaev et al. 2020): hash buckets, hash rounds, the sorted chunk's length
    buckets: int | None = None
    rounds: int | None = None
    chunk: int | None = None


class Modifier(_Frozen):
    """A score modifier (``position = …`` / ``bias = …``): a position term in the scores
    that leaves the score function and the alignment as they are (docs/codegen.md)."""

    fn: Literal["relative", "rotary", "alibi", "gaussian", "transformer_xl"]
    clip: int | None = None  # relative: k, distances clipped to [-k, k] (Shaw et al. eq. 15)
    values: bool = False  # relative: a^V_ij in the values too
    base: float = 10000.0  # rotary: theta_i = base^(-2i/d)
    sym: tuple[tuple[str, str], ...] = ()  # parameter -> its constant expression (Config)
    loc: Location

    def __str__(self) -> str:
        from .mechanisms import MODIFIERS  # (the registry's parameters import this module)

        return MODIFIERS[self.fn].text("label", self)


class Supervision(_Frozen):
    """``penalty = supervised(gold, lambda, loss = …)``: supervised attention (Liu et al.
    2016, Mi et al. 2016), a loss term between the module's weights and a target alignment
    input ``gold`` (B, Lq, Lk): lambda sum (a - gold)^2 or -lambda sum gold log a."""

    gold: str  # the `alignment` input's id
    lam: float
    loss: Literal["squared", "cross_entropy"] = "squared"
    loc: Location


# ---- nodes ----------------------------------------------------------------------


class Hop(_Frozen):
    """Where a node sits in a ``repeat`` block (eq. 41-42)."""

    block: str  # the repeat's path, e.g. "decoder"
    index: int  # 1-based hop
    count: int
    shared: bool  # weights shared across hops
    template: str  # the statement without hop indexes, e.g. "decoder.cross"
    outer: tuple[int, ...] = ()  # hop indexes of enclosing repeats, outermost first
    count_sym: str | None = None  # the hop count's constant expression (generated Config)

    @property
    def first(self) -> bool:
        """The first hop of every enclosing repeat: where diagrams draw the body."""
        return self.index == 1 and all(i == 1 for i in self.outer)


class Input(_Frozen):
    kind_: Literal["input"] = "input"
    id: str
    # mask: a (B, Lq, Lk) bool mask given to forward(); graph: a graph over one axis, an
    # edge list (2, E) or a dense (B, N, N) adjacency (an attention's `mask = adj`)
    kind: Literal["tokens", "sequence", "grid", "set", "vector", "alignment", "pointers",
                  "mask", "graph"]
    axes: tuple[str, ...]
    sizes: tuple[int | None, ...]
    dim: int | None  # None for tokens
    vocab: int | None = None
    autoregressive: bool = False
    view_of: str | None = None  # another view (level, tokenisation) of this input's data
    into: str | None = None  # pointers: the axis whose positions they index (Vinyals et al.)
    sym: tuple[tuple[str, str], ...] = ()  # "dim", "vocab", "size:AXIS" -> constant expression
    loc: Location


class Node(_Frozen):
    """A feature, query or output model, or an affinity matrix."""

    kind_: Literal["feature", "query", "output", "affinity"]
    id: str
    name: str  # as written in the spec
    expr: Expr
    hop: Hop | None = None
    loc: Location


class Disagreement(_Frozen):
    """Li et al. 2018: the loss adds -lam D, D = -(1/H^2) sum_i sum_j sim of heads i and j
    on their values (eq. 5), weights (eq. 6) or outputs (eq. 7)."""

    lam: float
    on: Literal["subspace", "position", "output"]


class QKNorm(_Frozen):
    """Query-key normalisation (`qk_norm = l2(…)`, as x-transformers' `attn_qk_norm`): q and
    k l2-normalised per head (in `groups` equal parts), then e = scale * q^T k, or with
    `dim_scale` a learned gain per head and feature on each, and scale = 1 / sqrt(d_head);
    `qk_norm = rms` (x-transformers' `qk_rmsnorm`): q and k each RMS-normalised per head with
    a learned gain per head and feature, then the score as written."""

    fn: Literal["l2", "rms"] = "l2"
    scale: float = 10.0
    groups: int = 1
    dim_scale: bool = False
    sym: tuple[tuple[str, str], ...] = ()
    loc: Location
    rms: bool = False  # `qk_norm = rms`: RMS norms with learned gains, no l2 norm and scale


class Routing(_Frozen):
    """Routing by agreement between the heads and output capsules (Li et al. 2019, after
    Sabour et al. 2017): `heads_out = routing(capsules = N, iters = r)`."""

    capsules: int  # N output capsules, each d_v / N wide, concatenated
    iters: int = 3  # r routing iterations
    sym: tuple[tuple[str, str], ...] = ()  # capsules / iters -> its constant expression
    loc: Location


class SegmentMemory(_Frozen):
    """`mem_len = M`: Transformer-XL's segment memory (Dai et al. 2019, §3.2): the keys and
    values are computed from [SG(m); h], m the last M positions of the feature they read
    that the previous segment left (detached), h this segment's (queries from h only)."""

    length: int
    sym: tuple[tuple[str, str], ...] = ()
    loc: Location


class Attention(_Frozen):
    kind_: Literal["attention"] = "attention"
    id: str
    name: str
    query: Expr | None  # None: no query (eq. 33)
    keys: Expr
    values: Expr
    affinity: str | None = None  # affinity node id (eq. 12-16)
    score: Score
    align: Align
    dimensionality: Literal["single", "multi"] = "single"
    heads: int = 1
    heads_out: Literal["project", "concat", "mean", "routing"] = "project"  # how heads join
    capsules: int = 0
    mask: Literal["none", "causal", "forward", "backward"] = "none"  # within one sequence
    # a `mask` or `graph` input (`mask = m`, `mask = causal * m`, `mask = adj`): which keys
    # each query may see, from the data; a graph makes it graph attention (GAT)
    mask_input: str | None = None
    self_loops: bool = False  # graph attention: every node also attends to itself (GATConv)
    penalty: float | None = None  # Lin et al.: ||A A^T - I||_F^2 coefficient
    # Xu et al. eq. 14: lambda sum_i (1 - sum_t a_ti)^2, every key attended once in all
    doubly_stochastic: float | None = None
    # See et al. 2017 eq. 10-11: the coverage c^t = sum_{t'<t} a^{t'} enters the additive
    # score as w_c c_i^t; eq. 12-13: lambda sum_t sum_i min(a_i^t, c_i^t)
    coverage: bool = False
    coverage_loss: float | None = None
    # Li et al. 2018 eq. 5-7: -lambda D, D the heads' disagreement on values, weights or outputs
    disagreement: Disagreement | None = None
    dropout: float | None = None  # dropout on the attention weights, in training
    share: str | None = None  # the attention module whose weights this one uses
    position: Modifier | None = None  # relative (Shaw et al.) or rotary positions in q, k
    bias: Modifier | None = None  # an additive bias on the scores: ALiBi or Yang's Gaussian
    supervised: Supervision | None = None  # a target alignment's loss term (Liu et al. 2016)
    hop: Hop | None = None
    sym: tuple[tuple[str, str], ...] = ()  # parameter -> its constant expression (Config)
    loc: Location
    # graph attention's output bias (GATConv's `bias`): `bias = false` drops it; None: not said
    out_bias: bool | None = None
    # issue 25, the heads (taxcompile/mechanisms/heads.py): talking heads "pre" | "post" | "both"
    talking_heads: str = ""
    mem_kv: int = 0  # learned memory key/values per head (x-transformers' num_mem_kv)
    head_gates: bool = False  # each head's context gated from the query (gate_value_heads)
    # grouped-query attention (Ainslie et al. 2023): the keys' and values' heads, each shared
    # by heads / kv_heads query heads (1: multi-query, Shazeer 2019); 0: one per query head
    kv_heads: int = 0
    qk_norm: QKNorm | None = None  # query-key normalisation (cosine scores with a scale)
    routing: Routing | None = None  # heads_out = routing(…): its output capsules, iterations
    memory: SegmentMemory | None = None  # `mem_len = M`: Transformer-XL's segment memory

    def traits(self) -> list[str]:
        """The module's mechanisms beyond score and alignment, as short phrases."""
        out = []
        from . import mechanisms as mech  # (the registry's parameters import this module)

        traits, out = mech.TRAITS, []
        if self.heads > 1:
            out.append(traits["heads"].text("label", self))
            if self.heads_out != "project":
                out.append(mech.HEADS_OUT[self.heads_out].text("label", self.routing))
            if self.kv_heads:
                out.append(traits["kv_heads"].text("label", self))
        if self.qk_norm is not None:
            out.append(traits["qk_norm"].text("label", self.qk_norm))
        if self.dimensionality == "multi":
            out.append(traits["multi_dimensional"].text("label"))
        if self.capsules:
            out.append(traits["capsules"].text("label", self))
        if self.mask != "none":
            out.append(mech.MASKS[self.mask].text("label"))
        if self.mask_input is not None:
            out.append(traits["pair_mask"].text("label", self))
        if self.self_loops:
            out.append("self loops")
        if self.out_bias is False:
            out.append("no output bias")
        # each penalty's label, by its record's name (a coefficient's pattern reads `lam`)
        pen = {rec.name: rec.text("label", v, lam=getattr(v, "lam", v))
               for rec, v in mech.penalties(self)}
        out += [pen.get("frobenius"), pen.get("doubly_stochastic")]
        if self.coverage:
            out.append(traits["coverage"].text("label"))
        out += [pen.get("coverage"), pen.get("disagreement")]
        if self.dropout:
            out.append(traits["dropout"].text("label", self))
        if self.share is not None:
            out.append(f"weights of {self.share}")
        out += [str(m) for m in (self.position, self.bias) if m is not None]
        out.append(pen.get("supervised"))
        out += [rec.text("label", self) for rec in mech.heads.present(self)]
        if self.memory is not None:
            out.append(traits["segment_memory"].text("label", self.memory))
        return [x for x in out if x]


AnyNode = Union[Input, Node, Attention]


class Model(_Frozen):
    name: str
    base: str | None = None
    nodes: tuple[AnyNode, ...]
    consts: tuple[tuple[str, Scalar, str | None], ...] = ()  # the model's own `let`s
    loc: Location

    @cached_property
    def by_id(self) -> dict[str, AnyNode]:
        """Nodes by id, built once (the model is frozen)."""
        return {n.id: n for n in self.nodes}

    def node(self, node_id: str) -> AnyNode:
        return self.by_id[node_id]

    @property
    def attentions(self) -> tuple[Attention, ...]:
        return tuple(n for n in self.nodes if isinstance(n, Attention))

    @property
    def inputs(self) -> tuple[Input, ...]:
        return tuple(n for n in self.nodes if isinstance(n, Input))


class Paper(_Frozen):
    id: str
    cite: str
    ref: int | None = None
    row: int | None = None  # position in the survey's Table III, if the paper is there
    title: str = ""
    year: int | None = None
    loc: Location


class Spec(_Frozen):
    file: str
    paper: Paper
    constants: tuple[tuple[str, Scalar], ...] = ()
    const_syms: tuple[tuple[str, str | None], ...] = ()  # `let` name -> expression over others
    models: tuple[Model, ...]
