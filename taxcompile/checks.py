"""Stage 4: cross-entry checks on the IR of each model.

- every reference names a node that exists (forward references are allowed, so
  a model is a dataflow graph, not a program);
- the dataflow has no cycle (``feed =`` is the one delayed edge, read a step later);
- shape inference: every tensor's axes and feature size are known;
- each mechanism's requirements (Table II, eq. 12-45), e.g. multiplicative scores
  need d_q = d_k.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from . import ir, ops
from .diagnostics import Collector, Location, SpecError


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

    @property
    def graph(self) -> nx.DiGraph:
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


def deps(n: ir.AnyNode, delayed: bool = False) -> list[str]:
    """Node ids ``n`` reads; with ``delayed`` only the ``feed`` edges."""
    exprs: list[ir.Expr] = []
    if isinstance(n, ir.Node):
        exprs = [n.expr]
    elif isinstance(n, ir.Attention):
        exprs = [e for e in (n.query, n.keys, n.values) if e is not None]
    out: list[str] = []
    feeds: list[str] = []
    stack = list(exprs)
    while stack:
        e = stack.pop(0)
        if isinstance(e, ir.Ref):
            out.append(e.node)
        else:
            if e.param("feed"):
                feeds.append(str(e.param("feed")))
            stack.extend(e.args)
    if isinstance(n, ir.Attention) and n.affinity:
        out.append(n.affinity)
    return feeds if delayed else out


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
            if len(deps(n, delayed=True)) > 1:
                self.err(n.loc, f"`{n.id}` has {len(deps(n, delayed=True))} recurrent models with "
                         "`feed`; a statement runs one decoder step by step",
                         "give each decoder its own statement")
            for d in deps(n, delayed=True):
                if d not in ids or not isinstance(ids[d], ir.Attention):
                    self.err(n.loc, f"`feed = {d}` must name an attention module",
                             "a recurrent decoder reads the previous context of an attention module")
        if len(self.c.diagnostics) > before:
            return None
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
        self.cm = CheckedModel(m, {}, {}, {}, {}, order)
        self.op_inputs: dict[int, list[Shape]] = {}
        fixed_by: dict[str, ir.Input] = {}
        for n in m.inputs:
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
        for node_id in order:
            n = ids[node_id]
            if any(d not in self.cm.shapes for d in deps(n)):
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
            if deps(n, delayed=True):
                self.check_feed(n)
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
            return self.cm.shapes.get(e.node)
        args = [self.shape(a, node_id) for a in e.args]
        if any(a is None for a in args):
            return None
        self.op_inputs[id(e)] = args  # for the checks of `share` and `tie`
        if e.fn != "embed":
            for a, s in zip(e.args, args):
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


    @ops.shape_rule("cnn")
    def shape_cnn(self, e, a, nid):
        if not self._seq(e, a[0], "convolves over positions"):
            return None
        return Shape(a[0].axes, int(e.param("d")))

    @ops.shape_rule("identity", "scale", "norm", "tanh", "relu", "sigmoid", "ffn", "dropout")
    def _same(self, e, a, nid):
        return a[0]


    @ops.shape_rule("positional")
    def shape_positional(self, e, a, nid):
        if not self._seq(e, a[0], "encodes positions"):
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
        if q is not None:
            if len(q.axes) == len(k.axes) and q.axes[:-1] == groups:
                mode, ctx_axes = "sequence", q.axes
            elif q.axes == groups[: len(q.axes)]:
                mode = "single"
            else:
                self.err(n.query.loc, f"query {q} does not fit keys {k}",
                         "a query is one vector per group of keys, or one per position of a "
                         "sequence whose other axes match the keys'")
                return None
        where = f"attention `{n.name}`"
        if q is None and sc.fn not in ("additive", "concat"):
            self.err(n.loc, f"{where} has no query, which only an additive score allows (eq. 33)",
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
        if n.affinity is not None and (n.heads > 1 or n.dimensionality == "multi" or n.capsules):
            what = "heads" if n.heads > 1 else "capsules" if n.capsules else "multi-dimensional weights"
            self.err(n.loc, f"{where} reads its scores from affinity `{n.affinity}` (eq. 12-16), "
                     f"one number per pair of positions, so it cannot have {what}",
                     "drop the field, or score without an affinity matrix")
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
            if not (isinstance(n.query, ir.Op) and n.query.fn == "learned"):
                self.err(n.loc, f"{where}: capsule-based attention learns one query per class "
                         "(eq. 43)", "write `query = learned(d)`")
                return None
            if n.heads > 1:
                self.err(n.loc, f"{where}: capsules already hold one query per class; "
                         "eq. 43-45 define no heads inside a capsule", "drop `heads` or `capsules`")
                return None
        if n.mask != "none":
            if mode != "sequence" or ctx_axes[-1] != attended:
                self.err(n.loc, f"{where}: the {n.mask} mask relates positions of one sequence, "
                         "so query and keys must run over the same axis",
                         "masks are for self-attention (`query = project(F)`, `keys = F`)")
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
        d_v = v.dim
        self.cm.attention[n.id] = AttentionInfo(attended, groups, mode,
                                                q.dim if q is not None else None, k.dim, d_v)
        if n.capsules:
            axis = f"{n.id}.capsules"
            self.cm.sizes[axis] = n.capsules
            self.cm.axis_origin[axis] = n.id
            ctx_axes = ctx_axes + (axis,)
        return Shape(ctx_axes, d_v)

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
        """A recurrent model reading a previous context runs over an autoregressive axis."""
        if not isinstance(n, ir.Node):
            return
        stack = [n.expr]
        while stack:
            e = stack.pop()
            if isinstance(e, ir.Op):
                stack.extend(e.args)
                if e.param("feed") and e.fn in ("lstm", "gru") and e.args:
                    s = self.cm.shapes.get(_base_ref(e.args[0]) or "")
                    axis = s.axes[-1] if s and s.axes else None
                    origin = self.cm.model.node(self.cm.axis_origin[axis]) if axis in \
                        self.cm.axis_origin else None
                    if s is not None and len(s.axes) != 1:
                        self.err(e.loc, "`feed` runs a decoder step by step over one sequence; "
                                 f"its input has axes {s}", "feed a decoder over a "
                                 "`tokens[T]` or `sequence[T, d]` input")
                    elif not (isinstance(origin, ir.Input) and origin.autoregressive):
                        self.err(e.loc, "`feed` makes a decoder read its previous context, so the "
                                 "recurrent model must run over an autoregressive input",
                                 "declare the target input with `(…, autoregressive)`")


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
                   "dimensionality = single" if "multi" in (n.dimensionality, o.dimensionality)
                   else "no capsules" if n.capsules or o.capsules else
                   "no affinity" if n.affinity or o.affinity else
                   f"act = {so.act}" if sc.act != so.act else
                   f"bias = {_show(so.bias)}" if sc.bias != so.bias else
                   f"d_k = {b.d_k}" if a.d_k != b.d_k else
                   f"d_w = {_d_w(o, b)}" if _d_w(n, a) != _d_w(o, b) else None)
            if why:
                self.err(n.loc, f"{where}: a module with a query uses the weights of a module "
                         "without one as eq. 9 does: both single-head additive scores over "
                         f"keys of one size, with W, b and w of one shape; this needs {why}",
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
                   f"d_q = {b.d_k} and d_k = {b.d_q}" if (a.d_q, a.d_k) != (b.d_k, b.d_q) else
                   f"d_w = {_d_w(o, b)}" if _d_w(n, a) != _d_w(o, b) else None)
            if why:
                self.err(n.loc, f"{where}: two co-attention modules share W1 and W2 across "
                         f"directions (eq. 14-15); this needs {why}",
                         "each direction keeps its own w")
            return
        mine, theirs = _mechanisms(n, a), _mechanisms(o, b)
        for k in mine:
            if mine[k] != theirs[k]:
                self.err(n.loc, f"{where}: one module has one set of mechanisms and sizes, "
                         f"but `{_short(o.id)}` has {k} = {_show(theirs[k])} and this one "
                         f"{_show(mine[k])}", f"write the same `{k}` in both")
                return
        if _roles_sig(n) != _roles_sig(o):
            self.err(n.loc, f"{where}: the module's key, value and query models are shared "
                     f"too, so they must be written alike; `{_short(o.id)}` reads "
                     f"{_roles_text(o)}, this one {_roles_text(n)}",
                     "the same operators in the same roles, over this module's own inputs")


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
    return n.score.d_w or (info.d_q if n.query is not None and not n.capsules else info.d_k)


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


def _name(e: ir.Expr | None) -> str:
    if e is None:
        return "?"
    if isinstance(e, ir.Ref):
        return e.node
    return f"{e.fn}(…)"


def check(spec: ir.Spec, source: str | None = None) -> CheckedSpec:
    return Checker(spec, source).run()


__all__ = ["Shape", "AttentionInfo", "CheckedModel", "CheckedSpec", "check", "deps", "SpecError",
           "share_kind", "share_root"]
