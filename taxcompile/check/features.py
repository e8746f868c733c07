"""Shapes of feature models: the shape rule of each feature operator (``ops.OPS[fn].shape``,
registered here by ``ops.shape_rule``), from the shapes of its arguments: the axes and
feature size it makes, and the errors of an operator that does not fit what it reads
(token ids where features are needed, unequal shapes, a grid operator off a grid). The
operator's own parameters were checked by ``lower``; the rules that read attention
modules (``att.weights``, ``context``, ``pointed``, affinity matrices) are in ``values``."""

from __future__ import annotations

from .. import ir, ops
from ..lower import MASK_KINDS
from .core import Shape, _name, rescaled


class FeatureShapes:
    """The shape rules of the feature operators and of grids (B, H, W, C)."""

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
                if e.fn in ("pointed", "location") and i == 1:
                    continue  # the pointers (`aspect`): checked by its shape rule
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

    @ops.shape_rule("identity", "scale", "tanh", "relu", "sigmoid", "gelu", "elu",
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

    @ops.shape_rule("rsub")
    def shape_rsub(self, e, a, nid):
        if a[0].dim is None:
            self.err(e.loc, "cannot subtract token ids", "embed them first: `embed(x, d)`")
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
