"""Shared weights: ``share = NODE`` on an operation (one module, one set of sizes),
``tie = NODE`` on ``classify`` (the embedding matrix as the output layer, Vaswani et al.
3.4) and ``share = OTHER`` on an attention module (the same module, eq. 9's shared keys,
or eq. 14-15's co-attention in the other direction). Run after every shape is known."""

from __future__ import annotations

from .. import ir, ops
from .. import mechanisms as mech
from ..diagnostics import Location
from .core import (AttentionInfo, _hop_place, _name, _short, _show, _vocab, learned_capsules,
                   operations)


class SharingChecks:
    """``check_sharing`` and the checks of ``share`` and ``tie`` it runs."""


    def check_sharing(self, n: ir.AnyNode) -> None:
        """``share = NODE`` on an operation, ``tie = NODE`` on ``classify`` and ``share =
        OTHER`` on an attention module name modules that can be the same weights."""
        if isinstance(n, ir.Attention):
            for e in (n.query, n.keys, n.values):
                for op in operations(e):
                    self.check_op_sharing(n, op)
            if n.share is not None:
                self.check_attention_share(n)
        elif isinstance(n, ir.Node):
            for op in operations(n.expr):
                self.check_op_sharing(n, op)

    def _same_body(self, n: ir.AnyNode, other: ir.AnyNode, what: str, loc: Location) -> bool:
        """Shared modules live in one generated class: both statements outside any repeat,
        or both in the same hop of one."""
        if _hop_place(n) == _hop_place(other):
            return True
        self.err(loc, f"{what} `{_short(other.id)}` and this statement are in different "
                 "`repeat` bodies or hops; one module is shared by the statements of one body",
                 "share within one hop (a `repeat … shared` shares a body across hops)")
        return False

    def _target_op(self, n: ir.AnyNode, e: ir.Op, key: str, fn: str) -> ir.Op | None:
        """The one ``fn`` operation of the statement that ``e``'s ``key`` names."""
        tid = str(e.param(key))
        t = version_with(self.cm.model, tid, fn)
        tid = t.id if t is not None else tid
        what = f"`{key} = {_short(tid)}`"
        if t is None or not isinstance(t, ir.Node) or t.kind_ == "affinity":
            kind = "nothing" if t is None else \
                f"{'an' if t.kind_[0] in 'aeiou' else 'a'} {t.kind_}"
            self.err(e.loc, f"{what} names {kind}; it names a feature, query or output "
                     f"statement with one `{fn}`", f"e.g. `feature x = {fn}(…)` and "
                     f"`{key} = x`")
            return None
        if t.id == n.id:
            self.err(e.loc, f"{what} names the statement it is in",
                     f"name another statement with one `{fn}`")
            return None
        found = [op for op in operations(t.expr) if op.fn == fn]
        if len(found) != 1:
            self.err(e.loc, f"{what}: statement `{_short(tid)}` has "
                     f"{len(found) or 'no'} `{fn}`{' operations' if found else ''}; "
                     f"`{key}` needs exactly one", f"name a statement whose expression has "
                     f"one `{fn}(…)`")
            return None
        if not self._same_body(n, t, f"{what}: statement", e.loc):
            return None
        return found[0]

    def check_op_sharing(self, n: ir.AnyNode, e: ir.Op) -> None:
        if e.param("share") is not None and e.param("tie") is not None:
            self.err(e.loc, "`classify` takes `share` (another output layer's weights) or "
                     "`tie` (an embedding matrix), not both")
            return
        if e.param("tie") is not None:
            self.check_tie(n, e)
        if e.param("share") is None:
            return
        t = self._target_op(n, e, "share", e.fn)
        if t is None:
            return
        if e.param("feed") or t.param("feed") or e.param("state") or t.param("state"):
            key = "state" if e.param("state") or t.param("state") else "feed"
            what = "a recurrence with `state`" if key == "state" else "a decoder with `feed`"
            self.err(e.loc, f"{what} runs its own cells step by step; it cannot share "
                     "weights", f"drop `share` or `{key}`")
            return
        tid = _short(str(e.param("share")))
        mine = {k: v for k, v in e.params if k not in ("share", "tie")}
        theirs = {k: v for k, v in t.params if k not in ("share", "tie")}
        for k in dict.fromkeys([*mine, *theirs]):
            if mine.get(k) != theirs.get(k):
                self.err(e.loc, f"`share = {tid}`: the `{e.fn}` of `{tid}` has {k} = "
                         f"{_show(theirs.get(k))}, this one {k} = {_show(mine.get(k))}; one "
                         "module has one set of sizes", f"write the same `{k}` in both")
                return
        a, b = self.op_inputs.get(id(e)), self.op_inputs.get(id(t))
        if a is None or b is None:
            return
        if e.fn == "embed":
            va, vb = _vocab(self.cm.model, e), _vocab(self.cm.model, t)
            if va != vb:
                self.err(e.loc, f"`share = {tid}`: one embedding needs one vocabulary; "
                         f"`{tid}` embeds {vb} tokens, this one {va}",
                         "give both inputs the same `vocab`")
                return
        elif a[0].dim != b[0].dim:
            self.err(e.loc, f"`share = {tid}`: the `{e.fn}` of `{tid}` reads {b[0].dim} "
                     f"features, this one {a[0].dim}; one module reads one size",
                     "map both inputs to the same size first")
            return
        if share_root(self.cm.model, e) is None:
            self.err(e.loc, f"`share = {tid}` goes round in a circle: one of the statements "
                     "must own the module", "drop `share` from one of them")

    def check_tie(self, n: ir.AnyNode, e: ir.Op) -> None:
        """``classify(x, V, tie = NODE)``: logits = x E^T + b with E the embedding matrix of
        NODE's ``embed`` (Vaswani et al. 3.4): V rows of x's width."""
        t = self._target_op(n, e, "tie", "embed")
        if t is None:
            return
        tid = _short(str(e.param("tie")))
        vocab, d = _vocab(self.cm.model, t), int(t.param("d"))
        classes = int(e.param("classes"))
        x = self.op_inputs.get(id(e))
        if vocab != classes:
            self.err(e.loc, f"`tie = {tid}`: the embedding of `{tid}` has one row per token "
                     f"({vocab}), so the output layer needs classes = {vocab}, not {classes}",
                     "tie the output layer to the embedding of the vocabulary it predicts")
        elif x is not None and x[0].dim != d:
            self.err(e.loc, f"`tie = {tid}`: the embedding of `{tid}` has width {d}, but "
                     f"`classify` reads {x[0].dim} features",
                     f"map the features to {d} first, e.g. `linear(x, {d})`")

    def check_attention_share(self, n: ir.Attention) -> None:
        m = self.cm.model
        o = m.by_id.get(n.share)
        where = f"attention `{n.name}`: `share = {_short(n.share)}`"
        if not isinstance(o, ir.Attention):
            self.err(n.loc, f"{where} names {'nothing' if o is None else 'a ' + o.kind_}; it "
                     "names another attention module", "e.g. `share = enc_self`")
            return
        if o.id == n.id:
            self.err(n.loc, f"{where} names the module itself", "name another attention module")
            return
        if o.share is not None:
            self.err(n.loc, f"{where}, which itself uses the weights of `{_short(o.share)}`",
                     f"write `share = {_short(o.share)}`")
            return
        if not self._same_body(n, o, f"{where}: attention", n.loc):
            return
        a, b = self.cm.attention.get(n.id), self.cm.attention.get(o.id)
        if a is None or b is None:
            return
        kind = share_kind(n, o)
        if kind in ("keys", "swap") and self.cm.order.index(o.id) > self.cm.order.index(n.id):
            self.err(n.loc, f"{where}: `{_short(o.id)}` is computed after this module, but "
                     "the module that owns the weights comes first",
                     f"write `share = {n.name}` in `{_short(o.id)}` instead")
            return
        if kind in ("keys", "swap"):
            for e in (n.query, n.keys, n.values, o.query, o.keys, o.values):
                if any(op.fn in ops.SHAREABLE or op.fn == "learned" for op in operations(e)):
                    self.err(n.loc, f"{where} shares the score's weights (eq. "
                             f"{'9' if kind == 'keys' else '14-15'}), not those of the "
                             f"key, value or query models (`{_name(e)}` has weights)",
                             "compute them as features first, e.g. `feature k = linear(x, d)`")
                    return
        if kind == "keys":  # eq. 9: eq. 7's W, b and w with a query added (eq. 6)
            sc, so = n.score, o.score
            why = ("score = additive" if not (_act_sum(sc) and _act_sum(so)) else
                   "heads = 1" if n.heads != 1 or o.heads != 1 else
                   f"dimensionality = {o.dimensionality}" if n.dimensionality != o.dimensionality
                   else f"d_v = {b.d_v} (W_d maps d_w to d_v, eq. 31)"
                   if n.dimensionality == "multi" and a.d_v != b.d_v
                   else "no capsules" if n.capsules or o.capsules else
                   "no affinity" if n.affinity or o.affinity else
                   f"act = {so.act}" if sc.act != so.act else
                   f"bias = {_show(so.bias)}" if sc.bias != so.bias else
                   f"d_k = {b.d_k}" if a.d_k != b.d_k else
                   f"d_w = {_d_w(o, b)}" if _d_w(n, a) != _d_w(o, b) else None)
            if why:
                self.err(n.loc, f"{where}: a module with a query uses the weights of a module "
                         "without one as eq. 9 does: both single-head additive scores (eq. 7's "
                         "W reads whole keys, a head's query a slice, eq. 38) over keys of one "
                         "size, with W, b and w (W_d for multi-dimensional weights, eq. 31) of "
                         f"one shape; this needs {why}",
                         "the module with the query adds its own W1 for it (eq. 6)")
            return
        if kind == "swap":  # eq. 14-15: one W1, W2 in both directions over one affinity
            so = o.score
            why = ("the same affinity matrix" if n.affinity != o.affinity else
                   "score = additive in both" if not (_act_sum(n.score) and _act_sum(so)) else
                   "the other direction: its keys are this module's query"
                   if a.attended == b.attended else
                   f"act = {so.act}" if n.score.act != so.act else
                   f"bias = {_show(so.bias)}" if n.score.bias != so.bias else
                   f"heads = {o.heads} (W1, W2 split the same way)" if n.heads != o.heads else
                   f"dimensionality = {o.dimensionality} (both build W1 and W2 alike)"
                   if n.dimensionality != o.dimensionality else
                   f"d_q = {b.d_k} and d_k = {b.d_q}" if (a.d_q, a.d_k) != (b.d_k, b.d_q) else
                   f"d_w = {_d_w(o, b)}" if _d_w(n, a) != _d_w(o, b) else None)
            if why:
                self.err(n.loc, f"{where}: two co-attention modules share W1 and W2 across "
                         f"directions (eq. 14-15); this needs {why}",
                         "each direction keeps its own w")
            return
        mine, theirs = _mechanisms(n, a), _mechanisms(o, b)
        for k in mine | theirs:  # (a score modifier is a key only where it is given)
            if mine.get(k) != theirs.get(k):
                self.err(n.loc, f"{where}: one module has one set of mechanisms and sizes, "
                         f"but `{_short(o.id)}` has {k} = {_show(theirs.get(k))} and this one "
                         f"{_show(mine.get(k))}", f"write the same `{k}` in both")
                return
        if _roles_sig(n) != _roles_sig(o):
            self.err(n.loc, f"{where}: the module's key, value and query models are shared "
                     f"too, so they must be written alike; `{_short(o.id)}` reads "
                     f"{_roles_text(o)}, this one {_roles_text(n)}",
                     "the same operators in the same roles, over this module's own inputs")


def version_with(m: ir.Model, node_id: str, fn: str) -> ir.AnyNode | None:
    """The statement ``share = x`` / ``tie = x`` names: the version of ``x`` visible there
    (``x@3`` after two ``update``s), or the latest earlier one whose expression has a
    ``fn`` operation (``tie = x`` after an encoder has updated x names ``feature x``)."""
    n = m.by_id.get(node_id)
    base, _, k = node_id.rpartition("@")
    if not isinstance(n, ir.Node) or not k.isdigit():
        return n
    for i in range(int(k), 0, -1):
        v = m.by_id.get(base if i == 1 else f"{base}@{i}")
        if isinstance(v, ir.Node) and any(op.fn == fn for op in operations(v.expr)):
            return v
    return n


def share_root(m: ir.Model, e: ir.Op) -> tuple[ir.Node, ir.Op] | None:
    """The statement and operation whose module ``e`` uses: ``e``'s ``share`` target, or
    that one's, and so on (None when the chain comes back or breaks)."""
    seen: set[int] = set()
    node, cur = None, e
    while cur.param("share") is not None:
        if id(cur) in seen:
            return None
        seen.add(id(cur))
        node = version_with(m, str(cur.param("share")), e.fn)
        found = [op for op in operations(node.expr) if op.fn == e.fn] \
            if isinstance(node, ir.Node) else []
        if len(found) != 1:
            return None
        cur = found[0]
    return (node, cur) if node is not None else None


def share_kind(n: ir.Attention, o: ir.Attention) -> str:
    """How attention ``n`` uses the weights of ``o`` (``share = o``): "same" (it is the
    same module), "keys" (eq. 9: o scores keys alone, eq. 7, and n uses o's W, b and w with
    a query added) or "swap" (eq. 14-15: co-attention in the other direction over the
    same affinity matrix, n's W_q is o's W_k and n's W_k is o's W_q)."""
    if n.query is not None and o.query is None and not o.capsules:
        return "keys"
    if n.affinity is not None and o.affinity is not None:
        return "swap"
    return "same"


def _d_w(n: ir.Attention, info: AttentionInfo) -> int | None:
    if not mech.SCORES[n.score.fn].hidden:
        return None
    return n.score.d_w or (info.d_q if n.query is not None and not learned_capsules(n)
                           else info.d_k)


def _mechanisms(n: ir.Attention, info: AttentionInfo) -> dict:
    """What one attention module's weights and behaviour depend on."""
    out = {"score": n.score.fn, **{f"score {k}": v for k, v in n.score.params if k != "d_w"},
           "d_w": _d_w(n, info), "align": n.align.fn}
    out.update((f"align {k}", v) for k, v in n.align.params)
    out.update(query="none" if n.query is None else "given", heads=n.heads,
               dimensionality=n.dimensionality, capsules=n.capsules, mask=n.mask,
               penalty=_class_penalty(n), dropout=n.dropout, affinity=n.affinity is not None,
               d_q=info.d_q, d_k=info.d_k, d_v=info.d_v)
    for name in mech.HEAD_MECHANISMS:  # talking heads, memory, gates: with their parameters
        m = n.head(name)
        out[name] = "none" if m is None else \
            ", ".join(f"{k} = {v}" for k, v in m.params) or "on"
    for what, m in (("position", n.position), ("bias", n.bias)):  # score modifiers
        if m is not None:
            out[what] = str(m) + mech.MODIFIERS[m.fn].text("detail", m)
    return out


def _class_penalty(n: ir.Attention):
    """The coefficient of a penalty the module's class computes (Lin et al.'s: the class's
    own, so modules that share one have one), None without one."""
    return next((m.params[0][1] for rec, m in mech.penalties(n)
                 if "penalty" in rec.extras and isinstance(m, ir.Mech) and m.params), None)


def _roles_sig(n: ir.Attention) -> tuple:
    """The key, value and query models' operators, with their inputs numbered in order."""
    names: dict[str, int] = {}

    def sig(e: ir.Expr | None):
        if e is None:
            return None
        if isinstance(e, ir.Ref):
            return names.setdefault(e.node, len(names))
        return (e.fn, tuple((k, v) for k, v in e.params if k not in ("share", "tie")),
                tuple(sig(a) for a in e.args))

    out = sig(n.query), sig(n.keys), sig(n.values)
    del sig  # a recursive closure is a cycle: it would keep the IR for the collector
    return out


def _roles_text(n: ir.Attention) -> str:
    return ", ".join(f"{r} {_name(e)}" for r, e in (("query", n.query), ("keys", n.keys),
                                                    ("values", n.values)) if e is not None)


def _act_sum(sc: ir.Mech) -> bool:
    """The additive score's act(W1 q + W2 k + b), whose weights eq. 9 and eq. 14-15 share."""
    return mech.SCORES[sc.fn].act_sum
