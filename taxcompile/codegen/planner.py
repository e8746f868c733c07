"""Stage 7a: a checked model -> its ``FilePlan``.

The planner walks the model's nodes once, in dependency order. Feature models are planned
by their operator's plan rule (``ops.OPS[fn].plan``: ``features.py`` for the core
operators, each family's own module in ``taxcompile/operators/``, which gets ``kit`` as
``self.kit``),
attention statements by ``attention.py``, ``repeat`` bodies by ``repeat.py``, decoder
loops by ``decoder.py``; ``config.py`` picks the Config and ``model.py`` the rest of the
file."""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import networkx as nx

from .. import checks, graph, ir, ops, reserved
from . import (attention, decoder, features, generate, kit, model, positions,  # noqa: F401
               repeat, ties, values)
from .expr import Expr
from .imports import recording
from .frame import MASKABLE, Frame, Owner, Step, Var, constructor
from .names import MODULE_ATTRS, RESERVED, Dim, Names, dim_of, ident, is_name, sym_names
from .plan import FilePlan



class Planner:
    """Model-level state shared by the planning stages; the function being planned is
    ``self.frame``. Every field is declared here: what the file defines (``helpers``,
    ``classes``, ``blocks``), what Config needs (``used_cfg``, ``equal``, ``divides``,
    ``axis_fields``, ``need_max_len``, ``max_len_axes``), where planning stands (``frame``,
    ``step`` inside a decoder loop, ``gen`` for generate(), ``emitted``)."""

    kit = kit  # what an operator family's plan rule writes code with (codegen/kit.py)

    def __init__(self, cs: checks.CheckedSpec, cm: checks.CheckedModel, source: str):
        self.cs, self.cm, self.m = cs, cm, cm.model
        self.source = source
        self.g = graph.dataflow(graph.of(cm))  # the model graph (built once), without feed edges
        # what the file defines
        self.helpers: set[str] = set()
        self.classes: dict[str, object] = {}  # attention class name -> its plan
        self.class_key: dict[tuple, str] = {}  # mechanism combination -> its class's name
        self.blocks: list = []  # ModuleClass plans of repeat bodies, innermost first
        self.block_names = Names(set(reserved.module_names()))  # the file's own classes
        self.reserved = RESERVED | {i.id for i in self.m.inputs} | \
            {i.id + "_mask" for i in self.m.inputs} | {"i", "j", "k", "l"}
        # what the Config needs
        self.used_cfg: set[str] = set()
        self.equal: list[tuple[Dim, Dim]] = []  # sizes the code needs equal (Config.tiny())
        self.divides: list[tuple[Dim, Dim | int]] = []  # (size, k): k must divide the size
        self.axis_fields: dict[str, int] = {}  # fixed axes that are Config fields -> size
        self.need_max_len = False
        self.max_len_axes: set[str] = set()  # axes read by a learned position table
        # the model's structure (run() sets them before planning)
        self.shared: dict[str, bool] = {}  # repeat path -> its hops share weights
        self.loops: dict[str, tuple] = {}  # decoder node -> (node, its fed op, fed node)
        self.returned: set[str] = set()  # what forward() returns
        self.read_outside: set[str] = set()  # what an enclosing repeat's Block returns
        # where planning stands
        self.op_counts: dict[tuple[str, str], int] = {}  # (statement, op kind) -> ops so far
        self.step: Step | None = None  # inside a decoder loop
        self.finals: dict[str, str] = {}  # RNN node -> its final states (a decoder's `init`)
        self.emitted: set[str] = set()
        self.same_module: dict[str, object] = {}  # attention id -> the module it is (share =)
        self.gen: generate.Decoding | None = None  # generate(): see generate.setup
        self.frame = Frame(Owner("Model"), self.reserved)
        self.prev_seqs: dict[str, Var] = {}  # x -> prev(x) at every step, after its loop
        self.tie_ops: dict[int, ir.Op] = {}
        self.input_ties: dict[str, Expr] = {}  # input -> the axis length its features are
        self.ties = ties.literal_ties(self)  # sizes written as an axis's Config field

    # ---- symbols ------------------------------------------------------------------

    def p(self, op: ir.Op, name: str) -> Dim:
        if (id(op), name) in self.ties:
            return Dim(0, (self.ties[id(op), name],))
        sym = dict(op.sym).get(name)
        if sym:
            self.use_sym(sym)
        return dim_of(op.param(name), sym)

    def use_sym(self, sym: str) -> None:
        self.used_cfg.update(sym_names(sym))

    def sym(self, obj, key: str, value, owner: str = "cfg") -> str:
        """A value the spec may give as a Config expression, as code over ``owner``'s
        fields (``cfg.vocab``; ``self.cfg.vocab`` in a method of Model), else its literal."""
        if key == "dim" and isinstance(obj, ir.Input) and obj.id in self.input_ties:
            return self.input_ties[obj.id].render(owner)  # tied to an axis length (ties.py)
        s = dict(getattr(obj, "sym", ())).get(key)
        if s:
            self.use_sym(s)
            return dim_of(value, s).render(owner)
        return repr(value)

    # ---- modules and locals ----------------------------------------------------------

    def share_key(self, n) -> tuple:
        """Nodes that use the same weights get the same key: a node, or in a shared repeat
        written out hop by hop, its statement (eq. 41-42)."""
        h = getattr(n, "hop", None)
        if h is None:
            return (n.id,)
        levels = h.template.split(".")[:-1]
        idx = list(h.outer) + [h.index]
        key = []
        for depth, i in enumerate(idx):
            path = ".".join(levels[: depth + 1])
            key.append("*" if self.shared.get(path) else i)
        return (h.template, tuple(key[self.frame.depth:]))

    def module(self, n, suffix: str, ctor: "str | Callable[[], str]", comment: str = "") -> str:
        """Register (once per sharing key) a submodule of the class being planned. A ctor
        that renders sizes comes as a function, rendered here: its reads are __init__'s
        (``cfg``, its parameter), not forward()'s (``Frame.reads``)."""
        ctor = constructor(ctor)
        n = self.same_module.get(getattr(n, "id", ""), n)  # `share = OTHER`: OTHER's modules
        owner = self.frame.owner
        key = self.share_key(n) + (suffix,)
        if key not in owner.by_key:
            want = self.attr_name(n) + ("_" + suffix if suffix else "")
            if want in MODULE_ATTRS:  # an attention module called `self`
                want += "_attn"
            owner.by_key[key] = owner.add(want, ctor, comment)
        return owner.by_key[key]

    def attr_name(self, n) -> str:
        """A submodule's name: its statement, relative to the block that owns it."""
        h = getattr(n, "hop", None)
        if h is None:
            return ident(n.id)
        parts = h.template.split(".")
        segs = repeat.segments(n)
        if all(i == "*" for i in self.share_key(n)[1]) or len(segs) <= self.frame.depth:
            return ident("_".join(parts[self.frame.depth:]))
        # a hop written out inside this class: its hop numbers keep it apart
        return ident(re.sub(r"^(\w+\[\d+\]\.){%d}" % self.frame.depth, "", n.id))

    def tmp(self, code: str, want: str, comment: str = "") -> str:
        name = self.frame.locals.new(want)
        self.frame.emit(f"{name} = {code}", comment, (name,))
        return name

    def named(self, x: Var, want: str) -> Var:
        """x, bound to a local name unless it already is one (so it is computed once)."""
        if is_name(x.name):
            return x
        name = self.tmp(x.name, want, self.shape(x.shape, step=self.step is not None, dim=x.dim))
        return Var(name, x.shape, x.mask, x.dim, x.mask_code)

    @staticmethod
    def role(n, e: ir.Op | None) -> str:
        """Which input of attention statement ``n`` op ``e`` computes: "k", "v" or "q" (the
        key, value and query models' modules are named after it), else ""."""
        if e is None or not isinstance(n, ir.Attention):
            return ""
        for role, x in (("k", n.keys), ("v", n.values), ("q", n.query)):
            if any(op is e for op in checks.operations(x)):
                return role
        return ""

    def suffix(self, n, base: str, e: ir.Op | None = None) -> str:
        """Distinct suffixes for several ops of one kind inside one statement; the modules of
        an attention's key/value/query models start with the role (``q_proj``)."""
        role = self.role(n, e)
        if role and base != role:
            base = f"{role}_{base}"
        count = self.op_counts.setdefault((n.id, base), 0)
        self.op_counts[(n.id, base)] = count + 1
        return base if count == 0 else f"{base}{count + 1}"

    @staticmethod
    def embed_suffix(n, e: ir.Op) -> str:
        """``embed``, ``embed2`` … by the op's place among the statement's embeddings: one
        table per op, the same name wherever the op is planned (``tie = x`` plans x's again)."""
        exprs = [getattr(n, f, None) for f in ("expr", "query", "keys", "values")]
        found = [op for x in exprs if isinstance(x, (ir.Ref, ir.Op))
                 for op in checks.operations(x) if op.fn == "embed"]
        i = next((i for i, op in enumerate(found) if op is e), 0)
        return "embed" if i == 0 else f"embed{i + 1}"

    def size(self, obj, key: str, value: int) -> Dim:
        """``sym``'s size: a Config expression when the spec gives one, else the literal."""
        s = dict(getattr(obj, "sym", ())).get(key)
        if s:
            self.use_sym(s)
        return dim_of(value, s)

    def axis_size_code(self, axis: str) -> str:
        return str(model.axis_size(self, axis))

    def axis_size(self, axis: str) -> Dim:
        return model.axis_size(self, axis)

    # ---- shapes -------------------------------------------------------------------------

    def shape(self, s: checks.Shape, step: bool = False, dim: Dim | None = None) -> str:
        """A shape comment, symbolic in the Config's names: ``(B, S, d_model)``."""
        axes = ["B"] + [a if not step or a != self.step_axis() else "1" for a in s.axes]
        if dim is not None and (dim.terms or dim.const):
            axes.append(dim.shown())
        elif s.dim is not None:
            axes.append(str(s.dim))
        return "(" + ", ".join(axes) + ")"

    def step_axis(self) -> str | None:
        return self.step.axis if self.step else None

    # ---- expressions ----------------------------------------------------------------------

    def expr(self, e: ir.Expr, n) -> Var:
        if isinstance(e, ir.Ref):
            return self.ref(e.node)
        if (e.param("feed") or e.param("state")) and self.step is not None and \
                e is self.step.op:
            return decoder.feed_step(self, e, n)
        args = [] if e.fn in ("affinity", "prev") else [self.expr(a, n) for a in e.args]
        return ops.OPS[e.fn].plan(self, e, args, n)

    def ref(self, node_id: str) -> Var:
        v = self.frame.lookup(node_id)
        assert v is not None, f"`{node_id}` is read before it is planned"
        if self.step is not None and node_id not in self.step.region and \
                self.step.axis in v.shape.axes:
            i = 1 + v.shape.axes.index(self.step.axis)
            return Var(f"{v.name}.narrow({i}, t, 1)", v.shape, v.mask, v.dim)
        return v

    # ---- masks ------------------------------------------------------------------------------

    def mask_of(self, x: Var) -> tuple[str, str] | None:
        """The padding mask over x's positions: (the input's mask argument, what to apply to
        it), or None when x's positions are not an input's."""
        if x.mask_code is not None:
            self.frame.use(x.mask_code[0])
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
        if self.step is not None and self.step.axis in x.shape.axes:
            suffix += f".narrow({1 + x.shape.axes.index(self.step.axis)}, t, 1)"
        return self.frame.use(f"{inp.id}_mask"), suffix

    def mask_arg(self, x: Var, then: str = "", local: tuple[str, str] | None = None) -> str:
        """x's padding mask as an argument (``None`` when it has none), with ``then``
        applied; ``local``: (name, comment) of a local to bind a computed mask to."""
        mk = self.mask_of(x)
        if mk is None:
            return "None"
        name, suffix = mk
        if not suffix and not then:
            return name
        code = f"None if {name} is None else {name}{suffix}{then}"
        return self.tmp(code, *local) if local is not None else f"({code})"

    # ---- nodes ---------------------------------------------------------------------------------

    def want(self, n) -> str:
        """A local's name: the node's id, or inside a block its statement."""
        if getattr(n, "hop", None) is not None and self.frame.depth:
            want = ident(n.hop.template.split(".", self.frame.depth)[-1])
        else:
            want = ident(n.id)
        return want + "_attn" if want in RESERVED else want

    def reuse(self, n) -> str | None:
        """``update x = …`` assigns to the name of the version it replaces when nothing
        reads that version any more (so the code reads ``x = norm(x + c)``)."""
        mt = re.fullmatch(r"(.+)@(\d+)", n.id)
        if mt is None:
            return None
        base, k = mt.group(1), int(mt.group(2))
        prev = base if k == 2 else f"{base}@{k - 1}"
        v = self.frame.vars.get(prev)
        if v is None or not is_name(v.name) or prev not in self.g:
            return None
        if v.name in {i.id for i in self.m.inputs} or v.name in self.frame.free.values():
            return None  # inputs and parameters keep their names
        if all(r == n.id or r in self.emitted for r in self.g.successors(prev)):
            return v.name
        return None

    def key_code(self, n, kind: str = "") -> str:
        """The node id as a Python string, after ``kind`` (a constant such as "coverage:");
        in a block an f-string after its ``at`` prefix."""
        if self.frame.at is None:
            return repr(f"{kind}{n.id}")
        rel = re.sub(r"^(\w+\[\d+\]\.){%d}" % self.frame.depth, "", n.id)
        return f'f"{kind}{{at}}{rel}"'

    def node(self, n: ir.Node) -> None:
        shape = self.cm.shapes[n.id]
        v = self.expr(n.expr, n)
        where = f"{n.kind_} `{n.name}`" + (", updated (eq. 37)" if "@" in n.id else "")
        if self.step is None:
            name = self.reuse(n) or self.frame.locals.new(self.want(n))
            self.frame.emit(f"{name} = {v.name}", f"{self.shape(shape, dim=v.dim)}: {where}",
                            (name,))
        else:
            name = self.step.names.setdefault(n.id, self.frame.locals.new(self.want(n) + "_t"))
            self.frame.emit(f"{name} = {v.name}",
                            f"{self.shape(shape, step=True, dim=v.dim)}: {where}, one step")
        self.frame.vars[n.id] = Var(name, shape, v.mask if n.kind_ != "affinity" else None, v.dim,
                                    v.mask_code if n.kind_ != "affinity" else None)

    def emit_one(self, node_id: str) -> None:
        nd = self.m.node(node_id)
        if node_id in self.loops:
            n, op, att = self.loops[node_id]
            self.emitted.update(decoder.decoder_loop(self, n, op, att))
        elif node_id in self.emitted:
            return
        elif isinstance(nd, ir.Attention):
            attention.plan_attention(self, nd)
        else:
            self.node(nd)
        self.emitted.add(node_id)

    # ---- the whole file --------------------------------------------------------------------------

    def loops_last(self, ids: list[str]) -> list[str]:
        """``ids`` with every decoder loop (``feed =``) after what its region reads from
        outside: the loop plans the whole region at once, wherever the spec declares the
        decoder (e.g. `query h = lstm(…, feed = att)` above the features att reads)."""
        order = nx.DiGraph()
        order.add_nodes_from(ids)
        order.add_edges_from((a, b) for a, b in self.g.subgraph(ids).edges)
        extra = [(x, h) for h in self.loops if h in order
                 for r in repeat.region_of(self, h) if r in order
                 for x in self.g.predecessors(r)
                 if x in order and x not in repeat.region_of(self, h)]
        if not extra:
            return ids
        order.add_edges_from(extra)
        rank = {i: f"{k:06d}" for k, i in enumerate(ids)}
        return list(nx.lexicographical_topological_sort(order, key=rank.__getitem__))

    def run(self) -> FilePlan:
        """The file's plan; the module-level names its code writes are recorded as it is
        planned (``imports``: the file imports those)."""
        used: set[str] = set()
        with recording(used):
            plan = self._run()
        return dataclasses.replace(plan, modules=frozenset(used))

    def _run(self) -> FilePlan:
        m = self.m
        self.shared = repeat.shared_levels(m)
        self.loops = {n.id: (n, op, att) for n, op, att in decoder.feed_regions(m)}
        # features nothing reads (e.g. a last hop's query update): no code for them
        # (a repeat's nodes are always planned, so what they read is live too)
        sinks = [nd.id for nd in m.nodes if isinstance(nd, ir.Attention)
                 or (isinstance(nd, ir.Node) and (nd.kind_ == "output" or nd.hop is not None))]
        full = graph.of(self.cm)  # feed and prev edges too: a decoder step feeds what it reads
        live = set(sinks).union(*(nx.ancestors(full, x) for x in sinks if x in full))
        dead = {nd.id for nd in m.nodes if isinstance(nd, ir.Node) and nd.id not in live
                and nd.hop is None}
        for inp in m.inputs:
            self.frame.vars[inp.id] = Var(inp.id, checks.Shape(inp.axes, inp.dim),
                                          inp.id if inp.kind in MASKABLE else None,
                                          Dim(0, (self.input_ties[inp.id],))
                                          if inp.id in self.input_ties else
                                          dim_of(inp.dim, dict(inp.sym).get("dim")))
            if dict(inp.sym).get("dim"):
                self.use_sym(dict(inp.sym)["dim"])
        outputs = [n.id for n in m.nodes if isinstance(n, ir.Node) and n.kind_ == "output"]
        self.returned = set(outputs or [m.attentions[-1].id])  # what forward() returns
        self.read_outside = set()
        ids = [i for i in self.cm.order if i not in dead and not isinstance(m.node(i), ir.Input)]
        generate.setup(self)  # generate(): the source side first, then the target side
        with self.frame.reading():
            repeat.plan_scope(self, self.loops_last(ids), 0)
        return model.file_plan(self)
