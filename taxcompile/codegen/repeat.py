"""Plan rules of ``repeat`` blocks.

A repeat whose hops are the same computation (eq. 41-42) becomes a ``Block`` class, its
body planned once; the model (or the enclosing block) holds one instance per hop in an
``nn.ModuleList``, or one instance for ``repeat … shared``, and loops over them. A repeat
whose hops differ is written out hop by hop. Decoder loops (``feed =``) are planned by
``decoder.py``; here a decoder's step is one item of its scope."""

from __future__ import annotations

import re

import networkx as nx

from .. import checks, ir
from . import generate
from .decoder import region_of
from .frame import Frame, Owner, Var
from .expr import BATCH_NAME, CFG
from .names import Dim, camel, dim_of, ident, is_name
from .plan import ModuleClass, Stmt


RECORD_TYPES = {"penalties": "list", "cache": "dict | None"}  # else dict


def shared_levels(m: ir.Model) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for n in m.nodes:
        h = getattr(n, "hop", None)
        if h is not None:
            out[re.sub(r"\[\d+\]", "", h.block)] = h.shared
    return out


def segments(n) -> list[tuple[str, int]]:
    """A hop node's place: ``model_enc[1].block[3]`` -> [("model_enc", 1), ("block", 3)]."""
    h = getattr(n, "hop", None)
    if h is None:
        return []
    return [(a, int(i)) for a, i in re.findall(r"(\w+)\[(\d+)\]", f"{h.block}[{h.index}]")]


# ---- scopes and repeats ---------------------------------------------------------------


def plan_scope(p, ids: list[str], depth: int) -> None:
    """Plan ``ids`` (the top level or one hop's body): plain nodes, and every repeat one
    level down as a single item, in dependency order."""
    item_of: dict[str, tuple] = {}
    for node_id in ids:
        segs = segments(p.m.node(node_id))
        loop = next((x for x in p.loops if node_id in region_of(p, x)), None)
        if len(segs) > depth:  # (a decoder loop inside a hop is an item of that hop's scope)
            item_of[node_id] = ("block", tuple(segs[:depth]), segs[depth][0])
        elif loop is not None:  # a decoder loop runs as one item, after all it reads
            item_of[node_id] = ("node", loop)
        else:
            item_of[node_id] = ("node", node_id)
    cg = nx.DiGraph()
    rank: dict[tuple, int] = {}
    for pos, node_id in enumerate(ids):
        cg.add_node(item_of[node_id])
        rank.setdefault(item_of[node_id], pos)
    for node_id in ids:
        for d in p.g.predecessors(node_id):
            if d in item_of and item_of[d] != item_of[node_id]:
                cg.add_edge(item_of[d], item_of[node_id])
    if not nx.is_directed_acyclic_graph(cg):  # a repeat interleaved with outside nodes
        for node_id in ids:
            p.emit_one(node_id)
        return
    members: dict[tuple, list[str]] = {}
    for node_id in ids:
        members.setdefault(item_of[node_id], []).append(node_id)
    # generate(): at the top level the source side (the encoder) comes first, so it can run once
    first = {it: generate.source_first(p, members[it]) if depth == 0 else 0 for it in members}
    plain = list(nx.lexicographical_topological_sort(cg, key=lambda it: f"{rank[it]:06d}"))
    subs, registered = p.frame.owner.subs, {}
    for it in nx.lexicographical_topological_sort(
            cg, key=lambda it: f"{first[it]}{rank[it]:06d}"):
        if first[it]:
            generate.mark_prefix(p)
        before = len(subs)
        if it[0] == "node":
            p.emit_one(it[1])
        else:
            plan_repeat(p, members[it], depth)
        registered[it] = subs[before:]
    if any(first.values()):  # submodules in the plain order: the same state_dict and init
        subs[:] = [s for it in plain for s in registered[it]]


def plan_repeat(p, members: list[str], depth: int) -> None:
    """One repeat instance: a Block when every hop is the first hop with other weights
    (eq. 41-42), else hop by hop."""
    hops: dict[int, list[str]] = {}
    for node_id in members:
        hops.setdefault(segments(p.m.node(node_id))[depth][1], []).append(node_id)
    lp = loop_plan(p, hops, depth)
    if lp is None:
        for k in sorted(hops):
            plan_scope(p, hops[k], depth + 1)
    else:
        plan_block(p, hops, depth, lp)


def rel(p, node_id: str, depth: int) -> tuple:
    """A hop node's identity inside its hop: its statement and any deeper hop indexes."""
    n = p.m.node(node_id)
    return (n.hop.template, tuple(segments(n)[depth + 1:]))


def loop_plan(p, hops: dict[int, list[str]], depth: int) -> dict | None:
    """What a loop over these hops carries from one hop to the next, or None when the
    hops are not the same computation (then they are written out one by one)."""
    first = {rel(p, x, depth): x for x in hops[1]}
    if len(first) != len(hops[1]):
        return None
    carried: dict[str, tuple] = {}  # value before the repeat -> what replaces it
    members = {x for ids in hops.values() for x in ids}
    for k in sorted(hops)[1:]:
        here = {rel(p, x, depth): x for x in hops[k]}
        prev = set(hops[k - 1])
        if set(here) != set(first):
            return None
        for r, nk in here.items():
            n1 = p.m.node(first[r])
            d1s, dks = checks.deps(n1), checks.deps(p.m.node(nk))
            if len(d1s) != len(dks) or checks.deps(n1, delayed=True):
                return None
            for d1, dk in zip(d1s, dks):
                if d1 in hops[1]:
                    if dk not in hops[k] or rel(p, dk, depth) != rel(p, d1, depth):
                        return None
                elif dk == d1:
                    continue  # read unchanged by every hop
                elif dk in prev and d1 not in members:
                    if carried.setdefault(d1, rel(p, dk, depth)) != rel(p, dk, depth):
                        return None
                else:
                    return None
    return {"carried": carried, "first": first}


def plan_block(p, hops: dict[int, list[str]], depth: int, lp: dict) -> None:
    """A Block class for the body, and the loop over its instances."""
    N, first, carried = len(hops), lp["first"], lp["carried"]
    members = {x for ids in hops.values() for x in ids}
    outer = p.frame
    n0 = p.m.node(hops[1][0])
    segs = segments(n0)
    path = ".".join(a for a, _ in segs[: depth + 1])
    name = segs[depth][0]
    cls = p.block_names.new(camel(path.replace(".", "_")) + "Layer")
    # values carried from hop to hop: each keeps one name in the caller
    carry_names: dict[str, str] = {}
    for x0 in carried:
        v = p.ref(x0)
        if any(s not in members for s in p.g.successors(x0)) or not is_name(v.name):
            carry_names[x0] = p.tmp(v.name, ident(getattr(p.m.node(x0), "name", x0)),
                                    "carried from hop to hop")
        else:
            carry_names[x0] = v.name
    # the body, planned once in the block's own forward()
    inner = Frame(Owner(cls), p.reserved, parent=outer, depth=depth + 1, at="at")
    params = []
    for x0 in carried:
        v = p.ref(x0)
        param = inner.locals.new(carry_names[x0])
        inner.vars[x0] = Var(param, v.shape, v.mask, v.dim, v.mask_code)
        params.append(param)
    # what the caller reads back: the carried values, then values read after the loop
    outs = [first[r] for r in carried.values()]
    read = {x for ids in hops.values() for x in ids if x in p.returned or x in p.read_outside
            or any(s not in members for s in p.g.successors(x))}
    out_rel = {rel(p, x, depth) for x in read}
    outs += [first[r] for r in first if r in out_rel and first[r] not in outs]
    # a repeat nested in the body returns what this Block returns (`outer.inner.a`)
    enclosing, p.read_outside = p.read_outside, p.read_outside | set(outs)
    p.frame = inner  # (no decoder step here: loop_plan refuses hops with `feed`)
    with inner.reading():
        plan_scope(p, hops[1], depth + 1)
    p.frame, p.read_outside = outer, enclosing
    _block_class(p, inner, cls, params, outs, path, hops[1])
    # the caller: one instance per hop, or one shared by every hop
    count = Dim(N)  # (rendered where it is written: in forward(), it reads cfg there)
    lists = {rel(p, x, depth) for k, ids in hops.items() if k < N for x in ids if x in read}
    sym = n0.hop.count_sym if depth == 0 else None
    if sym and not lists:
        p.use_sym(sym)
        count = dim_of(N, sym)
    shared = p.shared.get(path)
    if shared:
        mod = p.frame.owner.add(name, f"{cls}(cfg)", f"one `{name}` hop, shared by all {N}")
    elif inner.takes_depth:  # a parameter by the layer's depth: each hop knows its number
        stop = Dim(N + 1) if count == Dim(N) else count + Dim(1)
        mod = p.frame.owner.add(name, lambda: f"nn.ModuleList({cls}(cfg, depth) for depth in "
                                f"range(1, {stop}))", "one per hop (eq. 41-42)")
    else:
        mod = p.frame.owner.add(name, lambda: f"nn.ModuleList({cls}(cfg) for _ in range("
                                f"{count}))", "one per hop (eq. 41-42)")
    var = "ijkl"[depth] if depth < 4 else f"i{depth}"
    hop_lists = {}
    for r in sorted(lists, key=str):
        hop_lists[r] = p.tmp("[]", ident(r[0].split(".")[-1]) + "_hops", f"`{r[0]}` of every hop")
    results = [carry_names[x0] for x0 in carried]
    for x in outs[len(carried):]:
        results.append(p.frame.locals.new(p.want(p.m.node(x)) if depth else
                                          ident(p.m.node(x).hop.template)))
    args = [carry_names[x0] for x0 in carried] + list(inner.free)
    args += [f"{r}={r}" for r in sorted(inner.records)]
    outer.records.update(inner.records)
    if inner.records:
        prefix = "{at}" if outer.at else ""
        args.append(f"at=f\"{prefix}{name}[{{{var} + 1}}].\"")
    if "return_attention" in inner.flags:  # the hop's forward() reads it (``Frame.flag``)
        args.append(f"return_attention={outer.flag('return_attention')}")
    if shared:
        p.frame.emit(f"for {var} in range({count}):", f"`{path}`: {N} hops (eq. 41-42)")
        call = f"{mod}({', '.join(args)})"
    elif inner.records:
        p.frame.emit(f"for {var}, layer in enumerate({mod}):", f"`{path}`: {N} hops (eq. 41-42)")
        call = f"layer({', '.join(args)})"
    else:
        p.frame.emit(f"for layer in {mod}:", f"`{path}`: {N} hops (eq. 41-42)")
        call = f"layer({', '.join(args)})"
    p.frame.indent += 1
    p.frame.emit(f"{', '.join(results)} = {call}" if results else call, binds=tuple(results))
    for r, lst in hop_lists.items():
        p.frame.emit(f"{lst}.append({results[outs.index(first[r])]})")
    p.frame.indent -= 1
    _last_hop(p, hops, depth, inner, outs, results, hop_lists)
    p.emitted.update(members)


def _block_class(p, inner: Frame, cls: str, params: list[str], outs: list[str], path: str,
                 first_hop: list[str]) -> None:
    """The Block class of a repeat's body: its forward() planned in ``inner``, returning
    ``outs``."""
    body = list(inner.body)
    head = []
    if BATCH_NAME in inner.reads:
        tensor = params[0] if params else next(iter(inner.free.values()))
        head.append(Stmt(f"{BATCH_NAME} = {tensor}.shape[0]"))
    if CFG in inner.reads:
        head.append(Stmt(f"{CFG} = self.cfg"))
    ret = [inner.vars[x].name for x in outs]
    body = head + body + [Stmt(f"return {', '.join(ret)}" if ret else "return None")]
    sig = params + list(inner.free.values())
    sig += [f"{r}: {RECORD_TYPES.get(r, 'dict')}" for r in sorted(inner.records)]
    if inner.records:
        sig.append("at: str = \"\"")
    if "return_attention" in inner.flags:
        sig.append("return_attention: bool = False")
    doc = (f"One hop of `{path}` (eq. 41-42): "
           f"{', '.join(sorted({p.m.node(x).name for x in first_hop}))}.",)
    if inner.takes_depth:
        doc += ("", "depth: the hop's number, 1 to the hop count (layer l of a parameter by "
                "depth).")
    p.blocks.append(ModuleClass(cls, doc, tuple(inner.owner.subs), tuple(sig),
                                "tuple" if len(ret) > 1 else "torch.Tensor", tuple(body),
                                keeps_cfg=CFG in inner.reads,
                                init_params=("depth: int",) if inner.takes_depth else ()))


def _last_hop(p, hops: dict[int, list[str]], depth: int, inner: Frame, outs: list[str],
              results: list[str], hop_lists: dict) -> None:
    """After the loop: the last hop's values are the loop's results; an earlier hop's value
    read after the loop is its item of the list the loop filled."""
    outer, N = p.frame, len(hops)
    last = {rel(p, x, depth): x for x in hops[N]}
    for x, res in zip(outs, results):
        r = rel(p, x, depth)
        v = inner.vars[x]
        outer.vars[last[r]] = Var(res, v.shape, v.mask, v.dim, v.mask_code)
        if r in hop_lists:
            for k in range(1, N):
                xk = {rel(p, y, depth): y for y in hops[k]}[r]
                outer.vars[xk] = Var(f"{hop_lists[r]}[{k - 1}]", v.shape, v.mask, v.dim,
                                     v.mask_code)
