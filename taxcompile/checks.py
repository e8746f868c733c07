"""Stage 4: cross-entry checks on the IR of each model.

- every reference names a node that exists (forward references are allowed, so
  a model is a dataflow graph, not a program);
- the dataflow has no cycle (a decoder's ``feed =`` and ``prev(…)`` may read a step later);
- shape inference: every tensor's axes and feature size are known;
- each mechanism's requirements (Table II, eq. 12-45), e.g. multiplicative scores
  need d_q = d_k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import digraph as nx  # networkx's algorithms that checks uses, without its import

from . import ir, module_checks, ops, prev_reads
from .diagnostics import Collector, Location, SpecError, article
from .lower import MASK_KINDS, SCORES_WITHOUT_QUERY


@dataclass(frozen=True)
class Shape:
    """Named axes (positions, groups) and the feature size (None: token ids)."""

    axes: tuple[str, ...]
    dim: int | None

    def __str__(self) -> str:
        return "(" + ", ".join(self.axes + ((str(self.dim),) if self.dim is not None else ())) + ")"


@dataclass
class AttentionInfo:
    attended: str  # the axis the weights are normalised over
    groups: tuple[str, ...]  # keys' other axes: one attention per group
    query_mode: str  # "none" | "single" (one query per group) | "sequence" (one per position)
    #                  | "capsules" (one per class: an earlier capsule module's output)
    d_q: int | None
    d_k: int
    d_v: int


@dataclass
class CheckedModel:
    model: ir.Model
    shapes: dict[str, Shape]
    sizes: dict[str, int | None]  # axis -> length when known
    axis_origin: dict[str, str]  # axis -> input or node that created it
    attention: dict[str, AttentionInfo]
    order: list[str]  # node ids, dependencies first
    # an axis resampled by a grid operator -> (its input axis, numerator, denominator):
    # "H/2" -> ("H", 1, 2); its length is the input axis's times num / den
    scaled: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    # (fed node, decoder) pairs whose `feed` reads the fed node's value of the same step:
    # it is computed before the decoder in each step (from `prev(decoder)`), e.g.
    # Bahdanau's s_i = f(s_(i-1), y_(i-1), c_i). Other `feed` edges read the previous step.
    feed_now: frozenset = frozenset()
    # decoder node -> the nodes computed in each of its steps (its strongly connected
    # component through `feed` and `prev` edges)
    steps: dict = field(default_factory=dict)

    @property
    def graph(self) -> "networkx.DiGraph":
        """The model graph (``graph.build``), built once and shared by every later stage."""
        g = self.__dict__.get("_graph")
        if g is None:
            from .graph import build
            g = self.__dict__["_graph"] = build(self)
        return g


@dataclass
class CheckedSpec:
    spec: ir.Spec
    models: list[CheckedModel] = field(default_factory=list)


def links(n: ir.AnyNode) -> list[tuple[str, str]]:
    """(node id, how) for everything ``n`` reads: ``read`` (in the same step), ``prev``
    (inside ``prev(…)``: the previous decoder step), ``feed`` (a decoder's fed node: the
    previous step's value when it depends on the decoder, else this step's) and ``init``
    (a decoder's initial state)."""
    exprs: list[ir.Expr] = []
    if isinstance(n, ir.Node):
        exprs = [n.expr]
    elif isinstance(n, ir.Attention):
        exprs = [e for e in (n.query, n.keys, n.values) if e is not None]
    out = expr_links(*exprs)
    if isinstance(n, ir.Attention) and n.affinity:
        out.append((n.affinity, "read"))
    if isinstance(n, ir.Attention) and n.mask_input:
        out.append((n.mask_input, "read"))
    return out


def expr_links(*exprs: ir.Expr) -> list[tuple[str, str]]:
    """``links`` of expressions."""
    out: list[tuple[str, str]] = []
    stack = [(e, "read") for e in exprs]
    while stack:
        e, how = stack.pop(0)
        if isinstance(e, ir.Ref):
            out.append((e.node, how))
        else:
            for key in ("feed", "init", "init_c"):
                if e.param(key):
                    out.append((str(e.param(key)), "feed" if key == "feed" else "init"))
            stack.extend((a, "prev" if e.fn == "prev" else how) for a in e.args)
    return out


def deps(n: ir.AnyNode, delayed: bool = False) -> list[str]:
    """Node ids ``n`` reads within a step (its inputs, a decoder's initial state); with
    ``delayed`` the decoder links that may cross steps: ``feed`` and ``prev(…)``."""
    kinds = ("feed", "prev") if delayed else ("read", "init")
    return [r for r, how in links(n) if how in kinds]


def feeds(n: ir.AnyNode) -> list[str]:
    """The nodes ``n``'s decoder reads through ``feed =``."""
    return [r for r, how in links(n) if how == "feed"]


def decoder_ops(n: ir.AnyNode) -> list[ir.Op]:
    """The recurrent decoders (``lstm``/``gru`` with ``feed``) in ``n``'s expression."""
    out, stack = [], [n.expr] if isinstance(n, ir.Node) else []
    while stack:
        e = stack.pop()
        if isinstance(e, ir.Op):
            if e.param("feed"):
                out.append(e)
            stack.extend(e.args)
    return out


def penalised(n: ir.Attention) -> bool:
    """Whether attention ``n`` adds a term to the loss: Lin et al.'s penalty, Xu et al.'s
    doubly stochastic one, See et al.'s coverage loss, Li et al.'s disagreement or
    supervised attention."""
    return n.penalty is not None or n.doubly_stochastic is not None or \
        n.coverage_loss is not None or n.disagreement is not None or n.supervised is not None


class Checker:
    def __init__(self, spec: ir.Spec, source: str | None):
        self.spec = spec
        self.c = Collector(spec.file, source)

    def run(self) -> CheckedSpec:
        out = CheckedSpec(self.spec)
        for m in self.spec.models:
            cm = self.model(m)
            if cm is not None:
                out.models.append(cm)
        self.c.raise_if_any()
        return out

    def err(self, loc: Location, msg: str, hint: str = "") -> None:
        self.c.error(loc, msg, hint)

    # ---- per model ---------------------------------------------------------------

    def model(self, m: ir.Model) -> CheckedModel | None:
        before = len(self.c.diagnostics)
        ids = {n.id: n for n in m.nodes}
        g = nx.DiGraph()
        for n in m.nodes:
            g.add_node(n.id)
        for n in m.nodes:
            for d in deps(n):
                if d not in ids:  # a forward reference to a node that failed to lower
                    self.err(n.loc, f"`{d}` is referenced but not defined")
                    continue
                g.add_edge(d, n.id)
            if len(feeds(n)) > 1:
                self.err(n.loc, f"`{n.id}` has {len(feeds(n))} recurrent models with "
                         "`feed`; a statement runs one decoder step by step",
                         "give each decoder its own statement")
            for d, how in links(n):
                if how not in ("feed", "prev") or d not in ids:
                    continue
                if isinstance(ids[d], ir.Input) or (how == "feed" and isinstance(
                        ids[d], ir.Node) and ids[d].kind_ == "affinity"):
                    what = "an input" if isinstance(ids[d], ir.Input) else "an affinity matrix"
                    self.err(n.loc, f"`{d}` is {what}, not a node of the decoder step, so "
                             f"{'`feed`' if how == 'feed' else '`prev`'} cannot read it",
                             "`feed` and `prev(…)` name nodes computed in each step of a "
                             "decoder, e.g. `feed = att`, `query = prev(s)`")
                if how == "feed" and isinstance(ids[d], ir.Attention) and ids[d].heads > 1 \
                        and ids[d].heads_out != "project":
                    self.err(n.loc, f"`feed = {d}`: a decoder reads a context as wide as the "
                             f"values, and `{d}` has `heads_out = {ids[d].heads_out}`",
                             "use the default `heads_out = project` (W_O, eq. 40) on a module "
                             "a decoder reads")
        if len(self.c.diagnostics) > before:
            return None
        # A `feed` reads the fed node's previous value when the node depends on the decoder
        # within the step (input feeding), else its value of this step, computed first.
        now = set()
        for n in m.nodes:
            for d in feeds(n):
                if d in ids and not nx.has_path(g, n.id, d):
                    now.add((d, n.id))
                    g.add_edge(d, n.id)
        try:
            cycle = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            path = [a for a, _ in cycle] + [cycle[0][0]]
            first = ids[cycle[0][1]]
            self.err(first.loc, "cycle in the dataflow: " + " → ".join(f"`{p}`" for p in path),
                     "a model is a dataflow graph; a decoder that reads its previous context "
                     "uses `gru(x, 512, feed = ATTENTION)`")
            return None
        rank = {n.id: f"{i:06d}" for i, n in enumerate(m.nodes)}
        order = list(nx.lexicographical_topological_sort(g, key=rank.__getitem__))
        self.cm = CheckedModel(m, {}, {}, {}, {}, order, feed_now=frozenset(now))
        full = g.copy()
        for n in m.nodes:
            for d, how in links(n):
                if how in ("prev", "feed") and d in ids:
                    full.add_edge(d, n.id)
        for comp in nx.strongly_connected_components(full):
            for n in m.nodes:
                if n.id in comp and decoder_ops(n):
                    self.cm.steps[n.id] = set(comp)
        if (late := prev_reads.outside_reads(m, self.cm.steps)):  # read after the loop
            g.add_edges_from(late)
            self.cm.order = list(nx.lexicographical_topological_sort(g, key=rank.__getitem__))
        self.op_inputs: dict[int, list[Shape]] = {}
        fixed_by: dict[str, ir.Input] = {}
        data_axes = {a for n in m.inputs if n.kind not in MASK_KINDS for a in n.axes}
        for n in m.inputs:
            if n.kind in MASK_KINDS:
                for a in dict.fromkeys(n.axes):
                    if a not in data_axes:
                        self.err(n.loc, f"axis `{a}` of {n.kind} input `{n.id}` is no axis of "
                                 "the model's other inputs", "a mask or graph input names the "
                                 "axes of the inputs it masks, e.g. `input x: set[N, 64]` and "
                                 "`input adj: graph[N]`")
                if n.kind == "mask" and any(i.autoregressive for i in m.inputs):
                    self.err(n.loc, f"mask input `{n.id}` in a model with an autoregressive "
                             "input: generate() decodes one position at a time from a KV cache, "
                             "which a (B, T, S) mask given once does not follow",
                             "use `mask = causal` for the decoder's own positions, or drop "
                             "`autoregressive`")
                continue
            for a, s in zip(n.axes, n.sizes):
                if s is not None:
                    other = fixed_by.setdefault(a, n)
                    size = other.sizes[other.axes.index(a)]
                    if size != s:
                        self.err(n.loc, f"axis `{a}` has length {s} here but {size} in input "
                                 f"`{other.id}`", "one axis has one length in every input")
                    self.cm.sizes[a] = s
                else:
                    self.cm.sizes.setdefault(a, None)
                self.cm.axis_origin.setdefault(a, n.id)
        for n in m.inputs:  # pointers index the positions of another input's axis
            if n.kind == "pointers" and (n.into not in self.cm.axis_origin or n.into in n.axes):
                self.err(n.loc, f"`into = {n.into}`: pointers index the positions of an axis "
                         "of another input", "e.g. `input x: sequence[S, 2]` and "
                         f"`input {n.id}: pointers[T] (into = S)`")
        # shapes follow what each node reads, `prev(…)` included (a decoder's fed node
        # and initial state do not change its shape)
        gs = nx.DiGraph()
        gs.add_nodes_from(order)
        gs.add_edges_from((d, n.id) for n in m.nodes for d, how in links(n)
                          if how in ("read", "prev") and d in ids)
        try:
            shape_order = list(nx.lexicographical_topological_sort(gs, key=rank.__getitem__))
        except nx.NetworkXUnfeasible:
            a, b = nx.find_cycle(gs)[0]
            self.err(ids[b].loc, f"`{b}` reads itself through `prev(…)`: a node of a decoder "
                     "step cannot be computed from its own previous value",
                     "the decoder's recurrence is its RNN: read `prev(s)` of the decoder `s`")
            return None
        for node_id in shape_order:
            n = ids[node_id]
            if any(d not in self.cm.shapes for d, how in links(n) if how in ("read", "prev")):
                continue  # an upstream error was reported
            if isinstance(n, ir.Input):
                self.cm.shapes[n.id] = Shape(n.axes, n.dim)
            elif isinstance(n, ir.Node):
                s = self.node(n)
                if s is not None:
                    self.cm.shapes[n.id] = s
            else:
                s = self.attention(n)
                if s is not None:
                    self.cm.shapes[n.id] = s
        for n in m.nodes:
            if decoder_ops(n):
                self.check_feed(n)
            self.check_prev(n)
        # (every shape known: the diagnostics may not grow in a variant whose base
        # already reported the same error)
        if len(self.c.diagnostics) == before and all(x.id in self.cm.shapes for x in m.nodes):
            for n in m.nodes:
                if decoder_ops(n):
                    self.check_feed_loop(n)
        if len(self.c.diagnostics) > before:
            return None
        for n in m.nodes:
            self.check_sharing(n)
        if len(self.c.diagnostics) > before:
            return None
        return self.cm

    # ---- shapes of feature models ------------------------------------------------

    def shape(self, e: ir.Expr, node_id: str) -> Shape | None:
        if isinstance(e, ir.Ref):
            n = self.cm.model.by_id.get(e.node)
            if isinstance(n, ir.Input) and n.kind in MASK_KINDS:
                self.err(e.loc, f"`{e.node}` is a {n.kind} input: it says which keys each query "
                         "may see and holds no features", f"read it in an attention module, "
                         f"`mask = {e.node}`")
                return None
            return self.cm.shapes.get(e.node)
        args = [self.shape(a, node_id) for a in e.args]
        if any(a is None for a in args):
            return None
        self.op_inputs[id(e)] = args  # for the checks of `share` and `tie`
        if e.fn not in ("embed", "weights"):  # `att.weights`: checked by its shape rule
            for i, (a, s) in enumerate(zip(e.args, args)):
                kind = getattr(self.cm.model.by_id.get(a.node), "kind", "") \
                    if isinstance(a, ir.Ref) else ""
                if kind == "alignment":
                    self.err(a.loc, f"`{a.node}` is a target alignment, read only by "
                             "`penalty = supervised(…)`", "use `att.weights` for an attention "
                             "module's weights as a feature")
                    return None
                if e.fn == "pointed" and i == 1:
                    continue  # the pointers: checked by its shape rule
                if kind == "pointers":
                    self.err(a.loc, f"`{a.node}` holds target pointers, read by "
                             f"`pointed(X, {a.node})` (the decoder's input) and compared with "
                             "a pointer attention's weights", "e.g. `lstm(pointed(x, "
                             f"{a.node}), d, init = enc)`")
                    return None
                if s.dim is None:
                    self.err(a.loc, f"`{_name(a)}` holds token ids; embed them first",
                             "e.g. `embed(src, 512)`")
                    return None
        return ops.OPS[e.fn].shape(self, e, args, node_id)

    def node(self, n: ir.Node) -> Shape | None:
        if n.kind_ == "affinity":
            return self.affinity(n)
        return self.shape(n.expr, n.id)

    def _seq(self, e: ir.Op, s: Shape, what: str) -> bool:
        if not s.axes:
            self.err(e.loc, f"`{e.fn}` {what}, but `{_name(e.args[0])}` is a single vector {s}")
            return False
        return True

    @ops.shape_rule("embed")
    def shape_embed(self, e, a, nid):
        if a[0].dim is not None:
            self.err(e.args[0].loc, f"`embed` reads token ids, but `{_name(e.args[0])}` "
                     f"already has features {a[0]}", "use `linear(x, d)` to map features")
            return None
        src = e.args[0]
        while isinstance(src, ir.Op):  # the input the token ids come from
            src = src.args[0]
        kind = getattr(self.cm.model.by_id.get(src.node), "kind", "tokens")
        if kind != "tokens":  # an alignment or pointers: no vocabulary to embed
            self.err(e.args[0].loc, f"`embed` reads token ids, but `{src.node}` is "
                     f"{'an' if kind[0] in 'aeiou' else 'a'} `{kind}` input",
                     "embed a `tokens[…] (vocab = V)` input")
            return None
        return Shape(a[0].axes, int(e.param("d")))

    @ops.shape_rule("linear")
    def shape_linear(self, e, a, nid):
        return Shape(a[0].axes, int(e.param("d")))

    @ops.shape_rule("project")
    def shape_project(self, e, a, nid):
        return Shape(a[0].axes, int(e.param("d", a[0].dim)))

    @ops.shape_rule("lstm", "gru")
    def shape_lstm(self, e, a, nid):
        if not self._seq(e, a[0], "runs over a sequence"):
            return None
        return Shape(a[0].axes, int(e.param("hidden")))


    @ops.shape_rule("bilstm", "bigru")
    def shape_bilstm(self, e, a, nid):
        if not self._seq(e, a[0], "runs over a sequence"):
            return None
        return Shape(a[0].axes, 2 * int(e.param("hidden")))


    @ops.shape_rule("prev")
    def shape_prev(self, e, a, nid):
        return a[0]

    @ops.shape_rule("first")
    def shape_first(self, e, a, nid):
        if not self._seq(e, a[0], "takes the first position of a sequence"):
            return None
        return Shape(a[0].axes[:-1], a[0].dim)

    @ops.shape_rule("backward")
    def shape_backward(self, e, a, nid):
        x = e.args[0]
        while isinstance(x, ir.Ref) and isinstance(self.cm.model.node(x.node), ir.Node):
            x = self.cm.model.node(x.node).expr
        if not (isinstance(x, ir.Op) and x.fn in ("bilstm", "bigru")):
            self.err(e.loc, f"`backward` takes the backward direction of a bidirectional "
                     f"RNN, but `{_name(e.args[0])}` is not a `bilstm` or `bigru`",
                     "e.g. `backward(h)` with `feature h = bigru(x, 1000)`")
            return None
        return Shape(a[0].axes, a[0].dim // 2)

    @ops.shape_rule("cnn")
    def shape_cnn(self, e, a, nid):
        if not self._seq(e, a[0], "convolves over positions"):
            return None
        return Shape(a[0].axes, int(e.param("d")))

    @ops.shape_rule("identity", "scale", "norm", "tanh", "relu", "sigmoid", "ffn", "gelu", "elu",
                    "leaky_relu", "softplus", "scaled_tanh", "dropout")
    def _same(self, e, a, nid):
        return a[0]

    @ops.shape_rule("maxout")
    def shape_maxout(self, e, a, nid):
        k = int(e.param("k"))
        if a[0].dim % k:
            self.err(e.loc, f"`maxout` takes the max over k = {k} pieces of each feature "
                     f"vector, but `{_name(e.args[0])}` has {a[0].dim} features, not a "
                     f"multiple of {k}", f"make the layer before it k·d wide, e.g. "
                     f"`linear(x, d, act = maxout({k}))`")
            return None
        return Shape(a[0].axes, a[0].dim // k)


    @ops.shape_rule("positional", "positions")
    def shape_positional(self, e, a, nid):
        if not self._seq(e, a[0], "encodes positions"):
            return None
        return a[0]

    @ops.shape_rule("mul", "sub")
    def shape_elementwise(self, e, a, nid):
        what = "multiply" if e.fn == "mul" else "subtract"
        if a[0].dim is None or a[1].dim is None:
            self.err(e.loc, f"cannot {what} token ids", "embed them first: `embed(x, d)`")
            return None
        gate = e.fn == "mul" and a[0].axes == a[1].axes and 1 in (a[0].dim, a[1].dim)
        if a[0] != a[1] and not gate:
            self.err(e.loc, f"cannot {what} `{_name(e.args[0])}` {a[0]} and "
                     f"`{_name(e.args[1])}` {a[1]}: shapes differ",
                     "element-wise operations need equal shapes, or for `*` a gate of one "
                     "feature per position (e.g. `sigmoid(linear(h, 1)) * c`)")
            return None
        return a[0] if a[0].dim != 1 else a[1]

    @ops.shape_rule("rsub")
    def shape_rsub(self, e, a, nid):
        if a[0].dim is None:
            self.err(e.loc, "cannot subtract token ids", "embed them first: `embed(x, d)`")
            return None
        return a[0]

    @ops.shape_rule("add")
    def shape_add(self, e, a, nid):
        if a[0] != a[1]:
            self.err(e.loc, f"cannot add `{_name(e.args[0])}` {a[0]} and "
                     f"`{_name(e.args[1])}` {a[1]}: shapes differ",
                     "a residual sum (eq. 37) needs equal shapes; project one side with `linear`")
            return None
        return a[0]

    @ops.shape_rule("concat")
    def shape_concat(self, e, a, nid):
        widest = max(a, key=lambda s: len(s.axes))
        for arg, s in zip(e.args, a):
            if widest.axes[: len(s.axes)] != s.axes:
                self.err(arg.loc, f"cannot concatenate `{_name(arg)}` {s} with {widest}: "
                         "axes differ", "concatenated features share their positions")
                return None
        return Shape(widest.axes, sum(s.dim for s in a))

    @ops.shape_rule("stack")
    def shape_stack(self, e, a, nid):
        if len(a) < 2:
            self.err(e.loc, "`stack` needs at least two representations")
            return None
        for arg, s in zip(e.args, a):
            if s != a[0]:
                self.err(arg.loc, f"cannot stack `{_name(arg)}` {s} with {a[0]}: shapes differ",
                         "map each representation to the same size first (eq. 21: `linear(x, d_t)`)")
                return None
        axis = f"{nid}.reps"
        self.cm.sizes[axis] = len(a)
        self.cm.axis_origin[axis] = nid
        return Shape(a[0].axes + (axis,), a[0].dim)

    @ops.shape_rule("mean", "max", "sum")
    def _pool(self, e, a, nid):
        if not self._seq(e, a[0], "pools over positions"):
            return None
        return Shape(a[0].axes[:-1], a[0].dim)


    @ops.shape_rule("flatten")
    def shape_flatten(self, e, a, nid):
        s = a[0]
        if len(s.axes) < 2:
            self.err(e.loc, f"`flatten` merges two axes, but `{_name(e.args[0])}` has {s}")
            return None
        x, y = s.axes[-2:]
        axis = f"{x}*{y}"
        sx, sy = self.cm.sizes.get(x), self.cm.sizes.get(y)
        self.cm.sizes[axis] = sx * sy if sx and sy else None
        self.cm.axis_origin[axis] = self.cm.axis_origin.get(x, nid)
        return Shape(s.axes[:-2] + (axis,), s.dim)

    @ops.shape_rule("resize")
    def shape_resize(self, e, a, nid):
        if len(a[0].axes) != len(a[1].axes):
            self.err(e.loc, f"cannot resize {a[0]} to the positions of {a[1]}")
            return None
        return Shape(a[1].axes, a[0].dim)

    # ---- grids (B, H, W, C) ------------------------------------------------------

    def _spatial(self, axis: str) -> bool:
        """A grid's spatial axis: one of a `grid` input's, or one resampled from it."""
        origin = self.cm.axis_origin.get(axis)
        n = self.cm.model.by_id.get(origin) if origin else None
        return isinstance(n, ir.Input) and n.kind == "grid" and "*" not in axis

    def _grid(self, e: ir.Op, s: Shape) -> bool:
        if len(s.axes) == 2 and all(self._spatial(a) for a in s.axes):
            return True
        self.err(e.loc, f"`{e.fn}` works on the two spatial axes of a grid (B, H, W, C), but "
                 f"`{_name(e.args[0])}` has {s}", "grid operators read a `grid[H, W, C]` input "
                 "or features built from it (not flattened); over a sequence use `cnn(x, d)`")
        return False

    def _resample(self, e: ir.Op, axes: tuple[str, ...], up: int, down: int) -> tuple | None:
        """``axes`` resampled by up / down (``H`` -> ``H/2``), with their lengths; a length
        that is divided must be known and divisible."""
        out = []
        for axis in axes:
            name, base, num, den = rescaled(self.cm.scaled, axis, up, down)
            size = self.cm.sizes.get(axis)
            if down > 1 and size is None:
                self.err(e.loc, f"`{e.fn}` divides the length of axis `{axis}` by {down}, so "
                         "the length must be known", f"fix it where the input is declared, "
                         f"e.g. `({base} = {16 * den})`")
                return None
            if down > 1 and size % down:
                self.err(e.loc, f"`{e.fn}` divides axis `{axis}` of length {size} by {down}, "
                         "which does not divide it", f"give `{base}` a length that is a "
                         f"multiple of {den} where the input is declared")
                return None
            self.cm.sizes[name] = None if size is None else size * up // down
            self.cm.axis_origin.setdefault(name, self.cm.axis_origin[axis])
            if name != base:
                self.cm.scaled[name] = (base, num, den)
            out.append(name)
        return tuple(out)

    @ops.shape_rule("conv2d")
    def shape_conv2d(self, e, a, nid):
        if not self._grid(e, a[0]):
            return None
        stride = int(e.param("stride", 1))
        axes = self._resample(e, a[0].axes, 1, stride) if stride > 1 else a[0].axes
        return None if axes is None else Shape(axes, int(e.param("d")))

    @ops.shape_rule("maxpool", "upsample")
    def shape_resample(self, e, a, nid):
        if not self._grid(e, a[0]):
            return None
        f = int(e.param("factor"))
        axes = self._resample(e, a[0].axes, *((1, f) if e.fn == "maxpool" else (f, 1)))
        return None if axes is None else Shape(axes, a[0].dim)

    # ---- attention weights as values ----------------------------------------------

    def weights_of(self, e: ir.Op) -> ir.Attention | None:
        """The module of ``att.weights``, when its weights can be read as a feature."""
        ref = e.args[0]
        n = self.cm.model.node(ref.node)
        if not isinstance(n, ir.Attention):
            what = "an input" if isinstance(n, ir.Input) else f"{article(n.kind_)} {n.kind_}"
            self.err(e.loc, f"`{n.name if hasattr(n, 'name') else n.id}.weights`: "
                     f"`{ref.node}` is {what}, not an attention module, so it has no "
                     "attention weights", "`.weights` reads the weights a_l (eq. 3) of an "
                     "`attention` statement")
            return None
        why = ("a multi-dimensional module has a weight per feature (eq. 30-32), not one per "
               "key" if n.dimensionality == "multi" else
               "a capsule module's weights are per class (eq. 43-45)" if n.capsules else
               "a sigmoid gate's weights are not normalised over the keys" if
               n.align.fn == "sigmoid" else
               "graph attention's weights are one per edge and head, (E, H), not a dense "
               "(N, N) matrix (its sparse path never builds one)" if n.mask_input is not None
               and self.cm.model.node(n.mask_input).kind == "graph" else None)
        if why:
            self.err(e.loc, f"`{n.name}.weights`: {why}, so they are not a distribution "
                     "over the keys' positions", "read the weights of a single-dimensional "
                     "module that normalises over its keys")
            return None
        if n.hop is not None or any(n.id in comp for comp in self.cm.steps.values()):
            self.err(e.loc, f"`{n.name}.weights`: `{n.name}` runs once per hop of a `repeat` "
                     "or step of a decoder loop, and its weights exist only inside it",
                     "read the weights of a module outside `repeat` blocks and decoder steps")
            return None
        return n

    @ops.shape_rule("weights")
    def shape_weights(self, e, a, nid):
        """(…, Lq, |Lk|): the context's positions, one feature per key position (the
        weights, averaged over heads)."""
        n = self.weights_of(e)
        if n is None:
            return None
        info = self.cm.attention[n.id]
        size = self.cm.sizes.get(info.attended)
        if size is None:
            self.err(e.loc, f"`{n.name}.weights` has one feature per position of axis "
                     f"`{info.attended}`, whose length is not fixed",
                     f"fix it where the input is declared, e.g. `({info.attended} = 50)`; "
                     "padding masks still leave out the positions past each example's length")
            return None
        return Shape(a[0].axes, size)

    @ops.shape_rule("context")
    def shape_context(self, e, a, nid):
        """A V: values V (…, Lk, d) weighted by A (…, [Lq,] |Lk|) -> (…, [Lq,] d)."""
        v, w = a
        if not v.axes:
            self.err(e.args[0].loc, f"`context` sums the values over their positions, but "
                     f"`{_name(e.args[0])}` is a single vector {v}")
            return None
        attended, groups = v.axes[-1], v.axes[:-1]
        size = self.cm.sizes.get(attended)
        if size is None or w.dim != size or w.axes[:len(groups)] != groups \
                or len(w.axes) > len(groups) + 1 or attended in w.axes:
            self.err(e.loc, f"`context({_name(e.args[0])}, {_name(e.args[1])})`: the weights "
                     f"{w} do not weigh the values {v} over axis `{attended}`",
                     (f"the weights start with the values' other axes {', '.join(groups)}, "
                      if groups else "the weights have ")
                     + "at most one axis of queries and one feature per position of "
                     f"`{attended}` ({size if size is not None else 'which needs a fixed length'}"
                     "), e.g. `context(v, att.weights)` with `att` over v's positions")
            return None
        return Shape(w.axes, v.dim)

    @ops.shape_rule("pointed")
    def shape_pointed(self, e, a, nid):
        """X at the previous target pointer: (…, S, d) and pointers (T,) into S -> (T, d)
        (a pointer network's decoder input, Vinyals et al. 2015)."""
        c = e.args[1]
        inp = self.cm.model.by_id.get(c.node) if isinstance(c, ir.Ref) else None
        if not (isinstance(inp, ir.Input) and inp.kind == "pointers"):
            self.err(c.loc, f"`pointed` reads positions from a pointers input, but "
                     f"`{_name(c)}` is not one", "declare `input C: pointers[T] (into = S)`")
            return None
        x = a[0]
        if x.axes != (inp.into,):
            self.err(e.loc, f"`pointed({_name(e.args[0])}, {inp.id})`: `{inp.id}` points into "
                     f"axis `{inp.into}`, but `{_name(e.args[0])}` has {x}",
                     f"take the vectors of one sequence over `{inp.into}`, e.g. the input "
                     "the encoder reads")
            return None
        return Shape(inp.axes, x.dim)

    @ops.shape_rule("learned")
    def shape_learned(self, e, a, nid):
        return Shape((), int(e.param("d")))

    @ops.shape_rule("classify")
    def shape_classify(self, e, a, nid):
        return Shape(a[0].axes, int(e.param("classes")))

    def affinity(self, n: ir.Node) -> Shape | None:
        e = n.expr
        assert isinstance(e, ir.Op)
        a = [self.shape(x, n.id) for x in e.args]
        if any(s is None for s in a):
            return None
        return self.affinity_shape(e, a)

    @ops.shape_rule("affinity")
    def shape_affinity(self, e, a, nid):
        return self.affinity_shape(e, a)

    def affinity_shape(self, e: ir.Op, a: list[Shape]) -> Shape | None:
        s1, s2 = a
        if not s1.axes or not s2.axes:
            self.err(e.loc, "an affinity matrix relates two sets of feature vectors (eq. 12); "
                     f"got {s1} and {s2}")
            return None
        if s1.axes[:-1] != s2.axes[:-1]:
            self.err(e.loc, f"affinity operands must share their group axes: {s1} vs {s2}")
            return None
        if s1.axes[-1] == s2.axes[-1]:
            self.err(e.loc, "an affinity matrix relates two different inputs; both operands "
                     f"run over `{s1.axes[-1]}`", "for relations within one input use "
                     "self-attention (`query = project(F)`)")
            return None
        form = e.param("form", "bilinear")
        if form in ("trilinear", "dot", "scaled_dot") and s1.dim != s2.dim:
            self.err(e.loc, f"the {form} affinity needs equal feature sizes (eq. 13); "
                     f"got {s1.dim} and {s2.dim}", "use `form = bilinear` (eq. 12) or project "
                     "one side")
            return None
        return Shape(s1.axes + (s2.axes[-1],), None)

    # ---- attention modules -------------------------------------------------------

    def attention(self, n: ir.Attention) -> Shape | None:
        k = self.shape(n.keys, n.id)
        v = self.shape(n.values, n.id)
        q = self.shape(n.query, n.id) if n.query is not None else None
        if k is None or v is None or (n.query is not None and q is None):
            return None
        for what, s, e in (("keys", k, n.keys), ("values", v, n.values),
                           ("query", q, n.query)):
            if s is not None and s.dim is None:
                self.err(e.loc, f"the {what} `{_name(e)}` are token ids; embed them first")
                return None
        if not k.axes:
            self.err(n.keys.loc, f"attention `{n.name}` attends over `{_name(n.keys)}`, a single "
                     f"vector {k}", "keys need a sequence, set or grid axis to attend over")
            return None
        if k.axes != v.axes:
            self.err(n.values.loc, f"values {v} and keys {k} must have the same positions")
            return None
        attended, groups = k.axes[-1], k.axes[:-1]
        sc = n.score
        mode = "none"
        ctx_axes: tuple[str, ...] = groups
        # capsules over multi-hop attention (eq. 41-43): the query is an earlier capsule
        # module's output, one row per class, and this module's capsules are those rows
        cax = self.capsule_axis(q) if n.capsules and q is not None else None
        if q is not None:
            if cax is not None and q.axes[:-1] == groups:
                mode = "capsules"  # one query per class
            elif len(q.axes) == len(k.axes) and q.axes[:-1] == groups:
                mode, ctx_axes = "sequence", q.axes
            elif q.axes == groups[: len(q.axes)]:
                mode = "single"
            elif n.align.fn == "sigmoid":
                mode = "other"  # gate_fits says why a gate cannot take it
            else:
                self.err(n.query.loc, f"query {q} does not fit keys {k}",
                         "a query is one vector per group of keys, or one per position of a "
                         "sequence whose other axes match the keys'")
                return None
        where = f"attention `{n.name}`"
        if (refused := module_checks.refusal(n)) is not None:
            self.err(*refused)
            return None
        if n.align.fn == "sigmoid":
            if not self.gate_fits(n, q, k, mode):
                return None
            ctx_axes = k.axes  # the gated values, at the keys' positions
        if q is None and sc.fn not in SCORES_WITHOUT_QUERY:
            scores = " and ".join(f"`{s}`" for s in SCORES_WITHOUT_QUERY)
            self.err(n.loc, f"{where} has no query, which only the {scores} scores allow (eq. 33)",
                     "give a learned query, `query = learned(d)` (eq. 34), or a projection of "
                     "the features, `query = project(F)` (eq. 35)")
            return None
        if sc.fn in ("multiplicative", "scaled_multiplicative", "similarity") and q.dim != k.dim:
            self.err(sc.loc, f"the {sc.fn.replace('_', ' ')} score needs d_q = d_k, but the query "
                     f"has {q.dim} and the keys have {k.dim}",
                     f"project one side, e.g. `query = project({_base_ref(n.query) or '…'}, "
                     f"{k.dim})`")
            return None
        if sc.fn == "concat" and q is not None:
            self.err(sc.loc, "the concat score w^T W [q; k_l] = w^T W1 q + w^T W2 k_l is linear: "
                     "the query adds the same number to every key's score, which the alignment "
                     "cancels, so the query would be ignored",
                     "use `score = additive(…)` (a non-linearity between q and k, eq. 6), or "
                     "score the keys alone by dropping the query (eq. 33)")
            return None
        if sc.fn == "location":
            size = self.cm.sizes.get(attended)
            if size is None:
                self.err(sc.loc, f"the location score predicts one weight per key from the query "
                         f"alone, so `{attended}` needs a fixed length",
                         f"give the axis a length where the input is declared, e.g. "
                         f"`(…, {attended} = 50)`")
                return None
        if n.affinity is not None:
            if not self.affinity_fits(n, q, k):
                return None
            if sc.fn in ("additive", "max_pool"):
                mode, ctx_axes = "single", groups  # eq. 14-16: one context per input
        elif sc.fn in ("affinity", "max_pool"):
            self.err(sc.loc, f"the `{sc.fn}` score reads an affinity matrix (eq. 12-16)",
                     "add `affinity = NAME` with `affinity NAME = affinity(A, B)`")
            return None
        if n.affinity is not None and n.capsules:
            self.err(n.loc, f"{where} takes its queries from the other input through affinity "
                     f"`{n.affinity}` (eq. 14-15), but capsule-based attention learns one query "
                     "per class (eq. 43): a capsule has no query from the other input",
                     "drop `capsules`, or attend with learned capsule queries in another module")
            return None
        if n.affinity is not None and n.align.fn == "local" and sc.fn in ("additive", "max_pool"):
            self.err(n.align.loc, f"{where}: the `{sc.fn}` score reads the whole other input "
                     f"through affinity `{n.affinity}` (eq. 14-16), one context per input: "
                     "there is no query position or vector for local alignment's centre p "
                     "(eq. 27-28)", "use `align = global` (or `sparsemax`, `entmax`), or "
                     "`score = affinity` (one context per query position)")
            return None
        if n.affinity is not None and sc.fn != "additive" and (
                n.heads > 1 or n.dimensionality == "multi"):
            what = "heads" if n.heads > 1 else "multi-dimensional weights"
            eq = "eq. 16" if sc.fn == "max_pool" else "eq. 12-13"
            self.err(n.loc, f"{where}: the `{sc.fn}` score reads its scores off affinity "
                     f"`{n.affinity}` ({eq}), one number per pair of positions with no "
                     f"weights of its own, so it cannot have {what} (eq. 38 projects each "
                     "head's query and keys; eq. 31 scores each feature)",
                     "use `score = additive(…)`, whose per-head W_q, W_k and w (or W_d) extend "
                     "eq. 14-15")
            return None
        if n.heads > 1:
            for what, d in (("d_q", q.dim if q is not None else None), ("d_k", k.dim), ("d_v", v.dim)):
                if d is not None and d % n.heads:
                    self.err(n.loc, f"{where}: {what} = {d} is not divisible by heads = {n.heads}",
                             "each head gets an equal slice (eq. 38)")
                    return None
        if n.dimensionality == "multi":
            if sc.fn not in ("additive", "concat"):
                self.err(sc.loc, f"multi-dimensional attention scores each feature with "
                         f"W_d^T act(W1 q + W2 k + b) (eq. 31); `{sc.fn}` gives one number per key",
                         "use `score = additive(…)`")
                return None
            if n.align.fn == "hard":
                self.err(n.align.loc, "hard alignment picks one value vector (eq. 26); "
                         "multi-dimensional weights need a distribution per feature (eq. 32)",
                         "use `dimensionality = single` with `align = hard`, or a soft "
                         "alignment with `dimensionality = multi`")
                return None
        if n.capsules:
            if not learned_capsules(n) and cax is None:
                self.err(n.loc, f"{where}: capsule-based attention learns one query per class "
                         "(eq. 43)", "write `query = learned(d)`, or over several hops the "
                         "output of an earlier capsule module, one query per class (eq. 41-43)")
                return None
            if cax is not None and self.cm.sizes.get(cax) != n.capsules:
                self.err(n.loc, f"{where}: the query holds {self.cm.sizes.get(cax)} capsules' "
                         f"outputs, one per class, but this module has capsules = {n.capsules}",
                         f"write `capsules = {self.cm.sizes.get(cax)}` (one capsule per class, "
                         "eq. 43)")
                return None
            if n.heads > 1 and n.heads_out == "mean":
                self.err(n.loc, f"{where}: each capsule's probability reads its whole context, "
                         "p_c = sigmoid(w_c^T c_c + b_c) with c_c of width d_v (eq. 44), but "
                         "`heads_out = mean` gives d_v / H",
                         "use `heads_out = project` (c_c = W_O concat(c_c^(1), ..., c_c^(H)), "
                         "eq. 40) or `heads_out = concat`")
                return None
        if n.mask != "none":
            if mode != "sequence" or ctx_axes[-1] != attended:
                self.err(n.loc, f"{where}: the {n.mask} mask relates positions of one sequence, "
                         "so query and keys must run over the same axis",
                         "masks are for self-attention (`query = project(F)`, `keys = F`)")
                return None
        if not self.masks_fit(n, q, k, mode, groups, attended):
            return None
        if (n.position or n.bias) and not self.modifiers_fit(n, mode, ctx_axes, attended, k):
            return None
        al = n.align
        if al.fn == "local":
            if mode == "none":
                self.err(al.loc, "local alignment centres a window on a position the query "
                         "gives (eq. 27-28); this module has no query")
                return None
            if al.position == "monotonic" and mode != "sequence":
                self.err(al.loc, "monotonic local alignment sets p = the query's position "
                         "(eq. 27), so the query must be a sequence",
                         "use `position = predictive` (eq. 28)")
                return None
        if n.penalty is not None and n.heads < 2:
            self.err(n.loc, f"{where}: the penalty ||AAᵀ − I||²_F compares several rows of "
                     "attention", "set `heads = r` (Lin et al.: r rows)")
            return None
        if n.doubly_stochastic is not None and (mode != "sequence" or n.dimensionality == "multi"
                                       or n.capsules or n.affinity is not None or groups):
            self.err(n.loc, f"{where}: the doubly stochastic penalty sums each key's weights "
                     "over the query positions (Xu et al. eq. 14), one weight per key and "
                     "query", "give the module a query sequence (a decoder's states) and "
                     "single-dimensional weights")
            return None
        if not self.coverage_fits(n, mode, groups):
            return None
        if n.supervised is not None and not self.supervision_fits(n, groups, ctx_axes, attended):
            return None
        d_v = v.dim
        self.cm.attention[n.id] = AttentionInfo(attended, groups, mode,
                                                q.dim if q is not None else None, k.dim, d_v)
        if cax is not None:
            ctx_axes = ctx_axes + (cax,)  # the query's classes
        elif n.capsules:
            axis = f"{n.id}.capsules"
            self.cm.sizes[axis] = n.capsules
            self.cm.axis_origin[axis] = n.id
            ctx_axes = ctx_axes + (axis,)
        return Shape(ctx_axes, context_dim(n, d_v))

    def coverage_fits(self, n: ir.Attention, mode: str, groups) -> bool:
        """``coverage = true`` (See et al. eq. 10-11), ``penalty = coverage(λ)`` (eq. 12-13)
        and ``penalty = disagreement(λ, on = …)`` (Li et al. 2018, eq. 5-7)."""
        where = f"attention `{n.name}`"
        one_row = (mode != "sequence" or n.dimensionality == "multi" or n.capsules
                   or n.affinity is not None or bool(groups))
        if n.coverage and n.score.fn != "additive":
            self.err(n.score.loc, f"{where}: coverage enters the score inside the additive "
                     "form, e_i^t = vᵀ tanh(W_h h_i + W_s s_t + w_c c_i^t + b) (See et al. "
                     f"eq. 11); the {n.score.fn.replace('_', ' ')} score has no such term",
                     "use `score = additive(…)`, or `penalty = coverage(λ)` alone (eq. 12-13 "
                     "need no coverage in the score)")
            return False
        if n.coverage and (one_row or n.query is None):
            self.err(n.loc, f"{where}: the coverage c^t sums the weights of the earlier query "
                     "positions (See et al. eq. 10), so the module needs a query sequence (a "
                     "decoder's states) and single-dimensional weights over one key sequence",
                     "give the module `query = …` over a sequence, or drop `coverage`")
            return False
        if n.coverage and (n.share is not None or n.position is not None or n.bias is not None
                           or n.align.fn not in ("global", "sparsemax", "entmax")):
            what = ("`share`" if n.share is not None else "a position term or score bias"
                    if n.position or n.bias else f"`{n.align.fn}` alignment")
            self.err(n.loc, f"{where}: coverage is built for a module of its own with "
                     "w_c c_i^t inside its additive score and a normalised alignment over all "
                     f"the keys (See et al. eq. 10-11); {what} is not combined with it",
                     "use `align = global` (or `sparsemax`, `entmax`) without `share`, "
                     "`position` or `bias`")
            return False
        if n.coverage_loss is not None and one_row:
            self.err(n.loc, f"{where}: the coverage loss compares each step's weights with "
                     "the sum of the earlier steps' (See et al. eq. 12-13), one weight per "
                     "key and query", "give the module a query sequence (a decoder's states) "
                     "and single-dimensional weights")
            return False
        d = n.disagreement
        if d is not None and n.heads < 2:
            self.err(n.loc, f"{where}: the disagreement penalty compares pairs of heads "
                     f"(Li et al. eq. 5-7), but the module has {n.heads}", "set `heads = H`, "
                     "H ≥ 2")
            return False
        if d is not None and n.dimensionality == "multi":
            self.err(n.loc, f"{where}: the disagreement penalty compares the heads' weight "
                     "matrices (Li et al. eq. 5-7); multi-dimensional weights (eq. 30-32) "
                     "are not combined with it", "use `dimensionality = single`")
            return False
        if d is not None and d.on == "subspace" and n.query is None:
            self.err(n.loc, f"{where}: without a query every head reads the same values, "
                     "so cos(V^i, V^j) = 1 for every pair (Li et al. eq. 5)",
                     "use `on = position` or `on = output`, or give the module a query "
                     "(heads then split the values, eq. 38)")
            return False
        return True

    def capsule_axis(self, q: Shape) -> str | None:
        """The classes' axis when ``q`` is a capsule module's output (or a stream built from
        one, e.g. ``q + att`` in a hop): one row per class."""
        ax = q.axes[-1] if q.axes else None
        o = self.cm.model.by_id.get(self.cm.axis_origin.get(ax)) if ax else None
        return ax if isinstance(o, ir.Attention) and o.capsules else None

    def supervision_fits(self, n: ir.Attention, groups: tuple[str, ...],
                         ctx_axes: tuple[str, ...], attended: str) -> bool:
        """``penalty = supervised(gold, …)`` (Liu et al. 2016): ``gold`` is an ``alignment``
        input over the module's query positions and keys, (Lq, Lk), and the weights are one
        distribution over the keys per query position."""
        sup, where = n.supervised, f"attention `{n.name}`"
        gold = self.cm.model.by_id.get(sup.gold)
        if not (isinstance(gold, ir.Input) and gold.kind == "alignment"):
            what = (f"{article(gold.kind)} `{gold.kind}` input" if isinstance(gold, ir.Input)
                    else f"{article(gold.kind_)} {gold.kind_}" if gold is not None else "unknown")
            self.err(sup.loc, f"{where}: `supervised` compares the weights with a target "
                     f"alignment, but `{sup.gold}` is {what}",
                     "declare the target as `input gold: alignment[T, S]` (rows sum to 1, or "
                     "are all zero where a query position is aligned to nothing)")
            return False
        why = ("its weights are per feature (eq. 30-32)" if n.dimensionality == "multi" else
               "its weights are per class (eq. 43-45)" if n.capsules else
               "a sigmoid gate is not a distribution over the keys" if n.align.fn == "sigmoid"
               else f"it attends once per group of {', '.join(groups)}" if groups else None)
        if why:
            self.err(sup.loc, f"{where}: `supervised` compares one distribution over the keys "
                     f"per query position with the target alignment, but {why}",
                     "supervise a single-dimensional module without groups")
            return False
        want = ctx_axes + (attended,)
        if gold.axes != want:
            shown = ", ".join(want)
            self.err(sup.loc, f"{where}: the target alignment `{gold.id}` has axes "
                     f"({', '.join(gold.axes)}), but the module's weights have "
                     f"({shown}) (query positions, keys)",
                     f"declare it as `input {gold.id}: alignment[{shown}]`")
            return False
        return True

    def masks_fit(self, n: ir.Attention, q: Shape | None, k: Shape, mode: str,
                  groups: tuple[str, ...], attended: str) -> bool:
        """A mask input (``mask = m``, ``causal * m``) and graph attention (``mask = adj``,
        ``activated_concat``, ``self_loops``): what they need of the module."""
        where = f"attention `{n.name}`"
        mi = self.cm.model.node(n.mask_input) if n.mask_input else None
        graph = mi is not None and mi.kind == "graph"
        if n.score.fn == "activated_concat" and not graph:
            self.err(n.score.loc, "the activated concat score act(a^T [W h_i || W h_j]) is GAT's "
                     "(Velickovic et al. eq. 1-3): it scores the edges of a graph, and "
                     f"{where} has no graph mask", "declare `input adj: graph[N]` and set "
                     "`mask = adj`; over a sequence use `additive(…)` (eq. 6)")
            return False
        if n.self_loops and not graph:
            self.err(n.loc, f"{where}: `self_loops` adds the edge i -> i to a graph, and the "
                     "module has no graph mask", "set `mask = adj` with `input adj: graph[N]`, "
                     "or drop `self_loops`")
            return False
        if n.out_bias is not None and not graph:
            self.err(n.loc, f"{where}: `bias = {str(n.out_bias).lower()}` switches graph "
                     "attention's output bias, and the module has no graph mask", "set "
                     "`mask = adj` with `input adj: graph[N]`, or give `bias` a score bias "
                     "(`alibi`, `gaussian(…)`)")
            return False
        if mi is None:
            return True
        if mode != "sequence" or groups:
            self.err(n.loc, f"{where}: mask `{mi.id}` gives one row of keys per query position, "
                     "so the query must be a sequence over its own axis and the keys have no "
                     "other axes (one attention per example)",
                     "a query with one vector per position, e.g. `query = project(x)`")
            return False
        axes = (q.axes[-1], attended)
        if mi.kind == "mask" and tuple(mi.axes) != axes:
            self.err(n.loc, f"{where}: mask `{mi.id}` is over ({', '.join(mi.axes)}), and the "
                     f"module's query and keys over ({', '.join(axes)})",
                     f"declare `input {mi.id}: mask[{', '.join(axes)}]`")
            return False
        if graph and axes != (mi.axes[0], mi.axes[0]):
            self.err(n.loc, f"{where}: graph `{mi.id}` relates the nodes of axis "
                     f"`{mi.axes[0]}`, and the module's query and keys are over "
                     f"({', '.join(axes)})", "graph attention: each node's features attend "
                     "over its neighbours' (query, keys and values over the graph's axis)")
            return False
        refuse = None
        if n.align.fn == "local" or n.position or n.bias or n.affinity or n.capsules \
                or n.align.fn == "sigmoid" or n.coverage:
            refuse = ("local alignment" if n.align.fn == "local" else "a position term"
                      if n.position else "a score bias" if n.bias else "an affinity matrix"
                      if n.affinity else "capsules" if n.capsules else "a sigmoid gate"
                      if n.align.fn == "sigmoid" else "coverage")
        elif graph and (n.align.fn != "global" or n.dimensionality == "multi"
                        or penalised(n) or n.coverage or n.share or n.mask != "none"):
            refuse = (f"`{n.align.fn}` alignment" if n.align.fn != "global" else
                      "multi-dimensional weights" if n.dimensionality == "multi" else
                      "a penalty" if penalised(n) else
                      "`share`" if n.share else f"the {n.mask} mask")
        if refuse:
            why = ("graph attention normalises each node's scores over its neighbours "
                   "(Velickovic et al. eq. 3) with one softmax per head" if graph else
                   "coverage scores the query positions one at a time (See et al. eq. 10-11) "
                   "over all the keys" if refuse == "coverage" else
                   "a mask input is the whole (B, Lq, Lk) keep matrix")
            self.err(n.loc, f"{where}: mask `{mi.id}` cannot be combined with {refuse}: {why}",
                     "drop one of the two")
            return False
        if graph and n.score.fn != "activated_concat":
            self.err(n.score.loc, f"{where}: graph attention scores the edges with GAT's "
                     f"activated concat score, not `{n.score.fn}`", "write `score = "
                     "activated_concat(act = leaky_relu(0.2))` (Velickovic et al. eq. 1)")
            return False
        if graph and n.heads > 1 and n.heads_out == "project":
            self.err(n.loc, f"{where}: GAT joins its heads by concatenation or by their mean "
                     "(Velickovic et al. eq. 5-6), with no W_O", "set `heads_out = concat` "
                     "(hidden layers) or `heads_out = mean` (the output layer)")
            return False
        return True

    def modifiers_fit(self, n: ir.Attention, mode: str, ctx_axes: tuple[str, ...],
                      attended: str, k: Shape) -> bool:
        """Score modifiers (``position``, ``bias``) relate query position i to key position j
        of one sequence; relative and rotary positions enter the q·k term, so the score must
        have one; rotary turns pairs of features, so a head's width must be even."""
        where = f"attention `{n.name}`"
        for m in (n.position, n.bias):
            if m is None:
                continue
            what = f"`{'position' if m is n.position else 'bias'} = {m.fn}`"
            if mode != "sequence" or ctx_axes[-1] != attended or n.affinity is not None:
                self.err(m.loc, f"{where}: {what} relates query position i to key position j "
                         "of one sequence, but this module has no query sequence over its "
                         "keys' axis",
                         "score modifiers are for self-attention (`query = project(F)`, "
                         "`keys = F`)")
                return False
            if m.fn in ("relative", "rotary") and n.score.fn not in (
                    "multiplicative", "scaled_multiplicative"):
                self.err(m.loc, f"{where}: {what} enters the q·k term of the score, and the "
                         f"`{n.score.fn}` score has none",
                         "use `score = scaled_multiplicative` (or `multiplicative`), or a "
                         "`bias = …` added to any score")
                return False
            if n.dimensionality == "multi":
                self.err(m.loc, f"{where}: {what} gives one term per pair of positions; "
                         "multi-dimensional attention scores every feature (eq. 31)",
                         "drop the modifier or use `dimensionality = single`")
                return False
            if n.align.fn not in ("global", "sparsemax", "entmax"):
                self.err(m.loc, f"{where}: {what} is added to the scores before a normalised "
                         f"alignment over all the keys; `{n.align.fn}` alignment is not one",
                         "use `align = global` (or `sparsemax`, `entmax`)"
                         + ("; the Gaussian bias is itself a soft local window (Yang et al.)"
                            if n.align.fn == "local" else ""))
                return False
            d_head = k.dim // n.heads
            if m.fn == "rotary" and d_head % 2:
                self.err(m.loc, f"{where}: rotary positions turn pairs of features, but each "
                         f"head has d_k / heads = {k.dim} / {n.heads} = {d_head}, an odd width",
                         "give the keys and query an even width per head")
                return False
        return True

    def gate_fits(self, n: ir.Attention, q: Shape | None, k: Shape, mode: str) -> bool:
        """A sigmoid gate (Oktay et al.): one weight per key position from that position's
        key and query alone, e_l = w^T act(W1 q_l + W2 k_l + b), a_l = sigmoid(e_l + b_psi)."""
        where, sc = f"attention `{n.name}`", n.score
        if sc.fn != "additive" and not (sc.fn == "concat" and q is None):
            self.err(sc.loc, f"{where}: a sigmoid gate scores each position on its own with the "
                     "additive form w^T act(W1 q_l + W2 k_l + b) (eq. 6, Oktay et al.); the "
                     f"{sc.fn.replace('_', ' ')} score is not computed per position",
                     "use `score = additive(…)`")
            return False
        if mode == "other" or mode == "sequence" and q.axes != k.axes:
            self.err(n.query.loc, f"{where}: a sigmoid gate pairs each key position with the "
                     f"query at the same position, but the query {q} and the keys {k} run "
                     "over different positions", "resample the query to the keys' grid, e.g. "
                     "`upsample(g, 2)`, `maxpool(g, 2)` or `resize(g, x)`")
            return False
        why = {"affinity": "an affinity matrix relates pairs of positions",
               "capsules": "capsules weigh all keys for one query per class",
               "mask": "a mask relates pairs of positions of one sequence",
               "penalty": "the penalty compares rows of weights that sum to 1"}
        given = {"affinity": n.affinity, "capsules": n.capsules, "mask": n.mask != "none",
                 "penalty": n.penalty is not None or n.doubly_stochastic is not None
                 or n.coverage_loss is not None or n.disagreement is not None or n.coverage}
        for name, reason in why.items():
            if given[name]:
                self.err(n.loc, f"{where}: a sigmoid gate weighs each position on its own, so "
                         f"it takes no `{name}` ({reason})",
                         f"drop `{name}`, or use a softmax alignment")
                return False
        return True

    def affinity_fits(self, n: ir.Attention, q: Shape | None, k: Shape) -> bool:
        aff = self.cm.shapes.get(n.affinity)
        if aff is None:
            return False
        pair = set(aff.axes[-2:])
        if q is None or k.axes[-1] not in pair or q.axes[-1:] == () or q.axes[-1] not in pair \
                or q.axes[-1] == k.axes[-1]:
            self.err(n.loc, f"attention `{n.name}` uses affinity `{n.affinity}` over "
                     f"{' and '.join(sorted(pair))}: its keys must run over one of them and its "
                     "query over the other", "parallel co-attention: the keys of one input are "
                     "the query of the other (eq. 12-15)")
            return False
        return True

    def check_feed(self, n: ir.AnyNode) -> None:
        """A recurrent decoder runs over an autoregressive axis, reads a node of its own
        step, and starts from a state of its width."""
        for e in decoder_ops(n):
            if e.fn not in ("lstm", "gru") or not e.args:
                continue
            s = self.cm.shapes.get(_base_ref(e.args[0]) or "")
            axis = s.axes[-1] if s and s.axes else None
            origin = self.cm.model.node(self.cm.axis_origin[axis]) if axis in \
                self.cm.axis_origin else None
            if s is not None and len(s.axes) != 1:
                self.err(e.loc, "`feed` runs a decoder step by step over one sequence; "
                         f"its input has axes {s}", "feed a decoder over a "
                         "`tokens[T]` or `sequence[T, d]` input")
                continue
            if not (isinstance(origin, ir.Input) and origin.autoregressive):
                self.err(e.loc, "`feed` makes a decoder read its previous context, so the "
                         "recurrent model must run over an autoregressive input",
                         "declare the target input with `(…, autoregressive)`")
                continue
            if e is not n.expr:
                self.err(e.loc, "a decoder with `feed` is a statement of its own",
                         f"write `{n.kind_} {n.name} = {e.fn}(…, feed = {e.param('feed')})` and "
                         f"build on `{n.name}` in other statements")
                continue
            fed = str(e.param("feed"))
            step = self.cm.steps.get(n.id, set())
            if fed not in step or fed == n.id:
                self.err(e.loc, f"`feed = {fed}`: `{fed}` is not computed in the steps of the "
                         f"decoder `{n.name}`: it does not depend on `{n.name}`",
                         f"feed a node computed from `{n.name}` in each step (an attention "
                         f"queried by `{n.name}`, Luong's h̃), or query the attention with "
                         f"`prev({n.name})` and feed its context (Bahdanau's c_i)")
                continue
            fs = self.cm.shapes.get(fed)
            if fs is not None and fs.axes != s.axes:
                self.err(e.loc, f"`feed = {fed}`: the decoder reads one vector of `{fed}` per "
                         f"step, but it has shape {fs}", "feed a node with one vector per "
                         f"position of `{axis}`")
            self.check_init(n, e, s)

    def check_encoder_init(self, n: ir.AnyNode, e: ir.Op) -> None:
        """``init = ENCODER`` on an ``lstm``/``gru`` run over its whole input at once (a
        decoder without ``feed``, e.g. a pointer network's, Vinyals et al. 2015): it starts
        from the encoder's final states, layer by layer. Other initial states belong to a
        decoder run step by step."""
        init = e.param("init")
        src = self.cm.model.by_id.get(str(init)) if init is not None else None
        encoder = isinstance(src, ir.Node) and isinstance(src.expr, ir.Op) and \
            src.expr.fn in ("lstm", "gru")
        if e.fn not in ("lstm", "gru") or not encoder or e.param("init_c"):
            self.err(e.loc, "without `feed`, `init` names an encoder `lstm`/`gru` whose final "
                     "states start this RNN; other initial states (`init = s0`, `init_c`) "
                     "belong to a decoder run step by step with `feed = …`",
                     "e.g. `lstm(x, 256, init = enc)` with `feature enc = lstm(src, 256)`")
            return
        x = self.cm.shapes.get(n.id)
        if x is not None and len(x.axes) != 1:
            self.err(e.loc, f"`init = {init}` starts one sequence per example, but this RNN's "
                     f"output {x} has several axes", "run it over one sequence per example")
            return
        self.check_init(n, e, x)

    def check_init(self, n: ir.Node, e: ir.Op, x: Shape) -> None:
        """``init``: a vector per example of the decoder's width (h_0; ``init_c`` c_0), or an
        encoder LSTM/GRU whose final states start the decoder layer by layer."""
        hidden, layers = int(e.param("hidden")), int(e.param("layers", 1))
        init, init_c = e.param("init"), e.param("init_c")
        step = self.cm.steps.get(n.id, set())
        for key, ref in (("init", init), ("init_c", init_c)):
            if ref is not None and str(ref) in step:
                self.err(e.loc, f"`{key} = {ref}` is computed in the decoder's steps; the "
                         "initial state comes before the first step",
                         "start from the encoder, e.g. `init = s0` with "
                         "`feature s0 = linear(first(backward(h)), …)`")
                return
        if init_c is not None and (e.fn != "lstm" or init is None):
            self.err(e.loc, "`init_c` gives an LSTM's initial memory c_0 beside `init` (h_0)"
                     if e.fn == "lstm" else "`init_c` gives an LSTM's memory c_0; a GRU has "
                     "only the state `init` sets", "give `init = H0, init_c = C0`"
                     if e.fn == "lstm" else "drop `init_c`")
            return
        if init is None:
            return
        src = self.cm.model.node(str(init))
        enc = src.expr if isinstance(src, ir.Node) and isinstance(src.expr, ir.Op) and \
            src.expr.fn in ("lstm", "gru", "bilstm", "bigru") else None
        if enc is not None:
            want = f"{e.fn}(…, {hidden}, layers = {layers})"
            if enc.fn != e.fn or enc.param("feed") or int(enc.param("hidden")) != hidden or \
                    int(enc.param("layers", 1)) != layers:
                self.err(e.loc, f"`init = {init}` starts the decoder from the final states of "
                         f"`{init}`, layer by layer, so `{init}` must be `{want}` too",
                         "or give one vector per example, e.g. `init = s0` with `feature s0 = "
                         f"linear(first(backward(h)), {hidden}, act = tanh)`" if layers == 1
                         else f"give the encoder the decoder's kind, size and layers: {want}")
                return
            es = self.cm.shapes.get(str(init))
            if es is not None and len(es.axes) != 1:
                self.err(e.loc, f"`init = {init}`: the final states of `{init}` {es} are one "
                         "per group, not one per example", "start from an encoder over one "
                         "sequence per example")
                return
            if init_c is not None:
                self.err(e.loc, f"`init = {init}` gives the encoder's final memory too",
                         "drop `init_c`")
            return
        if layers != 1:
            self.err(e.loc, f"`init = {init}` gives one state vector, but the decoder has "
                     f"{layers} layers", "start a stacked decoder from an encoder with as many "
                     f"layers (`init = ENCODER`), whose final states it takes layer by layer")
            return
        for key, ref in (("init", init), ("init_c", init_c)):
            rs = self.cm.shapes.get(str(ref)) if ref is not None else None
            if rs is not None and (rs.axes or rs.dim != hidden):
                self.err(e.loc, f"`{key} = {ref}` has shape {rs}, but the decoder's initial "
                         f"{'state' if key == 'init' else 'memory'} is one vector of "
                         f"hidden = {hidden} per example", f"map it to the decoder's width, "
                         f"e.g. `linear(first(…), {hidden}, act = tanh)`; pool a sequence "
                         "with `mean(…)` or `first(…)`")
                return

    def check_prev(self, n: ir.AnyNode) -> None:
        """``prev(x)`` reads x at the previous step of the decoder that computes both x and
        the node reading it; ``init`` belongs to a decoder."""
        stack = [e for e in ([n.expr] if isinstance(n, ir.Node) else
                             [n.query, n.keys, n.values] if isinstance(n, ir.Attention) else [])
                 if e is not None]
        while stack:
            e = stack.pop()
            if not isinstance(e, ir.Op):
                continue
            stack.extend(e.args)
            if (e.param("init") or e.param("init_c")) and not e.param("feed"):
                self.check_encoder_init(n, e)
            if e.fn != "prev" or not e.args or not isinstance(e.args[0], ir.Ref):
                continue
            x = e.args[0].node
            homes = [d for d, step in self.cm.steps.items() if x in step]
            if not homes:
                self.err(e.loc, f"`prev({x})` reads `{x}` at the previous decoder step, but "
                         f"`{x}` is not computed step by step by a decoder",
                         "`prev` reads a node of a recurrent decoder's step "
                         "(`gru(…, feed = …)`), e.g. Bahdanau's `query = prev(s)`")
            elif other := prev_reads.in_other_step(self.cm.steps, x, n.id):
                self.err(e.loc, f"`prev({x})` is read by `{n.id}`, which runs in the steps "
                         f"of another decoder, `{other}`: a decoder's step reads another "
                         "decoder's steps only as whole sequences",
                         f"read `prev({x})` in the steps of `{homes[0]}`, or after them "
                         "(an output over all steps)")
            elif n.id in homes:
                self.err(e.loc, f"the decoder `{n.id}` reads its inputs for all steps at once; "
                         f"`prev({x})` cannot be one of them", f"give it to the decoder "
                         "through `feed = NODE`")

    # What runs inside a decoder loop must act on one step at a time: the ops that mix the
    # positions of their input's last axis, and what they do (for messages).
    STEP_MIXING = {"lstm": "runs", "gru": "runs", "bilstm": "runs", "bigru": "runs",
                   "cnn": "convolves", "positional": "encodes positions",
                   "positions": "encodes positions", "mean": "pools",
                   "max": "pools", "sum": "pools", "prepend": "prepends"}

    def check_feed_loop(self, n: ir.AnyNode) -> None:
        """``feed = ATT`` runs the recurrent model R one step at a time, and with it every
        node between R and ATT (codegen's decoder loop): there only the current step of R's
        axis exists. Refuse what would need the other steps: an attention over that axis
        (attention inside a recurrence, e.g. LSTMN's intra-attention over the decoder's own
        outputs, or over its inputs), and ops that mix positions along it."""
        fed = None
        stack = [n.expr] if isinstance(n, ir.Node) else []
        while stack:
            e = stack.pop()
            if isinstance(e, ir.Op):
                if e.param("feed"):
                    fed = e
                stack.extend(e.args)
        if fed is None:
            return
        att = str(fed.param("feed"))
        axis = self.shape(fed.args[0], n.id).axes[-1]
        ctx = self.cm.shapes[att]
        if ctx.axes != (axis,):
            self.err(fed.loc, f"`feed = {att}` reads the previous step's context, one vector per "
                     f"step of `{axis}`, but the context of `{att}` is {ctx}",
                     f"a context that does not change with the steps is an input: "
                     f"`{fed.fn}(concat(x, {att}), …)`" if axis not in ctx.axes else
                     "feed a module whose query is the decoder state, one per step")
            return
        region = self.cm.steps.get(n.id, {n.id, att})
        where = (f"the steps of decoder `{n.id}`, but it runs inside that decoder's "
                 f"step-by-step loop (`feed = {att}`), where only the current step exists")
        for node_id in self.cm.order:
            if node_id not in region:
                continue
            x = self.cm.model.node(node_id)
            if isinstance(x, ir.Attention):
                k = self.shape(x.keys, node_id)
                if k.axes[-1] == axis:
                    self.err(x.keys.loc, f"attention `{x.name}` attends over `{axis}`, {where}",
                             "attention inside a recurrence (LSTMN-style intra-attention) is "
                             "not supported yet: attend over another input's features, or drop "
                             "`feed` and attend over the decoder's outputs once it has run "
                             "(`mask = causal`)")
                    return
                q = self.shape(x.query, node_id) if x.query is not None else None
                if x.affinity and x.score.fn in ("additive", "max_pool") and q is not None \
                        and q.axes[-1:] == (axis,):
                    self.err(x.loc, f"attention `{x.name}` sums its affinity over the query's "
                             f"positions (eq. 14-16), `{axis}`, {where}",
                             "use `score = affinity` (one context per query position)")
                    return
                exprs = [e for e in (x.query, x.keys, x.values) if e is not None]
            else:
                exprs = [x.expr]
            for e in exprs:
                if self.feed_loop_op(e, node_id, fed, axis, where):
                    return
        fa = self.cm.model.node(att)
        inside = [r for r in ir.refs(fa.values) if r in region] \
            if isinstance(fa, ir.Attention) else []
        if inside:  # codegen sizes the fed context from the values before the loop
            self.err(fa.values.loc, f"the values of `{fa.name}` are built from decoder "
                     f"`{n.id}` (through `{inside[0]}`), which reads their context a step later "
                     f"(`feed = {att}`)", "attention inside a recurrence is not supported yet: "
                     "attend over features computed without the decoder")

    def feed_loop_op(self, e: ir.Expr, node_id: str, fed: ir.Op, axis: str, where: str) -> bool:
        """Report the first op of ``e`` (outside the fed op's input, which runs before the
        loop) that needs other steps of ``axis`` than the current one."""
        if isinstance(e, ir.Ref) or e is fed:
            return False
        a = [self.shape(x, node_id) for x in e.args]
        what = None
        if e.fn in self.STEP_MIXING and a[0].axes[-1:] == (axis,):
            what = self.STEP_MIXING[e.fn]
        elif e.fn == "flatten" and axis in a[0].axes[-2:]:
            what = "merges axes"
        elif e.fn == "resize" and any(axis in s.axes for s in a):
            what = "resizes positions"
        elif e.fn == "affinity" and a[1].axes[-1:] == (axis,):
            what = "relates positions"
        if what is not None:
            self.err(e.loc, f"`{e.fn}` {what} over `{axis}`, {where}",
                     "compute it outside the loop: from the decoder's input, or from the "
                     f"decoder's outputs in a node that `{fed.param('feed')}` does not read")
            return True
        return any(self.feed_loop_op(x, node_id, fed, axis, where) for x in e.args)


    # ---- shared weights (`share =`, `tie =`) ---------------------------------------------

    def check_sharing(self, n: ir.AnyNode) -> None:
        """``share = NODE`` on an operation, ``tie = NODE`` on ``classify`` and ``share =
        OTHER`` on an attention module name modules that can be the same weights."""
        if isinstance(n, ir.Attention):
            for e in (n.query, n.keys, n.values):
                for op in operations(e):
                    self.check_op_sharing(n, op)
            if n.share is not None:
                self.check_attention_share(n)
        elif isinstance(n, ir.Node):
            for op in operations(n.expr):
                self.check_op_sharing(n, op)

    def _same_body(self, n: ir.AnyNode, other: ir.AnyNode, what: str, loc: Location) -> bool:
        """Shared modules live in one generated class: both statements outside any repeat,
        or both in the same hop of one."""
        if _hop_place(n) == _hop_place(other):
            return True
        self.err(loc, f"{what} `{_short(other.id)}` and this statement are in different "
                 "`repeat` bodies or hops; one module is shared by the statements of one body",
                 "share within one hop (a `repeat … shared` shares a body across hops)")
        return False

    def _target_op(self, n: ir.AnyNode, e: ir.Op, key: str, fn: str) -> ir.Op | None:
        """The one ``fn`` operation of the statement that ``e``'s ``key`` names."""
        tid = str(e.param(key))
        t = version_with(self.cm.model, tid, fn)
        tid = t.id if t is not None else tid
        what = f"`{key} = {_short(tid)}`"
        if t is None or not isinstance(t, ir.Node) or t.kind_ == "affinity":
            kind = "nothing" if t is None else \
                f"{'an' if t.kind_[0] in 'aeiou' else 'a'} {t.kind_}"
            self.err(e.loc, f"{what} names {kind}; it names a feature, query or output "
                     f"statement with one `{fn}`", f"e.g. `feature x = {fn}(…)` and "
                     f"`{key} = x`")
            return None
        if t.id == n.id:
            self.err(e.loc, f"{what} names the statement it is in",
                     f"name another statement with one `{fn}`")
            return None
        found = [op for op in operations(t.expr) if op.fn == fn]
        if len(found) != 1:
            self.err(e.loc, f"{what}: statement `{_short(tid)}` has "
                     f"{len(found) or 'no'} `{fn}`{' operations' if found else ''}; "
                     f"`{key}` needs exactly one", f"name a statement whose expression has "
                     f"one `{fn}(…)`")
            return None
        if not self._same_body(n, t, f"{what}: statement", e.loc):
            return None
        return found[0]

    def check_op_sharing(self, n: ir.AnyNode, e: ir.Op) -> None:
        if e.param("share") is not None and e.param("tie") is not None:
            self.err(e.loc, "`classify` takes `share` (another output layer's weights) or "
                     "`tie` (an embedding matrix), not both")
            return
        if e.param("tie") is not None:
            self.check_tie(n, e)
        if e.param("share") is None:
            return
        t = self._target_op(n, e, "share", e.fn)
        if t is None:
            return
        if e.param("feed") or t.param("feed"):
            self.err(e.loc, "a decoder with `feed` runs its own cells step by step; it "
                     "cannot share weights", "drop `share` or `feed`")
            return
        tid = _short(str(e.param("share")))
        mine = {k: v for k, v in e.params if k not in ("share", "tie")}
        theirs = {k: v for k, v in t.params if k not in ("share", "tie")}
        for k in dict.fromkeys([*mine, *theirs]):
            if mine.get(k) != theirs.get(k):
                self.err(e.loc, f"`share = {tid}`: the `{e.fn}` of `{tid}` has {k} = "
                         f"{_show(theirs.get(k))}, this one {k} = {_show(mine.get(k))}; one "
                         "module has one set of sizes", f"write the same `{k}` in both")
                return
        a, b = self.op_inputs.get(id(e)), self.op_inputs.get(id(t))
        if a is None or b is None:
            return
        if e.fn == "embed":
            va, vb = _vocab(self.cm.model, e), _vocab(self.cm.model, t)
            if va != vb:
                self.err(e.loc, f"`share = {tid}`: one embedding needs one vocabulary; "
                         f"`{tid}` embeds {vb} tokens, this one {va}",
                         "give both inputs the same `vocab`")
                return
        elif a[0].dim != b[0].dim:
            self.err(e.loc, f"`share = {tid}`: the `{e.fn}` of `{tid}` reads {b[0].dim} "
                     f"features, this one {a[0].dim}; one module reads one size",
                     "map both inputs to the same size first")
            return
        if share_root(self.cm.model, e) is None:
            self.err(e.loc, f"`share = {tid}` goes round in a circle: one of the statements "
                     "must own the module", "drop `share` from one of them")

    def check_tie(self, n: ir.AnyNode, e: ir.Op) -> None:
        """``classify(x, V, tie = NODE)``: logits = x E^T + b with E the embedding matrix of
        NODE's ``embed`` (Vaswani et al. 3.4): V rows of x's width."""
        t = self._target_op(n, e, "tie", "embed")
        if t is None:
            return
        tid = _short(str(e.param("tie")))
        vocab, d = _vocab(self.cm.model, t), int(t.param("d"))
        classes = int(e.param("classes"))
        x = self.op_inputs.get(id(e))
        if vocab != classes:
            self.err(e.loc, f"`tie = {tid}`: the embedding of `{tid}` has one row per token "
                     f"({vocab}), so the output layer needs classes = {vocab}, not {classes}",
                     "tie the output layer to the embedding of the vocabulary it predicts")
        elif x is not None and x[0].dim != d:
            self.err(e.loc, f"`tie = {tid}`: the embedding of `{tid}` has width {d}, but "
                     f"`classify` reads {x[0].dim} features",
                     f"map the features to {d} first, e.g. `linear(x, {d})`")

    def check_attention_share(self, n: ir.Attention) -> None:
        m = self.cm.model
        o = m.by_id.get(n.share)
        where = f"attention `{n.name}`: `share = {_short(n.share)}`"
        if not isinstance(o, ir.Attention):
            self.err(n.loc, f"{where} names {'nothing' if o is None else 'a ' + o.kind_}; it "
                     "names another attention module", "e.g. `share = enc_self`")
            return
        if o.id == n.id:
            self.err(n.loc, f"{where} names the module itself", "name another attention module")
            return
        if o.share is not None:
            self.err(n.loc, f"{where}, which itself uses the weights of `{_short(o.share)}`",
                     f"write `share = {_short(o.share)}`")
            return
        if not self._same_body(n, o, f"{where}: attention", n.loc):
            return
        a, b = self.cm.attention.get(n.id), self.cm.attention.get(o.id)
        if a is None or b is None:
            return
        kind = share_kind(n, o)
        if kind in ("keys", "swap") and self.cm.order.index(o.id) > self.cm.order.index(n.id):
            self.err(n.loc, f"{where}: `{_short(o.id)}` is computed after this module, but "
                     "the module that owns the weights comes first",
                     f"write `share = {n.name}` in `{_short(o.id)}` instead")
            return
        if kind in ("keys", "swap"):
            for e in (n.query, n.keys, n.values, o.query, o.keys, o.values):
                if any(op.fn in ops.SHAREABLE or op.fn == "learned" for op in operations(e)):
                    self.err(n.loc, f"{where} shares the score's weights (eq. "
                             f"{'9' if kind == 'keys' else '14-15'}), not those of the "
                             f"key, value or query models (`{_name(e)}` has weights)",
                             "compute them as features first, e.g. `feature k = linear(x, d)`")
                    return
        if kind == "keys":  # eq. 9: eq. 7's W, b and w with a query added (eq. 6)
            sc, so = n.score, o.score
            why = ("score = additive" if (sc.fn, so.fn) != ("additive", "additive") else
                   "heads = 1" if n.heads != 1 or o.heads != 1 else
                   f"dimensionality = {o.dimensionality}" if n.dimensionality != o.dimensionality
                   else f"d_v = {b.d_v} (W_d maps d_w to d_v, eq. 31)"
                   if n.dimensionality == "multi" and a.d_v != b.d_v
                   else "no capsules" if n.capsules or o.capsules else
                   "no affinity" if n.affinity or o.affinity else
                   f"act = {so.act}" if sc.act != so.act else
                   f"bias = {_show(so.bias)}" if sc.bias != so.bias else
                   f"d_k = {b.d_k}" if a.d_k != b.d_k else
                   f"d_w = {_d_w(o, b)}" if _d_w(n, a) != _d_w(o, b) else None)
            if why:
                self.err(n.loc, f"{where}: a module with a query uses the weights of a module "
                         "without one as eq. 9 does: both single-head additive scores (eq. 7's "
                         "W reads whole keys, a head's query a slice, eq. 38) over keys of one "
                         "size, with W, b and w (W_d for multi-dimensional weights, eq. 31) of "
                         f"one shape; this needs {why}",
                         "the module with the query adds its own W1 for it (eq. 6)")
            return
        if kind == "swap":  # eq. 14-15: one W1, W2 in both directions over one affinity
            so = o.score
            why = ("the same affinity matrix" if n.affinity != o.affinity else
                   "score = additive in both" if (n.score.fn, so.fn) != ("additive",
                                                                         "additive") else
                   "the other direction: its keys are this module's query"
                   if a.attended == b.attended else
                   f"act = {so.act}" if n.score.act != so.act else
                   f"bias = {_show(so.bias)}" if n.score.bias != so.bias else
                   f"heads = {o.heads} (W1, W2 split the same way)" if n.heads != o.heads else
                   f"dimensionality = {o.dimensionality} (both build W1 and W2 alike)"
                   if n.dimensionality != o.dimensionality else
                   f"d_q = {b.d_k} and d_k = {b.d_q}" if (a.d_q, a.d_k) != (b.d_k, b.d_q) else
                   f"d_w = {_d_w(o, b)}" if _d_w(n, a) != _d_w(o, b) else None)
            if why:
                self.err(n.loc, f"{where}: two co-attention modules share W1 and W2 across "
                         f"directions (eq. 14-15); this needs {why}",
                         "each direction keeps its own w")
            return
        mine, theirs = _mechanisms(n, a), _mechanisms(o, b)
        for k in mine | theirs:  # (a score modifier is a key only where it is given)
            if mine.get(k) != theirs.get(k):
                self.err(n.loc, f"{where}: one module has one set of mechanisms and sizes, "
                         f"but `{_short(o.id)}` has {k} = {_show(theirs.get(k))} and this one "
                         f"{_show(mine.get(k))}", f"write the same `{k}` in both")
                return
        if _roles_sig(n) != _roles_sig(o):
            self.err(n.loc, f"{where}: the module's key, value and query models are shared "
                     f"too, so they must be written alike; `{_short(o.id)}` reads "
                     f"{_roles_text(o)}, this one {_roles_text(n)}",
                     "the same operators in the same roles, over this module's own inputs")


def context_dim(n: ir.Attention, d_v: int) -> int:
    """The width of a module's context: d_v, or with several heads and no W_O (eq. 40) the
    heads' contexts side by side (``concat``) or averaged (``mean``). With a query each
    head reads a d_v/H slice of the values (eq. 38); without one, all of them."""
    if n.heads < 2 or n.heads_out == "project":
        return d_v
    head = d_v // n.heads if n.query is not None else d_v
    return head * n.heads if n.heads_out == "concat" else head


def rescaled(scaled: dict[str, tuple[str, int, int]], axis: str, up: int,
             down: int) -> tuple[str, str, int, int]:
    """The name of ``axis`` resampled by up / down, its input axis and its scale num / den
    (in lowest terms) relative to that axis: ``H`` by 1/2 is ``H/2``, ``H/4`` by 2 is
    ``H/2``, ``H/2`` by 2 is ``H`` again, ``H`` by 2 is ``2H``."""
    base, num, den = scaled.get(axis, (axis, 1, 1))
    num, den = num * up, den * down
    g = math.gcd(num, den)
    num, den = num // g, den // g
    return f"{num if num > 1 else ''}{base}{f'/{den}' if den > 1 else ''}", base, num, den


def version_with(m: ir.Model, node_id: str, fn: str) -> ir.AnyNode | None:
    """The statement ``share = x`` / ``tie = x`` names: the version of ``x`` visible there
    (``x@3`` after two ``update``s), or the latest earlier one whose expression has a
    ``fn`` operation (``tie = x`` after an encoder has updated x names ``feature x``)."""
    n = m.by_id.get(node_id)
    base, _, k = node_id.rpartition("@")
    if not isinstance(n, ir.Node) or not k.isdigit():
        return n
    for i in range(int(k), 0, -1):
        v = m.by_id.get(base if i == 1 else f"{base}@{i}")
        if isinstance(v, ir.Node) and any(op.fn == fn for op in operations(v.expr)):
            return v
    return n


def share_root(m: ir.Model, e: ir.Op) -> tuple[ir.Node, ir.Op] | None:
    """The statement and operation whose module ``e`` uses: ``e``'s ``share`` target, or
    that one's, and so on (None when the chain comes back or breaks)."""
    seen: set[int] = set()
    node, cur = None, e
    while cur.param("share") is not None:
        if id(cur) in seen:
            return None
        seen.add(id(cur))
        node = version_with(m, str(cur.param("share")), e.fn)
        found = [op for op in operations(node.expr) if op.fn == e.fn] \
            if isinstance(node, ir.Node) else []
        if len(found) != 1:
            return None
        cur = found[0]
    return (node, cur) if node is not None else None


def share_kind(n: ir.Attention, o: ir.Attention) -> str:
    """How attention ``n`` uses the weights of ``o`` (``share = o``): "same" (it is the
    same module), "keys" (eq. 9: o scores keys alone, eq. 7, and n uses o's W, b and w with
    a query added) or "swap" (eq. 14-15: co-attention in the other direction over the
    same affinity matrix, n's W_q is o's W_k and n's W_k is o's W_q)."""
    if n.query is not None and o.query is None and not o.capsules:
        return "keys"
    if n.affinity is not None and o.affinity is not None:
        return "swap"
    return "same"


def _d_w(n: ir.Attention, info: AttentionInfo) -> int | None:
    if n.score.fn not in ("additive", "concat"):
        return None
    return n.score.d_w or (info.d_q if n.query is not None and not learned_capsules(n)
                           else info.d_k)


def learned_capsules(n: ir.Attention) -> bool:
    """Capsules with their own learned queries, q_c (eq. 43): the module's `query =
    learned(d)` stands for one learned vector per class. Otherwise a capsule module's query
    is an earlier capsule module's output, one row per class (eq. 41-43)."""
    return bool(n.capsules) and isinstance(n.query, ir.Op) and n.query.fn == "learned"


def _mechanisms(n: ir.Attention, info: AttentionInfo) -> dict:
    """What one attention module's weights and behaviour depend on."""
    out = {"score": n.score.fn, **{f"score {k}": v for k, v in n.score.model_dump(
        exclude={"loc", "sym", "fn", "d_w"}).items()}, "d_w": _d_w(n, info), "align": n.align.fn}
    out.update({f"align {k}": v for k, v in n.align.model_dump(exclude={"loc", "sym", "fn"})
                .items()})
    out.update(query="none" if n.query is None else "given", heads=n.heads,
               dimensionality=n.dimensionality, capsules=n.capsules, mask=n.mask,
               penalty=n.penalty, dropout=n.dropout, affinity=n.affinity is not None,
               d_q=info.d_q, d_k=info.d_k, d_v=info.d_v)
    for what, m in (("position", n.position), ("bias", n.bias)):  # score modifiers
        if m is not None:
            out[what] = str(m) + (f" (base {m.base:g})" if m.fn == "rotary" else "")
    return out


def _roles_sig(n: ir.Attention) -> tuple:
    """The key, value and query models' operators, with their inputs numbered in order."""
    names: dict[str, int] = {}

    def sig(e: ir.Expr | None):
        if e is None:
            return None
        if isinstance(e, ir.Ref):
            return names.setdefault(e.node, len(names))
        return (e.fn, tuple((k, v) for k, v in e.params if k not in ("share", "tie")),
                tuple(sig(a) for a in e.args))

    return sig(n.query), sig(n.keys), sig(n.values)


def _roles_text(n: ir.Attention) -> str:
    return ", ".join(f"{r} {_name(e)}" for r, e in (("query", n.query), ("keys", n.keys),
                                                    ("values", n.values)) if e is not None)


def operations(e: ir.Expr | None):
    """Every operation in ``e``, outermost first."""
    stack = [e] if e is not None else []
    while stack:
        x = stack.pop(0)
        if isinstance(x, ir.Op):
            yield x
            stack.extend(x.args)


def _hop_place(n: ir.AnyNode) -> tuple | None:
    h = getattr(n, "hop", None)
    return None if h is None else (h.block, h.index, h.outer)


def _vocab(m: ir.Model, e: ir.Op) -> int | None:
    while isinstance(e, ir.Op):
        e = e.args[0]
    n = m.by_id.get(e.node)
    return n.vocab if isinstance(n, ir.Input) else None


def _short(node_id: str) -> str:
    """A node as the spec names it: ``x@3`` (a later version of x) reads ``x``."""
    return node_id.split("@")[0]


def _show(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "none" if v is None else str(v)


def _base_ref(e: ir.Expr) -> str | None:
    while isinstance(e, ir.Op) and e.args:
        e = e.args[0]
    return e.node if isinstance(e, ir.Ref) else None


def weights_read(m: ir.Model) -> set[str]:
    """Attention modules whose weights a feature reads (``att.weights``)."""
    out: set[str] = set()
    stack = [n.expr for n in m.nodes if isinstance(n, ir.Node)]
    stack += [e for n in m.attentions for e in (n.query, n.keys, n.values) if e is not None]
    while stack:
        e = stack.pop()
        if isinstance(e, ir.Op):
            if e.fn == "weights":
                out.add(e.args[0].node)
            stack.extend(e.args)
    return out


def _name(e: ir.Expr | None) -> str:
    if e is None:
        return "?"
    if isinstance(e, ir.Ref):
        return e.node
    if e.fn == "weights":
        return f"{_name(e.args[0])}.weights"
    return f"{e.fn}(…)"


def check(spec: ir.Spec, source: str | None = None) -> CheckedSpec:
    return Checker(spec, source).run()


from . import blocks  # noqa: E402,F401  (registers the shape rules of the everyday blocks)

__all__ = ["Shape", "AttentionInfo", "CheckedModel", "CheckedSpec", "check", "deps", "links",
           "SpecError", "learned_capsules", "share_kind", "share_root"]
