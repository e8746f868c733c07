"""Stage 2: AST -> IR. Checks each entry on its own (identifiers, fields, types,
constants), resolves names, merges model variants and unrolls ``repeat`` blocks.
Cross-entry checks (cycles, shapes, a score's requirements) live in ``checks.py``."""

from __future__ import annotations

import keyword
import math
from dataclasses import dataclass, field

from . import ast, ir, reserved
from . import mechanisms as mech
from .diagnostics import Collector, Location, article
from .mechanisms import spellings
from .ops import ACTS, P, enum, node, pint  # noqa: F401  (the parameter vocabulary)
from .ops import ACTIVATIONS, GATED_ACTS
from .ops import CALLS as OPS  # the feature models written as calls: name -> parameters
from .ops import NAMED  # parameters that name a node (`feed = att`, `init = s0`)
from .suggest import alias, not_one_of, suggest

NAMED_HINT = {
    "feed": ("`feed` names the node of the decoder step that the recurrent model reads",
             "an attention module (its context) or a node computed from it, e.g. "
             "`feed = att` or Luong's `feed = h_att`"),
    "init": ("`init` names the node that gives the decoder's initial state",
             "declare it first, e.g. `feature s0 = linear(first(backward(h)), 1000, act = tanh)` "
             "and `init = s0`; or name an encoder LSTM/GRU to start from its final states"),
    "init_c": ("`init_c` names the node that gives the decoder LSTM's initial memory c_0",
               "declare it first, e.g. `feature c0 = linear(mean(a), 512, act = tanh)`"),
    "share": ("`share` names the statement whose module (weights) of the same operator this "
              "operation uses", "e.g. `feature k2 = linear(x2, 64, share = k1)`"),
    "tie": ("`tie` names the statement whose `embed` matrix the output layer uses as its weight",
            "e.g. `output y = classify(h, vocab, tie = src_emb)`"),
}

MAX_HOPS = 64
MAX_INT = 1 << 24


class _NotConstant(Exception):
    """``sym`` met an expression that is no constant (its error is reported elsewhere)."""
MAX_NODES = 5000
# Nodes of all models of a spec together (variants and `repeat` hops unrolled): what the
# front end's time and memory grow with. A one-line variant of a large model is a whole
# model again, so without this bound 1 MB of variants would cost hours and gigabytes;
# with it, a spec costs at most a few seconds (the largest in specs/ has 156 nodes).
MAX_SPEC_NODES = 10_000

# `alignment[T, S]`: a target alignment (B, T, S) for supervised attention, no feature size
# `pointers[T] (into = S)`: target positions of axis S, one per position of T (a pointer
# network's outputs, Vinyals et al. 2015), read by `pointed(X, C)`
INPUT_KINDS = ("tokens", "sequence", "grid", "set", "vector", "alignment", "pointers",
               "mask", "graph")
# Inputs that only say which keys a query may see: `mask[T, S]`, a (B, T, S) bool mask, and
# `graph[N]`, a graph over the N positions of an axis (an edge list or a dense adjacency).
MASK_KINDS = ("mask", "graph")


# The parameters of each mechanism a statement names come from its record
# (taxcompile/mechanisms), aliases included (`dot`, `soft`).
SCORES: dict[str, tuple[P, ...]] = {k: m.params for k, m in spellings(mech.SCORES).items()}

# Scores that score the keys alone when a module has no query (eq. 33).
SCORES_WITHOUT_QUERY = mech.WITHOUT_QUERY

ALIGNS: dict[str, tuple[P, ...]] = {k: m.params for k, m in spellings(mech.ALIGNS).items()}

# Masks over one sequence (their records say which keys each keeps).
MASKS = P("mask", "enum", False, "none", tuple(mech.MASKS))

ATTENTION_FIELDS = ("query", "keys", "values", "features", "score", "align", "dimensionality",
                    "heads", "capsules", "mask", "penalty", "affinity", "heads_out", "dropout",
                    "share", "position", "bias", "coverage", "self_loops")
# Score modifiers: position terms in q and k (`position = …`) and additive biases on the
# scores before the alignment (`bias = …`); docs/codegen.md has their equations.
POSITIONS: dict[str, tuple[P, ...]] = {k: m.params for k, m in mech.POSITIONS.items()}
BIASES: dict[str, tuple[P, ...]] = {k: m.params for k, m in mech.BIASES.items()}
# How a multi-head module joins its heads' contexts (the records of mechanisms.HEADS_OUT).
HEADS_OUT = P("heads_out", "enum", False, "project", tuple(mech.HEADS_OUT))
PAPER_FIELDS = ("cite", "ref", "row", "title", "year")
FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32 (torch.finfo(torch.float32).max)

def bad_identifier(name: str, python_keywords: bool = False) -> str | None:
    """Why ``name`` cannot be used as an identifier (specs are untrusted). Python keywords
    are allowed where the name never becomes a Python name (``python_keywords``)."""
    if not name.isidentifier() or not name.isascii():
        return "is not a valid identifier"
    if not python_keywords and (keyword.iskeyword(name) or keyword.issoftkeyword(name)):
        return "is a Python keyword"
    if name.startswith("__"):
        return "starts with `__` (dunder names are reserved)"
    if name in ("true", "false"):
        return "is reserved for booleans"
    if len(name) > 64:
        return "is longer than 64 characters"
    return None


@dataclass
class Scope:
    """Name bindings of a model body or of one hop of a ``repeat``."""

    prefix: str  # "" or "encoder[2]."
    parent: "Scope | None"
    bindings: dict[str, str] = field(default_factory=dict)  # name -> current node id
    declared: dict[str, str] = field(default_factory=dict)  # names declared later (forward refs)
    consts: dict[str, ir.Scalar] = field(default_factory=dict)
    blocks: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # repeat -> hops' bindings
    hop: ir.Hop | None = None
    updates: dict[str, int] = field(default_factory=dict)  # `update` statements seen, by name

    def lookup(self, name: str):
        s: Scope | None = self
        while s is not None:
            if name in s.consts:
                return ("const", s.consts[name])
            if name in s.bindings:
                return ("node", s.bindings[name])
            if name in s.declared:
                return ("node", s.declared[name])
            if name in s.blocks:
                return ("block", s.blocks[name])
            s = s.parent
        return None

    def owner(self, name: str) -> "Scope | None":
        s: Scope | None = self
        while s is not None:
            if name in s.bindings:
                return s
            s = s.parent
        return None


class Lowerer:
    def __init__(self, module: ast.Module, file: str, source: str | None):
        self.module = module
        self.file = file
        self.c = Collector(file, source)
        self.consts: dict[str, ir.Scalar] = {}
        self.defining = ""  # the statement being lowered (not suggested for itself)
        self.defining_feature = False
        self.const_syms: dict[str, str | None] = {}  # `let` name -> its expression (Config)
        self.model_scope: Scope | None = None
        self.spec_nodes = 0  # nodes of every model lowered so far (MAX_SPEC_NODES)
        self.too_big = False

    # ---- helpers ------------------------------------------------------------

    def loc(self, pos: ast.Pos) -> Location:
        return self.c.loc(pos.line, pos.col)

    def err(self, pos: ast.Pos, msg: str, hint: str = "") -> None:
        self.c.error(self.loc(pos), msg, hint)

    def check_ident(self, name: str, pos: ast.Pos, what: str,
                    python_keywords: bool = False) -> bool:
        why = bad_identifier(name, python_keywords)
        if why:
            self.err(pos, f"{what} name `{name}` {why}", "use letters, digits and `_`, e.g. `enc_self`")
            return False
        clash = reserved.refusal(name, what) if what in reserved.ROLES else None
        if clash:  # the generated file's own names (taxcompile/reserved.py)
            self.err(pos, *clash)
            return False
        return True

    # ---- constants ----------------------------------------------------------

    def const(self, e: ast.Expr, scope: Scope | None) -> ir.Scalar | None:
        """Evaluate a constant expression (numbers, strings, `let` names, + - * /)."""
        if isinstance(e, ast.Number):
            return e.value
        if isinstance(e, ast.String):
            return e.value
        if isinstance(e, ast.Neg):
            v = self.const(e.operand, scope)
            if v is None:
                return None
            if isinstance(v, (bool, str)):
                self.err(e.pos, "cannot negate a non-number")
                return None
            return -v
        if isinstance(e, ast.Ref):
            if e.name in ("true", "false"):
                return e.name == "true"
            found = scope.lookup(e.name) if scope else None
            if found is None and e.name in self.consts:
                found = ("const", self.consts[e.name])
            if found is None or found[0] != "const":
                known = list(self.consts) + (list(scope.consts) if scope else [])
                self.err(e.pos, f"unknown constant `{e.name}`",
                         suggest(e.name, known) if known else "define it first with `let`")
                return None
            return found[1]
        if isinstance(e, ast.BinOp):
            a, b = self.const(e.left, scope), self.const(e.right, scope)
            if a is None or b is None:
                return None
            if isinstance(a, (bool, str)) or isinstance(b, (bool, str)):
                self.err(e.pos, f"`{e.op}` needs numbers on both sides")
                return None
            try:
                if e.op == "+":
                    v = a + b
                elif e.op == "-":
                    v = a - b
                elif e.op == "*":
                    v = a * b
                else:
                    if b == 0:
                        self.err(e.pos, "division by zero")
                        return None
                    v = a // b if isinstance(a, int) and isinstance(b, int) and a % b == 0 else a / b
            except OverflowError:
                v = math.inf
            if isinstance(v, float) and not math.isfinite(v) or abs(v) > 1e15:
                self.err(e.pos, "number out of range")
                return None
            return v
        self.err(e.pos, "expected a constant (a number, a string or a `let` name)")
        return None

    def sym(self, e: ast.Expr, scope: Scope | None) -> str | None:
        """A valid constant expression as Python text over Config field names, for the
        generated code's ``Config`` (None when it names no constant: use the value).
        Only names that passed ``bad_identifier`` and numbers appear in the text."""
        names: list[str] = []

        # Parentheses only where Python needs them, so that a long chain `a + b + …`
        # stays flat (Python refuses more than 200 nested parentheses).
        prec = {"+": 1, "-": 1, "*": 2, "/": 2}

        def go(x: ast.Expr) -> tuple[str, int]:  # (text, precedence: atoms 4, `-x` 3)
            if isinstance(x, ast.Number):
                return repr(x.value), 4 if x.value >= 0 else 3
            if isinstance(x, ast.Neg):
                inner, p = go(x.operand)
                return f"-{inner if p >= 3 else f'({inner})'}", 3
            if isinstance(x, ast.Ref):
                owner = scope
                while owner is not None and x.name not in owner.consts:
                    owner = owner.parent
                if owner is None or owner is self.model_scope or owner.parent is None:
                    names.append(x.name)
                    return x.name, 4
                v = owner.consts[x.name]  # a constant local to a `repeat`
                return repr(v), 4 if not isinstance(v, (int, float)) or v >= 0 else 3
            if isinstance(x, ast.BinOp):
                op, p = x.op, prec[x.op]
                if op == "/":
                    op = "//" if isinstance(self.const(x, scope), int) else "/"
                (left, lp), (right, rp) = go(x.left), go(x.right)
                left = left if lp >= p else f"({left})"
                right = right if rp > p else f"({right})"
                return f"{left} {op} {right}", p
            raise _NotConstant  # a call or a string: `const` has reported it

        if isinstance(e, ast.Ref) and e.name in ("true", "false"):
            return None
        try:
            text = go(e)[0]
        except _NotConstant:
            return None
        if not names:
            return None
        return text

    def as_int(self, e: ast.Expr, scope: Scope | None, what: str, lo: int = 1,
               hi: int = MAX_INT) -> int | None:
        v = self.const(e, scope)
        if v is None:
            return None
        shown = str(int(v)) if isinstance(v, float) and v.is_integer() and abs(v) < 1e16 \
            else _show(v)
        floating = isinstance(v, float) and v.is_integer()
        if floating:
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            self.err(e.pos, f"{what} must be a whole number, got {shown}")
            return None
        if lo == 1 and hi == MAX_INT and not lo <= v <= hi:  # no range of its own
            self.err(e.pos, f"{what} must be a positive integer, got {shown}" if v < 1 else
                     f"{what} must be a positive integer of at most {hi:,}, got {shown}")
            return None
        if not lo <= v <= hi:
            self.err(e.pos, f"{what} must be between {lo} and {hi}, got {shown}")
            return None
        if floating and self.sym(e, scope) is not None:  # Config would compute a float
            self.err(e.pos, f"{what} must be a whole number, but it is computed in floating "
                     f"point ({shown}.0): the generated Config would hold a float",
                     "use whole numbers: integer `let`s, `*` and `/` by integers, "
                     "e.g. `d * 10` for `d / 0.1`")
            return None
        return v

    def as_param(self, p: P, e: ast.Expr, scope: Scope | None, what: str) -> ir.Scalar | None:
        if p.type == "int":
            return self.as_int(e, scope, what, p.lo)
        if p.type == "act":
            return self.as_act(p, e, scope, what)
        if p.type == "float":
            v = self.const(e, scope)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                self.err(e.pos, f"{what} must be a positive number, got {_show(v)}")
                return None
            if p.below is not None and v >= p.below:
                self.err(e.pos, f"{what} must be between 0 and {p.below:g}, got {v:g}")
                return None
            if v > FLOAT32_MAX:  # e.g. a penalty's lambda: the loss would be infinite
                self.err(e.pos, f"{what} must be at most {FLOAT32_MAX:.4g} (the largest "
                         f"float32), got {v:g}", "a larger number is infinite in the model's "
                         "float32 arithmetic")
                return None
            return float(v)
        if p.type == "prob":  # a dropout probability: 0 <= p < 1
            v = self.const(e, scope)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                self.err(e.pos, f"{what} must be a probability, at least 0 and below 1, "
                         f"got {_show(v)}", "e.g. 0.1 (Vaswani et al.'s P_drop)")
                return None
            return float(v)
        if p.type == "bool":
            if isinstance(e, ast.Ref) and e.name in ("true", "false"):
                return e.name == "true"
            self.err(e.pos, f"{what} must be `true` or `false`")
            return None
        if p.type == "enum":
            if isinstance(e, ast.Ref) and len(e.parts) == 1 and alias(p.name, e.name) in p.choices:
                return alias(p.name, e.name)
            self.err(e.pos, *not_one_of(what, e, p.choices))
            return None
        raise AssertionError(p.type)

    def as_act(self, p: P, e: ast.Expr, scope: Scope | None, what: str) -> ir.Act | None:
        """``act = tanh`` or ``act = leaky_relu(0.2)`` -> ``ir.Act`` (defaults filled in)."""
        if isinstance(e, ast.Ref) and len(e.parts) == 1:
            name, pos_args, kwargs = e.name, (), ()
        elif isinstance(e, ast.Call):
            name, pos_args, kwargs = e.fn, e.args, e.kwargs
        else:
            self.err(e.pos, f"{what} must be an activation function", suggest("", p.choices))
            return None
        if name not in ACTIVATIONS:
            self.err(e.pos, f"unknown activation `{name}`", suggest(name, ACTIVATIONS))
            return None
        if name not in p.choices and name in GATED_ACTS:
            self.err(e.pos, f"{what} cannot be `{name}`: a gated unit multiplies act(x W) by a "
                     "second projection x V of the layer's input (Shazeer 2020)",
                     f"use `ffn(x, d_ff, act = {name})`")
            return None
        if name not in p.choices:
            self.err(e.pos, f"{what} cannot be `{name}`: maxout narrows d·k features to d, "
                     "and here nothing makes the features k times wider first",
                     "use `act = maxout(k)` in `linear`, `cnn` or `ffn` (the layer becomes "
                     "k·d wide), or `maxout(x, k)` as a feature model")
            return None
        sig = ACTIVATIONS[name]
        if len(pos_args) > len(sig):
            self.err(pos_args[len(sig)].pos, f"`{name}` takes {len(sig) or 'no'} parameter"
                     f"{'s' if len(sig) != 1 else ''}" + (f" ({', '.join(q.name for q in sig)})"
                                                          if sig else ""),
                     f"write `act = {name}`" if not sig else "")
            return None
        values: dict[str, ir.Scalar] = {}
        for q, a in zip(sig, pos_args):
            values[q.name] = a
        names = {q.name: q for q in sig}
        for k in kwargs:
            if k.name not in names:
                self.err(k.pos, f"`{name}` has no parameter `{k.name}`",
                         suggest(k.name, names) if names else f"`{name}` takes no parameters")
                return None
            if k.name in values:
                self.err(k.pos, f"`{k.name}` is given twice")
                return None
            values[k.name] = k.value
        params: list[tuple[str, int | float]] = []
        for q in sig:
            if q.name in values:
                v = self.as_param(q, values[q.name], scope, f"`{q.name}` of `{name}`")
                if v is None:
                    return None
            elif q.required:
                self.err(e.pos, f"`{name}` needs `{q.name}`",
                         f"e.g. `{name}({2 if q.type == 'int' else 5})`")
                return None
            else:
                v = q.default
            params.append((q.name, v))
        return ir.Act(fn=name, params=tuple(params))

    # ---- entry point ----------------------------------------------------------

    def run(self) -> ir.Spec:
        papers = [i for i in self.module.items if isinstance(i, ast.Paper)]
        models = [i for i in self.module.items if isinstance(i, ast.Model)]
        for item in self.module.items:
            if isinstance(item, ast.Let):
                if self.check_ident(item.name, item.pos, "constant"):
                    if item.name in self.consts:
                        self.err(item.pos, f"constant `{item.name}` is defined twice")
                    v = self.const(item.value, None)
                    if v is not None:
                        self.consts[item.name] = v
                        self.const_syms[item.name] = self.sym(item.value, None)
        paper = self.paper(papers)
        if not models:
            self.err(ast.Pos(1, 1), "the spec defines no model",
                     "add `model NAME { … }` with inputs, features and attention modules")
        by_name: dict[str, ast.Model] = {}
        out: list[ir.Model] = []
        for m in models:
            if self.too_big:  # past MAX_SPEC_NODES: the rest is not lowered
                break
            # a model's name is only a file name (`paper_model.py`) and text in the
            # generated code, so `global` (Luong et al.'s global attention) is a fine one
            if not self.check_ident(m.name, m.pos, "model", python_keywords=True):
                continue
            if m.name in by_name:
                self.err(m.pos, f"model `{m.name}` is defined twice")
                continue
            body = m.body
            if m.base is not None:
                base = by_name.get(m.base)
                if base is None:
                    self.err(m.base_pos or m.pos, f"unknown base model `{m.base}`",
                             "a variant extends a model defined above it: " + suggest(m.base, by_name)
                             if by_name else "define the base model first")
                    continue
                body = self.merge(base.body, m.body, m.base)
            merged = ast.Model(m.pos, m.name, m.base, m.base_pos, body)
            by_name[m.name] = merged
            lowered = self.model(merged)
            if lowered is not None:
                out.append(lowered)
        self.c.raise_if_any()
        assert paper is not None
        return ir.Spec(file=self.file, paper=paper, constants=tuple(self.consts.items()),
                       const_syms=tuple(self.const_syms.items()), models=tuple(out))

    def paper(self, papers: list[ast.Paper]) -> ir.Paper | None:
        if not papers:
            self.err(ast.Pos(1, 1), "the spec has no `paper` block",
                     'start with `paper bahdanau2015 { cite = "Bahdanau et al."  year = 2015 }`')
            return None
        for extra in papers[1:]:
            self.err(extra.pos, "a spec describes one paper; found a second `paper` block",
                     "put each paper in its own .attn file")
        p = papers[0]
        self.check_ident(p.name, p.pos, "paper")
        vals: dict[str, ir.Scalar] = {}
        for f in p.fields:
            if f.name not in PAPER_FIELDS:
                self.err(f.pos, f"unknown paper field `{f.name}`", suggest(f.name, PAPER_FIELDS))
                continue
            if f.name in vals:
                self.err(f.pos, f"paper field `{f.name}` is given twice")
                continue
            if f.name in ("cite", "title"):
                if not isinstance(f.value, ast.String):
                    self.err(f.value.pos, f"`{f.name}` must be a string in double quotes")
                    continue
                if not f.value.value.strip() or len(f.value.value) > 300 or "\n" in f.value.value:
                    self.err(f.value.pos, f"`{f.name}` must be a non-empty one-line string")
                    continue
                vals[f.name] = f.value.value
            else:
                lo, hi = {"ref": (1, 100000), "row": (1, 1000), "year": (1900, 2100)}[f.name]
                v = self.as_int(f.value, None, f"`{f.name}`", lo, hi)
                if v is not None:
                    vals[f.name] = v
        if "cite" not in vals:
            if not any(f.name == "cite" for f in p.fields):
                self.err(p.pos, "the paper block needs `cite`",
                         'the citation label as in Table III, e.g. `cite = "Vaswani et al."`')
            return None
        return ir.Paper(id=p.name, loc=self.loc(p.pos), **vals)

    # ---- variants ---------------------------------------------------------------

    @staticmethod
    def stmt_key(s: ast.Stmt):
        if isinstance(s, ast.Feature) and s.role == "update":
            return None
        if isinstance(s, (ast.Feature, ast.Input, ast.Attention, ast.Repeat, ast.Let)):
            return s.name
        return None

    def merge(self, base: tuple, override: tuple, base_name: str = "") -> tuple:
        """A variant's statements replace the base's statements of the same name; an
        ``update NAME`` replaces the base's one top-level ``update NAME`` in its place (with
        none or several there, where it would go is ambiguous: an error)."""
        over = {self.stmt_key(s): s for s in override if self.stmt_key(s) is not None}
        over_updates: dict[str, ast.Feature] = {}
        for s in override:
            if isinstance(s, ast.Feature) and s.role == "update":
                n = sum(isinstance(b, ast.Feature) and b.role == "update" and b.name == s.name
                        for b in base)
                if s.name in over_updates:
                    self.err(s.pos, f"`update {s.name}` appears twice in this variant",
                             f"a variant's `update {s.name}` replaces the base's; name the extra "
                             f"versions instead (`feature {s.name}2 = …`)")
                elif n != 1:
                    where = "no" if n == 0 else f"{n}"
                    self.err(s.pos, f"`update {s.name}` in a variant replaces the base's "
                             f"`update {s.name}`, but `{base_name}` has {where} top-level "
                             f"`update {s.name}`", "updates are ordered, so where a new one "
                             "would go is ambiguous: define the model in full, or name the new "
                             f"version (`feature {s.name}2 = …`) and read it where it is used")
                over_updates[s.name] = s
        used: set[str] = set()
        out = []
        for s in base:
            k = self.stmt_key(s)
            if k is not None and k in over:
                out.append(over[k])
                used.add(k)
            elif isinstance(s, ast.Feature) and s.role == "update" and s.name in over_updates:
                out.append(over_updates[s.name])
            else:
                out.append(s)
        lets = []
        for s in override:
            k = self.stmt_key(s)
            if isinstance(s, ast.Feature) and s.role == "update":
                continue  # in the base's update's place, or refused above
            if k is None or k not in used:
                # New constants go first so replaced statements can use them.
                (lets if isinstance(s, ast.Let) else out).append(s)
        return tuple(lets + out)

    # ---- models -------------------------------------------------------------------

    def model(self, m: ast.Model) -> ir.Model | None:
        self.nodes: list[ir.AnyNode] = []
        self.ids: set[str] = set()
        self.versions: dict[str, int] = {}
        self.roles: dict[str, str] = {}  # node id -> feature/query/output/affinity/input/attention
        self.kinds_by_name: dict[str, str] = {}
        self.pending_feeds: list = []
        scope = Scope("", Scope("", None, consts=self.consts))  # top-level `let`s outside
        self.model_scope = scope
        self.model_pos = m.pos
        self.model_consts: list[tuple[str, ir.Scalar, str | None]] = []
        before = len(self.c.diagnostics)
        self.body(m.body, scope)
        if len(self.c.diagnostics) > before:
            return None
        if not any(isinstance(n, ir.Attention) for n in self.nodes):
            self.err(m.pos, f"model `{m.name}` has no attention module",
                     "add `attention NAME { query = …  keys = …  score = … }`")
            return None
        return ir.Model(name=m.name, base=m.base, nodes=tuple(self.nodes),
                        consts=tuple(self.model_consts), loc=self.loc(m.pos))

    def declare(self, stmts, scope: Scope) -> None:
        for s in stmts:
            if isinstance(s, (ast.Input, ast.Attention)) or (
                    isinstance(s, ast.Feature) and s.role != "update"):
                scope.declared.setdefault(s.name, scope.prefix + s.name)

    def add_node(self, n: ir.AnyNode, pos: ast.Pos) -> None:
        self.spec_nodes += 1
        if self.spec_nodes > MAX_SPEC_NODES:
            if not self.too_big:
                self.err(self.model_pos, f"the spec has more than {MAX_SPEC_NODES:,} nodes in "
                         "its models (variants and `repeat` hops unrolled); this model passes "
                         "the limit", "split the spec, or compile fewer variants at once")
            self.too_big = True
            raise _TooBig
        if len(self.nodes) >= MAX_NODES:
            self.err(pos, f"model has more than {MAX_NODES} nodes after unrolling `repeat` blocks",
                     "use fewer hops or fewer statements")
            raise _TooBig
        self.nodes.append(n)
        self.ids.add(n.id)
        self.roles[n.id] = n.kind_

    def bind(self, scope: Scope, name: str, pos: ast.Pos, what: str) -> str | None:
        if not self.check_ident(name, pos, what):
            return None
        if name in scope.bindings or name in scope.consts or name in scope.blocks:
            self.err(pos, f"`{name}` is already defined in this model",
                     "use `update NAME = …` to refine a feature, or pick another name")
            return None
        node_id = scope.prefix + name
        scope.bindings[name] = node_id
        scope.declared.pop(name, None)
        return node_id

    def body(self, stmts, scope: Scope) -> None:
        self.declare(stmts, scope)
        try:
            for s in stmts:
                if isinstance(s, ast.Let):
                    if self.check_ident(s.name, s.pos, "constant"):
                        v = self.const(s.value, scope)
                        if v is not None:
                            scope.consts[s.name] = v
                            if scope is self.model_scope:
                                self.model_consts.append((s.name, v, self.sym(s.value, scope)))
                elif isinstance(s, ast.Input):
                    self.input(s, scope)
                elif isinstance(s, ast.Feature):
                    self.feature(s, scope)
                elif isinstance(s, ast.Attention):
                    self.attention(s, scope)
                elif isinstance(s, ast.Repeat):
                    self.repeat(s, scope)
        except _TooBig:
            return

    def input(self, s: ast.Input, scope: Scope) -> None:
        if scope.hop is not None:
            self.err(s.pos, "inputs are declared at the top of a model, not inside `repeat`")
            return
        masked = ("tokens", "sequence", "set", "pointers")  # the inputs with a NAME_mask
        twin = next((n.id for n in self.nodes if isinstance(n, ir.Input) and (
            n.id == s.name + "_mask" and s.kind in masked
            or n.id + "_mask" == s.name and n.kind in masked)), None)
        if twin is not None:  # forward(x, x_mask, x_mask=None): one parameter, two inputs
            mask = max(twin, s.name, key=len)
            self.err(s.pos, f"input name `{s.name}` is taken: `forward()` would have two "
                     f"parameters `{mask}`, input `{mask}` and the padding mask of input "
                     f"`{min(twin, s.name, key=len)}`", f"pick another name, e.g. `{s.name}2`")
            return
        node_id = self.bind(scope, s.name, s.pos, "input")
        if node_id is None:
            return
        if s.kind not in INPUT_KINDS:
            self.err(s.kind_pos, f"unknown input kind `{s.kind}`", suggest(s.kind, INPUT_KINDS))
            return
        dims = list(s.dims)
        dim = None
        syms: dict[str, str] = {}
        if s.kind in MASK_KINDS and len(dims) != (2 if s.kind == "mask" else 1):
            self.err(s.kind_pos, "a mask input has the query's axis and the keys' axis, e.g. "
                     "`mask[T, S]` (a (B, T, S) bool tensor)" if s.kind == "mask" else
                     "a graph input has one axis, its nodes: `graph[N]` (an edge list (2, E) or "
                     "a (B, N, N) adjacency)")
            return
        if s.kind not in ("tokens", "alignment", "pointers", "mask", "graph"):
            if not dims:
                self.err(s.kind_pos, "missing feature size")
                return
            dim_e = dims.pop()
            dim = self.as_int(dim_e, scope, f"the feature size of `{s.name}`")
            if dim is None:
                return
            if t := self.sym(dim_e, scope):
                syms["dim"] = t
        elif not dims:
            self.err(s.kind_pos, "tokens need at least one axis, e.g. `tokens[S]`")
            return
        if s.kind == "grid" and len(dims) != 2:
            self.err(s.kind_pos, "a grid has two spatial axes and a channel size: `grid[H, W, C]`")
            return
        if s.kind == "pointers" and len(dims) != 1:
            self.err(s.kind_pos, "pointers have one axis, the target positions, and no "
                     "feature size: `pointers[T] (into = S)`")
            return
        if s.kind == "alignment" and len(dims) != 2:
            self.err(s.kind_pos, "an alignment has two axes, the attention's query and key "
                     "positions, and no feature size: `alignment[T, S]`")
            return
        if s.kind in ("sequence", "set") and not dims:
            self.err(s.kind_pos, f"{article(s.kind)} {s.kind} needs an axis and a feature size, e.g. `{s.kind}[L, 300]`")
            return
        axes, sizes = [], []
        for i, d in enumerate(dims):
            if isinstance(d, ast.Ref) and len(d.parts) == 1:
                found = scope.lookup(d.name) or (("const", self.consts[d.name])
                                                 if d.name in self.consts else None)
                if found and found[0] == "const":
                    size = self.as_int(d, scope, f"axis `{d.name}`")
                    axes.append(d.name)
                    sizes.append(size)
                    if t := self.sym(d, scope):
                        syms["size:" + d.name] = t
                elif found:
                    self.err(d.pos, f"axis `{d.name}` clashes with a node of the same name")
                    return
                else:
                    if not self.check_ident(d.name, d.pos, "axis"):
                        return
                    axes.append(d.name)
                    sizes.append(None)
            else:
                size = self.as_int(d, scope, "an axis size")
                if size is None:
                    return
                axes.append(f"{s.name}_{i}")
                sizes.append(size)
        if len(set(axes)) != len(axes) and s.kind not in ("mask", "alignment"):  # self-attention
            self.err(s.kind_pos, f"input `{s.name}` repeats an axis name")
            return
        vocab, auto, view_of, vocab_given, into = None, False, None, False, None
        for a in s.args:
            if s.kind == "pointers" and isinstance(a, ast.Kwarg) and a.name == "into":
                if isinstance(a.value, ast.Ref) and len(a.value.parts) == 1 and \
                        self.check_ident(a.value.name, a.value.pos, "axis"):
                    into = a.value.name  # checks.py: an axis of another input
                else:
                    self.err(a.value.pos, "`into` names the axis the pointers index",
                             "e.g. `input C: pointers[T] (into = S)`")
            elif isinstance(a, ast.Ref) and a.name == "autoregressive":
                auto = True
            elif isinstance(a, ast.Kwarg) and a.name == "vocab":
                vocab_given = True  # a bad value is reported where it is written
                vocab = self.as_int(a.value, scope, "`vocab`")
                if t := self.sym(a.value, scope):
                    syms["vocab"] = t
            elif isinstance(a, ast.Kwarg) and a.name == "autoregressive":
                auto = bool(self.as_param(P("autoregressive", "bool"), a.value, scope, "`autoregressive`"))
            elif isinstance(a, ast.Kwarg) and a.name == "of":
                # `(of = words)`: another view of the same data, e.g. its characters
                target = a.value.name if isinstance(a.value, ast.Ref) else None
                found = scope.bindings.get(target) if target else None
                if found is None or self.roles.get(found) != "input":
                    self.err(a.value.pos, "`of` names an input declared above: the data this "
                             "input is another view of", "e.g. `input chars: tokens[W, C] "
                             "(vocab = 300, of = words)`")
                else:
                    view_of = found
            elif s.kind in MASK_KINDS:
                name = a.name if isinstance(a, (ast.Kwarg, ast.Ref)) else "this"
                self.err(a.pos, f"a {s.kind} input takes no options (`{name}`): its axes are "
                         "those of the inputs it masks, which fix their lengths")
            elif isinstance(a, ast.Kwarg) and a.name in axes:
                i = axes.index(a.name)  # `(S = 50)`: the axis has a fixed length
                if sizes[i] is not None:
                    self.err(a.pos, f"axis `{a.name}` already has a size ({sizes[i]})")
                else:
                    sizes[i] = self.as_int(a.value, scope, f"the length of `{a.name}`")
                    if t := self.sym(a.value, scope):
                        syms["size:" + a.name] = t
            else:
                name = a.name if isinstance(a, (ast.Kwarg, ast.Ref)) else "this"
                self.err(a.pos, f"unknown input option `{name}`",
                         suggest(name, ("vocab", "autoregressive", "of", *axes)))
        if s.kind == "tokens" and vocab is None:
            if vocab_given:
                return
            self.err(s.kind_pos, f"token input `{s.name}` needs a vocabulary size",
                     f"write `input {s.name}: tokens[…] (vocab = 30000)`")
            return
        if s.kind != "tokens" and vocab is not None:
            self.err(s.kind_pos, "only token inputs have a vocabulary")
            return
        if s.kind == "pointers" and into is None:
            self.err(s.kind_pos, f"pointers `{s.name}` need the axis they point into",
                     f"write `input {s.name}: pointers[{', '.join(axes)}] (into = S)`")
            return
        self.add_node(ir.Input(id=node_id, kind=s.kind, axes=tuple(axes), sizes=tuple(sizes),
                               dim=dim, vocab=vocab, autoregressive=auto, view_of=view_of,
                               into=into,
                               sym=tuple(sorted(syms.items())), loc=self.loc(s.pos)), s.pos)

    def feature(self, s: ast.Feature, scope: Scope) -> None:
        self.defining, self.defining_feature = s.name, True
        if s.role == "update":
            owner = scope.owner(s.name)
            if owner is None:
                self.err(s.pos, f"cannot update `{s.name}`: it is not defined yet",
                         f"define it first with `feature {s.name} = …`")
                return
            old = owner.bindings[s.name]
            role = self.roles.get(old, "feature")
            if role not in ("feature", "query", "output"):
                self.err(s.pos, f"`{s.name}` is {'an' if role[0] in 'aeiou' else 'a'} {role}; "
                         "only features, queries and outputs can be updated")
                return
            base = old.split("@")[0]
            scope.updates[s.name] = nth = scope.updates.get(s.name, 0) + 1
            self.versions[base] = self.versions.get(base, 1) + 1
            node_id = f"{base}@{self.versions[base]}"
            expr = self.expr(s.value, scope)  # reads the old version
            owner.bindings[s.name] = node_id
            if expr is not None:
                self.add_node(ir.Node(kind_=role, id=node_id, name=s.name, expr=expr,
                                      # one template per `update` statement of the body
                                      hop=self.hop_of(scope, f"{s.name}@{nth}"),
                                      loc=self.loc(s.pos)), s.pos)
            return
        node_id = self.bind(scope, s.name, s.pos, s.role)
        if node_id is None:
            return
        if s.role == "affinity":
            if not (isinstance(s.value, ast.Call) and s.value.fn == "affinity"):
                self.err(s.value.pos, "an affinity matrix is `affinity(A, B, form = bilinear, act = tanh)`",
                         "eq. 12 (bilinear) or eq. 13 (trilinear)")
                return
        expr = self.call(s.value, scope, top=True) if s.role == "affinity" else \
            self.expr(s.value, scope)
        if expr is None:
            return
        self.add_node(ir.Node(kind_=s.role, id=node_id, name=s.name, expr=expr,
                              hop=self.hop_of(scope, s.name), loc=self.loc(s.pos)), s.pos)

    def hop_of(self, scope: Scope, name: str) -> ir.Hop | None:
        if scope.hop is None:
            return None
        return scope.hop.model_copy(update={"template": scope.hop.template + "." + name})

    def repeat(self, s: ast.Repeat, scope: Scope) -> None:
        if not self.check_ident(s.name, s.pos, "repeat"):
            return
        if s.name in scope.bindings or s.name in scope.blocks:
            self.err(s.pos, f"`{s.name}` is already defined in this model")
            return
        if isinstance(s.count, ast.Ref) and s.count.name == "shared":
            self.err(s.count.pos, "expected a hop count after the repeat name, e.g. "
                     "`repeat encoder 6 { … }`; found `shared`",
                     "`repeat NAME COUNT [shared] { … }`")
            return
        count = self.as_int(s.count, scope, "the hop count", 1, MAX_HOPS)
        if count is None:
            return
        shared = s.shared is not None
        if shared and str(s.shared) != "shared":
            self.err(ast.Pos(s.shared.line, s.shared.column), f"expected `shared` or `{{` after "
                     f"the hop count, found `{s.shared}`",
                     "`repeat NAME COUNT shared { … }` shares weights across hops")
            return
        block = scope.prefix + s.name
        template = block if scope.hop is None else scope.hop.template + "." + s.name
        hops: list[dict[str, str]] = []
        scope.blocks[s.name] = hops
        for i in range(1, count + 1):
            inner = Scope(f"{block}[{i}].", scope,
                          hop=ir.Hop(block=block, index=i, count=count, shared=shared,
                                     count_sym=self.sym(s.count, scope),
                                     outer=scope.hop.outer + (scope.hop.index,) if scope.hop else (),
                                     template=template))
            before = len(self.c.diagnostics)
            self.body(s.body, inner)
            hops.append({**{k: ("node", v) for k, v in inner.bindings.items()},
                         **{k: ("block", v) for k, v in inner.blocks.items()}})
            if len(self.c.diagnostics) > before:
                return  # report each mistake once, not once per hop

    # ---- expressions -------------------------------------------------------------

    def resolve(self, r: ast.Ref, scope: Scope, what: str = "feature") -> str | None:
        """``x``, ``encoder.self`` (the last hop), ``encoder[2].self`` -> a node id."""
        indexes = r.indexes or (None,) * len(r.parts)
        found = scope.lookup(r.parts[0])
        if found is None:
            known = sorted(self._visible(scope) - {self.defining})
            self.err(r.pos, f"unknown name `{r.parts[0]}`",
                     suggest(r.parts[0], known) if known else "define it before using it")
            return None
        for i, (part, index) in enumerate(zip(r.parts, indexes)):
            if index is not None or i + 1 < len(r.parts):
                if found[0] != "block":
                    self.err(r.part_pos[i], f"`{part}` is not a `repeat` block, so "
                             + ("its hops cannot be numbered" if index is not None
                                else f"`.{r.parts[i + 1]}` cannot be looked up in it"))
                    return None
                hops = found[1]
                if not hops:  # read inside its own body: no hop is complete yet
                    self.err(r.part_pos[i], f"`{part}` is read inside its own body",
                             f"inside `repeat {part}`, name its statements without "
                             f"`{part}.` (they are this hop's)")
                    return None
                if index is not None and not 1 <= index <= len(hops):
                    self.err(r.part_pos[i], f"`{part}` has hops 1 to {len(hops)}; there is "
                             f"no hop {index}" if index > 0 else "hops are numbered from 1")
                    return None
                hop = hops[index - 1] if index is not None else hops[-1]
            if i + 1 == len(r.parts):
                break
            name = r.parts[i + 1]
            if name not in hop:
                self.err(r.part_pos[i + 1], f"`{part}` has no `{name}`", suggest(name, sorted(hop)))
                return None
            found = hop[name]
        if found[0] == "const":
            self.err(r.pos, f"`{r.name}` is a constant, not {article(what)} {what}")
            return None
        if found[0] == "block":
            self.err(r.pos, f"`{r.name}` is a `repeat` block; name a node inside it, "
                     f"e.g. `{r.name}.NAME`")
            return None
        return found[1]

    def _visible(self, scope: Scope) -> set[str]:
        out: set[str] = set()
        s: Scope | None = scope
        while s is not None:
            out |= set(s.bindings) | set(s.declared) | set(s.consts) | set(s.blocks)
            s = s.parent
        return out

    def weights_ref(self, e: ast.Ref, scope: Scope) -> ast.Ref | None:
        """``att.weights`` (or ``block.att.weights``): the reference to the node whose
        attention weights are read, when the name before ``.weights`` is a node and not a
        ``repeat`` block (a block may hold a statement called ``weights``)."""
        if len(e.parts) < 2 or e.parts[-1] != "weights" or (
                e.indexes and e.indexes[-1] is not None):
            return None
        found = scope.lookup(e.parts[0])
        indexes = e.indexes or (None,) * len(e.parts)
        for part, index in zip(e.parts[1:-1], indexes[:-2]):
            if found is None or found[0] != "block":
                return None
            hops = found[1]
            hop = hops[index - 1] if index is not None and 1 <= index <= len(hops) else \
                hops[-1] if index is None else None
            if hop is None or part not in hop:
                return None
            found = hop[part]
        if found is None or found[0] != "node" or indexes[-2] is not None:
            return None
        return ast.Ref(e.pos, e.parts[:-1], e.part_pos[:-1], tuple(indexes[:-1]))

    def expr(self, e: ast.Expr, scope: Scope) -> ir.Expr | None:
        loc = self.loc(e.pos)
        if isinstance(e, ast.Ref) and (w := self.weights_ref(e, scope)) is not None:
            # `att.weights`: the module's attention weights as a feature (checks.py)
            node_id = self.resolve(w, scope)
            if node_id is None:
                return None
            return ir.Op(fn="weights", args=(ir.Ref(node=node_id, loc=loc),), loc=loc)
        if isinstance(e, ast.Ref):
            node_id = self.resolve(e, scope)
            if node_id is None:
                return None
            if self.roles.get(node_id) == "affinity":
                self.err(e.pos, f"`{e.name}` is an affinity matrix; use it in an attention "
                         "module's `affinity` field")
                return None
            return ir.Ref(node=node_id, loc=loc)
        if isinstance(e, ast.BinOp):
            if e.op == "/":
                self.err(e.pos, "features cannot be divided",
                         "`a + b`, `a - b` and `a * b` (element-wise, e.g. a gate "
                         "`sigmoid(linear(h, 1)) * c`) combine features; `/` is for constants")
                return None
            if e.op == "-" and self.is_const(e.left, scope):  # c - x, e.g. 1 - g
                c, x = self.const(e.left, scope), self.expr(e.right, scope)
                if c is None or x is None:
                    return None
                if isinstance(c, (bool, str)):
                    self.err(e.left.pos, f"`{e.op}` needs a number or a feature on the left")
                    return None
                return ir.Op(fn="rsub", args=(x,), params=(("c", float(c)),), loc=loc)
            for side in (e.left, e.right):
                if self.is_const(side, scope):
                    self.err(side.pos, f"`{e.op}` combines two features here; this side is a "
                             "number", "scale a feature with `scale(x)` (learned) or a layer; "
                             "`c - x` (e.g. `1 - g`) is the one form with a number")
                    return None
            a, b = self.expr(e.left, scope), self.expr(e.right, scope)
            if a is None or b is None:
                return None
            fn = {"+": "add", "-": "sub", "*": "mul"}[e.op]
            return ir.Op(fn=fn, args=(a, b), loc=loc)
        if isinstance(e, ast.Call):
            return self.call(e, scope)
        if isinstance(e, (ast.Number, ast.Neg)):
            self.err(e.pos, "expected a feature, found a number",
                     "numbers are parameters of feature models, e.g. `linear(x, 64)`")
            return None
        self.err(e.pos, "expected a feature, found a string")
        return None

    def is_const(self, e: ast.Expr, scope: Scope) -> bool:
        """Whether ``e`` is constant arithmetic (a number or a `let`), not a feature."""
        if isinstance(e, (ast.Number, ast.Neg)):
            return True
        if isinstance(e, ast.BinOp):
            return self.is_const(e.left, scope) and self.is_const(e.right, scope)
        if isinstance(e, ast.Ref) and len(e.parts) == 1 and not any(
                i is not None for i in e.indexes):
            found = scope.lookup(e.name) if scope else None
            if found is None and e.name in self.consts:
                return True
            return found is not None and found[0] == "const"
        return False

    def call(self, e: ast.Call, scope: Scope, top: bool = False) -> ir.Expr | None:
        sig = OPS.get(e.fn)
        if sig is None:
            self.err(e.pos, f"unknown feature model `{e.fn}`", suggest(e.fn, OPS))
            return None
        if e.fn == "affinity" and not top:  # only `affinity NAME = affinity(…)` makes one
            self.err(e.pos, "`affinity(…)` is not a feature: declare the matrix with "
                     f"`affinity {self.defining if self.defining_feature else 'NAME'} = affinity(…)` "
                     "and name it in an attention module's `affinity` field")
            return None
        args: list[ir.Expr] = []
        params: dict[str, ir.Scalar] = {}
        syms: dict[str, str] = {}
        ok = True
        positional = list(e.args)
        for p in sig:
            if p.name in NAMED:
                continue  # a keyword naming a node (`feed`, `init`, `share`, `tie`): below
            if p.type == "nodes":
                if not positional:
                    self.err(e.pos, f"`{e.fn}` needs at least one feature")
                    return None
                for a in positional:
                    x = self.expr(a, scope)
                    ok &= x is not None
                    if x is not None:
                        args.append(x)
                positional = []
                continue
            kw = None
            if positional:
                a = positional.pop(0)
            else:
                kw = next((k for k in e.kwargs if k.name == p.name), None)
                if kw is None:
                    if p.required:
                        self.err(e.pos, f"`{e.fn}` is missing `{p.name}`",
                                 f"write `{e.fn}({', '.join(q.name for q in sig if q.required)})`")
                        ok = False
                    elif p.default is not None and p.type != "node":
                        params[p.name] = p.default
                    continue
                a = kw.value
            if p.type == "node":
                x = self.expr(a, scope)
                ok &= x is not None
                if x is not None:
                    args.append(x)
            else:
                v = self.as_param(p, a, scope, f"`{p.name}` of `{e.fn}`")
                ok &= v is not None
                if v is not None:
                    params[p.name] = v
                    if p.type in ("int", "prob") and (t := self.sym(a, scope)):
                        syms[p.name] = t
        if positional:
            named = [p.name for p in sig if p.name in NAMED]
            self.err(positional[0].pos, f"`{e.fn}` takes "
                     f"{sum(p.type != 'nodes' and p.name not in NAMED for p in sig)} argument(s); "
                     "this one is extra", (f"{', '.join(f'`{q}`' for q in named)} "
                                           f"{'is' if len(named) == 1 else 'are'} given by "
                                           f"name, e.g. `{named[0]} = NODE`") if named else "")
            ok = False
        names = {p.name for p in sig}
        seen: set[str] = set()
        for k in e.kwargs:
            if k.name not in names:
                self.err(k.pos, f"`{e.fn}` has no parameter `{k.name}`", suggest(k.name, names))
                ok = False
            elif k.name in seen:
                self.err(k.pos, f"`{k.name}` is given twice")
                ok = False
            seen.add(k.name)
        for k in e.kwargs:
            if k.name not in NAMED or k.name not in names:
                continue
            if not isinstance(k.value, ast.Ref):
                self.err(k.value.pos, NAMED_HINT[k.name][0], NAMED_HINT[k.name][1])
                return None
            fid = self.resolve(k.value, scope)
            if fid is None:
                return None
            params[k.name] = fid
        if e.fn == "prev" and args and not isinstance(args[0], ir.Ref):
            self.err(e.args[0].pos, "`prev` takes a name: the node of the decoder step whose "
                     "value at the previous step it reads", "e.g. `query = prev(s)` (s_(t-1))")
            return None
        if not ok:
            return None
        if params.get("dropout") and params.get("layers", 1) == 1:
            kw = next(k for k in e.kwargs if k.name == "dropout")
            self.err(kw.pos, f"`dropout` of `{e.fn}` zeroes features between stacked layers, "
                     "but this one has one layer", f"set `layers = N` (N > 1), or write "
                     f"`dropout({e.fn}(…), p)` for dropout on its outputs")
            return None
        return ir.Op(fn=e.fn, args=tuple(args), params=tuple(sorted(params.items())),
                     sym=tuple(sorted(syms.items())), loc=self.loc(e.pos))

    # ---- attention modules ----------------------------------------------------------

    def attention(self, s: ast.Attention, scope: Scope) -> None:
        self.defining, self.defining_feature = s.name, False
        node_id = self.bind(scope, s.name, s.pos, "attention")
        if node_id is None:
            return
        f: dict[str, ast.Field] = {}
        for fld in s.fields:
            if fld.name not in ATTENTION_FIELDS:
                self.err(fld.pos, f"unknown attention field `{fld.name}`",
                         suggest(fld.name, ATTENTION_FIELDS))
            elif fld.name in f:
                self.err(fld.pos, f"field `{fld.name}` is given twice")
            else:
                f[fld.name] = fld
        before = len(self.c.diagnostics)
        if "features" in f and ("keys" in f or "values" in f):
            other = f.get("keys") or f["values"]
            self.err(other.pos, f"`{other.name}` conflicts with `features`",
                     "`features = F` sets both keys and values; give either it or `keys`/`values`")
        keys_f = f.get("keys") or f.get("features")
        if keys_f is None:
            self.err(s.pos, f"attention `{s.name}` has no keys",
                     "say what it attends over: `features = F`, or `keys = …` and `values = …`")
            return
        keys = self.expr(keys_f.value, scope)
        values_f = f.get("values") or f.get("features")
        values = self.expr(values_f.value, scope) if values_f and values_f is not keys_f else keys
        query = self.expr(f["query"].value, scope) if "query" in f else None
        score = self.score(f.get("score"), s)
        align = self.align(f.get("align"), s)
        dims = "single"
        if "dimensionality" in f:
            dims = self.as_param(P("dimensionality", "enum", choices=("single", "multi")),
                                 f["dimensionality"].value, scope, "`dimensionality`") or "single"
        heads = self.as_int(f["heads"].value, scope, "`heads`", 1, 1024) if "heads" in f else 1
        capsules = (self.as_int(f["capsules"].value, scope, "`capsules`", 2, 1024)
                    if "capsules" in f else 0)
        mask, mask_input = "none", None
        if "mask" in f:
            mask, mask_input = self.mask_field(f["mask"].value, scope)
        self_loops = False
        if "self_loops" in f:
            self_loops = bool(self.as_param(P("self_loops", "bool"), f["self_loops"].value,
                                            scope, "`self_loops`"))
        penalty = doubly = cov_loss = disagree = supervised = None
        if "penalty" in f:
            v = f["penalty"].value
            if isinstance(v, ast.Call) and v.fn == "supervised":
                supervised = self.supervised(v, scope)
            elif isinstance(v, ast.Call) and v.fn == "doubly_stochastic":
                # Xu et al. eq. 14: lambda sum_i (1 - sum_t a_ti)^2
                if v.kwargs or len(v.args) > 1:
                    self.err(v.pos, "`doubly_stochastic` takes one argument, its coefficient "
                             "lambda", "e.g. `penalty = doubly_stochastic(1.0)`")
                else:
                    doubly = (self.as_param(P("lambda", "float"), v.args[0], scope,
                                            "`lambda` of `doubly_stochastic`")
                              if v.args else 1.0)
            elif isinstance(v, ast.Call) and v.fn == "coverage":
                cov_loss = self.coverage_penalty(v, scope)
            elif isinstance(v, ast.Call) and v.fn == "disagreement":
                disagree = self.disagreement_penalty(v, scope)
            else:
                penalty = self.as_param(P("penalty", "float"), v, scope, "`penalty`")
        coverage = (bool(self.as_param(P("coverage", "bool"), f["coverage"].value, scope,
                                       "`coverage`")) if "coverage" in f else False)
        heads_out = (self.as_param(HEADS_OUT, f["heads_out"].value, scope, "`heads_out`")
                     if "heads_out" in f else "project")
        if "heads_out" in f and heads == 1:
            self.err(f["heads_out"].pos, "`heads_out` joins the contexts of several heads, "
                     f"but attention `{s.name}` has one", "set `heads = H`, or drop `heads_out`")
        dropout = (self.as_param(P("dropout", "prob"), f["dropout"].value, scope, "`dropout`")
                   if "dropout" in f else None)
        syms = {k: t for k in ("heads", "capsules", "dropout") if k in f
                and (t := self.sym(f[k].value, scope))}
        share = None
        if "share" in f:
            v = f["share"].value
            if not isinstance(v, ast.Ref):
                self.err(v.pos, "`share` names another attention module whose weights this "
                         "one uses")
            else:
                share = self.resolve(v, scope)
        affinity = None
        if "affinity" in f:
            v = f["affinity"].value
            if not isinstance(v, ast.Ref):
                self.err(v.pos, "`affinity` names an affinity matrix declared with "
                         "`affinity NAME = affinity(A, B, …)`")
            else:
                affinity = self.resolve(v, scope)
                if affinity is not None and self.roles.get(affinity) not in (None, "affinity"):
                    self.err(v.pos, f"`{v.name}` is not an affinity matrix")
                    affinity = None
                elif affinity is not None and affinity not in self.ids:
                    self.err(v.pos, f"affinity matrix `{v.name}` must be declared before it is used")
                    affinity = None
        position = self.modifier(f.get("position"), POSITIONS, "position term")
        bf = f.get("bias")  # `bias = true | false`: graph attention's output bias
        on = bf.value.name if bf and isinstance(bf.value, ast.Ref) else None
        out_bias = on == "true" if on in ("true", "false") else None
        bias = self.modifier(bf if out_bias is None else None, BIASES, "score bias")
        if len(self.c.diagnostics) > before or keys is None or values is None or score is None \
                or align is None or heads is None or capsules is None:
            return
        self.add_node(ir.Attention(
            id=node_id, name=s.name, query=query, keys=keys, values=values, affinity=affinity,
            score=score, align=align, dimensionality=dims, heads=heads,
            heads_out=heads_out or "project", capsules=capsules,
            mask=mask or "none", mask_input=mask_input, self_loops=self_loops,
            penalty=penalty, doubly_stochastic=doubly, dropout=dropout,
            coverage=coverage, coverage_loss=cov_loss, disagreement=disagree, share=share,
            position=position, bias=bias, supervised=supervised, hop=self.hop_of(scope, s.name),
            sym=tuple(sorted(syms.items())), loc=self.loc(s.pos), out_bias=out_bias), s.pos)

    def coverage_penalty(self, v: ast.Call, scope: Scope) -> float | None:
        """``penalty = coverage(lambda)``: See et al.'s lambda sum_t sum_i min(a_i^t, c_i^t)
        (eq. 12-13); the coefficient, 1 when not given."""
        if v.kwargs or len(v.args) > 1:
            self.err(v.pos, "`coverage` takes one argument, its coefficient lambda "
                     "(See et al. eq. 13)", "e.g. `penalty = coverage(1.0)`")
            return None
        return (self.as_param(P("lambda", "float"), v.args[0], scope, "`lambda` of `coverage`")
                if v.args else 1.0)

    def disagreement_penalty(self, v: ast.Call, scope: Scope) -> ir.Disagreement | None:
        """``penalty = disagreement(lambda, on = subspace | position | output)``: Li et al.'s
        -lambda D (2018, eq. 5-7)."""
        on_p = P("on", "enum", False, "subspace", ("subspace", "position", "output"))
        extra = [k for k in v.kwargs if k.name != "on"]
        if len(v.args) > 1 or extra:
            self.err(extra[0].pos if extra else v.args[1].pos, "`disagreement` takes its "
                     "coefficient lambda and `on = subspace | position | output` (Li et al. "
                     "eq. 5-7)", "e.g. `penalty = disagreement(1.0, on = output)`")
            return None
        on = next((k for k in v.kwargs if k.name == "on"), None)
        if on is None:
            self.err(v.pos, "`disagreement` needs `on = subspace | position | output`: the "
                     "heads' values (eq. 5), weights (eq. 6) or outputs (eq. 7)",
                     "e.g. `penalty = disagreement(1.0, on = output)`")
            return None
        lam = (self.as_param(P("lambda", "float"), v.args[0], scope,
                             "`lambda` of `disagreement`") if v.args else 1.0)
        where = self.as_param(on_p, on.value, scope, "`on` of `disagreement`")
        if lam is None or where is None:
            return None
        return ir.Disagreement(lam=lam, on=where)

    def supervised(self, v: ast.Call, scope: Scope) -> ir.Supervision | None:
        """``supervised(gold, lambda, loss = squared | cross_entropy)``: supervised
        attention (Liu et al. 2016, Mi et al. 2016); ``gold`` is checked in checks.py."""
        usage = "e.g. `penalty = supervised(gold, 1.0, loss = cross_entropy)`"
        if not v.args or len(v.args) > 2 or not isinstance(v.args[0], ast.Ref):
            self.err(v.pos, "`supervised` takes the target alignment input and the "
                     "coefficient lambda", usage)
            return None
        lam = (self.as_param(P("lambda", "float"), v.args[1], scope, "`lambda` of `supervised`")
               if len(v.args) > 1 else 1.0)
        loss = "squared"
        for k in v.kwargs:
            if k.name != "loss":
                self.err(k.pos, f"`supervised` has no parameter `{k.name}`", usage)
                return None
            loss = self.as_param(P("loss", "enum", choices=("squared", "cross_entropy")),
                                 k.value, scope, "`loss` of `supervised`")
        gold = self.resolve(v.args[0], scope, "input")
        if gold is None or lam is None or loss is None:
            return None
        return ir.Supervision(gold=gold, lam=float(lam), loss=loss, loc=self.loc(v.args[0].pos))

    def mask_field(self, e: ast.Expr, scope: Scope) -> tuple[str | None, str | None]:
        """``mask = causal``, ``mask = m`` (a mask or graph input), ``mask = causal * m``:
        the structural mask and the mask input (an error is recorded when neither fits)."""
        parts = [e.left, e.right] if isinstance(e, ast.BinOp) and e.op == "*" else [e]
        structural, data = None, None
        for x in parts:
            look = (scope.lookup(x.name) if isinstance(x, ast.Ref) and len(x.parts) == 1
                    else None)
            found = look[1] if look and look[0] == "node" else None
            node = next((n for n in self.nodes if n.id == found), None) if found else None
            if isinstance(node, ir.Input):
                kind = node.kind
                if kind not in MASK_KINDS or data is not None:
                    self.err(x.pos, f"`{x.name}` is {article(kind)} {kind} input, not a mask"
                             if kind not in MASK_KINDS else "`mask` combines one mask input "
                             "at most", "declare `input m: mask[T, S]` (a (B, T, S) bool "
                             "mask) or `input adj: graph[N]`, and write `mask = m`")
                    return None, None
                data = found
            elif isinstance(x, ast.Ref) and len(x.parts) == 1 and x.name in MASKS.choices \
                    and structural is None and (len(parts) == 1 or x.name != "none"):
                structural = x.name
            else:
                got = x.name if isinstance(x, ast.Ref) else "this"
                self.err(x.pos, f"`mask` cannot be `{got}`",
                         "a structural mask (`causal`, `forward`, `backward`), a mask or graph "
                         "input declared above, or both: `mask = causal * m`")
                return None, None
        return structural or "none", data

    def _mechanism(self, fld: ast.Field | None, table: dict, what: str):
        if fld is None:
            return None, {}
        e = fld.value
        if isinstance(e, ast.Ref) and len(e.parts) == 1:
            name, kwargs, pos_args = e.name, (), ()
        elif isinstance(e, ast.Call):
            name, kwargs, pos_args = e.fn, e.kwargs, e.args
        else:
            self.err(e.pos, f"expected {article(what)} {what} function", suggest("", table))
            return False, {}
        if name not in table:
            self.err(e.pos, f"unknown {what} function `{name}`", suggest(name, table))
            return False, {}
        sig = table[name]
        params: dict[str, ir.Scalar] = {}
        syms: dict[str, str] = {}
        self.mech_syms = syms
        for i, a in enumerate(pos_args):
            if i >= len(sig):
                self.err(a.pos, f"`{name}` takes {len(sig)} argument(s)")
                return False, {}
            v = self.as_param(sig[i], a, None, f"`{sig[i].name}` of `{name}`")
            if v is None:
                return False, {}
            params[sig[i].name] = v
            if sig[i].type == "int" and (t := self.sym(a, None)):
                syms[sig[i].name] = t
        names = {p.name: p for p in sig}
        for k in kwargs:
            if k.name not in names:
                self.err(k.pos, f"`{name}` has no parameter `{k.name}`",
                         suggest(k.name, names) if names else f"`{name}` takes no parameters")
                return False, {}
            v = self.as_param(names[k.name], k.value, None, f"`{k.name}` of `{name}`")
            if v is None:
                return False, {}
            params[k.name] = v
            if names[k.name].type == "int" and (t := self.sym(k.value, None)):
                syms[k.name] = t
        for p in sig:
            if p.name not in params:
                if p.required:
                    self.err(e.pos, f"`{name}` needs `{p.name}`",
                             f"e.g. `{name}({p.name} = 10)`")
                    return False, {}
                if p.default is not None:
                    params[p.name] = p.default
        return name, params

    def score(self, fld: ast.Field | None, s: ast.Attention) -> ir.Score | None:
        if fld is None:
            self.err(s.pos, f"attention `{s.name}` has no score function",
                     "add e.g. `score = additive(d_w = 256)` or `score = scaled_multiplicative` "
                     "(Table II)")
            return None
        name, p = self._mechanism(fld, SCORES, "score")
        if not name:
            return None
        name = alias("score", name)  # dot, scaled_dot: the IR's one spelling
        return ir.Score(fn=name, d_w=p.get("d_w"), act=p.get("act"), bias=p.get("bias", True),
                        similarity=p.get("kind"), sym=tuple(sorted(self.mech_syms.items())),
                        loc=self.loc(fld.value.pos))

    def modifier(self, fld: ast.Field | None, table: dict, what: str) -> ir.Modifier | None:
        """``position = relative(k = 16, values = true)`` / ``rotary``, ``bias = alibi`` /
        ``gaussian``: a score modifier (an error is recorded when it does not lower)."""
        if fld is None:
            return None
        name, p = self._mechanism(fld, table, what)
        if not name:
            return None
        return ir.Modifier(fn=name, clip=p.get("k"), values=bool(p.get("values", False)),
                           base=float(p.get("base", 10000.0)),
                           sym=tuple(sorted(self.mech_syms.items())),
                           loc=self.loc(fld.value.pos))

    def align(self, fld: ast.Field | None, s: ast.Attention) -> ir.Align | None:
        if fld is None:
            return ir.Align(fn="global", loc=self.loc(s.pos))
        name, p = self._mechanism(fld, ALIGNS, "alignment")
        if not name:
            return None
        if name == "soft":  # the same function as global (eq. 25)
            name = "global"
        return ir.Align(fn=name, window=p.get("D"), position=p.get("position"),
                        gaussian=bool(p.get("gaussian", False)), sigma=p.get("sigma"),
                        sym=tuple(sorted(self.mech_syms.items())), loc=self.loc(fld.value.pos))


class _TooBig(Exception):
    """Unrolling reached MAX_NODES: stop lowering this model (the error is recorded)."""


def _show(v: ir.Scalar) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'the string "{v}"'
    return str(v)


def lower(module: ast.Module, file: str, source: str | None = None) -> ir.Spec:
    return Lowerer(module, file, source).run()
