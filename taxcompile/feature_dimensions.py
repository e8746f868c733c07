"""The wiring's three dimensions of Table III: feature multiplicity (co-attention, rotatory
attention), feature levels (attention-via-attention, hierarchies) and feature
representations, read off where each attention module's query, keys and values come from.
Each function fills its cell of the ``classification.Classifier`` it is given."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ir

if TYPE_CHECKING:
    from .classification import Classifier

# Transparent maps: a context reaching a query only through these "joins" the query.
TRANSPARENT = {"concat", "project", "linear", "identity", "dropout"}


def multiplicity(cl: Classifier) -> None:
    cell = cl.cells["feature_multiplicity"]
    cross: dict[str, tuple[set[str], set[str], str]] = {}  # id -> (own, partners, grain)
    for a in cl.atts:
        own = {r for r in cl.feature_roots(a.keys) if cl.is_input(r, False)}
        partners: set[str] = set()
        for kind, reasons in cl.sources[a.id].items():
            if kind == "Specialized":
                partners |= {p for _, p in reasons if p is not None and p not in own}
        if not partners:
            continue
        info = cl.cm.attention[a.id]
        grain = "fine" if a.affinity is not None or info.query_mode == "sequence" else "coarse"
        cross[a.id] = (own, partners, grain)
    if not cross:
        cell.add("Singular", "no query comes from another input the model attends over: "
                 + cl.modules_over())
        return
    # Rotatory (eq. 17-20): one input exchanges queries with two others, both ways.
    for t in sorted(cl.attended_inputs()):
        outward = {p for aid, (own, partners, _) in cross.items() if t in partners
                   for p in own if p != t}
        inward = {p for aid, (own, partners, _) in cross.items() if t in own
                  for p in partners if p != t}
        both = outward & inward
        if len(both) >= 2:
            names = ", ".join(cl.q(x) for x in sorted(both))
            cell.add("Rotatory", f"{cl.q(t)} queries {names}, whose contexts query {cl.q(t)} "
                     "in turn (eq. 17-20)")
            return
    fine = sorted(i for i, v in cross.items() if v[2] == "fine")
    coarse = sorted(i for i, v in cross.items() if v[2] == "coarse")
    if fine and coarse:
        cell.add("Multi-Grained Co-attention",
                 f"fine-grained {', '.join(map(cl.q, fine))} and coarse-grained "
                 f"{', '.join(map(cl.q, coarse))} co-attention in one model")
        return
    if fine:
        for i in fine:
            a = cl.m.node(i)
            how = (f"through the affinity matrix {cl.q(a.affinity)} (eq. 12-16)" if a.affinity
                   else "with every feature vector of the other input as a query")
            partners = ", ".join(map(cl.q, sorted(cross[i][1])))
            cell.add("Parallel Co-attention", f"attention {cl.q(i)} relates {partners} to "
                     f"its keys {how}")
        return
    # in turn: the query is the context of a co-attention module over one of the
    # partner inputs (a refined query over the same input is a hop, eq. 41-42)
    sequential = [i for i in coarse if any(
        isinstance(cl.m.node(x), ir.Attention) and x in cross and x != i
        and cross[x][0] & cross[i][1]
        for x in cl.expr_ancestors(cl.m.node(i).query))]
    if sequential:
        for i in sequential:
            cell.add("Alternating Co-attention", f"the query of {cl.q(i)} is the context of "
                     "another co-attention module: the inputs are attended in turn (eq. 6-9)")
    else:
        for i in coarse:
            partners = ", ".join(map(cl.q, sorted(cross[i][1])))
            cell.add("Interactive Co-attention", f"attention {cl.q(i)} is queried by a summary "
                     f"of {partners}, computed in parallel (eq. 10-11)")


def levels(cl: Classifier) -> None:
    cell = cl.cells["feature_levels"]
    info = cl.cm.attention
    by_base: dict[str, list[ir.Attention]] = {}  # feature node -> modules reading it
    for a in cl.atts:
        for b in cl.keys_base(a):
            by_base.setdefault(b, []).append(a)
    atts = {a.id: a for a in cl.atts}
    for u in cl.atts:
        u_keys = cl.expr_ancestors(u.keys)
        # Only modules upstream of u, or over features u's features are built from,
        # can stand in a level relation with it.
        near = u_keys | cl.expr_ancestors(u.query)
        candidates = {n: atts[n] for n in near if n in atts}
        for b in u_keys:
            candidates.update((w.id, w) for w in by_base.get(b, ()))
        for w in (candidates[k] for k in sorted(candidates)):
            if w.id == u.id:
                continue
            # Fig. 8: the contexts of w, one per group, are the features u attends over.
            if (w.id in u_keys and info[u.id].attended in info[w.id].groups
                    and not is_stack_axis(cl, info[w.id].attended)):
                cell.add("Hierarchical", f"the contexts of {cl.q(w.id)} (one per "
                         f"`{info[u.id].attended}`) are the features {cl.q(u.id)} attends over")
            # Attention at several levels of one input's features, combined bottom-up:
            # u's features are built from w's (not from its context), and w's context
            # feeds the node that combines u's context.
            elif (w.id not in u_keys and cl.keys_base(w) & u_keys
                  and not cl.keys_base(w) & cl.keys_base(u)
                  and cl.feature_roots(w.keys) & cl.feature_roots(u.keys)):
                for c in sorted(cl.dag.successors(u.id)):
                    if w.id in cl.ancestors(c) and not isinstance(
                            cl.m.node(c), ir.Attention):
                        cell.add("Hierarchical", f"{cl.q(u.id)} attends over features built "
                                 f"from those of {cl.q(w.id)}, and {cl.q(c)} combines its "
                                 f"context with that of {cl.q(w.id)}")
                        break
            # Fig. 7: w's context joins the query of u, which attends over another
            # level (axis) of the same input.
            if (joins_query(cl, w.id, u.query)
                    and info[u.id].attended != info[w.id].attended
                    and cl.feature_roots(w.keys) & cl.feature_roots(u.keys)
                    and w.id not in u_keys):
                cell.add("Attention-via-Attention", f"the context of {cl.q(w.id)} joins the "
                         f"query of {cl.q(u.id)}, which attends over `{info[u.id].attended}` "
                         f"instead of `{info[w.id].attended}`")
    if not cell.values:
        axes = cl.listing(list(dict.fromkeys(
            f"{cl.q(a.id)} over `{info[a.id].attended}`" for a in cl.atts)))
        cell.add("Single-Level", f"no module's features or query come from another "
                 f"level's attention: {axes}")


def joins_query(cl: Classifier, ctx: str, e: ir.Expr | None) -> bool:
    if e is None:
        return False
    if isinstance(e, ir.Ref):
        if e.node == ctx:
            return True
        n = cl.m.node(e.node)
        return isinstance(n, ir.Node) and n.kind_ == "query" and joins_query(cl, ctx, n.expr)
    return e.fn in TRANSPARENT and any(joins_query(cl, ctx, x) for x in e.args)


def is_stack_axis(cl: Classifier, axis: str) -> bool:
    """An axis of representations (eq. 21), not a level of the input."""
    origin = cl.cm.axis_origin.get(axis)
    n = cl.m.node(origin) if origin else None
    return isinstance(n, ir.Node) and isinstance(n.expr, ir.Op) and n.expr.fn == "stack"


def representations(cl: Classifier) -> None:
    cell = cl.cells["feature_representations"]
    for a in cl.atts:
        axis = cl.cm.attention[a.id].attended
        origin = cl.cm.axis_origin.get(axis)
        n = cl.m.node(origin) if origin else None
        if isinstance(n, ir.Node) and isinstance(n.expr, ir.Op) and n.expr.fn == "stack":
            roots = [cl.feature_roots(p) for p in n.expr.args]
            if all(r and r == roots[0] for r in roots):
                cell.add("Multi-Representational", f"attention {cl.q(a.id)} weighs "
                         f"{len(roots)} representations of {', '.join(map(cl.q, sorted(roots[0])))} "
                         f"stacked in {cl.q(n.id)} (eq. 21-22)")
    if not cell.values:
        cell.add("Single-Representational", "no module weighs several representations of "
                 "one input: " + cl.modules_over())
