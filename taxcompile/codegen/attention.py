"""Plan rules of attention statements: the wiring in forward(): the key, value and query
models, one attention per group, padding masks, and the records (weights, log p, penalty,
capsules). The classes themselves are planned by ``classes.py``."""

from __future__ import annotations

import re

from .. import checks, ir
from .. import mechanisms as mech
from ..checks import learned_capsules, share_kind
from . import generate, segment
from .classes import attention_class, dot_form, fast_path, one_per_input
from .features import project_width
from .frame import Var
from .contexts import context_dim, describe
from .graph_attention import is_graph, plan_graph_attention
from .expr import BATCH, unread
from .names import atom, dim_of
from .depth import depth_code


def plan_attention(p, n: ir.Attention) -> None:
    if is_graph(p, n):  # `mask = adj`: graph attention (GAT), a class of its own
        return plan_graph_attention(p, n)
    info = p.cm.attention[n.id]
    capsule = n.capsules > 0
    other = p.m.node(n.share) if n.share is not None else None
    kind = share_kind(n, other) if other is not None else None
    if kind == "same":  # `share = OTHER`: this statement runs OTHER's module (checks.py)
        p.same_module[n.id] = other
    mark = len(p.frame.body)  # where the key and value models' statements start
    with p.frame.part(n.id, "keys"):  # generate.cache_keys picks these statements
        seg = segment.extend(p, n)  # `mem_len`: the keys and values over [SG(m); h]
        fused = fused_projections(p, n, seg is not None)
        # the modules of the key, value and query models are named after their role
        k = fused.get("k") or p.expr(n.keys, n)
        v = (fused.get("v") or p.expr(n.values, n)) if n.values != n.keys else k
        segment.restore(p, seg)
    q = None
    if n.query is not None and not learned_capsules(n):  # else the class holds q_c (eq. 43)
        q = fused.get("q") or p.expr(n.query, n)
    G = len(info.groups)
    if q is not None and mech.score(n.score.fn).equal_qk:  # q^T k
        p.equal.append((q.dim, k.dim))
    if n.heads > 1:  # the features split evenly into the heads (Config.tiny()'s check)
        heads = p.size(n, "heads", n.heads)
        p.divides.extend((d.dim, heads) for d in (q, k, v) if d is not None)
    with unread():  # the class's own code
        cls = attention_class(p, n)
    owner = None
    if kind in ("keys", "swap"):  # eq. 9 / eq. 14-15: the other module's score weights
        owner = p.frame.owner.by_key.get(p.share_key(other) + ("",))
        assert owner is not None, f"`{other.id}` is planned before `{n.id}` (checks.py)"
    mod = p.module(n, "", lambda: constructor_call(p, n, cls, info, q, k, v, kind, owner))
    name = p.want(n)
    p.frame.note(f"attention `{n.name}`: {describe(n, info)}")
    with p.frame.part(n.id, "keys"):
        k = p.named(k, f"{name}_k")
        v = k if n.values == n.keys else p.named(v, f"{name}_v")
    k, v = generate.cache_keys(p, n, k, v, mark)  # generate(): a KV cache
    kk = f"{k.name}.flatten(0, {G})" if G else k.name
    vv = f"{v.name}.flatten(0, {G})" if G else v.name
    if G:
        p.frame.note(f"one attention per group: N = B x {' x '.join(info.groups)}")
    qq = "None"
    if q is not None:
        q = p.named(q, f"{name}_q")
        if info.query_mode in ("sequence", "capsules") or n.affinity:
            qq = f"{q.name}.flatten(0, {G})" if G else q.name
        elif not G:
            qq = f"{q.name}.unsqueeze(1)"
        else:
            code, extra = q.name, G - len(q.shape.axes)
            if extra:  # the same query for every group below its own axes
                m = len(q.shape.axes)
                kept = f"*{k.name}.shape[1:{1 + m}], " if m else ""
                code = f"{q.name}.view({BATCH}, {kept}{'1, ' * extra}-1)" \
                       f".expand(*{k.name}.shape[:{1 + G}], -1)"
            qq = p.tmp(f"{code}.reshape(-1, 1, {q.name}.shape[-1])", f"{name}_q1",  # a call
                       "(N, 1, d_q): one query per group")
    mk = p.mask_of(k)
    kmask = mk[0] if G == 0 and mk is not None and not mk[1] else \
        p.mask_arg(k, f".reshape(-1, {k.name}.shape[-2])",
                   (f"{name}_keep", "(N, Lk): padding mask of the keys"))
    if seg is not None:
        kmask = segment.key_mask(p, seg, n, kmask)
    args = [qq, kk, vv, kmask] + generate.keys_once(p, n, mod, kk)
    if n.affinity:
        args.append(f"affinity={affinity_arg(p, n, info, q, G, name)}")
    if p.step is not None and mech.align(n.align.fn).holds("step_start", n.align):
        args.append(f"start={generate.step_start(p)}")  # p = t: this step's position (eq. 27)
    if n.mask_input is not None:  # `mask = m`: (B, Lq, Lk), one attention per example
        args.append(f"pair_mask={p.frame.use(n.mask_input)}")
    args += policy_args(p, n, k, G, name)
    read = n.id in checks.weights_read(p.m)  # `att.weights` as a feature
    if fast_path(n, dot_form(n)):  # else a fast path skips the weights
        own = p.step is not None and p.step.own == n.id  # its weights sum the cells too
        args.append("need_weights=True" if weights_penalty(n) or read or own
                    else f"need_weights={p.frame.flag('return_attention')}")
    # where generate() keeps c: a key per module, per hop in a block (key_code is then an
    # f-string on the hop's prefix `at`)
    cov_key = p.key_code(n, "coverage:")
    if n.coverage and p.step is not None:  # c^t carried from step to step (See et al. eq. 10)
        args.append(f"coverage={p.step.cov[n.id]}")
    elif n.coverage and generate.is_target_side(p, n.id):  # generate(): the earlier calls' c
        p.frame.records.add("cache")
        args.append(f"coverage=None if cache is None else cache.get({cov_key})")
    args += generate.table_arg(p, n)  # generate(): the earlier steps' rows per distance
    args += generate.kv_arg(p, n)  # generate(): the keys kept inside the module
    call = f"{mod}({', '.join(args)})"
    a, ex = record(p, n, info, q, k, v, G, call, name, capsule)
    generate.save_table(p, n, ex)
    if n.coverage and p.step is not None:
        p.frame.emit(f"{p.step.cov[n.id]} = {ex}[\"coverage\"]",
                     "c^(t+1) = c^t + a^t (See et al. eq. 10)")
    elif n.coverage and generate.is_target_side(p, n.id):
        p.frame.emit("if cache is not None:", "generate(): the coverage for the next call")
        p.frame.emit(f"    cache[{cov_key}] = {ex}[\"coverage\"]")
    if read:
        weights_value(p, n, a, info)
    penalty_of_weights(p, n, a, ex, q, kmask, G)


def constructor_call(p, n: ir.Attention, cls: str, info, q: Var | None, k: Var, v: Var,
                     kind: str | None, owner: str | None) -> str:
    """``cls(name=value, …)``, the module's constructor call: the arguments of its
    mechanisms' records (``mechanisms.constructor``, the list the drop-in layer's call is
    built from too), each a Config expression where the spec wrote one."""
    def d_w() -> str:
        sym = dict(n.score.sym).get("d_w")
        if sym:
            p.use_sym(sym)
        d_w = getattr(n.score, "d_w", None)
        return str(dim_of(d_w, sym) if d_w else
                   (q.dim if q is not None else k.dim))

    computed = {"d_q": lambda: q.dim if q is not None else k.dim, "d_k": lambda: k.dim,
                "d_v": lambda: v.dim, "d_w": d_w, "share": lambda: owner,
                "n_keys": lambda: p.axis_size_code(info.attended),
                "d_p": lambda: p.ref(mech.align_reads(n.align)[0][1]).dim}
    args = mech.constructor(n, n.dropout is not None, kind if kind != "same" else None,
                            q is not None or n.capsules > 0)
    out = []
    for arg in args:
        if code := depth_code(p, n, arg):  # a parameter by the layer's depth
            out.append(f"{arg.name}={code}")
            continue
        if not arg.passed(n):
            continue
        value = arg.value(n)
        if arg.name in computed:
            code = str(computed[arg.name]())
        elif isinstance(value, str):
            code = mech.literal(value)
        else:
            code = p.sym(arg.owner_of(n), arg.sym or arg.field, value)
        out.append(f"{arg.name}={code}")
    return f"{cls}({', '.join(out)})"


def policy_args(p, n: ir.Attention, k: Var, G: int, name: str) -> list[str]:
    """``policy_in=s``: what a reinforced alignment's policy reads beside each key (RBAN's
    aspect), one vector per example (B, d_p), repeated for each group of keys (N = B x
    groups) where the module attends once per group."""
    reads = mech.align_reads(n.align)
    if not reads:
        return []
    s = p.ref(reads[0][1])
    code = s.name
    if G:
        m = len(s.shape.axes)
        kept = f"*{k.name}.shape[1:{1 + m}], " if m else ""
        code = p.tmp(f"{atom(s)}.view({BATCH}, {kept}{'1, ' * (G - m)}-1)"
                     f".expand(*{k.name}.shape[:{1 + G}], -1).reshape(-1, {atom(s)}.shape[-1])",
                     f"{name}_s", "(N, d_p): the policy's input for each group of keys")
    return [f"policy_in={code}"]


def weights_value(p, n: ir.Attention, a: str, info) -> None:
    """``att.weights`` as a value: the weights (N, H, Lq, Lk) averaged over the heads, with
    the context's leading axes: (B, …, Lq, Lk) (or (B, …, Lk) for one query per group)."""
    c = p.frame.vars[n.id]
    shape = checks.Shape(c.shape.axes, p.cm.sizes[info.attended])
    dim = p.axis_size(info.attended)
    mean = f"{a}.mean(1)" if n.heads > 1 else f"{a}.squeeze(1)"
    w = p.tmp(f"{mean}.reshape(*{c.name}.shape[:-1], -1)", f"{p.want(n)}_w",
              f"{p.shape(shape, dim=dim)}: the weights a_l (eq. 3)"
              + (", averaged over the heads" if n.heads > 1 else ""))
    p.frame.vars[n.id + ".weights"] = Var(w, shape, c.mask, dim, c.mask_code)


def weights_penalty(n: ir.Attention) -> bool:
    """Whether a penalty in the loss reads the module's weights (the fast path must then
    compute them)."""
    return called(n) and not mech.heads_extra(n)


def called(n: ir.Attention) -> bool:
    """Whether the module's penalty is its record's call over the weights or the heads'
    tensors (``call``)."""
    return n.loss_term is not None and bool(n.loss_term.record.call)


def penalty_of_weights(p, n: ir.Attention, a: str, ex: str, q: Var | None, kmask: str,
                       G: int) -> None:
    """Xu et al.'s doubly stochastic penalty (eq. 14), See et al.'s coverage loss (eq. 12-13),
    Li et al.'s disagreement (eq. 5-7) and supervised attention over the module's weights or
    heads: at once, or in a decoder loop from the tensors of every step once the loop is done
    (``penalty_call``)."""
    if not called(n):
        return
    p.frame.records.add("penalties")
    x = f"{ex}[\"heads\"]" if mech.heads_extra(n) else a
    if p.step is not None:
        p.step.penalty.append((n, x, kmask))
        return
    info = p.cm.attention[n.id]
    qmask = "None"
    if q is not None and info.query_mode == "sequence":
        qmask = p.mask_arg(q, f".reshape(-1, {q.name}.shape[-2])") if G else p.mask_arg(q)
    emit_penalty(p, n, x, qmask, kmask)


def emit_penalty(p, n: ir.Attention, x: str, qmask: str, kmask: str) -> None:
    """``penalties.append(…)`` of ``penalty_call``; supervised attention's only when the
    target alignment is given (in training)."""
    f, m = p.frame, n.loss_term
    target = m.param(m.record.target) if m.record.target else None
    if target is not None:
        f.emit(f"if {f.use(target)} is not None:", "in training")
        f.indent += 1
    code, comment = penalty_call(p, n, x, qmask, kmask)
    f.emit(f"penalties.append({code})", comment)
    if target is not None:
        f.indent -= 1


def penalty_call(p, n: ir.Attention, x: str, qmask: str, kmask: str) -> tuple[str, str]:
    """The call that computes a module's penalty from its weights (or heads) x, with the
    padding masks of its queries and keys, and its comment."""
    m = n.loss_term  # its record's helper call (Xu et al.'s, See et al.'s, Li et al.'s, …)
    rec = m.record
    p.helpers.update(rec.helpers)
    # a target alignment (supervised attention): the input's name in forward()
    more = {"target": p.frame.use(m.param(rec.target))} if rec.target else {}
    return (rec.text("call", m, a=x, qmask=qmask, kmask=kmask, **more),
            rec.text("call_note", m) or rec.text("doc", m))


def affinity_arg(p, n, info, q, G: int, name: str) -> str:
    """The affinity matrix (eq. 12-13) as the module reads it: rows = query positions."""
    A = p.ref(n.affinity)
    code = A.name
    if A.shape.axes[-1] != info.attended:
        code = f"{code}.transpose(-1, -2)"
    code = f"{code}.flatten(0, {G})" if G else code
    qmask = p.mask_of(q) if q is not None else None
    rows = mech.score(n.score.fn).affinity_rows
    if qmask and rows:
        # padded query positions must not add to (eq. 14-15) or win (eq. 16) a score
        mname, suffix = qmask
        fill = "0.0" if rows == "sum" else f"torch.finfo({A.name}.dtype).min"
        code = p.tmp(f"{code} if {mname} is None else {code}.masked_fill("
                     f"~{mname}{suffix}.reshape(-1, {q.name}.shape[-2], 1), {fill})",
                     f"{name}_A", "(N, Lq, Lk): padded query rows left out")
    return code


def record(p, n, info, q, k, v, G, call, name, capsule) -> tuple[str, str]:
    """Call the module; keep its context, and its weights and extras in the records; the
    names of its weights and extras."""
    shape = p.cm.shapes[n.id]
    step = p.step is not None
    # the context's leading axes (B rendered where it is written: forward() binds it then)
    lead = f"*{k.name}.shape[:{1 + G}]" if G else BATCH
    align = mech.align(n.align.fn)
    single = info.query_mode != "sequence" or one_per_input(n)  # one context per group
    gate = align.gate  # the gated values, at the keys' positions
    single = single and not gate
    direct = G == 0 and not single and not capsule
    needs_ex = bool(align.log_prob) or mech.class_penalty(n) or capsule or \
        n.coverage or bool(mech.heads_extra(n)) or generate.keeps_table(p, n)
    locs = p.frame.locals
    if direct and step:
        c = p.step.names.setdefault(n.id, locs.new(name + "_t"))
    else:
        c = locs.new(name if direct else f"{name}_c")
    a = locs.new(f"{name}_a")
    ex = locs.new(f"{name}_ex") if needs_ex else "_"
    cdim = context_dim(p, n, v.dim)
    comment = p.shape(shape, step=step, dim=cdim)
    p.frame.emit(f"{c}, {a}, {ex} = {call}", comment if direct else "", (c, a, ex))
    if direct:
        res = c
    else:
        res = p.step.names.setdefault(n.id, locs.new(name + "_t")) if step else locs.new(name)
        rest = "" if single and not capsule else f"{c}.shape[-2], "
        p.frame.emit(f"{res} = {c}.view({lead}, {rest}-1)", comment, (res,))
    if gate:
        p.frame.vars[n.id] = Var(res, shape, k.mask, cdim, k.mask_code)
    else:
        p.frame.vars[n.id] = Var(res, shape, k.mask if single or capsule else q.mask if q else None,
                                 cdim, None if single or capsule or q is None else q.mask_code)
    wshape = f"{lead}, *{a}.shape[1:]" if G else None  # None: the weights' own shape
    key = p.key_code(n)
    rec = p.frame.records
    rec.add("attn")
    if not step:
        # the heads' axis is H unless an axis of the keys is called H (an image's height)
        heads = "heads" if any(re.search(r"\bH\b", ax) for ax in (*info.groups, info.attended)) \
            else "H"
        wdims = ", ".join(["B", *info.groups, heads, q.shape.axes[-1] if not single and not capsule
                           and not gate else "C" if capsule else "1", info.attended] +
                          ([f"d_v / {heads}"] if n.dimensionality == "multi" else []))
        p.frame.emit(f"if {p.frame.flag('return_attention')}:")
        p.frame.indent += 1
        p.frame.emit(f"attn[{key}] = {a if not G else f'{a}.view({wshape})'}", f"({wdims})")
        p.frame.indent -= 1
    else:
        p.step.weights.append((key, a, wshape, n))
    if align.log_prob:
        rec.add("log_probs")
        if not step:
            p.frame.emit(f"log_probs[{key}] = {ex}[\"log_prob\"]")
        else:
            p.step.logp.append((key, ex, n))
    if mech.class_penalty(n):
        rec.add("penalties")
        p.frame.emit(f"penalties.append({ex}[\"penalty\"])")
    if capsule:
        rec.update(("capsules", "features"))
        t = locs.new("part")  # not a name `lead` reads (an input called `x`)
        p.frame.emit(f"capsules[{key}] = tuple({t}.view({lead}, *{t}.shape[1:]) "
                     f"for {t} in {ex}[\"capsule\"])")
        p.helpers.add("pool")
        p.frame.emit(f"features[{key}] = pool({v.name}, {p.mask_arg(v)}, \"mean\")",
                     "f: the mean feature vector")
    return a, ex


def fused_projections(p, n: ir.Attention, keys_only: bool = False) -> dict[str, Var]:
    """Queries, keys and values that are projections of one feature (self-attention:
    W_Q F, W_K F, W_V F, eq. 1 and 35) come from one stacked matmul: a single nn.Linear
    whose output is split, so the feature is read once. ``keys_only``: the keys and values
    (a segment memory's: they read [SG(m); h], the query h)."""
    if p.step is not None:
        return {}  # a decoder step projects one position of the query only
    query = n.query if n.query is not None and not learned_capsules(n) and not keys_only \
        else None
    roles = {"q": query, "k": n.keys,
             "v": n.values if n.values != n.keys else None}
    by_source: dict[str, list[str]] = {}
    for r, e in roles.items():
        if isinstance(e, ir.Op) and e.fn == "project" and isinstance(e.args[0], ir.Ref):
            by_source.setdefault(e.args[0].node, []).append(r)
    out: dict[str, Var] = {}
    for source, rs in by_source.items():
        if len(rs) < 2:
            continue
        x = p.ref(source)
        widths = [project_width(p, roles[r], n, x) for r in rs]
        dims = [d for _, d in widths]
        with unread():  # (a comparison, not code)
            equal = len({str(d) for d in dims}) == 1
        split = f"chunk({len(rs)}, -1)" if equal else \
            f"split([{', '.join(str(d) for d in dims)}], -1)"

        def ctor() -> str:  # (rendered at once, by p.module)
            width = dims[0].times(len(rs)) if equal else " + ".join(str(d) for d in dims)
            return f"nn.Linear({x.dim}, {width}, bias=False)"

        eqs = {"q": "W_Q", "k": "W_K", "v": "W_V"}
        mod = p.module(n, "".join(rs) + "_proj", ctor,
                       f"{', '.join(eqs[r] for r in rs)} stacked: one matmul (eq. 1, 35)")
        names = [p.frame.locals.new(f"{p.want(n)}_{r}") for r in rs]
        shapes = [checks.Shape(x.shape.axes, size) for size, _ in widths]
        p.frame.emit(f"{', '.join(names)} = {mod}({x.name}).{split}",
                     f"{p.shape(shapes[0], dim=dims[0])} each", tuple(names))
        for r, name, d, sh in zip(rs, names, dims, shapes):
            out[r] = Var(name, sh, x.mask, d, x.mask_code)
    return out
