"""Stage 7: IR -> standalone PyTorch source (jinja2 templates in templates/codegen/).

One file per model variant. Feature models are emitted by ``emit_<fn>``, attention modules
by ``templates/codegen/attention.py.j2`` with one template per score and per alignment
(``score/<fn>.py.j2``, ``align/<fn>.py.j2``). Nothing from a spec reaches the output except
identifiers (checked by ``lower.bad_identifier``) and numbers; the paper's title and
citation are escaped with ``repr``-safe text.
"""

from __future__ import annotations

import ast
import builtins
import functools
import operator
import re
import textwrap
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import jinja2
import networkx as nx

from . import checks, classify, ir

TEMPLATES = Path(__file__).parent / "templates" / "codegen"

ACT = {"tanh": "torch.tanh({})", "relu": "F.relu({})", "sigmoid": "torch.sigmoid({})",
       "gelu": "F.gelu({})", "elu": "F.elu({})", "none": "{}", None: "{}"}
ACT_FN = {"tanh": "torch.tanh", "relu": "F.relu", "sigmoid": "torch.sigmoid", "gelu": "F.gelu",
          "elu": "F.elu", "none": "None", None: "None"}

MASKABLE = ("tokens", "sequence", "set")

# Local names the generated forward() uses for itself.
RESERVED = {"self", "cfg", "torch", "nn", "F", "math", "B", "out", "attn", "log_probs", "penalty",
            "capsules", "features", "return_attention", "validate", "t",
            "Output", "Config", "Model", "field", "dataclass", "masked_softmax", "sparsemax",
            "entmax15", "sinusoid", "broadcast", "pool", "rnn", "cell_step", "state", "ctx",
            "example_inputs", "g", "outputs"} | set(dir(builtins))
MODULE_ATTRS = {"training", "forward", "to", "cuda", "cpu", "eval", "train", "parameters",
                "buffers", "children", "modules", "state_dict", "apply", "half", "float",
                "double", "type", "zero_grad", "register_buffer", "add_module", "cfg",
                "get_submodule", "extra_repr", "dump_patches", "call_super_init", "bfloat16",
                "named_modules", "named_parameters", "requires_grad_", "load_state_dict",
                "capsule_loss", "register_parameter", "share_memory", "xpu", "ipu", "mtia"}


@functools.lru_cache(maxsize=1)
def env() -> jinja2.Environment:
    """One environment for every model: it caches the compiled templates."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined, autoescape=False)


def ident(node_id: str) -> str:
    """``encoder[2].self`` -> ``encoder2_self``; ``x@3`` -> ``x_3``."""
    s = re.sub(r"\[(\d+)\]\.", r"\1_", node_id)
    s = s.replace("@", "_").replace(".", "_")
    return s


def camel(text: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[._@\[\]]+", text) if p)


def safe_text(text: str) -> str:
    """Spec strings go into docstrings: keep printable characters, no quotes or backslashes."""
    out = "".join(ch for ch in text if ch.isprintable() and ch not in '\\"`')
    return out.replace("'''", "")[:200]


@dataclass
class Dim:
    """A feature size: a literal plus symbolic terms over Config fields."""

    const: int = 0
    terms: tuple[str, ...] = ()

    def __add__(self, o: "Dim") -> "Dim":
        return Dim(self.const + o.const, self.terms + o.terms)

    def __str__(self) -> str:
        parts = list(self.terms) + ([str(self.const)] if self.const or not self.terms else [])
        return " + ".join(parts)

    def times(self, n: int) -> "Dim":
        if not self.terms:
            return Dim(self.const * n)
        return Dim(0, (f"{n} * ({self})" if len(self.terms) + bool(self.const) > 1
                       else f"{n} * {self}",))


def evaluate(text: str, env: dict[str, int | float]) -> int | float:
    """The value of a size expression the generator wrote (numbers, ``cfg.NAME``, + - * / //
    and parentheses), for checking ``Config.tiny()``; anything else is refused."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv}

    def go(node):
        if isinstance(node, ast.Expression):
            return go(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "cfg":
            return env[node.attr]
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](go(node.left), go(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -go(node.operand)
        raise ValueError(f"not a size expression: {text}")

    return go(ast.parse(text, mode="eval"))


def cfg_expr(text: str) -> str:
    """``d_model // heads`` -> ``cfg.d_model // cfg.heads`` (text built by lower.sym from
    checked identifiers and numbers only)."""
    return re.sub(r"(?<![\w.])([A-Za-z_]\w*)", r"cfg.\1", text)


def dim_of(value: int | None, sym: str | None) -> Dim:
    if sym:
        return Dim(0, (cfg_expr(sym) if re.fullmatch(r"[A-Za-z_]\w*", sym)
                       else f"({cfg_expr(sym)})",))
    return Dim(int(value or 0))


@dataclass
class Var:
    """A tensor in forward(): its Python name, shape and padding-mask source."""

    name: str
    shape: checks.Shape
    mask: str | None = None  # input id whose mask covers this tensor's positions
    dim: Dim = field(default_factory=Dim)
    mask_code: tuple[str, str] | None = None  # (mask argument, transform) when not plain


class Names:
    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def new(self, want: str) -> str:
        name, i = want, 2
        while name in self.taken:
            name = f"{want}_{i}" if not want.endswith("_") else f"{want}{i}"
            i += 1
        self.taken.add(name)
        return name


class Generator:
    def __init__(self, cs: checks.CheckedSpec, cm: checks.CheckedModel, source: str):
        self.cs, self.cm, self.m = cs, cm, cm.model
        self.source = source
        self.env = env()
        self.init: list[str] = []
        self.fwd: list[str] = []
        self.helpers: set[str] = set()
        self.classes: dict[str, str] = {}  # class name -> source
        self.class_key: dict[tuple, str] = {}
        self.reserved = RESERVED | {i.id for i in self.m.inputs} | \
            {i.id + "_mask" for i in self.m.inputs} | {"i", "j", "k", "l"}
        self.locals = Names(self.reserved)
        self.attrs = Names(MODULE_ATTRS)
        self.module_of: dict[tuple, str] = {}  # sharing key -> attribute expression
        self.lists: dict[str, int] = {}  # ModuleList attribute -> its length
        self.vars: dict[str, Var] = {}
        self.shared = self._shared_levels()
        self.step: dict | None = None  # inside a decoder loop: {"axis", "region", "t"}
        self.list_pos: dict[tuple, tuple[str, int]] = {}  # per-hop module -> (list, index)
        self.loop_levels: dict[int, str] = {}  # repeat depth -> loop variable, while in a loop
        self.frozen = False  # second pass: modules exist already
        self.role = ""  # "k", "v" or "q" while emitting an attention module's inputs
        self.equal: list[tuple[Dim, Dim]] = []  # sizes the code needs equal (for Config.tiny())
        self.divides: list[tuple[Dim, str]] = []  # (size, heads): heads must divide the size
        self.list_block: dict[str, str] = {}  # ModuleList -> its top-level repeat
        self.counts: dict[str, str] = {}  # top-level repeat -> its count as a Config expression
        self.used_cfg: set[str] = set()
        self.attn_names: list[str] = []

    # ---- symbols --------------------------------------------------------------

    def p(self, op: ir.Op, name: str) -> Dim:
        sym = dict(op.sym).get(name)
        if sym:
            self._use(sym)
        return dim_of(op.param(name), sym)

    def _use(self, sym: str) -> None:
        self.used_cfg.update(re.findall(r"(?<![\w.])([A-Za-z_]\w*)", sym))

    def sym(self, obj, key: str, value) -> str:
        s = dict(getattr(obj, "sym", ())).get(key)
        if s:
            self._use(s)
            return str(dim_of(value, s))
        return repr(value)

    def _shared_levels(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for n in self.m.nodes:
            h = getattr(n, "hop", None)
            if h is not None:
                out[re.sub(r"\[\d+\]", "", h.block)] = h.shared
        return out

    def share_key(self, n) -> tuple:
        """Nodes that must use the same weights get the same key (eq. 41-42, shared hops)."""
        h = getattr(n, "hop", None)
        if h is None:
            return (n.id,)
        levels = h.template.split(".")[:-1]
        idx = list(h.outer) + [h.index]
        key = []
        for depth, i in enumerate(idx):
            path = ".".join(levels[: depth + 1])
            key.append("*" if self.shared.get(path) else i)
        return (h.template, tuple(key))

    def module(self, n, suffix: str, ctor: str, comment: str = "") -> str:
        """Register (once per sharing key) a submodule; return the expression naming it."""
        key = self.share_key(n) + (suffix,)
        if key in self.list_pos and self.loop_levels:
            return self.list_expr(key)
        if key in self.module_of:
            return self.module_of[key]
        assert not self.frozen, f"module {key} was not registered by the first pass"
        h = getattr(n, "hop", None)
        if h is None:
            attr = self.attrs.new(ident(n.id) + ("_" + suffix if suffix else ""))
            self.init.append(f"self.{attr} = {ctor}" + (f"  # {comment}" if comment else ""))
            expr = f"self.{attr}"
        else:
            base = ident(h.template.replace(".", "_")) + ("_" + suffix if suffix else "")
            unshared = [i for i in key[1] if i != "*"]
            if not unshared:
                attr = self.attrs.new(base)
                block = re.sub(r"\[\d+\]", "", h.block)
                self.init.append(f"self.{attr} = {ctor}  # shared by every hop of `{block}`"
                                 + (f"; {comment}" if comment else ""))
                expr = f"self.{attr}"
            else:
                # one module per hop: a ModuleList indexed by the (flattened) hop number
                lkey = (h.template, suffix)
                if lkey not in self.module_of:
                    attr = self.attrs.new(base)
                    self.module_of[lkey] = attr
                    self.lists[attr] = []
                    self.list_block[attr] = h.template.split(".")[0]
                    self.init.append(("list", attr, comment))
                attr = self.module_of[lkey]
                pos = len(self.lists[attr])
                self.lists[attr].append(ctor)
                self.list_pos[key] = (attr, pos)
                expr = f"self.{attr}[{pos}]"
        self.module_of[key] = expr
        return expr

    def list_expr(self, key: tuple) -> str:
        """``self.attr[i]``: a per-hop module inside a loop over hops (its index is linear
        in the loop variables, as the first pass registered the hops in order)."""
        attr, base = self.list_pos[key]
        template, idx, suffix = key[0], key[1], key[2:]
        terms = []
        for depth, var in sorted(self.loop_levels.items()):
            if depth >= len(idx) or idx[depth] == "*":
                continue
            nxt = list(idx)
            nxt[depth] = idx[depth] + 1
            other = self.list_pos.get((template, tuple(nxt)) + suffix)
            stride = other[1] - base if other else 1
            terms.append(var if stride == 1 else f"{stride} * {var}")
        expr = " + ".join(terms + ([str(base)] if base or not terms else []))
        return f"self.{attr}[{expr}]"

    # ---- shapes -----------------------------------------------------------------

    def shape_comment(self, s: checks.Shape, lq: str | None = None) -> str:
        axes = ["B"] + [a if lq is None or a != self.step_axis() else "1" for a in s.axes]
        if s.dim is not None:
            axes.append(str(s.dim))
        return "(" + ", ".join(axes) + ")"

    def step_axis(self) -> str | None:
        return self.step["axis"] if self.step else None

    # ---- expressions ------------------------------------------------------------

    def expr(self, e: ir.Expr, n) -> Var:
        if isinstance(e, ir.Ref):
            return self.ref(e.node)
        args = [] if e.fn == "affinity" else e.args
        if e.param("feed") and self.step is not None and e is self.step["op"]:
            return self.emit_feed_step(e, n)
        vals = [self.expr(a, n) for a in args]
        out = getattr(self, "emit_" + e.fn)(e, vals, n)
        return out

    def ref(self, node_id: str) -> Var:
        v = self.vars[node_id]
        if self.step is not None and node_id not in self.step["region"] and \
                self.step["axis"] in v.shape.axes:
            i = 1 + v.shape.axes.index(self.step["axis"])
            return Var(f"{v.name}.narrow({i}, t, 1)", v.shape, v.mask, v.dim)
        return v

    @staticmethod
    def atom(code: str) -> str:
        """Parenthesise an expression before calling a method on it."""
        return code if re.fullmatch(r"[\w.]+(\[[\w +*]+\])?(\(.*\))?(\.\w+)*", code) and \
            code.count("(") == code.count(")") and \
            " + " not in re.sub(r"\[[^\]]*\]", "", code).split("(")[0] else f"({code})"

    def named(self, x: Var, want: str) -> Var:
        """x, bound to a local name unless it already is one (so it is computed once)."""
        if re.fullmatch(r"\w+", x.name):
            return x
        name = self.tmp(x.name, x.shape, want, self.shape_comment(x.shape, lq="1" if self.step else None))
        return Var(name, x.shape, x.mask, x.dim, x.mask_code)

    def tmp(self, code: str, shape: checks.Shape, want: str, comment: str = "") -> str:
        name = self.locals.new(want)
        self.fwd.append(f"{name} = {code}" + (f"  # {comment}" if comment else ""))
        return name

    def unary(self, e, x: Var, code: str, dim: Dim | None = None, shape=None) -> Var:
        sh = shape or x.shape
        return Var(code, sh, x.mask, dim if dim is not None else x.dim, x.mask_code)

    def emit_embed(self, e, a, n):
        x = a[0]
        src = self.token_source(e.args[0])
        vocab = self.sym(src, "vocab", src.vocab)
        d = self.p(e, "d")
        mod = self.module(n, "embed", f"nn.Embedding({vocab}, {d})")
        return Var(f"{mod}({x.name})", checks.Shape(x.shape.axes, e.param("d")), x.mask, d, x.mask_code)

    def token_source(self, e: ir.Expr) -> ir.Input:
        while isinstance(e, ir.Op):
            e = e.args[0]
        node = self.m.node(e.node)
        assert isinstance(node, ir.Input), "embed reads token ids, which only inputs hold"
        return node

    def emit_linear(self, e, a, n):
        x, d = a[0], self.p(e, "d")
        bias = "" if e.param("bias", True) else ", bias=False"
        mod = self.module(n, self.suffix(n, "linear"), f"nn.Linear({x.dim}, {d}{bias})")
        code = ACT[e.param("act", "none")].format(f"{mod}({x.name})")
        return Var(code, checks.Shape(x.shape.axes, e.param("d")), x.mask, d, x.mask_code)

    def emit_project(self, e, a, n):
        x = a[0]
        d = self.p(e, "d") if e.param("d") is not None else x.dim
        mod = self.module(n, self.suffix(n, "proj"), f"nn.Linear({x.dim}, {d}, bias=False)",
                          {"k": "W_K F (eq. 1)", "v": "W_V F (eq. 1)", "q": "W_Q F (eq. 35)"}.get(
                              self.role, "W F (eq. 1)"))
        return Var(f"{mod}({x.name})", checks.Shape(x.shape.axes, e.param("d") or x.shape.dim),
                   x.mask, d, x.mask_code)

    def suffix(self, n, base: str) -> str:
        """Distinct suffixes for several ops of one kind inside one statement; inside an
        attention module's key/value/query models they start with the role (``q_proj``)."""
        if self.role and base != self.role:
            base = f"{self.role}_{base}"
        count = self.op_counts.setdefault((n.id, base), 0)
        self.op_counts[(n.id, base)] = count + 1
        return base if count == 0 else f"{base}{count + 1}"

    def _rnn(self, e, a, n, kind: str, bidir: bool):
        x = a[0]
        hidden, layers = self.p(e, "hidden"), self.p(e, "layers")
        extra = f", num_layers={layers}" if str(layers) != "1" else ""
        cls = "nn.LSTM" if kind == "lstm" else "nn.GRU"
        mod = self.module(n, self.suffix(n, ("bi" if bidir else "") + kind),
                          f"{cls}({x.dim}, {hidden}{extra}, batch_first=True"
                          f"{', bidirectional=True' if bidir else ''})")
        self.helpers.add("rnn")
        mask = self.mask_arg(x)
        dim = hidden.times(2) if bidir else hidden
        size = int(e.param("hidden")) * (2 if bidir else 1)
        return Var(f"rnn({mod}, {x.name}{', ' + mask if mask != 'None' else ''})",
                   checks.Shape(x.shape.axes, size), x.mask, dim, x.mask_code)

    def emit_lstm(self, e, a, n):
        if e.param("feed"):
            return self.emit_feed_full(e, a, n)
        return self._rnn(e, a, n, "lstm", False)

    def emit_gru(self, e, a, n):
        if e.param("feed"):
            return self.emit_feed_full(e, a, n)
        return self._rnn(e, a, n, "gru", False)

    def emit_bilstm(self, e, a, n):
        return self._rnn(e, a, n, "lstm", True)

    def emit_bigru(self, e, a, n):
        return self._rnn(e, a, n, "gru", True)

    def emit_cnn(self, e, a, n):
        x, d = a[0], self.p(e, "d")
        k = int(e.param("kernel", 3))
        mod = self.module(n, self.suffix(n, "conv"),
                          f"nn.Conv1d({x.dim}, {d}, {k}, padding=\"same\")")
        out_shape = self.shape_comment(checks.Shape(x.shape.axes, e.param("d")))
        mk = self.mask_of(x)
        if mk is not None:  # padding must not leak into real positions through the kernel
            name, suffix = mk
            xin = x.name if re.fullmatch(r"\w+", x.name) else self.tmp(x.name, x.shape, "h", self.shape_comment(x.shape))
            padded = self.tmp(f"{xin} if {name} is None else {xin}.masked_fill(~{name}{suffix}.unsqueeze(-1), 0.0)",
                              x.shape, "h", "padded positions set to zero")
            x = Var(padded, x.shape, x.mask, x.dim, x.mask_code)
        if len(x.shape.axes) == 1:  # (B, L, d): Conv1d wants (B, d, L)
            y = self.tmp(f"{mod}({self.atom(x.name)}.transpose(1, 2)).transpose(1, 2)", x.shape, "y",
                         out_shape + ": convolve over positions")
        else:
            xin = x.name if re.fullmatch(r"\w+", x.name) else self.tmp(x.name, x.shape, "h", self.shape_comment(x.shape))
            xs = self.tmp(f"{xin}.reshape(-1, {xin}.shape[-2], {xin}.shape[-1])",
                          x.shape, "xs", "(N, L, d): leading axes folded into the batch")
            conv = f"{mod}({xs}.transpose(1, 2)).transpose(1, 2)"
            y = self.tmp(f"{conv}.reshape(*{xin}.shape[:-1], -1)", x.shape, "y",
                         out_shape + ": convolve over positions")
        code = ACT[e.param("act", "relu")].format(y)
        return Var(code, checks.Shape(x.shape.axes, e.param("d")), x.mask, d, x.mask_code)

    def emit_identity(self, e, a, n):
        return a[0]

    def emit_positional(self, e, a, n):
        x = a[0]
        if e.param("kind", "sinusoid") == "sinusoid":
            self.helpers.add("sinusoid")
            return self.unary(e, x, f"sinusoid({x.name})")
        axis = x.shape.axes[-1]
        size = self.cm.sizes.get(axis)
        length = self.axis_size_code(axis) if size else "cfg.max_len"
        if not size:
            self.need_max_len = True
        mod = self.module(n, self.suffix(n, "pos"), f"nn.Embedding({length}, {x.dim})", "learned positions")
        xin = x.name if re.fullmatch(r"\w+", x.name) else self.tmp(x.name, x.shape, "h", self.shape_comment(x.shape))
        return self.unary(e, x, f"{xin} + {mod}.weight[: {xin}.shape[-2]]")

    def emit_norm(self, e, a, n):
        x = a[0]
        mod = self.module(n, self.suffix(n, "norm"), f"nn.LayerNorm({x.dim})")
        return self.unary(e, x, f"{mod}({x.name})")

    def emit_scale(self, e, a, n):
        x = a[0]
        mod = self.module(n, self.suffix(n, "gamma"), "nn.Parameter(torch.zeros(()))", "gamma, starts at 0 (SAGAN)")
        return self.unary(e, x, f"{mod} * {self.atom(x.name)}")

    def emit_ffn(self, e, a, n):
        x = a[0]
        d_ff = self.p(e, "d_ff")
        act = {"relu": "nn.ReLU()", "tanh": "nn.Tanh()", "sigmoid": "nn.Sigmoid()", "gelu": "nn.GELU()",
               "elu": "nn.ELU()", "none": "nn.Identity()"}[e.param("act", "relu")]
        mod = self.module(n, self.suffix(n, "ffn"),
                          f"nn.Sequential(nn.Linear({x.dim}, {d_ff}), {act}, nn.Linear({d_ff}, {x.dim}))")
        return self.unary(e, x, f"{mod}({x.name})")

    def emit_tanh(self, e, a, n):
        return self.unary(e, a[0], f"torch.tanh({a[0].name})")

    def emit_relu(self, e, a, n):
        return self.unary(e, a[0], f"F.relu({a[0].name})")

    def emit_sigmoid(self, e, a, n):
        return self.unary(e, a[0], f"torch.sigmoid({a[0].name})")

    def emit_add(self, e, a, n):
        self.equal.append((a[0].dim, a[1].dim))
        return Var(f"{a[0].name} + {a[1].name}", a[0].shape, a[0].mask or a[1].mask, a[0].dim, a[0].mask_code)

    def emit_concat(self, e, a, n):
        widest = max(a, key=lambda v: len(v.shape.axes))
        parts = []
        for v in a:
            if len(v.shape.axes) < len(widest.shape.axes):
                self.helpers.add("broadcast")
                parts.append(f"broadcast({v.name}, {widest.name})")
            else:
                parts.append(v.name)
        dim = Dim()
        for v in a:
            dim = dim + v.dim
        return Var(f"torch.cat([{', '.join(parts)}], -1)",
                   checks.Shape(widest.shape.axes, sum(v.shape.dim for v in a)), widest.mask, dim)

    def emit_stack(self, e, a, n):
        self.equal.extend((a[0].dim, v.dim) for v in a[1:])
        shape = self.cm.shapes[n.id] if isinstance(n, ir.Node) and n.expr is e else \
            checks.Shape(a[0].shape.axes + (f"{n.id}.reps",), a[0].shape.dim)
        return Var(f"torch.stack([{', '.join(v.name for v in a)}], -2)", shape, a[0].mask, a[0].dim)

    def _pool(self, e, a, n, how):
        x = a[0]
        mask = self.mask_arg(x)
        if mask == "None":  # no padding over these positions
            code = f"{self.atom(x.name)}.{'amax' if how == 'max' else how}(-2)"
            return Var(code, checks.Shape(x.shape.axes[:-1], x.shape.dim), x.mask, x.dim)
        self.helpers.add("pool")
        return Var(f"pool({x.name}, {mask}, \"{how}\")",
                   checks.Shape(x.shape.axes[:-1], x.shape.dim), x.mask, x.dim)

    def emit_mean(self, e, a, n):
        return self._pool(e, a, n, "mean")

    def emit_max(self, e, a, n):
        return self._pool(e, a, n, "max")

    def emit_sum(self, e, a, n):
        return self._pool(e, a, n, "sum")

    def emit_flatten(self, e, a, n):
        x = a[0]
        ax = x.shape.axes
        mk = self.mask_of(x)
        return Var(f"{self.atom(x.name)}.flatten(-3, -2)",
                   checks.Shape(ax[:-2] + (f"{ax[-2]}*{ax[-1]}",), x.shape.dim), None, x.dim,
                   (mk[0], mk[1] + ".flatten(-2)") if mk else None)

    def emit_resize(self, e, a, n):
        x, like = a
        k = len(like.shape.axes)
        mode = "nearest"
        code = (f"F.interpolate({self.atom(x.name)}.movedim(-1, 1), size={self.atom(like.name)}.shape[1:-1], mode=\"{mode}\")"
                f".movedim(1, -1)")
        return Var(code, checks.Shape(like.shape.axes, x.shape.dim), like.mask, x.dim, like.mask_code) if k else x

    def emit_learned(self, e, a, n):
        d = self.p(e, "d")
        mod = self.module(n, self.suffix(n, "q"), f"nn.Parameter(torch.randn({d}) * ({d}) ** -0.5)",
                          "a learned query (eq. 34)")
        return Var(f"{mod}.expand(B, -1)", checks.Shape((), e.param("d")), None, d)

    def emit_classify(self, e, a, n):
        x = a[0]
        c = self.p(e, "classes")
        mod = self.module(n, self.suffix(n, "head"), f"nn.Linear({x.dim}, {c})")
        return Var(f"{mod}({x.name})", checks.Shape(x.shape.axes, e.param("classes")), x.mask, c, x.mask_code)

    def emit_affinity(self, e, a, n):
        x = self.named(self.expr(e.args[0], n), ident(n.id) + "_a")
        y = self.named(self.expr(e.args[1], n), ident(n.id) + "_b")
        form = e.param("form", "bilinear")
        if form != "bilinear":
            self.equal.append((x.dim, y.dim))
        act = ACT[e.param("act", "none")]
        if form == "bilinear":
            W = self.module(n, "W", f"nn.Parameter(torch.randn({x.dim}, {y.dim}) * ({x.dim}) ** -0.5)",
                            "W_A (eq. 12)")
            code = f"{x.name} @ {W} @ {y.name}.transpose(-1, -2)"
        elif form == "trilinear":
            w = self.module(n, "w", f"nn.Parameter(torch.randn(3, {x.dim}) * ({x.dim}) ** -0.5)",
                            "w_A = [w1; w2; w3] (eq. 13)")
            code = (f"({x.name} @ {w}[0]).unsqueeze(-1) + ({y.name} @ {w}[1]).unsqueeze(-2)"
                    f" + ({x.name} * {w}[2]) @ {y.name}.transpose(-1, -2)")
        elif form == "dot":
            code = f"{x.name} @ {y.name}.transpose(-1, -2)"
        else:
            code = f"{x.name} @ {y.name}.transpose(-1, -2) / math.sqrt({x.name}.shape[-1])"
        return Var(act.format(code), self.cm.shapes[n.id], None, Dim())

    # ---- masks --------------------------------------------------------------------

    def mask_of(self, x: Var) -> tuple[str, str] | None:
        """The padding mask over x's positions: (the input's mask argument, what to apply to
        it), or None when x's positions are not an input's."""
        if x.mask_code is not None:
            return x.mask_code
        if x.mask is None:
            return None
        inp = self.m.node(x.mask)
        extra = len(inp.axes) - len(x.shape.axes)
        if extra < 0 or tuple(inp.axes[: len(x.shape.axes)]) != x.shape.axes:
            return None
        suffix = ""
        if extra:  # a group is real when any of its positions is
            suffix = f".flatten(-{extra + 1}).any(-1)" if extra > 1 else ".any(-1)"
        if self.step is not None and self.step["axis"] in x.shape.axes:
            suffix += f".narrow({1 + x.shape.axes.index(self.step['axis'])}, t, 1)"
        return f"{inp.id}_mask", suffix

    def mask_arg(self, x: Var, then: str = "") -> str:
        mk = self.mask_of(x)
        if mk is None:
            return "None"
        name, suffix = mk
        if not suffix and not then:
            return name
        return f"(None if {name} is None else {name}{suffix}{then})"

    # ---- nodes ------------------------------------------------------------------------

    def want(self, n) -> str:
        """A local's name: the node's id, or inside a loop over hops its statement."""
        if self.loop_levels and getattr(n, "hop", None) is not None:
            return ident(n.hop.template)
        return ident(n.id)

    def reuse(self, n) -> str | None:
        """``update x = …`` assigns to the name of the version it replaces when nothing
        reads that version any more (so the code reads ``x = norm(x + c)``)."""
        m = re.fullmatch(r"(.+)@(\d+)", n.id)
        if not self.frozen or m is None:
            return None
        base, k = m.group(1), int(m.group(2))
        prev = base if k == 2 else f"{base}@{k - 1}"
        v = self.vars.get(prev)
        if v is None or not re.fullmatch(r"\w+", v.name) or prev not in self.g:
            return None
        if v.name in {i.id for i in self.m.inputs}:
            return None  # inputs keep their names
        if all(r == n.id or r in self.emitted for r in self.g.successors(prev)):
            return v.name
        return None

    def key_code(self, n) -> str:
        """The node id as a Python string; inside loops an f-string over the loop variables."""
        if not self.loop_levels or getattr(n, "hop", None) is None:
            return repr(n.id)
        segs = self.segments(n)
        parts = []
        for depth, (a, i) in enumerate(segs):
            var = self.loop_levels.get(depth)
            parts.append(f"{a}[{{{var} + 1}}]" if var else f"{a}[{i}]")
        return 'f"' + ".".join(parts) + "." + n.name + '"'

    def node(self, n: ir.Node) -> None:
        want = self.want(n)
        shape = self.cm.shapes[n.id]
        v = self.expr(n.expr, n)
        where = f"{n.kind_} `{n.name}`" + (", updated (eq. 37)" if "@" in n.id else "")
        if self.step is None:
            name = self.reuse(n) or self.locals.new(want)
            self.fwd.append(f"{name} = {v.name}  # {self.shape_comment(shape)}: {where}")
        else:
            name = self.step["names"].setdefault(n.id, self.locals.new(want + "_t"))
            self.fwd.append(f"{name} = {v.name}  # {self.shape_comment(shape, lq='1')}: {where}, one step")
        self.vars[n.id] = Var(name, shape, v.mask if n.kind_ != "affinity" else None, v.dim,
                              v.mask_code if n.kind_ != "affinity" else None)

    # ---- attention ----------------------------------------------------------------------

    def attention(self, n: ir.Attention) -> None:
        info = self.cm.attention[n.id]
        capsule = n.capsules > 0
        fused = self.fused_projections(n)
        # the modules of the key, value and query models are named after their role
        self.role = "k"
        k = fused.get("k") or self.expr(n.keys, n)
        self.role = "v"
        v = (fused.get("v") or self.expr(n.values, n)) if n.values != n.keys else k
        q = None
        if n.query is not None and not capsule:
            self.role = "q"
            q = fused.get("q") or self.expr(n.query, n)
        self.role = ""
        G = len(info.groups)
        if q is not None and n.score.fn in ("multiplicative", "scaled_multiplicative", "similarity"):
            self.equal.append((q.dim, k.dim))
        if n.heads > 1:
            heads = self.sym(n, "heads", n.heads)
            self.divides.extend((d.dim, heads) for d in (q, k, v) if d is not None)
        cls = self.attention_class(n, info, q, k, v)
        args = {"d_q": q.dim if q is not None else (k.dim if capsule else None), "d_k": k.dim,
                "d_v": v.dim}
        ctor = [f"{a}={args[a]}" for a in ("d_q", "d_k", "d_v") if args[a] is not None]
        ctor.append(f"heads={self.sym(n, 'heads', n.heads)}")
        if n.score.fn in ("additive", "concat"):
            d_w = dim_of(n.score.d_w, dict(n.score.sym).get("d_w")) if n.score.d_w else \
                (q.dim if q is not None and n.query is not None and not capsule else k.dim)
            if dict(n.score.sym).get("d_w"):
                self._use(dict(n.score.sym)["d_w"])
            ctor.append(f"d_w={d_w}")
        if n.score.fn == "location":
            ctor.append(f"n_keys={self.axis_size_code(info.attended)}")
        if n.align.fn == "local":
            ctor.append(f"window={self.sym(n.align, 'D', n.align.window)}")
        if capsule:
            ctor.append(f"capsules={self.sym(n, 'capsules', n.capsules)}")
        mod = self.module(n, "", f"{cls}({', '.join(ctor)})")
        name = self.want(n)
        self.fwd.append(f"# attention `{n.hop.template if n.hop and self.loop_levels else n.id}`: "
                        f"{self.describe(n, info)}")
        k = self.named(k, f"{name}_k")
        v = k if n.values == n.keys else self.named(v, f"{name}_v")
        groups = " x ".join(info.groups)
        kk = f"{k.name}.flatten(0, {G})" if G else k.name
        vv = f"{v.name}.flatten(0, {G})" if G else v.name
        if G:
            self.fwd.append(f"# one attention per group: N = B x {groups}")
        qq = "None"
        if q is not None:
            q = self.named(q, f"{name}_q")
            if info.query_mode == "sequence" or n.affinity:
                qq = f"{q.name}.flatten(0, {G})" if G else q.name
            else:
                extra = G - len(q.shape.axes)
                if not G:
                    qq = f"{q.name}.unsqueeze(1)"
                else:
                    code = q.name
                    if extra:  # the same query for every group below its own axes
                        m = len(q.shape.axes)
                        kept = f"*{k.name}.shape[1:{1 + m}], " if m else ""
                        code = f"{q.name}.view(B, {kept}{'1, ' * extra}-1)" \
                               f".expand(*{k.name}.shape[:{1 + G}], -1)"
                    qq = self.tmp(f"{self.atom(code)}.reshape(-1, 1, {q.name}.shape[-1])", q.shape,
                                  f"{name}_q1", "(N, 1, d_q): one query per group")
        mk = self.mask_of(k)
        if G == 0 and mk is not None and not mk[1]:
            kmask = mk[0]  # already (B, Lk)
        else:
            kmask = self.mask_arg(k, f".reshape(-1, {k.name}.shape[-2])")
        if kmask != "None" and kmask.startswith("("):
            kmask = self.tmp(kmask[1:-1], k.shape, f"{name}_keep", "(N, Lk): padding mask of the keys")
        call = f"{mod}({qq}, {kk}, {vv}, {kmask}"
        if n.affinity:
            A = self.vars[n.affinity]
            aff_axes = A.shape.axes
            code = A.name
            if aff_axes[-1] != info.attended:
                code = f"{code}.transpose(-1, -2)"
            code = f"{code}.flatten(0, {G})" if G else code
            qmask = self.mask_of(q) if q is not None else None
            if qmask and n.score.fn in ("additive", "max_pool"):
                # padded query positions must not add to (eq. 14-15) or win (eq. 16) a score
                mname, suffix = qmask
                fill = "0.0" if n.score.fn == "additive" else f"torch.finfo({A.name}.dtype).min"
                code = self.tmp(f"{code} if {mname} is None else {code}.masked_fill("
                                f"~{mname}{suffix}.reshape(-1, {q.name}.shape[-2], 1), {fill})",
                                A.shape, f"{name}_A", "(N, Lq, Lk): padded query rows left out")
            call += f", affinity={code}"
        if self.step is not None and n.align.fn == "local" and n.align.position == "monotonic":
            call += ", start=t"  # p = t: this step's position (eq. 27)
        if self.fast_path(n, self.dot_form(n)):
            call += ", need_weights=return_attention"  # otherwise a fast path skips the weights
        call += ")"
        shape = self.cm.shapes[n.id]
        lead = f"{k.name}.shape[:{1 + G}]" if G else "B,"
        single = info.query_mode != "sequence" or (n.affinity and n.score.fn in ("additive", "max_pool"))
        direct = G == 0 and not single and not capsule
        needs_ex = n.align.fn in ("hard", "reinforced") or n.penalty is not None or capsule
        if direct and self.step is not None:
            c = self.step["names"].setdefault(n.id, self.locals.new(name + "_t"))
        else:
            c = self.locals.new(name if direct else f"{name}_c")
        a = self.locals.new(f"{name}_a")
        ex = self.locals.new(f"{name}_ex") if needs_ex else "_"
        self.fwd.append(f"{c}, {a}, {ex} = {call}" + (
            f"  # {self.shape_comment(shape, lq='1' if self.step else None)}" if direct else ""))
        if direct:
            out_code = None
        elif capsule:
            out_code = f"{c}.view({star(lead)}, {c}.shape[-2], -1)"
        elif single:
            out_code = f"{c}.view({star(lead)}, -1)"
        else:
            out_code = f"{c}.view({star(lead)}, {c}.shape[-2], -1)"
        comment = self.shape_comment(shape, lq="1" if self.step else None)
        if direct:
            res = c
        elif self.step is None:
            res = self.locals.new(name)
        else:
            res = self.step["names"].setdefault(n.id, self.locals.new(name + "_t"))
        if out_code is not None:
            self.fwd.append(f"{res} = {out_code}  # {comment}")
        self.vars[n.id] = Var(res, shape, k.mask if single or capsule else q.mask if q else None,
                              v.dim, None if single or capsule or q is None else q.mask_code)
        wshape = f"{star(lead)}, *{a}.shape[1:]"
        key = self.key_code(n)
        if self.step is None:
            wdims = ", ".join(["B", *info.groups, "H", q.shape.axes[-1] if not single and not capsule
                               else "C" if capsule else "1", info.attended] +
                              (["d_v / H"] if n.dimensionality == "multi" else []))
            self.fwd.append("if return_attention:")
            self.fwd.append(f"    attn[{key}] = {a if not G else f'{a}.view({wshape})'}  # ({wdims})")
        else:
            self.step["weights"].append((key, a, wshape, n))
        if n.align.fn in ("hard", "reinforced"):
            if self.step is None:
                self.fwd.append(f"log_probs[{key}] = {ex}[\"log_prob\"]")
            else:
                self.step["logp"].append((key, ex, n))
        if n.penalty is not None:
            self.fwd.append(f"penalty = penalty + {ex}[\"penalty\"]")
        if capsule:
            self.fwd.append(f"capsules[{key}] = tuple(x.view({star(lead)}, *x.shape[1:]) for x in {ex}[\"capsule\"])")
            self.helpers.add("pool")
            vm = self.mask_arg(v)
            self.fwd.append(f"features[{key}] = pool({v.name}, {vm}, \"mean\")  # f: the mean feature vector")
        self.attn_names.append(n.id)

    def fused_projections(self, n: ir.Attention) -> dict[str, Var]:
        """Queries, keys and values that are projections of one feature (self-attention:
        W_Q F, W_K F, W_V F, eq. 1 and 35) come from one stacked matmul: a single
        nn.Linear whose output is split, so the feature is read once."""
        if self.step is not None:
            return {}  # a decoder step projects one position of the query only
        roles = {"q": n.query if n.query is not None and not n.capsules else None, "k": n.keys,
                 "v": n.values if n.values != n.keys else None}
        by_source: dict[str, list[str]] = {}
        for r, e in roles.items():
            if isinstance(e, ir.Op) and e.fn == "project" and isinstance(e.args[0], ir.Ref):
                by_source.setdefault(e.args[0].node, []).append(r)
        out: dict[str, Var] = {}
        for source, rs in by_source.items():
            if len(rs) < 2:
                continue
            x = self.ref(source)
            dims = [self.p(roles[r], "d") if roles[r].param("d") is not None else x.dim for r in rs]
            if len({str(d) for d in dims}) == 1:
                width, split = str(dims[0].times(len(rs))), f"chunk({len(rs)}, -1)"
            else:
                width = " + ".join(str(d) for d in dims)
                split = f"split([{', '.join(str(d) for d in dims)}], -1)"
            eqs = {"q": "W_Q", "k": "W_K", "v": "W_V"}
            mod = self.module(n, "".join(rs) + "_proj", f"nn.Linear({x.dim}, {width}, bias=False)",
                              f"{', '.join(eqs[r] for r in rs)} stacked: one matmul (eq. 1, 35)")
            want = self.want(n)
            names = [self.locals.new(f"{want}_{r}") for r in rs]
            shapes = [checks.Shape(x.shape.axes, roles[r].param("d") or x.shape.dim) for r in rs]
            self.fwd.append(f"{', '.join(names)} = {mod}({x.name}).{split}  # "
                            f"{self.shape_comment(shapes[0])} each")
            for r, name, d, sh in zip(rs, names, dims, shapes):
                out[r] = Var(name, sh, x.mask, d, x.mask_code)
        return out

    def describe(self, n: ir.Attention, info) -> str:
        bits = [n.score.fn.replace("_", " ") + " score", n.align.fn + " alignment", *n.traits()]
        if info.groups:
            bits.append("one per " + " x ".join(info.groups))
        return ", ".join(bits)

    def axis_size_code(self, axis: str) -> str:
        for inp in self.m.inputs:
            if axis in inp.axes and inp.sizes[inp.axes.index(axis)] is not None:
                return self.input_size(inp, axis)
        if "*" in axis:
            a, b = axis.split("*", 1)
            return f"{self.axis_size_code(a)} * {self.axis_size_code(b)}"
        return repr(self.cm.sizes[axis])

    def attention_class(self, n: ir.Attention, info, q, k, v) -> str:
        query = "none" if n.query is None else "given"
        split = n.heads > 1 and query != "none"
        key = (n.score.model_dump(exclude={"loc", "sym", "d_w"}) | {"align": n.align.model_dump(
            exclude={"loc", "sym", "window"})}, n.heads > 1, split, n.dimensionality, bool(n.capsules),
            n.mask, n.penalty, query, bool(n.affinity), n.align.window)
        key = repr(key)
        if key in self.class_key:
            return self.class_key[key]
        name = self.class_name(n)
        taken = set(self.classes) | {"Model", "Config", "Output"}
        base, i = name, 2
        while name in taken:
            name, i = f"{base}{i}", i + 1
        init_args = []
        if query != "none" or n.capsules:
            init_args.append("d_q: int")
        init_args += ["d_k: int", "d_v: int", "heads: int"]
        if n.score.fn in ("additive", "concat"):
            init_args.append("d_w: int")
        if n.score.fn == "location":
            init_args.append("n_keys: int")
        if n.align.fn == "local":
            init_args.append("window: int")
        if n.capsules:
            init_args.append("capsules: int")
        lq = "C" if n.capsules else ("1" if query == "none" or n.score.fn == "max_pool" or
                                     (n.affinity and n.score.fn == "additive") else "Lq")
        doc = self.class_doc(n)
        mask_expr = {"causal": "torch.ones(Lq, Lk, dtype=torch.bool, device=k.device).tril()",
                     "forward": "torch.ones(Lq, Lk, dtype=torch.bool, device=k.device).tril(-1)",
                     "backward": "torch.ones(Lq, Lk, dtype=torch.bool, device=k.device).triu(1)",
                     "none": ""}[n.mask]
        if n.align.fn in ("global", "hard", "local", "reinforced"):
            self.helpers.add("masked_softmax")
        if n.align.fn == "sparsemax":
            self.helpers.add("sparsemax")
        if n.align.fn == "entmax":
            self.helpers.add("entmax15")
        dot = self.dot_form(n)
        fast = self.fast_path(n, dot)
        if fast in ("band", "gather"):
            self.helpers.update({f"local_{fast}", "local_flex"})
        elif fast == "blocks":
            self.helpers.add("additive_context")
        if n.score.fn == "additive" and query != "none" and not n.affinity:
            self.helpers.add("additive_score")

        cut = doc.index("")
        a = SimpleNamespace(
            cls=name, title="\n    ".join(doc[:cut]), doc=doc[cut + 1:],
            query="capsules" if n.capsules else query,
            query_note="no query: self-attentive (eq. 33)", split=split, heads=n.heads,
            multi=n.dimensionality == "multi", capsules=n.capsules, mask=n.mask,
            mask_expr=mask_expr, penalty=n.penalty, affinity=bool(n.affinity), score=n.score,
            align=n.align, lq=lq, init_args=init_args, dot=dot, fast=fast,
            act=lambda x, act=n.score.act: ACT[act].format(x), act_fn=ACT_FN[n.score.act])
        src = self.env.get_template("attention.py.j2").render(a=a)
        src = re.sub(r"\n{3,}", "\n\n", src)
        self.classes[name] = src.rstrip() + "\n"
        self.class_key[key] = name
        return name

    @staticmethod
    def dot_form(n: ir.Attention) -> SimpleNamespace | None:
        """Scores that are a dot product of (transformed) q and k, e = q'^T k' * scale: the
        ones a fused attention kernel can compute."""
        if n.query is None and not n.capsules or n.affinity or n.dimensionality == "multi":
            return None
        fn = n.score.fn
        if fn == "scaled_multiplicative":
            return SimpleNamespace(scale=" / math.sqrt(k.shape[-1])", sdpa_scale="",
                                   scale_value="k.shape[-1] ** -0.5", what="q^T k_l / sqrt(d_k)")
        what = {"multiplicative": "q^T k_l (Table II, multiplicative)", "general": "k_l^T W q",
                "biased_general": "k_l^T (W q + b)"}.get(fn)
        if fn == "similarity" and n.score.similarity != "l2":
            what = "cos(q, k_l) (Table II, similarity)"
        if what is None:
            return None
        return SimpleNamespace(scale="", sdpa_scale=", scale=1.0", scale_value="1.0", what=what)

    @staticmethod
    def fast_path(n: ir.Attention, dot) -> str | None:
        """Which fast path the module takes when nobody asks for its weights: "sdpa" (a fused
        kernel), "band" or "gather" (local attention in O(L D)), "blocks" (multi-dimensional
        additive attention over blocks of queries), or None."""
        if n.penalty is not None:
            return None
        if dot is None:
            additive_rows = n.score.fn == "additive" and n.dimensionality == "multi" and \
                (n.query is not None or n.capsules) and not n.affinity
            return "blocks" if additive_rows and n.align.fn == "global" else None
        if n.align.fn in ("global", "reinforced"):
            return "sdpa"
        if n.align.fn == "local" and n.mask == "none":
            return "band" if n.align.position == "monotonic" else "gather"
        return None

    @staticmethod
    def class_name(n: ir.Attention) -> str:
        """Named after its mechanisms, e.g. ``CausalMultiHeadScaledMultiplicativeAttention``:
        modules with the same mechanisms share the class."""
        parts = [n.mask.title() if n.mask != "none" else ""]
        if n.query is None:
            parts.append("Queryless")  # eq. 33
        if n.heads > 1:
            parts.append("MultiHead")
        if n.capsules:
            parts.append("Capsule")
        if n.dimensionality == "multi":
            parts.append("MultiDim")
        if n.affinity:
            parts.append("CoAttention")
        parts.append({"max_pool": "MaxPool", "affinity": "Affinity"}.get(n.score.fn, camel(n.score.fn)))
        if n.score.fn == "similarity":
            parts.append("L2" if n.score.similarity == "l2" else "Cosine")
        if n.align.fn != "global":
            parts.append(camel(n.align.fn) + ("Monotonic" if n.align.position == "monotonic" else ""))
        return "".join(parts) + "Attention"

    def class_doc(self, n: ir.Attention) -> list[str]:
        sc = {"additive": "additive score w^T act(W1 q + W2 k + b) (eq. 6)",
              "concat": "concat score w^T W [q; k] (Table II)",
              "multiplicative": "multiplicative score q^T k (Table II)",
              "scaled_multiplicative": "scaled multiplicative score q^T k / sqrt(d_k) (Table II)",
              "general": "general score k^T W q (Table II)",
              "biased_general": "biased general score k^T (W q + b) (Table II)",
              "activated_general": "activated general score act(k^T W q + b) (Table II)",
              "similarity": f"similarity score ({n.score.similarity or 'cosine'}) (Table II)",
              "location": "location score W_a q (Luong et al.)",
              "affinity": "scores read off an affinity matrix (eq. 12-13)",
              "max_pool": "max-pooled affinity scores (eq. 16)"}[n.score.fn]
        if n.affinity and n.score.fn == "additive":
            sc = "aggregate additive score over an affinity matrix (eq. 14-15)"
        elif n.query is None and n.score.fn == "additive":
            sc = "additive score of the keys alone, w^T act(W k + b) (eq. 33)"
        elif n.query is None and n.score.fn == "concat":
            sc = "concat score of the keys alone, w^T W k (Table II, eq. 33)"
        al = {"global": "global (soft) alignment (eq. 25)",
              "hard": "hard alignment: sample one position (eq. 26)",
              "local": f"local alignment, {n.align.position} position (eq. 27-29)",
              "reinforced": "reinforced alignment: a policy picks the subset, softmax over it",
              "sparsemax": "sparsemax alignment (seed 000)",
              "entmax": "1.5-entmax alignment"}[n.align.fn]
        title = f"Attention module `{n.hop.template if n.hop else n.name}`: {sc}, {al}."
        lines = textwrap.wrap(title, 92) + [""]
        if n.heads > 1:
            lines.append("Multi-head (eq. 38-40): " + (
                "q, k, v split into H slices, one score per head, contexts joined by W_O."
                if n.query is not None else
                "H rows of weights over the same keys (Lin et al.'s r-row annotation "
                "matrix), contexts joined by W_O."))
        if n.dimensionality == "multi":
            lines.append("Multi-dimensional (eq. 30-32): one weight per key and feature.")
        if n.capsules:
            lines.append("Capsule-based (eq. 43-45): a learned query per class, p_c and r_c.")
        if n.mask != "none":
            lines.append(f"Mask: {n.mask} (keys a query position may see).")
        cut = lines.index("") + 1
        return lines[:cut] + [w for line in lines[cut:] for w in textwrap.wrap(line, 92)]

    # ---- emission order: nodes, decoder loops and loops over hops ----------------------

    def emit_one(self, node_id: str) -> None:
        nd = self.m.node(node_id)
        if node_id in self.loops:
            n, op, att = self.loops[node_id]
            self.emitted.update(self.decoder_loop(n, op, att, self.g))
        elif node_id in self.emitted:
            return
        elif isinstance(nd, ir.Attention):
            self.attention(nd)
        else:
            self.node(nd)
        self.emitted.add(node_id)

    def emit_unrolled(self, ids: list[str]) -> None:
        self.emitted: set[str] = set()
        for node_id in ids:
            if node_id not in self.emitted:
                self.emit_one(node_id)

    @staticmethod
    def segments(n) -> list[tuple[str, int]]:
        """A hop node's place: ``model_enc[1].block[3]`` -> [("model_enc", 1), ("block", 3)]."""
        h = getattr(n, "hop", None)
        if h is None:
            return []
        return [(a, int(i)) for a, i in re.findall(r"(\w+)\[(\d+)\]", f"{h.block}[{h.index}]")]

    def emit_scope(self, ids: list[str], depth: int) -> None:
        """Emit ``ids`` (a top-level scope or one hop's body): plain nodes, and every
        repeat instance one level down as a single item, in dependency order."""
        if depth == 0:
            self.emitted = set()
        item_of: dict[str, tuple] = {}
        for node_id in ids:
            segs = self.segments(self.m.node(node_id))
            region = any(node_id in self.region_of(x) for x in self.loops)
            if len(segs) > depth and not region:
                item_of[node_id] = ("block", tuple(segs[:depth]), segs[depth][0])
            else:
                item_of[node_id] = ("node", node_id)
        cg = nx.DiGraph()
        rank: dict[tuple, int] = {}
        for pos, node_id in enumerate(ids):
            it = item_of[node_id]
            cg.add_node(it)
            rank.setdefault(it, pos)
        for node_id in ids:
            for d in self.g.predecessors(node_id) if node_id in self.g else ():
                if d in item_of and item_of[d] != item_of[node_id]:
                    cg.add_edge(item_of[d], item_of[node_id])
        if not nx.is_directed_acyclic_graph(cg):  # a repeat interleaved with outside nodes
            for node_id in ids:
                if node_id not in self.emitted:
                    self.emit_one(node_id)
            return
        order = list(nx.lexicographical_topological_sort(cg, key=lambda it: f"{rank[it]:06d}"))
        members: dict[tuple, list[str]] = {}
        for node_id in ids:
            members.setdefault(item_of[node_id], []).append(node_id)
        self.scope_pos = {node_id: order.index(item_of[node_id]) for node_id in ids}
        for it in order:
            if it[0] == "node":
                if it[1] not in self.emitted:
                    self.emit_one(it[1])
            else:
                self.emit_block(members[it], depth)

    def region_of(self, node_id: str) -> set[str]:
        if node_id not in self.regions:
            n, op, att = self.loops[node_id]
            self.regions[node_id] = (nx.descendants(self.g, n.id) & nx.ancestors(self.g, att)) \
                | {n.id, att}
        return self.regions[node_id]

    def emit_block(self, members: list[str], depth: int) -> None:
        """One repeat instance: a loop over its hops when every hop is the first hop with
        other weights (eq. 41-42), else hop by hop."""
        hops: dict[int, list[str]] = {}
        for node_id in members:
            hops.setdefault(self.segments(self.m.node(node_id))[depth][1], []).append(node_id)
        plan = self.loop_plan(hops, depth) if len(hops) > 1 else None
        if plan is None:
            for k in sorted(hops):
                saved = getattr(self, "scope_pos", {})
                self.emit_scope(hops[k], depth + 1)
                self.scope_pos = saved
            return
        self.emit_loop(hops, depth, plan)

    def rel(self, node_id: str, depth: int) -> tuple:
        """A hop node's identity inside its hop: its statement and any deeper hop indexes."""
        n = self.m.node(node_id)
        return (n.hop.template, tuple(self.segments(n)[depth + 1:]))

    def loop_plan(self, hops: dict[int, list[str]], depth: int) -> dict | None:
        """What a loop over these hops carries from one hop to the next, or None when the
        hops are not the same computation (then they are written out one by one)."""
        first = {self.rel(x, depth): x for x in hops[1]}
        if len(first) != len(hops[1]):
            return None
        carried: dict[str, tuple] = {}  # value before the repeat -> what replaces it
        members = {x for ids in hops.values() for x in ids}
        for k in sorted(hops)[1:]:
            here = {self.rel(x, depth): x for x in hops[k]}
            prev = set(hops[k - 1])
            if set(here) != set(first):
                return None
            for r, nk in here.items():
                n1 = self.m.node(first[r])
                d1s, dks = checks.deps(n1), checks.deps(self.m.node(nk))
                if len(d1s) != len(dks) or checks.deps(n1, delayed=True):
                    return None
                for d1, dk in zip(d1s, dks):
                    if d1 in hops[1]:
                        if dk not in hops[k] or self.rel(dk, depth) != self.rel(d1, depth):
                            return None
                    elif dk == d1:
                        continue  # read unchanged by every hop
                    elif dk in prev and d1 not in members:
                        if carried.setdefault(d1, self.rel(dk, depth)) != self.rel(dk, depth):
                            return None
                    else:
                        return None
        return {"carried": carried, "first": first}

    def count_is_free(self, block: str) -> bool:
        """A top-level repeat's count can be a Config field when its per-hop modules are
        plain lists indexed by the loop variable (nested repeats keep their counts)."""
        inner = [k for k in self.list_pos if k[0].startswith(block + ".")]
        return all(len(k[1]) == 1 for k in inner)

    def emit_loop(self, hops: dict[int, list[str]], depth: int, plan: dict) -> None:
        N = len(hops)
        first, carried = plan["first"], plan["carried"]
        members = {x for ids in hops.values() for x in ids}
        var = "ijkl"[depth] if depth < 4 else f"i{depth}"
        n0 = self.m.node(hops[1][0])
        block = ".".join(f"{a}[{i}]" for a, i in self.segments(n0)[:depth]) + \
            ("." if depth else "") + self.segments(n0)[depth][0]
        block_name = re.sub(r"\[\d+\]", "", block)
        # the carried values: each keeps one name through the loop
        saved = {}
        for x0, r in carried.items():
            v = self.vars[x0]
            outside = [s for s in self.g.successors(x0) if s not in members]
            if outside or not re.fullmatch(r"\w+", v.name):
                name = self.locals.new(ident(self.m.node(x0).name if hasattr(self.m.node(x0), "name") else x0))
                self.fwd.append(f"{name} = {v.name}  # carried from hop to hop")
            else:
                name = v.name
            saved[x0] = v
            self.vars[x0] = Var(name, v.shape, v.mask, v.dim, v.mask_code)
        self.carry_names = {r: self.vars[x0].name for x0, r in carried.items()}
        # values read after the loop from a hop other than the last
        lists: dict[tuple, str] = {}
        for k, ids in hops.items():
            for x in ids:
                if k < N and any(s not in members for s in self.g.successors(x)):
                    r = self.rel(x, depth)
                    if r not in lists:
                        lists[r] = self.locals.new(ident(r[0].split(".")[-1]) + "_hops")
                        self.fwd.append(f"{lists[r]} = []  # `{r[0]}` of every hop")
        count = str(N)
        sym = n0.hop.count_sym if depth == 0 else None
        if sym and not lists and self.count_is_free(block_name):
            self._use(sym)
            count = str(dim_of(N, sym))
            self.counts[block_name] = count
        self.fwd.append(f"for {var} in range({count}):  # `{block_name}`: {N} hops (eq. 41-42)")
        outer = self.fwd
        self.fwd = []
        self.loop_levels[depth] = var
        saved_pos = getattr(self, "scope_pos", {})
        self.emit_scope(hops[1], depth + 1)
        self.scope_pos = saved_pos
        del self.loop_levels[depth]
        for x0, r in carried.items():
            y1 = self.vars[first[r]].name
            if y1 != self.vars[x0].name:
                self.fwd.append(f"{self.vars[x0].name} = {y1}  # to the next hop")
        for r, lst in lists.items():
            self.fwd.append(f"{lst}.append({self.vars[first[r]].name})")
        outer.extend("    " + line for line in self.fwd)
        self.fwd = outer
        # after the loop: the last hop's values are the loop's locals
        last = {self.rel(x, depth): x for x in hops[N]}
        for r, x1 in first.items():
            if x1 not in self.vars:
                continue  # a middle hop of an inner loop: nothing outside reads it
            v = self.vars[x1]
            self.vars[last[r]] = v
            for k in range(1, N):
                xk = {self.rel(x, depth): x for x in hops[k]}[r]
                if r in lists:
                    self.vars[xk] = Var(f"{lists[r]}[{k - 1}]", v.shape, v.mask, v.dim, v.mask_code)
        for x0, r in carried.items():
            if self.vars[x0].name == saved[x0].name:
                self.vars[x0] = saved[x0]
            self.vars[last[r]] = Var(self.vars[x0].name, self.vars[last[r]].shape,
                                     self.vars[last[r]].mask, self.vars[last[r]].dim,
                                     self.vars[last[r]].mask_code)
        self.emitted.update(members)

    # ---- the decoder loop (feed = ATT) ------------------------------------------------

    def feed_regions(self) -> list[tuple[ir.Node, ir.Op, str]]:
        out = []
        for n in self.m.nodes:
            if isinstance(n, ir.Node):
                stack = [n.expr]
                while stack:
                    e = stack.pop()
                    if isinstance(e, ir.Op):
                        if e.param("feed"):
                            out.append((n, e, str(e.param("feed"))))
                        stack.extend(e.args)
        return out

    def emit_feed_full(self, e, a, n):
        raise AssertionError("recurrent models with `feed` are emitted by the decoder loop")

    def decoder_loop(self, n: ir.Node, op: ir.Op, att_id: str, g: nx.DiGraph) -> list[str]:
        region = (nx.descendants(g, n.id) & nx.ancestors(g, att_id)) | {n.id, att_id}
        order = [x for x in self.cm.order if x in region]
        inner = op.args[0]
        x = self.expr(inner, n)
        axis = x.shape.axes[-1]
        seq = self.tmp(x.name, x.shape, ident(n.id) + "_in",
                       f"{self.shape_comment(x.shape)}: the decoder's inputs, all steps")
        kind = op.fn
        hidden, layers = self.p(op, "hidden"), self.p(op, "layers")
        self.step = {"axis": axis, "region": region, "op": op, "names": {}, "weights": [],
                     "logp": [], "seq": seq, "kind": kind, "hidden": hidden, "layers": layers,
                     "x": x, "att": att_id}
        ctx = self.locals.new(ident(att_id) + "_prev")
        state = self.locals.new(ident(n.id) + "_state")
        steps = self.locals.new("steps")
        self.fwd.append(f"{state} = None")
        self.step["ctx"], self.step["state"] = ctx, state
        self.fwd.append(f"{steps} = {{}}  # node -> its value at every step")
        self.fwd.append(f"{ctx} = {seq}.new_zeros(B, None)  # (B, d_v): no context before the first step")
        self.ctx_line = len(self.fwd) - 1
        self.fwd.append(f"for t in range({seq}.shape[{len(x.shape.axes)}]):  # one decoder step per position of {axis}")
        saved = self.fwd
        self.fwd = []
        for node_id in order:
            nd = self.m.node(node_id)
            if isinstance(nd, ir.Attention):
                self.attention(nd)
            else:
                self.node(nd)
        att_var = self.vars[att_id]
        self.fwd.append(f"{ctx} = {att_var.name}.squeeze({len(x.shape.axes)})  # fed to the next step")
        for node_id in order:
            if node_id == att_id or any(s not in region for s in g.successors(node_id)):
                self.fwd.append(f"{steps}.setdefault({node_id!r}, []).append({self.vars[node_id].name})")
        for key, a, wshape, nd in self.step["weights"]:
            w = a if wshape.startswith("B, ") else f"{a}.view({wshape})"
            self.fwd.append("if return_attention:")
            self.fwd.append(f"    {steps}.setdefault({self.step_key('weights', key)}, []).append({w})")
        for key, ex, _ in self.step["logp"]:
            self.fwd.append(f"{steps}.setdefault({self.step_key('log_prob', key)}, []).append({ex}[\"log_prob\"])")
        body = self.fwd
        self.fwd = saved
        self.fwd.extend("    " + line for line in body)
        # the context's width is the attention's d_v
        d_v = self.vars[att_id].dim
        self.fwd[self.ctx_line] = self.fwd[self.ctx_line].replace("None)", f"{d_v})")
        pos = len(x.shape.axes)
        for node_id in order:
            v = self.vars[node_id]
            if node_id != att_id and all(s in region for s in g.successors(node_id)):
                continue  # only read inside the loop
            name = self.locals.new(ident(node_id))
            self.fwd.append(f"{name} = torch.cat({steps}[{node_id!r}], {pos})  "
                            f"# {self.shape_comment(self.cm.shapes[node_id])}")
            self.vars[node_id] = Var(name, self.cm.shapes[node_id], x.mask if node_id != att_id else
                                     None, v.dim)
        for key, a, wshape, nd in self.step["weights"]:
            dim = -3 if nd.dimensionality == "multi" else -2
            self.fwd.append("if return_attention:")
            self.fwd.append(f"    attn[{key}] = torch.cat({steps}[{self.step_key('weights', key)}], {dim})")
        for key, ex, nd in self.step["logp"]:
            how = "cat" if nd.align.fn == "hard" else "stack"  # (N, H, 1) per step, or (N,)
            self.fwd.append(f"log_probs[{key}] = torch.{how}({steps}[{self.step_key('log_prob', key)}], -1)")
        self.step = None
        return order

    @staticmethod
    def step_key(what: str, key: str) -> str:
        """``'weights:att'``: where a decoder loop collects a module's per-step values."""
        return repr(f"{what}:{unrepr(key)}")

    def emit_feed_step(self, e, n):
        st = self.step
        kind, hidden, layers, x = st["kind"], st["hidden"], st["layers"], st["x"]
        cell = "nn.LSTMCell" if kind == "lstm" else "nn.GRUCell"
        ctx_dim = self.vars_dim_hint(st["att"])
        ctor = (f"nn.ModuleList({cell}({x.dim} + {ctx_dim} if i == 0 else {hidden}, {hidden}) "
                f"for i in range({layers}))")
        mod = self.module(n, self.suffix(n, kind + "_cells"), ctor, "input feeding: [x_t; c_(t-1)]")
        self.helpers.add("cell_step")
        pos = len(x.shape.axes)
        h = self.locals.new(ident(n.id) + "_h")
        self.fwd.append(f"{h}, {st['state']} = cell_step({mod}, torch.cat([{st['seq']}.select({pos}, t), "
                        f"{st['ctx']}], -1), {st['state']})  # (B, hidden)")
        return Var(f"{h}.unsqueeze({pos})", checks.Shape(x.shape.axes, e.param("hidden")), x.mask, hidden)

    def vars_dim_hint(self, att_id: str) -> str:
        """The fed context's width, as a Config expression: the attention's values' size."""
        att = self.m.node(att_id)
        saved = (self.fwd, self.op_counts.copy())
        self.fwd = []
        try:
            step, self.step = self.step, None
            v = self.expr(att.values, att)
            dim = v.dim
        finally:
            self.step = step
            self.fwd, self.op_counts = saved
        return str(dim)

    # ---- the whole file -----------------------------------------------------------------

    def run(self) -> str:
        self.op_counts: dict = {}
        self.need_max_len = False
        self.axis_fields: dict[str, int] = {}
        m = self.m
        g = nx.DiGraph()
        for nd in m.nodes:
            for d in checks.deps(nd):
                g.add_edge(d, nd.id)
        loops = {n.id: (n, op, att) for n, op, att in self.feed_regions()}
        # features nothing reads (e.g. a last hop's query update): no code for them
        sinks = [nd.id for nd in m.nodes if isinstance(nd, ir.Attention)
                 or (isinstance(nd, ir.Node) and nd.kind_ == "output")]
        live = set(sinks).union(*(nx.ancestors(g, x) for x in sinks if x in g))
        done: set[str] = {nd.id for nd in m.nodes if isinstance(nd, ir.Node) and nd.id not in live
                          and nd.hop is None}
        fwd_head: list[str] = []
        # inputs: check shapes, pick up B
        inputs = list(m.inputs)
        first = inputs[0]
        fwd_head.append(f"B = {first.id}.shape[0]")
        for inp in inputs:
            self.vars[inp.id] = Var(inp.id, checks.Shape(inp.axes, inp.dim),
                                    inp.id if inp.kind in MASKABLE else None,
                                    dim_of(inp.dim, dict(inp.sym).get("dim")))
            if dict(inp.sym).get("dim"):
                self._use(dict(inp.sym)["dim"])
        self.g, self.loops, self.regions = g, loops, {}
        ids = [i for i in self.cm.order if i not in done and not isinstance(m.node(i), ir.Input)]
        # pass 1, hop by hop: registers every module (and helpers, classes) in order
        self.fwd, saved_vars = [], dict(self.vars)
        self.emit_unrolled(ids)
        # pass 2: the forward pass, with a loop for each `repeat` whose hops agree
        self.frozen, self.fwd, self.vars = True, [], saved_vars
        self.locals = Names(self.reserved)
        self.op_counts = {}
        self.emit_scope(ids, 0)
        body = self.fwd
        outputs = [n for n in m.nodes if isinstance(n, ir.Node) and n.kind_ == "output"]
        if not outputs:  # no output model: the last attention module's context
            outputs = [m.attentions[-1]]
        if len(outputs) == 1:
            ret = self.vars[outputs[0].id].name
        else:
            ret = "{" + ", ".join(f"{o.id!r}: {self.vars[o.id].name}" for o in outputs) + "}"
        checks_lines = self.input_checks(inputs)
        examples = self.examples(inputs)
        uses_cfg = any("cfg." in line for line in checks_lines + body)
        if not any(re.search(r"\bB\b", line.split("#")[0]) for line in body):
            fwd_head = [x for x in fwd_head if not x.startswith("B = ")]
        fwd = (["cfg = self.cfg"] if uses_cfg else []) + checks_lines + fwd_head + [
            "attn, log_probs, capsules, features = {}, {}, {}, {}",
            "penalty = 0.0"] + body + [
            f"return Output({ret}, attn, log_probs, penalty, capsules, features)"]
        config, props, tiny = self.config()
        args = []
        for inp in inputs:
            args.append(inp.id)
        for inp in inputs:
            if inp.kind in MASKABLE:
                args.append(f"{inp.id}_mask=None")
        paper = self.cs.spec.paper
        row = classify.classify_model(self.cm)
        doc = [f"Model `{m.name}` of {safe_text(paper.cite)}"
               f"{f' ({paper.year})' if paper.year else ''}"
               f"{f', ref. [{paper.ref}] of the survey' if paper.ref else ''}.", "",
               "Table III classification, derived from the spec's structure:"]
        for d in classify.DIMENSIONS:
            doc.append(f"    {d.replace('_', ' ')}: {row.cells[d].text(d)}")
        doc.append("")
        doc.append("Attention modules:")
        for a in m.attentions:
            if a.hop is None or a.hop.first:
                doc.append(f"    {a.hop.template if a.hop else a.id}: "
                           f"{self.describe(a, self.cm.attention[a.id])}")
        model_doc = [f"`{m.name}`: inputs " + ", ".join(
            f"{i.id} {self.shape_comment(checks.Shape(i.axes, i.dim))}" for i in inputs) + ".",
            "",
            "Masks: `<input>_mask` (B, ...) bool, True = a real position, for sequence inputs.",
            "Inputs are checked; validate=False skips the checks that read their values "
            "(token ids < vocab, finite features).",
            "Returns Output(output, attention, log_probs, penalty, capsules, features)."]
        init = []
        for line in self.init:
            if isinstance(line, tuple):
                _, attr, comment = line
                ctors = self.lists[attr]
                note = "one per hop" + (f"; {comment}" if comment else "")
                count = self.counts.get(self.list_block.get(attr), str(len(ctors)))
                if all(c == ctors[0] for c in ctors):
                    line = f"self.{attr} = nn.ModuleList({ctors[0]} for _ in range({count}))  # {note}"
                    if len(line) > 92:  # one module per line, nanoGPT style
                        init.extend([f"self.{attr} = nn.ModuleList(  # {note}",
                                     f"    {ctors[0]}", f"    for _ in range({count}))"])
                    else:
                        init.append(line)
                else:
                    init.append(f"self.{attr} = nn.ModuleList([  # {note}")
                    init.extend(f"    {c}," for c in ctors)
                    init.append("])")
            else:
                init.append(line)
        helpers = [self.env.get_template(f"helpers/{h}.py.j2").render().rstrip()
                   for h in sorted(self.helpers)]
        title = "\n".join(textwrap.wrap(f"{safe_text(paper.title) or paper.id}: model `{m.name}`, "
                                        "generated from its .attn spec.", 88))
        src = self.env.get_template("model.py.j2").render(
            source=self.source, title=title, doc=doc, config=config, properties=props, tiny=tiny,
            outputs=[o.id for o in outputs], helpers=helpers, helper_names=self.helpers,
            classes=[self.classes[c].rstrip() for c in self.classes], model_doc=model_doc,
            init=init, args=args, forward=fwd, examples=examples,
            capsule_loss=any(a.capsules for a in m.attentions),
            masked=any(i.kind in MASKABLE for i in inputs))
        return src

    def fixed(self, inp: ir.Input, axis: str) -> tuple[ir.Input, int | None]:
        """The input that fixes ``axis``'s length (this one, or another with the same axis)."""
        for other in [inp, *self.m.inputs]:
            if axis in other.axes and other.sizes[other.axes.index(axis)] is not None:
                return other, other.sizes[other.axes.index(axis)]
        return inp, None

    def input_size(self, inp: ir.Input, axis: str) -> str:
        """A fixed axis length: its constant's Config field, or a field named after the axis."""
        inp, size = self.fixed(inp, axis)
        if dict(inp.sym).get("size:" + axis):
            return self.sym(inp, "size:" + axis, size)
        self.axis_fields.setdefault(axis, size)
        return f"cfg.{axis}"

    def input_checks(self, inputs: list[ir.Input]) -> list[str]:
        out = []
        for inp in inputs:
            dims = ["B"]
            exp = []
            sizes = [self.fixed(inp, ax)[1] for ax in inp.axes]
            for ax, size in zip(inp.axes, sizes):
                if size is not None:
                    exp.append(self.input_size(inp, ax))
                else:
                    exp.append("None")
                dims.append(ax)
            if inp.dim is not None:
                exp.append(self.sym(inp, "dim", inp.dim))
                dims.append(str(inp.dim))
            shown = ["B"] + [ax if size is None else "{" + e + "}"
                             for ax, size, e in zip(inp.axes, sizes, exp)]
            if inp.dim is not None:
                shown.append("{" + exp[-1] + "}" if not exp[-1].isdigit() else exp[-1])
            want = "(" + ", ".join(shown) + ")"
            want = f'f"{want}"' if "{" in want else repr(want)
            axes = f"axes={tuple(inp.axes)!r}, " if inp.axes else ""
            vocab = f"vocab={self.sym(inp, 'vocab', inp.vocab)}, " if inp.kind == "tokens" else ""
            out.append(f"check_input({inp.id!r}, {inp.id}, ({', '.join(exp)}{',' if len(exp) == 1 else ''}), "
                       f"{'True' if inp.kind == 'tokens' else 'False'}, {want}, {axes}{vocab}validate=validate)")
            if inp.kind in MASKABLE:
                out.append(f"check_mask({inp.id!r}, {inp.id}_mask, {inp.id}.shape[:{1 + len(inp.axes)}])")
        self.helpers.add("check_input")
        return out

    def config(self):
        consts = {k: v for k, v in self.cs.spec.constants}
        syms = {k: s for k, s in self.cs.spec.const_syms}
        for name, v, s in self.m.consts:
            consts[name] = v
            syms[name] = s
        # close over derived constants
        need = set(self.used_cfg)
        changed = True
        while changed:
            changed = False
            for nme in list(need):
                s = syms.get(nme)
                if s:
                    for dep in re.findall(r"(?<![\w.])([A-Za-z_]\w*)", s):
                        if dep not in need:
                            need.add(dep)
                            changed = True
        fields, props, tiny = [], [], []
        roles = self.roles()
        heads = [v for nme, v in consts.items() if roles.get(nme) == "heads"]
        for nme, v in consts.items():
            if nme not in need or isinstance(v, (bool, str)):
                continue
            typ = "int" if isinstance(v, int) else "float"
            if syms.get(nme):
                props.append({"name": nme, "type": typ, "expr": cfg_expr(syms[nme]).replace("cfg.", "self.")})
                continue
            role = roles.get(nme, "dim")
            comment = {"heads": "attention heads (eq. 38)", "vocab": "vocabulary size",
                       "count": "hops of a repeat (eq. 41-42)",
                       "axis": "a fixed axis length", "dim": ""}.get(role, "")
            fields.append({"name": nme, "type": typ, "value": repr(v), "comment": comment})
            if typ == "int":
                small = {"heads": min(v, 4), "vocab": min(v, 50), "axis": min(v, 6), "count": min(v, 2),
                         "capsules": v, "window": min(v, 2)}.get(role)
                if small is None:  # a feature size: 16, a multiple of the tiny head count
                    small = min(v, 4 * max(min(h, 4) for h in heads) if heads else 16)
                if small != v:
                    tiny.append(f"{nme}={small}")
        tiny = self.consistent_tiny(fields, props, tiny, roles)
        for axis, size in self.axis_fields.items():
            if axis in consts or any(f["name"] == axis for f in fields):
                continue
            fields.append({"name": axis, "type": "int", "value": repr(size),
                           "comment": f"length of axis {axis}"})
            if size > 6:
                tiny.append(f"{axis}={6}")
        if self.need_max_len:
            fields.append({"name": "max_len", "type": "int", "value": "512",
                           "comment": "longest sequence for learned position embeddings"})
            tiny.append("max_len=64")
        return fields, props, tiny

    def consistent_tiny(self, fields, props, tiny, roles) -> list[str]:
        """Shrink sizes for Config.tiny() only as far as the model stays consistent: a size
        tied to a literal in the spec (``bigru(x, 32)`` beside ``let d = 64``) keeps its value."""
        default = {f["name"]: (int(f["value"]) if f["type"] == "int" else float(f["value"]))
                   for f in fields}

        def ok(values: dict) -> bool:
            env = dict(values)
            for p in props:  # derived constants, in definition order
                try:
                    env[p["name"]] = evaluate(p["expr"].replace("self.", "cfg."), env)
                except (ValueError, KeyError, ZeroDivisionError):
                    return False
            try:
                return all(evaluate(str(a), env) == evaluate(str(b), env) for a, b in self.equal) \
                    and all(evaluate(str(d), env) % evaluate(h, env) == 0 for d, h in self.divides
                            if str(d) and h)
            except (ValueError, KeyError, ZeroDivisionError):
                return False

        proposals = [dict(t.split("=", 1) for t in tiny)]
        # first all sizes; then leave feature sizes (and then heads) at their defaults
        proposals.append({k: v for k, v in proposals[0].items() if roles.get(k, "dim") != "dim"})
        proposals.append({k: v for k, v in proposals[1].items() if roles.get(k) != "heads"})
        for prop in proposals:
            values = dict(default) | {k: int(v) for k, v in prop.items()}
            if ok(values):
                return [f"{k}={v}" for k, v in prop.items()]
        return []

    def roles(self) -> dict[str, str]:
        """What each constant sizes, to pick toy sizes for Config.tiny()."""
        out: dict[str, str] = {}

        def mark(sym: str | None, role: str) -> None:
            if sym and re.fullmatch(r"[A-Za-z_]\w*", sym):
                out.setdefault(sym, role)

        for n in self.m.nodes:
            s = dict(getattr(n, "sym", ()))
            if isinstance(n, ir.Input):
                mark(s.get("vocab"), "vocab")
                for k, v in s.items():
                    if k.startswith("size:"):
                        mark(v, "axis")
            h = getattr(n, "hop", None)
            if h is not None and h.count_sym:
                mark(h.count_sym, "count")
            if isinstance(n, ir.Attention):
                mark(s.get("heads"), "heads")
                mark(s.get("capsules"), "capsules")
                mark(dict(n.align.sym).get("D"), "window")
        return out

    def examples(self, inputs: list[ir.Input]) -> list[str]:
        lines = []
        free = {}
        primes = [7, 5, 6, 4, 3]
        for inp in inputs:
            for ax in inp.axes:
                if self.fixed(inp, ax)[1] is None and ax not in free:
                    free[ax] = primes[len(free) % len(primes)] + 2
        for ax, size in free.items():
            lines.append(f"{ax} = {size}  # a free axis: any length works")
        lines.append("out = {}")
        for inp in inputs:
            dims = ["B"]
            for ax in inp.axes:
                dims.append(ax if self.fixed(inp, ax)[1] is None else self.input_size(inp, ax))
            if inp.kind == "tokens":
                vocab = self.sym(inp, "vocab", inp.vocab)
                lines.append(f"out[{inp.id!r}] = torch.randint(0, {vocab}, ({', '.join(dims)}), generator=g)")
            else:
                dims.append(self.sym(inp, "dim", inp.dim))
                lines.append(f"out[{inp.id!r}] = torch.randn({', '.join(dims)}, generator=g)")
        for inp in inputs:
            if inp.kind in MASKABLE:
                ax = inp.axes[-1]
                lines.append(f"L = out[{inp.id!r}].shape[{len(inp.axes)}]")
                lines.append(f"keep = torch.arange(L) < torch.randint((L + 1) // 2, L + 1, (B,), generator=g)"
                             f".view(B, {'1, ' * (len(inp.axes) - 1)}1)")
                lines.append("keep[0] = True")
                lines.append(f"out[{inp.id + '_mask'!r}] = keep.expand(out[{inp.id!r}].shape[:{1 + len(inp.axes)}])"
                             f".contiguous()")
        lines.append("return {name: x.to(device) for name, x in out.items()}")
        return lines


def unrepr(text: str) -> str:
    """The string a ``repr`` wrote (node ids hold no quotes or backslashes)."""
    assert text[0] == text[-1] == "'" and "\\" not in text, text
    return text[1:-1]


def star(lead: str) -> str:
    """``B,`` -> ``B``; ``k.shape[:2]`` -> ``*k.shape[:2]``."""
    return lead[:-1] if lead.endswith(",") else f"*{lead}"


def safe_source(source: str) -> str:
    """The spec path as the header writes it, percent-encoded so that it holds only
    ASCII letters, digits and ``_ . / + - %`` and two paths never read the same."""
    return urllib.parse.quote(source, safe="/._-+")


def generate(cs: checks.CheckedSpec, cm: checks.CheckedModel, source: str) -> str:
    """The generated file's text. ``source`` (the spec's path) is reduced to safe characters:
    it is the one string from outside a spec's identifiers that reaches the output."""
    src = Generator(cs, cm, safe_source(source)).run()
    src = "\n".join(line.rstrip() for line in src.split("\n"))
    code = src.split("import torch.nn.functional as F", 1)[1]
    if not re.search(r"\bmath\.", code):
        src = src.replace("import math\n", "", 1)
    if not re.search(r"(?<![\w.])F\.", code):
        src = src.replace("import torch.nn.functional as F\n", "", 1)
    return re.sub(r"\n{4,}", "\n\n\n", src).rstrip("\n") + "\n"


def source_name(path: Path | str) -> str:
    """The spec's path as the header names it: relative to the working directory when it
    is inside it (so the output does not depend on where the checkout lives)."""
    p = Path(path)
    try:
        p = p.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        p = Path(p.name)
    return p.as_posix()


HEADER = "# @generated by taxcompile from "


def generated_from(path: Path) -> str | None:
    """The spec a generated file names in its first line, or None if it is not ours."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return None
    if not first.startswith(HEADER):
        return None
    return first[len(HEADER):].split(" — ")[0].strip()


def output_name(cs: checks.CheckedSpec, cm: checks.CheckedModel) -> str:
    return f"{cs.spec.paper.id}_{cm.model.name}.py"
