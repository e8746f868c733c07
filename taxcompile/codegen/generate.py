"""Plan rules of ``generate()``: decoding for a model with an ``autoregressive`` input.

generate() runs the model one new token at a time through ``forward(..., cache=...)``:

* the source side (every node that does not read the autoregressive input: the encoder)
  is planned first and runs once; its values are kept in ``cache["@memory"]``;
* a target-side attention whose keys read the target (causal self-attention) appends this
  step's keys and values to those of the earlier steps (a KV cache, ``extend_cache``);
  one whose keys are the source's computes them once (``cache[<module>]``);
* Transformer-XL's term keeps its rows W_R R_r per distance in ``cache["@table:<module>"]``
  (a step projects its new distance only; keys from "@" are not reordered by beam search);
* a recurrent decoder loop (``feed =``) starts from the state the earlier steps left in
  ``cache[<decoder>]`` and stores its state after the new steps;
* positions on the target axis start at ``past`` (the tokens already decoded).

A model whose target side mixes positions in another way (a recurrent model over the target
without ``feed``, attention over the target without a causal mask, LSH attention, which
sorts the whole target's positions into chunks, or the Gaussian bias in the scores; not
relative, rotary, ALiBi or Transformer-XL's terms, which place
the step's query after the cached keys: ``counts_past``) gets a generate() that re-runs the
whole model on the prefix at every step (the same tokens, slower)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath

import networkx as nx

from .. import checks, graph, ir
from .. import mechanisms as mech
from . import recurrence
from .frame import MASKABLE, Var
from .names import is_name
from .plan import GeneratePlan, Stmt

# operators that mix the positions of their argument (or reduce its axes): on the target
# side they see later positions, so a step cannot run on the new token alone (a recurrence
# with `feed =` is a decoder loop, which carries its state instead)
MIXING = ("lstm", "gru", "bilstm", "bigru", "cnn", "mean", "max", "sum", "flatten", "resize",
          "conv2d", "maxpool", "upsample", "first", "backward", "stack", "affinity", "prepend")


@dataclass
class Decoding:
    """The planner's state for generate() (``setup``; ``Planner.gen``, None without one)."""

    input: ir.Input  # the autoregressive input (the target)
    axis: str  # its position axis
    side: set[str]  # the nodes that read it (the target side)
    incremental: bool  # a step runs on the new token alone (forward() takes a cache)
    memory: str | None = None  # the local holding the source side's values (incremental)
    prefix_end: int | None = None  # where the top level's source side ends in forward()'s body
    why: str = ""  # not incremental: the first thing that mixes the target's positions
    # locals of the source side read on the target side other than nodes' values (an
    # encoder's final states, W2 k + b projected once): ``source_read``
    reads: set[str] = field(default_factory=set)

    @property
    def target_side(self) -> set[str]:
        return self.side | {self.input.id}


def target(m: ir.Model) -> ir.Input | None:
    return next((i for i in m.inputs if i.kind == "tokens" and getattr(i, "autoregressive",
                                                                        False)), None)


def decoded(m: ir.Model, shapes: dict) -> ir.Node | None:
    """The output generate() decodes: next-token logits over the target's positions (shape
    (B, T, vocab): the target's axes, its vocabulary as feature size); the first declared
    where several are. None: nothing to decode (no generate())."""
    t = target(m)
    if t is None:
        return None
    return next((n for n in m.nodes if isinstance(n, ir.Node) and n.kind_ == "output" and
                 shapes[n.id].axes == tuple(t.axes) and shapes[n.id].dim == t.vocab), None)


def setup(p) -> None:
    """Called before planning: which nodes read the target, and whether a step can run on
    the new token alone (``incremental``)."""
    t = target(p.m)
    p.gen = None
    if decoded(p.m, p.cm.shapes) is None:
        return  # no output of next-token logits over the target: nothing to decode
    full = graph.of(p.cm)
    side = nx.descendants(full, t.id) if t.id in full else set()
    loops = set().union(*(p.cm.steps[x] for x in p.loops)) if p.loops else set()
    why = []  # what keeps a step from running on the new token alone, in the model's order
    tgt = side | {t.id}
    for nd in p.m.nodes:
        if nd.id not in side:
            continue
        if isinstance(nd, ir.Attention):
            why.extend(_attention_mixes(nd, tgt, loops))
            exprs = [e for e in (nd.query, nd.keys, nd.values) if e is not None]
        elif isinstance(nd, ir.Node):
            exprs = [nd.expr]
        else:
            continue
        stack = list(exprs)
        while stack:
            e = stack.pop()
            if isinstance(e, ir.Op):
                reads = {r for r, _ in checks.expr_links(e)} & tgt
                if e.fn in MIXING and reads and not (e.param("feed") and nd.id in loops):
                    why.append(f"`{e.fn}` in `{nd.id}` mixes the target's positions"
                               f"{_where(e.loc)}")
                stack.extend(e.args)
    incremental = not why
    p.helpers.add("decode")
    p.gen = Decoding(t, t.axes[-1], side, incremental, why=why[0] if why else "")
    if incremental:
        p.reserved.update(("cache", "past"))
        p.frame.locals.taken.update(("cache", "past"))
        p.gen.memory = p.frame.locals.new("memory")


def _where(loc) -> str:
    """Where the spec writes it, for generate()'s refusal: " (file.attn:line:col)" (the
    file's name alone: the same code whatever the folder it is compiled from)."""
    return f" ({PurePath(loc.file).name}:{loc.line}:{loc.column})"


def _attention_mixes(nd: ir.Attention, tgt: set, loops: set) -> list[str]:
    """Why attention ``nd`` on the target side cannot run a step on the new token alone."""
    why = []
    keys = {r for r, _ in checks.expr_links(nd.keys, nd.values)}
    if (keys & tgt) and not mech.MASKS[nd.mask].hides_later:
        why.append(f"attention `{nd.id}` reads later target positions (no causal mask)"
                   f"{_where(nd.loc)}")
    align = mech.align(nd.align.fn)
    if align.shared_qk and keys & tgt:  # LSH: the sorted chunks of every position
        why.append(f"attention `{nd.id}` hashes the whole target's positions and sorts them "
                   "into chunks (LSH): the keys an earlier position sees change as the "
                   "target grows, so its cached values are not a re-run's"
                   f"{_where(nd.align.loc)}")
    elif align.by_query_index and nd.id not in loops:
        why.append(f"attention `{nd.id}` places its windows by the query's index in the "
                   f"whole target{_where(nd.align.loc)}")
    if keys & tgt:
        why.extend(f"attention `{nd.id}`'s {rec.name} term reads the whole target (it does "
                   f"not place a query after the cached keys){_where(m.loc)}"
                   for rec, m in mech.modifiers(nd) if not rec.counts_past)
    return why


def _literal(text: str) -> str:
    """``text`` as adjacent string literals of at most 60 characters each, one per line of
    generate()'s error message (so that no generated line is over 100 characters)."""
    import textwrap

    parts = textwrap.wrap(text, 60, drop_whitespace=False) or [""]
    return "\n".join(("" if i == 0 else " " * 29) + repr(s) for i, s in enumerate(parts))


def on(p) -> bool:
    return p.gen is not None and p.gen.incremental


def is_target_side(p, node_id: str) -> bool:
    return on(p) and node_id in p.gen.side


def source_first(p, item_members: list[str]) -> int:
    """Sort key of a top-level item: the source side before the target side."""
    return int(on(p) and any(x in p.gen.side for x in item_members))


def mark_prefix(p) -> None:
    """The top level's source side ends here (the first target-side item comes next)."""
    if on(p) and p.gen.prefix_end is None and p.frame.depth == 0:
        p.gen.prefix_end = len(p.frame.body)


def source_read(p, name: str) -> str:
    """``name``, a local of the source side, read here: the target side's reads go in the
    memory (``forward``)."""
    if on(p) and p.gen.prefix_end is not None:
        p.gen.reads.add(name)
    return name


def start(p, x) -> str | None:
    """``past`` when x's positions are the target's (a position encoding must start after
    the tokens already decoded), else None."""
    if not on(p) or p.step is not None or not x.shape.axes or x.shape.axes[-1] != p.gen.axis:
        return None
    return p.frame.use("past")


# ---- attention -------------------------------------------------------------------------


def cache_keys(p, n: ir.Attention, k, v, mark: int):
    """After an attention's keys and values are planned: cache them for generate(). Keys
    that read the target are appended step by step (KV cache); keys of the source are
    computed once (the statements since ``mark`` tagged ``(n.id, "keys")`` run only at the
    first step)."""
    if not is_target_side(p, n.id) or p.step is not None:
        return k, v
    f = p.frame
    keys = {r for r, _ in checks.expr_links(n.keys, n.values)}
    key = p.key_code(n)
    f.records.add("cache")
    same = v.name == k.name
    taken = {x.name for x in f.vars.values()}  # the nodes' own names: never reassigned
    if keys & p.gen.target_side:
        if mech.cached_inside(n):  # the module keeps its keys per head (kv_arg)
            return k, v
        kn = k.name if k.name not in taken else f.locals.new(f"{p.want(n)}_k")
        vn = v.name if v.name not in taken and not same else f.locals.new(f"{p.want(n)}_v")
        p.helpers.add("extend_cache")
        f.emit(f"{kn}, {vn} = extend_cache(cache, {key}, {k.name}, {v.name})",
               "generate(): after the earlier steps' keys and values")
        return (Var(kn, k.shape, k.mask, k.dim, k.mask_code),
                Var(vn, v.shape, v.mask, v.dim, v.mask_code))
    # the statements since `mark` built while the keys and values were planned (tagged by
    # plan_attention, ``Stmt.part``): the query's, comments included, stay outside
    computed = [x for x in dict.fromkeys((k.name, v.name)) if x not in taken]
    stmts, later = [], []
    for s in f.body[mark:]:
        (stmts if s.code and s.part == (n.id, "keys") else later).append(s)
    if not stmts or not computed:
        return k, v  # the keys are a source value as it is: nothing to compute
    del f.body[mark:]
    names = ", ".join(computed)
    f.emit(f"if cache is not None and {key} in cache:",
           "generate(): the source's keys and values, computed at the first step")
    f.emit(f"    {names} = cache[{key}]")
    f.emit("else:")
    f.body.extend(s.deeper() for s in stmts)
    f.emit("    if cache is not None:")
    f.emit(f"        cache[{key}] = {names}")
    f.body.extend(later)
    return k, v


def kv_arg(p, n: ir.Attention) -> list[str]:
    """The module's ``kv_cache=`` argument: a causal attention over the target whose module
    turns each key by itself (RoPE, qk-norm) or places them by a position term keeps its KV
    cache inside, per head and after the turn, so that a step turns its new keys only and
    reads the cache without copying it (``cache_keys`` leaves its keys as they are)."""
    if not mech.cached_inside(n) or not reads_target_keys(p, n):
        return []
    p.frame.records.add("cache")
    return [f"kv_cache=None if cache is None else (cache, {p.key_code(n)})"]


def reads_target_keys(p, n: ir.Attention) -> bool:
    """A target-side attention, outside a decoder loop, whose keys or values read the target:
    its keys grow by a step's positions at every generate() step."""
    if not is_target_side(p, n.id) or p.step is not None:
        return False
    return bool({r for r, _ in checks.expr_links(n.keys, n.values)} & p.gen.target_side)


def keeps_table(p, n: ir.Attention) -> bool:
    """A causal attention over the target whose position term keeps rows per distance
    (``step_table``: Transformer-XL's W_R R_r): generate() carries them from step to step."""
    return reads_target_keys(p, n) and any(rec.step_table for rec, _ in mech.modifiers(n))


def _table_key(p, n: ir.Attention) -> str:
    """Where generate() keeps the rows: "@table:<module>". A key from "@" is not per
    hypothesis, so beam search leaves it as it is (the rows are the same for every row)."""
    return p.key_code(n, "@table:")


def table_arg(p, n: ir.Attention) -> list[str]:
    """The module's ``table=`` argument: the earlier steps' rows, so that a step computes the
    rows of its new distances only (none where ``keeps_table`` does not hold)."""
    if not keeps_table(p, n):
        return []
    p.frame.records.add("cache")
    return [f"table=None if cache is None else cache.get({_table_key(p, n)})"]


def save_table(p, n: ir.Attention, extras: str) -> None:
    """After the module's call: its rows per distance, for the next step."""
    if keeps_table(p, n):
        p.frame.emit("if cache is not None:", "generate(): the rows per distance, for the next "
                     "step")
        p.frame.emit(f"    cache[{_table_key(p, n)}] = {extras}[\"table\"]")


def keys_once(p, n: ir.Attention, module: str, keys: str) -> list[str]:
    """In a decoder's step, an additive module over keys from outside the step: W2 k + b
    (``project_keys``, eq. 6) is computed once before the loop, not at every step; in
    generate(), with the source side when the keys are the source's (kept in
    ``cache["@memory"]``: once per generate()). Returns the module's ``wk=`` argument (none
    elsewhere)."""
    from .classes import keys_once as projects_keys

    st = p.step
    if st is not None and st.own == n.id and projects_keys(p, n):
        return recurrence.project_keys(p, module)
    reads = {r for r, _ in checks.expr_links(n.keys)}
    # only keys named by a node computed before the loop: an inline op (`keys = linear(h,
    # d)`) is computed at the statement, inside the step (the property test found it)
    if st is None or not projects_keys(p, n) or not is_name(keys) or \
            not isinstance(n.keys, ir.Ref) or reads & st.region:
        return []
    f = p.frame
    name = f.locals.new(f"{p.want(n)}_wk")
    code = f"{name} = {module}.project_keys({keys})"
    what = f"(B, H, {p.cm.attention[n.id].attended}, d_w): W2 k_l + b of `{n.name}`, for all steps"
    source = on(p) and not reads & p.gen.target_side
    if source and f.parent is None and p.gen.prefix_end is not None:
        f.body.insert(p.gen.prefix_end, Stmt(code, what, 0, binds=(name,)))
        p.gen.prefix_end += 1
        source_read(p, name)
    else:
        f.body.insert(st.loop_at, Stmt(code, what, f.indent - 1))
    st.loop_at += 1
    return [f"wk={name}"]


def step_start(p) -> str:
    """The absolute position of decoder step t (its index in the whole target)."""
    return f"{p.frame.use('past')} + t" if on(p) else "t"


# ---- the decoder loop ---------------------------------------------------------------------


def loop_resume(p, n: ir.Node, carried: list[str]) -> None:
    """Before a decoder loop: resume from the state the earlier steps left."""
    if not on(p):
        return
    p.frame.records.add("cache")
    names = [p.step.state] + carried
    p.frame.emit(f"if cache is not None and {n.id!r} in cache:",
                 "generate(): the state after the earlier steps")
    p.frame.emit(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = cache[{n.id!r}]")
    p.step.cached = names


def loop_save(p, n: ir.Node, names: list[str]) -> None:
    if not on(p):
        return
    p.frame.emit("if cache is not None:")
    p.frame.emit(f"    cache[{n.id!r}] = {', '.join(names)}"
                 if len(names) > 1 else f"    cache[{n.id!r}] = ({names[0]},)")


# ---- the Model's forward() -----------------------------------------------------------------


def forward(p, head: list[Stmt], body: list[Stmt]) -> tuple[list[Stmt], list[Stmt]]:
    """The Model's forward() with its cache: the source side runs once, ``past`` counts the
    tokens decoded before this call."""
    if not on(p):
        return head, body
    t = p.gen.input.id
    head.append(Stmt(f"if cache is not None and {t}_mask is not None:"))
    head.append(Stmt(f"    raise ValueError(\"input `{t}_mask`: must be None with a cache\")",
                     "generate() decodes without padding"))
    end = p.gen.prefix_end or 0  # None: the source side could not be put first
    prefix, rest = body[:end], body[end:]
    # what the target side reads, and the outputs (the return after the body): an output of
    # the source side is kept in the memory too, or a later step could not return it
    assigned = memory(p, prefix)
    mem = p.gen.memory
    if prefix and assigned:
        names = ", ".join(assigned) + ("," if len(assigned) == 1 else "")
        wrapped = [Stmt(f"{mem} = None if cache is None else cache.get(\"@memory\")"),
                   Stmt(f"if {mem} is None:", "the source side: once per generate()")]
        wrapped += [s.deeper() for s in prefix]
        wrapped += [Stmt(f"{mem} = ({names})", "", 1), Stmt("if cache is not None:", "", 1),
                    Stmt(f"cache[\"@memory\"] = {mem}", "", 2), Stmt(f"{names} = {mem}")]
        body = wrapped + rest
    if "past" in p.frame.used:  # read through use() (start, step_start), not the text
        head.append(Stmt("past = 0 if cache is None else cache.get(\"@length\", 0)",
                         "tokens decoded before this call"))
        body.append(Stmt("if cache is not None:"))
        body.append(Stmt(f"cache[\"@length\"] = past + {t}.shape[{len(p.gen.input.axes)}]",
                         "", 1))
    return head, body


def memory(p, prefix: list[Stmt]) -> list[str]:
    """What the source side keeps for later calls, in the order it binds them: the values of
    source nodes that a target-side node reads (the model's graph) or forward() returns,
    and the other locals the target side read (``source_read``)."""
    full, side = graph.of(p.cm), p.gen.target_side
    read = set(p.gen.reads)
    for x, var in p.frame.vars.items():
        if x not in side and (x in p.returned or x in full and
                              any(s in side for s in full.successors(x))):
            read.add(var.name)
    bound = dict.fromkeys(name for s in prefix for name in s.binds)
    return [name for name in bound if name in read]


def plan(p, outputs: list) -> GeneratePlan | None:
    """What the generated generate() needs to know."""
    if p.gen is None:
        return None
    t = p.gen.input
    # a target alignment (supervised attention) is for training: generate() gives none
    sources = [i for i in p.m.inputs if i.id != t.id and i.kind != "alignment"]
    pick = decoded(p.m, p.cm.shapes)
    out = ".output" if len(outputs) == 1 else f".output[{pick.id!r}]"
    return GeneratePlan(
        target=t.id, sources=tuple(i.id for i in sources),
        masks=tuple(f"{i.id}_mask" for i in sources if i.kind in MASKABLE),
        vocab=p.sym(t, "vocab", t.vocab, owner="self.cfg"),
        output=out, incremental=p.gen.incremental, why=_literal(p.gen.why))
