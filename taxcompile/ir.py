"""Stage 3: the immutable IR (frozen records, frozen.py). Every object carries its
``Location``.

Names here are resolved node ids: ``x``, ``x@2`` (second version of ``x`` after an
``update``), ``encoder[3].self`` (the third hop of ``self`` inside ``repeat encoder``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal, Union

from . import mechanisms as mech
from .diagnostics import Location
from .frozen import FieldError, Frozen
from .params import Act

__all__ = ["Act", "Attention", "Expr", "FieldError", "Hop", "Input", "Mech",
           "Model", "Node", "Op", "Paper", "Ref",
           "SegmentMemory", "Spec", "refs"]

Scalar = Union[bool, int, float, str]


class _Frozen(Frozen, checked=True):
    """An IR record: every field checked against its annotation when it is built."""


# ---- dataflow expressions -----------------------------------------------------


def _param(params: tuple, name: str, default):
    """``dict(params).get(name, default)`` without building the dict: the checks ask an
    operation for its parameters some 30,000 times in a table of specs/."""
    for key, value in reversed(params):  # the last of a repeated name, as dict() keeps
        if key == name:
            return value
    return default


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


class Mech(_Frozen):
    """One mechanism a statement uses, as data: its kind and name (a record of the registry,
    ``taxcompile/mechanisms``), every parameter of that record with its value (defaults
    filled in; None for an optional one without a default), the Config expressions of those
    written as one, and where the spec names it. ``align = local(D = 4)`` is
    ``Mech(kind="align", fn="local", params=(("D", 4), ("position", "predictive"), …))``;
    ``score = additive(d_w = 256)`` is ``Mech(kind="score", fn="additive", params=(("d_w",
    256), ("act", Act(fn="tanh")), ("bias", True)))``.
    Built records are checked against the registry: an unknown name, a parameter its record
    does not have or a value its ``P`` refuses is a ``ValueError``. A parameter reads as an
    attribute (``al.D``) unless a field has its name (similarity's ``kind``: read it with
    ``param("kind")``); a name that is neither is a ``FieldError`` that lists both."""

    kind: str  # one of mechanisms.KINDS
    fn: str  # its record's name (not an alias: `soft` is lowered to `global`)
    params: tuple[tuple[str, Any], ...] = ()  # every parameter of its record, in its order
    sym: tuple[tuple[str, str], ...] = ()  # parameter -> its constant expression (Config)
    loc: Location

    def check(self) -> None:
        rec = mech.REGISTRY.get((self.kind, self.fn))
        if rec is None:
            known = ", ".join(k[1] for k in mech.REGISTRY if k[0] == self.kind)
            raise ValueError(f"no {self.kind} mechanism `{self.fn}` in the registry "
                             f"(known: {known or 'none of this kind'})")
        names = tuple(p.name for p in rec.params)
        if tuple(k for k, _ in self.params) != names:
            raise ValueError(f"{self.kind} `{self.fn}` has the parameters "
                             f"({', '.join(names)}), got ({', '.join(k for k, _ in self.params)})")
        for p, (_, value) in zip(rec.params, self.params):
            why = p.refuses(value)
            if why:
                raise ValueError(f"{self.kind} `{self.fn}`: {p.name} = {value!r} {why}")
        if not {k for k, _ in self.sym} <= set(names):
            raise ValueError(f"{self.kind} `{self.fn}` has no parameter "
                             f"{sorted({k for k, _ in self.sym} - set(names))}")

    @property
    def record(self) -> mech.Mechanism:
        """Its record in the registry."""
        return mech.REGISTRY[self.kind, self.fn]

    def param(self, name: str) -> Any:
        for key, value in self.params:
            if key == name:
                return value
        raise FieldError(f"{self.kind} `{self.fn}` has no parameter {name!r} (its "
                         f"parameters: {', '.join(k for k, _ in self.params) or 'none'})")

    def __getattr__(self, name: str) -> Any:  # a parameter, as an attribute
        if name.startswith("__"):
            raise AttributeError(name)
        for key, value in self.__dict__.get("params", ()):
            if key == name:
                return value
        rec = mech.REGISTRY.get((self.__dict__.get("kind"), self.__dict__.get("fn")))
        for key, value in rec.fixed if rec is not None else ():  # its form's fixed values
            if key == name:
                return value
        raise FieldError(f"{self.kind} `{self.__dict__.get('fn')}` has no field or parameter "
                         f"{name!r} (fields: {', '.join(self._defaults)}; parameters: "
                         f"{', '.join(k for k, _ in self.__dict__.get('params', ())) or 'none'})")

    def data(self) -> dict[str, Any]:
        """Its name and parameters by name: the fields its record's text patterns read (a
        parameter left to the layer's depth as its record's ``by_depth`` says it)."""
        depth = {name: text for name, _, text in self.record.by_depth}
        return {"fn": self.fn, **dict(self.record.fixed),
                **{k: depth[k] if v is None and k in depth else v for k, v in self.params}}

    def __str__(self) -> str:
        """Its label (diagrams, summaries): ``relative positions (k = 16)``."""
        return self.record.text("label", self) or self.fn


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
    score: Mech  # score(q, k_l) (eq. 2; Table II)
    align: Mech  # align(e_l; e) (eq. 3, 25-29)
    dimensionality: Literal["single", "multi"] = "single"
    heads: int = 1
    heads_out: Literal["project", "concat", "mean", "routing"] = "project"  # how heads join
    capsules: int = 0
    mask: Literal["none", "causal", "forward", "backward"] = "none"  # within one sequence
    # a `mask` or `graph` input (`mask = m`, `mask = causal * m`, `mask = adj`): which keys
    # each query may see, from the data; a graph makes it graph attention (GAT)
    mask_input: str | None = None
    self_loops: bool = False  # graph attention: every node also attends to itself (GATConv)
    # See et al. 2017 eq. 10-11: the coverage c^t = sum_{t'<t} a^{t'} enters the additive
    # score as w_c c_i^t
    coverage: bool = False
    dropout: float | None = None  # dropout on the attention weights, in training
    share: str | None = None  # the attention module whose weights this one uses
    # score modifiers (kinds "position" and "bias"): relative (Shaw et al.) or rotary
    # positions in q, k; an additive bias on the scores, ALiBi or Yang's Gaussian
    position: Mech | None = None
    bias: Mech | None = None
    hop: Hop | None = None
    sym: tuple[tuple[str, str], ...] = ()  # parameter -> its constant expression (Config)
    loc: Location
    # graph attention's output bias (GATConv's `bias`): `bias = false` drops it; None: not said
    out_bias: bool | None = None
    # the mechanisms on its heads (taxcompile/mechanisms/heads.py: talking heads, memory
    # key/values, head gates), in their registry's order
    head_mechanisms: tuple[Mech, ...] = ()
    # grouped-query attention (Ainslie et al. 2023): the keys' and values' heads, each shared
    # by heads / kv_heads query heads (1: multi-query, Shazeer 2019); 0: one per query head
    kv_heads: int = 0
    # query-key normalisation (`qk_norm = l2(…)` | `rms`: cosine scores with a scale, or RMS
    # norms), its record's mechanism (taxcompile/mechanisms/others.py: QK_NORMS)
    qk_norm: Mech | None = None
    # how the heads join when the way has parameters (`heads_out = routing(capsules = N,
    # iters = r)`, Li et al. 2019): its record's mechanism, ``heads_out`` its name
    join: Mech | None = None
    memory: SegmentMemory | None = None  # `mem_len = M`: Transformer-XL's segment memory
    # the penalty, a term of the training loss that its record defines whole (`penalty =
    # NAME(…)`, or Lin et al.'s bare coefficient `penalty = λ`): Lin et al.'s ||A A^T -
    # I||_F^2, Xu et al.'s doubly stochastic penalty (eq. 14), See et al.'s coverage loss
    # (eq. 12-13), Li et al.'s disagreement of the heads (2018, eq. 5-7), supervised
    # attention (Liu et al. 2016, Mi et al. 2016), computed by the model from the weights or
    # the heads' tensors (its record's ``call``) or by its class (its template's
    # extras["penalty"])
    loss_term: Mech | None = None

    def head(self, name: str) -> Mech | None:
        """Its head mechanism ``name`` (None: the statement has none)."""
        return next((m for m in self.head_mechanisms if m.fn == name), None)

    def traits(self) -> list[str]:
        """The module's mechanisms beyond score and alignment, as short phrases."""
        traits, out = mech.TRAITS, []
        if self.heads > 1:
            out.append(traits["heads"].text("label", self))
            if self.heads_out != "project":
                out.append(mech.HEADS_OUT[self.heads_out].text("label", self.join))
            if self.kv_heads:
                out.append(traits["kv_heads"].text("label", self))
        if self.qk_norm is not None:
            out.append(self.qk_norm.record.text("label", self.qk_norm))
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
        if self.coverage:
            out.append(traits["coverage"].text("label"))
        if self.loss_term is not None:
            out.append(str(self.loss_term))
        if self.dropout:
            out.append(traits["dropout"].text("label", self))
        if self.share is not None:
            out.append(f"weights of {self.share}")
        out += [str(m) for m in (self.position, self.bias) if m is not None]
        out += [m.record.text("label", m) for m in self.head_mechanisms]
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
