"""Plan rules of recurrent decoders: a recurrent model with ``feed =`` becomes a loop over
time steps inside forward(). One step computes the nodes of the decoder's step
(``checks.CheckedModel.steps``) in dependency order; ``prev(x)`` reads x at the previous
step, ``feed =`` gives the decoder the fed node's most recent value, ``init =`` its initial
state; ``state =`` (an attention over the RNN's earlier states, LSTMN) runs in the same
loop, its parts planned by ``recurrence.py``."""

from __future__ import annotations

from .. import checks, ir
from ..check import prev_reads
from .. import mechanisms as mech
from ..ops import plan_rule
from . import generate, recurrence
from .attention import emit_penalty, plan_attention
from .frame import Frame, Owner, Step, Var
from .expr import BATCH
from .names import dim_of, ident


def feed_regions(m: ir.Model) -> list[tuple[ir.Node, ir.Op, str]]:
    out = []
    for n in m.nodes:
        if isinstance(n, ir.Node):
            stack = [n.expr]
            while stack:
                e = stack.pop()
                if isinstance(e, ir.Op):
                    if e.param("feed") or e.param("state"):  # state: recurrence.py
                        out.append((n, e, str(e.param("feed") or e.param("state"))))
                    stack.extend(e.args)
    return out


def decoder_loop(p, n: ir.Node, op: ir.Op, fed_id: str) -> list[str]:
    """Run the recurrent decoder one step at a time. A step computes, in dependency order,
    the nodes of the decoder's step (``checks.CheckedModel.steps``): the nodes that read
    ``prev(x)`` (x at step t - 1, its initial value at t = 0) before the decoder, the
    decoder, then the nodes computed from it. The decoder reads [x_t; fed], where fed is
    the fed node's most recent value when the decoder runs: this step's when it is computed
    before the decoder (Bahdanau's c_i from s_(i-1)), else the previous step's (input
    feeding: Luong's h~_(t-1))."""
    f = p.frame
    region = region_of(p, n.id)
    order = [x for x in p.cm.order if x in region]
    x = p.expr(op.args[0], n)
    axis = x.shape.axes[-1]
    pos = len(x.shape.axes)
    want = p.want(n)
    seq = p.tmp(x.name, want + "_in",
                f"{p.shape(x.shape, dim=x.dim)}: the decoder's inputs, all steps")
    own = bool(op.param("state"))  # an attention over the earlier states (recurrence.py)
    now = own or (fed_id, n.id) in p.cm.feed_now
    hidden, layers = p.p(op, "hidden"), p.p(op, "layers")
    dims = step_dims(p, n, op, region)
    mask = p.mask_of(x) if own else None
    p.step = Step(axis=axis, region=region, op=op, seq=seq, kind=op.fn, hidden=hidden,
                  layers=layers, x=x, fed=fed_id, now=now, dims=dims, pos=pos, rnn=n.id)
    # prev(x) read after the loop (an output over all steps): x before each step, collected
    late = sorted({x for x, y in prev_reads.outside_reads(p.m, p.cm.steps) if x in region})
    carried = list(dict.fromkeys(
        [r for y in order for r, how in checks.links(p.m.node(y)) if how == "prev"] + late +
        ([] if now else [fed_id])))
    _initial_values(p, n, op, order, carried, want)
    if own:
        recurrence.start(p, n, op, mask)
    generate.loop_resume(p, n, [p.step.prev[c] for c in carried] + list(p.step.cov.values()))
    steps = f.locals.new("steps")
    f.emit(f"{steps} = {{}}", "node -> its value at every step")
    p.step.loop_at = len(f.body)  # where statements that run once, before the loop, go
    f.emit(f"for t in range({seq}.shape[{pos}]):", f"one decoder step per position of {axis}")
    f.indent += 1
    for node_id in order:
        nd = p.m.node(node_id)
        if isinstance(nd, ir.Attention):
            recurrence.keys(p, node_id)
            plan_attention(p, nd)
            recurrence.cells(p, node_id)
        else:
            p.node(nd)
            recurrence.remember(p, node_id, p.step.state)
    kept = _record_step(p, steps, order, late, carried)
    f.indent -= 1
    _gather_steps(p, n, steps, kept, late)
    return order


def _initial_values(p, n: ir.Node, op: ir.Op, order: list[str], carried: list[str],
                    want: str) -> None:
    """Before the loop: the decoder's state, what each step reads of the one before
    (``prev``, the fed node), the coverage of modules that keep one."""
    f, own, dims, seq = p.frame, bool(op.param("state")), p.step.dims, p.step.seq
    state = p.step.state = f.locals.new(want + "_state")
    init, top = initial_state(p, n, op)
    if not own:  # (with `state` each step starts from the attention's context)
        f.emit(f"{state} = {init}", "the decoder's initial state, one per layer"
               if init != "None" else "no initial state: every layer starts at zero")
    for c in carried:
        name = p.step.prev[c] = f.locals.new(ident(c) + "_prev")
        d = dims[c]
        what = f"(B, {d.shown()}): `{p.m.node(c).name}` before the first step"
        if c == n.id and top is not None:
            f.emit(f"{name} = {top}", what + ": its initial state")
        else:
            f.emit(f"{name} = {seq}.new_zeros({BATCH}, {d})", what + ": zeros")
    covs = p.step.cov  # See et al.'s coverage c^t of a module, carried across steps
    for node_id in order:
        if getattr(p.m.node(node_id), "coverage", False):
            covs[node_id] = f.locals.new(p.want(p.m.node(node_id)) + "_cov")
            f.emit(f"{covs[node_id]} = None", f"`{p.m.node(node_id).name}`'s coverage c^0 = 0 "
                   "(See et al. eq. 10)")


def _record_step(p, steps: str, order: list[str], late: list[str],
                 carried: list[str]) -> list[str]:
    """At the end of a step: keep what the next step reads and what is read after the loop
    (returned: the nodes whose every step is kept)."""
    f, pos, region = p.frame, p.step.pos, p.step.region
    for c in late:
        f.emit(f"{steps}.setdefault({step_key('prev', c)}, []).append("
               f"{p.step.prev[c]}.unsqueeze({pos}))")
    for c in carried:
        f.emit(f"{p.step.prev[c]} = {f.vars[c].name}.squeeze({pos})",
               f"`{p.m.node(c).name}` read at the next step")
    kept = [x for x in order if x in p.returned or any(s not in region for s in p.g.successors(x))]
    for node_id in kept:
        f.emit(f"{steps}.setdefault({node_id!r}, []).append({f.vars[node_id].name})")
    for _, a, wshape, nd in p.step.weights:
        w = a if wshape is None else f"{a}.view({wshape})"
        f.emit(f"if {f.flag('return_attention')}:")
        f.emit(f"    {steps}.setdefault({step_key('weights', nd.id)}, []).append({w})")
    for _, ex, nd in p.step.logp:
        f.emit(f"{steps}.setdefault({step_key('log_prob', nd.id)}, []).append({ex}[\"log_prob\"])")
    for nd, a, _ in p.step.penalty:  # every step's weights (heads), for a penalty
        f.emit(f"{steps}.setdefault({step_key('penalty', nd.id)}, []).append({a})")
    return kept


def _gather_steps(p, n: ir.Node, steps: str, kept: list[str], late: list[str]) -> None:
    """After the loop: every step's values joined along the axis, the attention weights,
    log-probabilities and penalties over all steps; planning leaves the step."""
    f, pos, dims, x = p.frame, p.step.pos, p.step.dims, p.step.x
    for node_id in kept:
        v = f.vars[node_id]
        name = f.locals.new(ident(node_id))
        f.emit(f"{name} = torch.cat({steps}[{node_id!r}], {pos})",
               p.shape(p.cm.shapes[node_id], dim=v.dim))
        att = isinstance(p.m.node(node_id), ir.Attention)
        f.vars[node_id] = Var(name, p.cm.shapes[node_id], None if att else x.mask, v.dim)
    for c in late:  # prev(c) at every step, for the nodes after the loop
        name = f.locals.new(ident(c) + "_prev")
        f.emit(f"{name} = torch.cat({steps}[{step_key('prev', c)}], {pos})",
               p.shape(p.cm.shapes[c], dim=dims[c]) + f": `{p.m.node(c).name}` at step t - 1")
        p.prev_seqs[c] = Var(name, p.cm.shapes[c], x.mask, dims[c])
    for key, a, wshape, nd in p.step.weights:
        dim = -3 if nd.dimensionality == "multi" else -2
        f.emit(f"if {f.flag('return_attention')}:")
        f.emit(f"    attn[{key}] = torch.cat({steps}[{step_key('weights', nd.id)}], {dim})")
    for key, ex, nd in p.step.logp:
        # (N, H, 1) per query of each step, or (N,) per example
        how = "cat" if mech.align(nd.align.fn).log_prob == "query" else "stack"
        f.emit(f"log_probs[{key}] = torch.{how}({steps}[{step_key('log_prob', nd.id)}], -1)")
    covered = p.step.penalty
    generate.loop_save(p, n, p.step.cached)
    p.step = None
    for nd, a, kmask in covered:  # the penalty over every step's weights (the whole target)
        w = f"{steps}[{step_key('penalty', nd.id)}]"
        # the values V^h are the same at every step: the last step's
        w = f"{w}[-1]" if mech.heads_extra(nd) == "values" else f"torch.cat({w}, -2)"
        emit_penalty(p, nd, w, p.mask_arg(x), kmask)


def initial_state(p, n: ir.Node, op: ir.Op) -> tuple[str, str | None]:
    """The decoder's initial state as cell_step reads it (a list with one entry per layer:
    h, or (h, c) for an LSTM; None: zeros), and its top layer's h_0 (None: zeros)."""
    init, init_c = op.param("init"), op.param("init_c")
    if init is None:
        return "None", None
    lstm = op.fn == "lstm"
    if str(init) in p.finals:  # an encoder RNN's final states, layer by layer
        final = generate.source_read(p, p.finals[str(init)])
        if lstm:
            return f"list(zip(*{final}))", f"{final}[0][-1]"
        return f"list({final})", f"{final}[-1]"
    h0 = p.ref(str(init)).name
    if not lstm:
        return f"[{h0}]", h0
    c0 = p.ref(str(init_c)).name if init_c is not None else f"torch.zeros_like({h0})"
    return f"[({h0}, {c0})]", h0


def region_of(p, node_id: str) -> set[str]:
    """The nodes computed in each step of decoder ``node_id``."""
    return p.cm.steps[node_id]


def step_dims(p, n: ir.Node, op: ir.Op, region: set[str]) -> dict:
    """The feature size of every node of the decoder's step, as a Config expression, before
    the step is planned (the cells' input width and the zeros before the first step need
    them): each node is planned on a scratch frame, so nothing is registered or written."""
    dims: dict = {n.id: p.p(op, "hidden")}
    busy: set[str] = set()

    def dim(node_id: str):
        if node_id not in region:
            return p.frame.lookup(node_id).dim
        if node_id in dims:
            return dims[node_id]
        nd = p.m.node(node_id)
        if node_id in busy:  # read through prev() by a node it is computed from
            return dim_of(p.cm.shapes[node_id].dim, None)
        busy.add(node_id)
        expr = nd.values if isinstance(nd, ir.Attention) else nd.expr
        saved = (p.frame, p.step, dict(p.op_counts), set(p.helpers))
        scratch = Frame(Owner("scratch"), p.reserved, parent=saved[0], depth=saved[0].depth,
                        at=saved[0].at)
        for r, _ in checks.expr_links(expr):
            if r in region:
                scratch.vars[r] = Var("_", p.cm.shapes[r], None, dim(r))
        p.frame, p.step = scratch, None
        try:
            with scratch.reading():  # (its code is not written)
                dims[node_id] = p.expr(expr, nd).dim
        finally:
            p.frame, p.step, p.op_counts, p.helpers = saved
        return dims[node_id]

    for node_id in region:
        dim(node_id)
    return dims


@plan_rule("prev")
def prev(p, e: ir.Op, a, n) -> Var:
    """x at the previous decoder step (its initial value at t = 0); after the loop, x at
    step t - 1 for every t (collected by the loop: prev_reads)."""
    x = e.args[0].node
    if p.step is None and x in p.prev_seqs:
        return p.prev_seqs[x]
    if p.step is None:  # sizes only (step_dims)
        return p.ref(x)
    st = p.step
    return Var(f"{st.prev[x]}.unsqueeze({st.pos})", p.cm.shapes[x], st.x.mask,
               st.dims[x])


def step_key(what: str, node_id: str) -> str:
    """``'weights:att'``: where a decoder loop collects a module's per-step values (a loop
    is planned at the top level, never in a block: the key has no ``at`` prefix)."""
    return repr(f"{what}:{node_id}")


def feed_step(p, e: ir.Op, n) -> Var:
    """One step of the fed recurrent model: [x_t; fed] and the previous state in, h_t out."""
    st = p.step
    kind, hidden, layers, x = st.kind, st.hidden, st.layers, st.x
    fed, pos = st.fed, st.pos
    name = p.m.node(fed).name
    cell = "nn.LSTMCell" if kind == "lstm" else "nn.GRUCell"
    ctor = (lambda: f"nn.ModuleList({cell}({x.dim} + {st.dims[fed]} if i == 0 else {hidden}, "
                    f"{hidden}) for i in range({layers}))")
    if st.now:
        value = f"{p.frame.vars[fed].name}.squeeze({pos})"
        what = f"[x_t; {name}_t]: `{name}` of this step"
    else:
        value, what = st.prev[fed], f"input feeding: [x_t; {name}_(t-1)]"
    if st.own:  # the attention's context is the previous state (recurrence.py)
        ctor = lambda: f"nn.ModuleList([{cell}({x.dim}, {hidden})])"  # noqa: E731
        xt, state, what = recurrence.previous(p)
    else:
        xt, state = f"torch.cat([{st.seq}.select({pos}, t), {value}], -1)", st.state
    mod = p.module(n, p.suffix(n, kind + "_cells"), ctor, what)
    p.helpers.add("cell_step")
    drop = ""
    if e.param("dropout"):  # between the stacked cells, in training (Zaremba et al.)
        drop = ", " + p.module(n, p.suffix(n, "drop"),
                               lambda: f"nn.Dropout({p.sym(e, 'dropout', e.param('dropout'))})")
    h = p.frame.locals.new(p.want(n) + "_h")
    p.frame.emit(f"{h}, {st.state} = cell_step({mod}, {xt}, {state}{drop})", "(B, hidden)")
    return Var(f"{h}.unsqueeze({pos})", checks.Shape(x.shape.axes, e.param("hidden")), x.mask,
               hidden)
