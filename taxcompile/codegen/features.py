"""Plan rules of the feature, query and output models: one function per operator,
registered in ``taxcompile.ops``. Each takes the planner, the IR op, its planned arguments
and the node, registers the submodules it needs and returns the result's ``Var``."""

from __future__ import annotations

from typing import Callable

from .. import checks, ir
from ..ops import plan_rule
from ..shapes import learned_axis
from .acts import applied, widened
from . import kv_width
from .expr import ATOM, BATCH
from .imports import F, MATH
from .frame import Var
from .names import PRODUCT, SUM, Dim, atom, is_name


def same(x: Var, code: str, prec: int = ATOM) -> Var:
    """x's shape, mask and size under another expression (binding as tightly as prec)."""
    return Var(code, x.shape, x.mask, x.dim, x.mask_code, prec=prec)


def resized(x: Var, code: str, size: int | None, dim: Dim, prec: int = ATOM) -> Var:
    return Var(code, checks.Shape(x.shape.axes, size), x.mask, dim, x.mask_code, prec=prec)


def local(p, x: Var, want: str = "h") -> str:
    """x's expression bound to a local, unless it is a name already."""
    return x.name if is_name(x.name) else p.tmp(x.name, want, p.shape(x.shape, dim=x.dim))


def op_module(p, e: ir.Op, n, base: str, ctor: "str | Callable[[], str]",
              comment: str = "") -> str:
    """The module of operation ``e``: its own (``<statement>_<base>``), or with ``share =
    NODE`` the module of NODE's operation of the same operator (the same weights)."""
    root = checks.share_root(p.m, e) if e.param("share") is not None else None
    if root is None:
        return p.module(n, p.suffix(n, base, e) if base != "embed" else p.embed_suffix(n, e),
                        ctor, comment)
    return p.module(root[0], base, ctor, comment)


def embedding(p, e: ir.Op, n) -> str:
    """The nn.Embedding of ``embed`` op ``e`` (or the one it shares)."""
    src, d = token_source(p, e.args[0]), p.p(e, "d")
    if _root(p, e) in tied_embeds(p):  # also an output layer: small rows, logits near 0
        fn = "tied_embedding"
    elif e.param("scale"):  # rows N(0, 1/d), so that sqrt(d) E has unit variance
        fn = "scaled_embedding"
    else:
        fn = "nn.Embedding"
    if fn != "nn.Embedding":
        p.helpers.add(fn)
    return op_module(p, e, n, "embed", lambda: f"{fn}({p.sym(src, 'vocab', src.vocab)}, {d})")


def _root(p, e: ir.Op) -> int:
    """The identity of the embed operation whose module ``e`` uses (itself, or its share)."""
    root = checks.share_root(p.m, e) if e.param("share") is not None else None
    return id(e if root is None else root[1])


def tied_embeds(p) -> set[int]:
    """The embed operations (their roots) whose weight a ``classify(…, tie = …)`` reads."""
    out = set()
    for n in p.m.nodes:
        for op in checks.operations(n.expr) if isinstance(n, ir.Node) else ():
            if op.fn == "classify" and op.param("tie") is not None:
                node = checks.version_with(p.m, str(op.param("tie")), "embed")
                if isinstance(node, ir.Node):
                    out |= {_root(p, x) for x in checks.operations(node.expr)
                            if x.fn == "embed"}
    return out


@plan_rule("embed")
def embed(p, e, a, n):
    x, d = a[0], p.p(e, "d")
    code = f"{embedding(p, e, n)}({x.name})"
    prec = ATOM
    if e.param("scale"):  # Vaswani et al. 3.4: the embedding weights times sqrt(d_model)
        code, prec = f"{code} * {MATH}.sqrt({d})", PRODUCT
    return resized(x, code, e.param("d"), d, prec)


def token_source(p, e: ir.Expr) -> ir.Input:
    while isinstance(e, ir.Op):
        e = e.args[0]
    node = p.m.node(e.node)
    assert isinstance(node, ir.Input), "embed reads token ids, which only inputs hold"
    return node


@plan_rule("linear")
def linear(p, e, a, n):
    x, d, act = a[0], p.p(e, "d"), e.param("act")
    bias = "" if e.param("bias", True) else ", bias=False"
    mod = op_module(p, e, n, "linear", lambda: f"nn.Linear({x.dim}, {widened(act, d)}{bias})")
    code, prec = applied(act, f"{mod}({x.name})")
    return resized(x, code, e.param("d"), d, prec)


@plan_rule("project")
def project(p, e, a, n):
    x = a[0]
    size, d = project_width(p, e, n, x)
    role = {"k": "W_K F (eq. 1)", "v": "W_V F (eq. 1)", "q": "W_Q F (eq. 35)"}
    mod = op_module(p, e, n, "proj", lambda: f"nn.Linear({x.dim}, {d}, bias=False)",
                    role.get(p.role(n, e), "W F (eq. 1)"))
    return resized(x, f"{mod}({x.name})", size, d)


def project_width(p, e: ir.Op, n, x: Var) -> tuple[int | None, Dim]:
    """The width of ``project(x[, d])``: d, or x's, or as the keys/values of a `kv_heads`
    module g·d_q/H (codegen/kv_width.py)."""
    if e.param("d") is not None:
        return e.param("d"), p.p(e, "d")
    if kv_width.inferred(n, e):
        return kv_width.kv_dim(p, n)
    return x.shape.dim, x.dim


def encoder_started(n: ir.AnyNode) -> list[ir.Op]:
    """``lstm``/``gru`` ops without ``feed`` that start from an encoder (``init = ENC``)."""
    out, stack = [], [n.expr] if isinstance(n, ir.Node) else []
    while stack:
        e = stack.pop()
        if isinstance(e, ir.Op):
            if e.param("init") and not e.param("feed"):
                out.append(e)
            stack.extend(e.args)
    return out


def encoder_inits(m: ir.Model) -> set[str]:
    """RNN statements a decoder starts from (``init = NAME``): they return their final
    states too."""
    out = set()
    for n in m.nodes:
        for e in checks.decoder_ops(n) + encoder_started(n):
            init = e.param("init")
            src = m.node(str(init)) if init else None
            if isinstance(src, ir.Node) and isinstance(src.expr, ir.Op) and \
                    src.expr.fn in ("lstm", "gru"):
                out.add(src.id)
    return out


def _rnn(p, e, a, n, kind: str, bidir: bool):
    x = a[0]
    hidden, layers = p.p(e, "hidden"), p.p(e, "layers")
    cls = "nn.LSTM" if kind == "lstm" else "nn.GRU"

    def ctor() -> str:
        extra = f", num_layers={layers}" if str(layers) != "1" else ""
        if e.param("dropout"):  # between the layers, in training (Zaremba et al.)
            extra += f", dropout={p.sym(e, 'dropout', e.param('dropout'))}"
        return (f"{cls}({x.dim}, {hidden}{extra}, batch_first=True"
                f"{', bidirectional=True' if bidir else ''})")

    mod = op_module(p, e, n, ("bi" if bidir else "") + kind, ctor)
    mask = p.mask_arg(x)
    dim = hidden.times(2) if bidir else hidden
    size = int(e.param("hidden")) * (2 if bidir else 1)
    margs = f"{mod}, {x.name}{', ' + mask if mask != 'None' else ''}"
    if isinstance(n, ir.Node) and n.expr is e and n.id in encoder_inits(p.m):
        # a decoder starts from this RNN's final states (`init = NAME`)
        p.helpers.add("rnn_final")
        y, final = p.frame.locals.new(p.want(n) + "_seq"), p.frame.locals.new(p.want(n) + "_final")
        what = "(h_n, c_n)" if kind == "lstm" else "h_n"
        p.frame.emit(f"{y}, {final} = rnn_final({margs})",
                     f"{what}: ({layers.shown()}, B, {hidden.shown()}), a decoder's initial state",
                     (y, final))
        p.finals[n.id] = final
        return resized(x, y, size, dim)
    if e.param("init"):  # `init = ENCODER` without `feed`: from the encoder's final states
        p.helpers.add("rnn_init")
        state = p.finals[str(e.param("init"))]
        return resized(x, f"rnn_init({mod}, {x.name}, {state}"
                       f"{', ' + mask if mask != 'None' else ''})", size, dim)
    p.helpers.add("rnn")
    return resized(x, f"rnn({margs})", size, dim)


@plan_rule("lstm", "gru")
def rnn(p, e, a, n):
    assert not e.param("feed"), "recurrent models with `feed` are planned as decoder loops"
    return _rnn(p, e, a, n, e.fn, False)


@plan_rule("bilstm", "bigru")
def birnn(p, e, a, n):
    return _rnn(p, e, a, n, e.fn[2:], True)


@plan_rule("identity")
def identity(p, e, a, n):
    return a[0]


@plan_rule("scale")
def scale(p, e, a, n):
    mod = op_module(p, e, n, "gamma", "nn.Parameter(torch.zeros(()))",
                    "gamma, starts at 0 (SAGAN)")
    return same(a[0], f"{mod} * {atom(a[0])}", PRODUCT)


@plan_rule("tanh", "relu", "sigmoid", "gelu", "elu", "leaky_relu", "softplus", "scaled_tanh")
def activation(p, e, a, n):
    return same(a[0], *applied(ir.Act(fn=e.fn, params=e.params), a[0].name, a[0].prec))


@plan_rule("maxout")
def maxout(p, e, a, n):
    """The max over each run of k consecutive features: d -> d / k (Goodfellow et al.)."""
    x, k = a[0], int(e.param("k"))
    p.divides.append((x.dim, k))
    size = x.shape.dim // k
    dim = x.dim.floordiv(k)
    code, prec = applied(ir.Act(fn="maxout", params=e.params), x.name, x.prec)
    return resized(x, code, size, dim, prec)


@plan_rule("rsub")
def rsub(p, e, a, n):
    """c - x, e.g. the 1 - g of a fusion gate."""
    return same(a[0], f"{e.param('c', 1.0)!r} - {atom(a[0])}", SUM)


@plan_rule("concat")
def concat(p, e, a, n):
    widest = max(a, key=lambda v: len(v.shape.axes))
    parts = []
    for v in a:
        if len(v.shape.axes) < len(widest.shape.axes):
            p.helpers.add("broadcast")
            parts.append(f"broadcast({v.name}, {widest.name})")
        else:
            parts.append(v.name)
    dim = Dim()
    for v in a:
        dim = dim + v.dim
    return Var(f"torch.cat([{', '.join(parts)}], -1)",
               checks.Shape(widest.shape.axes, sum(v.shape.dim for v in a)), widest.mask, dim)


@plan_rule("stack")
def stack(p, e, a, n):
    p.equal.extend((a[0].dim, v.dim) for v in a[1:])
    shape = p.cm.shapes[n.id] if isinstance(n, ir.Node) and n.expr is e else \
        checks.Shape(a[0].shape.axes + (f"{n.id}.reps",), a[0].shape.dim)
    return Var(f"torch.stack([{', '.join(v.name for v in a)}], -2)", shape, a[0].mask, a[0].dim)


@plan_rule("first")
def first(p, e, a, n):
    x = a[0]
    return Var(f"{atom(x)}[..., 0, :]", checks.Shape(x.shape.axes[:-1], x.shape.dim), x.mask, x.dim)


@plan_rule("backward")
def backward(p, e, a, n):
    """The backward direction of a bidirectional RNN: the second half of its features."""
    rnn_op = e.args[0]
    while isinstance(rnn_op, ir.Ref):
        rnn_op = p.m.node(rnn_op.node).expr
    x = a[0]
    return Var(f"{atom(x)}.chunk(2, -1)[1]", checks.Shape(x.shape.axes, x.shape.dim // 2),
               x.mask, p.p(rnn_op, "hidden"), x.mask_code)


@plan_rule("mean", "max", "sum")
def pool(p, e, a, n):
    x = a[0]
    mask = p.mask_arg(x)
    shape = checks.Shape(x.shape.axes[:-1], x.shape.dim)
    if mask == "None":  # no padding over these positions
        return Var(f"{atom(x)}.{'amax' if e.fn == 'max' else e.fn}(-2)", shape, x.mask, x.dim)
    p.helpers.add("pool")
    return Var(f"pool({x.name}, {mask}, \"{e.fn}\")", shape, x.mask, x.dim)


@plan_rule("flatten")
def flatten(p, e, a, n):
    x = a[0]
    ax = x.shape.axes
    mk = p.mask_of(x)
    return Var(f"{atom(x)}.flatten(-3, -2)",
               checks.Shape(ax[:-2] + (f"{ax[-2]}*{ax[-1]}",), x.shape.dim), None, x.dim,
               (mk[0], mk[1] + ".flatten(-2)") if mk else None)


@plan_rule("resize")
def resize(p, e, a, n):
    x, like = a
    if not like.shape.axes:
        return x
    first = (f"{F}.interpolate({atom(x)}.movedim(-1, 1), size={atom(like)}.shape[1:-1], "
             f"mode=\"nearest\")")
    return channels_last(Var(first, checks.Shape(like.shape.axes, x.shape.dim), like.mask, x.dim,
                             like.mask_code))


def channels_first(x: Var) -> str:
    """A grid (B, H, W, C) as torch's images (B, C, H, W): the previous grid op's result
    before it moved the channels last, else x with its channels moved first."""
    return x.first if x.first is not None else f"{atom(x)}.movedim(-1, 1)"


def channels_last(v: Var) -> Var:
    """v, a grid op's result (B, C, H, W), with the channels last; ``first`` keeps v."""
    return Var(f"{v.name}.movedim(1, -1)", v.shape, v.mask, v.dim, v.mask_code, first=v.name)


def grid_shape(p, x: Var, up: int, down: int, d: int | None) -> checks.Shape:
    """x's grid axes resampled by up / down (the names checks gave them), feature size d."""
    axes = tuple(checks.rescaled(p.cm.scaled, ax, up, down)[0] for ax in x.shape.axes)
    return checks.Shape(axes, d)


@plan_rule("conv2d")
def conv2d(p, e, a, n):
    """nn.Conv2d over the grid axes of x (B, H, W, C): "same" padding, or with a stride s
    the padding that gives H/s x W/s outputs."""
    x, d = a[0], p.p(e, "d")
    k, s = int(e.param("kernel", 3)), int(e.param("stride", 1))
    pad = "\"same\"" if s == 1 else f"{max(0, (k - s + 1) // 2)}, stride={s}"
    mod = p.module(n, p.suffix(n, "conv", e),
                   lambda: f"nn.Conv2d({x.dim}, {d}, kernel_size={k}, padding={pad})")
    shape = grid_shape(p, x, 1, s, e.param("d"))
    y = p.tmp(f"{mod}({channels_first(x)}).movedim(1, -1)", "y",
              p.shape(shape, dim=d) + ": convolve over " + ", ".join(x.shape.axes))
    code, prec = applied(e.param("act"), y)
    return Var(code, shape, None, d, prec=prec)


@plan_rule("maxpool")
def maxpool(p, e, a, n):
    x, f = a[0], int(e.param("factor"))
    return channels_last(Var(f"{F}.max_pool2d({channels_first(x)}, {f})",
                             grid_shape(p, x, 1, f, x.shape.dim), None, x.dim))


@plan_rule("upsample")
def upsample(p, e, a, n):
    x, f = a[0], int(e.param("factor"))
    mode = e.param("mode", "bilinear")
    return channels_last(Var(f"{F}.interpolate({channels_first(x)}, scale_factor={f}, "
                             f"mode=\"{mode}\")", grid_shape(p, x, f, 1, x.shape.dim), None,
                             x.dim))


@plan_rule("learned")
def learned(p, e, a, n):
    d = p.p(e, "d")
    if e.param("n") is None:
        mod = p.module(n, p.suffix(n, "q", e),
                       lambda: f"nn.Parameter(torch.randn({d}) * ({d}) ** -0.5)",
                       "a learned query (eq. 34)")
        return Var(f"{mod}.expand({BATCH}, -1)", checks.Shape((), e.param("d")), None, d)
    # learned(K, d): K vectors, initialised as one (eq. 34), the same for every example
    k = p.p(e, "n")
    mod = p.module(n, p.suffix(n, "learned", e),
                   lambda: f"nn.Parameter(torch.randn({k}, {d}) * ({d}) ** -0.5)",
                   "K learned vectors (a query set, latents, seeds)")
    shape = checks.Shape((learned_axis(n, e),), e.param("d"))
    return Var(f"{mod}.expand({BATCH}, -1, -1)", shape, None, d)


@plan_rule("classify")
def classify(p, e, a, n):
    x, c = a[0], p.p(e, "classes")
    if e.param("tie") is not None:  # logits = x E^T + b, E the embedding (Vaswani et al. 3.4)
        node = checks.version_with(p.m, str(e.param("tie")), "embed")
        emb = next(op for op in checks.operations(node.expr) if op.fn == "embed")
        weight = embedding(p, emb, node)
        bias = p.module(n, p.suffix(n, "bias", e), lambda: f"nn.Parameter(torch.zeros({c}))",
                        f"b; the weight is {weight[5:]}'s (tied)")
        return resized(x, f"{F}.linear({x.name}, {weight}.weight, {bias})", e.param("classes"), c)
    mod = op_module(p, e, n, "head", lambda: f"nn.Linear({x.dim}, {c})")
    return resized(x, f"{mod}({x.name})", e.param("classes"), c)


@plan_rule("dropout")
def dropout(p, e, a, n):
    mod = p.module(n, p.suffix(n, "drop", e), lambda: f"nn.Dropout({p.sym(e, 'p', e.param('p'))})")
    return same(a[0], f"{mod}({a[0].name})")


@plan_rule("affinity")
def affinity(p, e, a, n):
    """An affinity matrix between two sets of feature vectors (eq. 12-13)."""
    x = p.named(p.expr(e.args[0], n), p.want(n) + "_a")
    y = p.named(p.expr(e.args[1], n), p.want(n) + "_b")
    form = e.param("form", "bilinear")
    if form != "bilinear":
        p.equal.append((x.dim, y.dim))
    if form == "bilinear":
        W = p.module(n, "W",
                     lambda: f"nn.Parameter(torch.randn({x.dim}, {y.dim}) * ({x.dim}) ** -0.5)",
                     "W_A (eq. 12)")
        code = f"{x.name} @ {W} @ {y.name}.transpose(-1, -2)"
    elif form == "trilinear":
        w = p.module(n, "w", lambda: f"nn.Parameter(torch.randn(3, {x.dim}) * ({x.dim}) ** -0.5)",
                     "w_A = [w1; w2; w3] (eq. 13)")
        code = (f"({x.name} @ {w}[0]).unsqueeze(-1) + ({y.name} @ {w}[1]).unsqueeze(-2)"
                f" + ({x.name} * {w}[2]) @ {y.name}.transpose(-1, -2)")
    elif form == "dot":
        code = f"{x.name} @ {y.name}.transpose(-1, -2)"
    else:
        code = f"{x.name} @ {y.name}.transpose(-1, -2) / {MATH}.sqrt({x.name}.shape[-1])"
    # every form is a product (x @ W @ y^T, ... / sqrt(d)) but trilinear's sum of three terms
    code, prec = applied(e.param("act"), code, SUM if form == "trilinear" else PRODUCT)
    return Var(code, p.cm.shapes[n.id], None, Dim(), prec=prec)

