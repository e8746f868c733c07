"""Attention inside a recurrence: ``lstm(x, d, state = ATT)`` (LSTMN, Cheng, Dong & Lapata
2016, eq. 4-7). At step t the attention ATT attends over the RNN's own states before t
(its keys are the RNN's outputs h_1 … h_(t-1)); its context h~_t replaces h_(t-1), and for
an LSTM the same weights over the memory cells give c~_t, which replaces c_(t-1). What the
step-by-step loop cannot hold is refused here with the field to drop."""

from __future__ import annotations

from .. import ir
from .. import mechanisms as mech
from .core import expr_links, state_ops

# the fields of a `state` attention besides its query, keys (= values), score and alignment:
# each changes what its weights mean or needs positions the loop does not have (dropout
# too: the module returns its weights before dropout, and they sum the cells)
_HOW = {"mask_input": "mask",
        "loss_term": "penalty", "out_bias": "bias"}
_KEPT = ("query", "keys", "values", "score", "align", "hop", "sym", "loc", "id", "name",
         "kind_")


class StateChecks:
    """``check_state``: the RNN and the attention that replaces its previous state."""

    def check_state(self, n: ir.AnyNode) -> None:
        for e in state_ops(n):
            att = self.cm.model.by_id.get(str(e.param("state")))
            if self.state_rnn(n, e, att):
                self.state_attention(n, e, att)

    def state_rnn(self, n: ir.Node, e: ir.Op, att) -> bool:
        """The RNN: a statement of its own over one sequence, one layer, no other state."""
        ref = str(e.param("state"))
        if e is not n.expr:
            self.err(e.loc, "an RNN with `state` is a statement of its own", f"write `{n.kind_} "
                     f"{n.name} = {e.fn}(…, state = {ref})` and build on `{n.name}` elsewhere")
        elif not isinstance(att, ir.Attention):
            self.err(e.loc, f"`state = {ref}`: `{ref}` is not an attention module",
                     "name the attention over the RNN's earlier states, e.g. `attention intra "
                     f"{{ query = concat(x, prev(intra))  features = {n.name} }}` (LSTMN)")
        elif (n.id, att.id) not in self.cm.past:
            self.err(e.loc, f"`state = {ref}`: `{ref}` does not attend over `{n.name}`; its "
                     f"context replaces the state of `{n.name}` as a weighted sum of its "
                     "earlier states", f"give `{ref}` `features = {n.name}`")
        elif e.param("feed") or e.param("init") or e.param("init_c"):
            key = next(k for k in ("feed", "init", "init_c") if e.param(k))
            self.err(e.loc, f"`{key}` and `state` both set what the step reads: with `state` "
                     "the previous state is the attention's context, and before the first step "
                     "there is none (h~_1 = 0, c~_1 = 0)", f"drop `{key}`")
        elif int(e.param("layers", 1)) != 1:
            self.err(e.loc, "`state` replaces one layer's previous state; this RNN has "
                     f"{e.param('layers')} layers", "stack RNNs with `state` as statements "
                     "of their own, each reading the one below")
        elif (s := self.cm.shapes.get(n.id)) is not None and len(s.axes) != 1:
            self.err(e.loc, f"`state` runs the RNN step by step over one sequence; its output "
                     f"has axes {s}", "run it over a `tokens[T]` or `sequence[T, d]` input")
        else:
            return True
        return False

    def state_attention(self, n: ir.Node, e: ir.Op, att: ir.Attention) -> None:
        """ATT's keys and values are the RNN's outputs (the weights also sum its cells),
        with one head and a scalar weight per earlier state."""
        if not (isinstance(att.keys, ir.Ref) and att.keys.node == n.id and
                att.values == att.keys):
            self.err(att.keys.loc, f"attention `{att.name}` is the state of `{n.name}`: its "
                     f"keys and values are the earlier states of `{n.name}`",
                     f"write `features = {n.name}` (its weights also sum the memory cells)")
            return
        if att.query is None:
            self.err(att.loc, f"attention `{att.name}` is the state of `{n.name}`: it needs a "
                     "query that changes with the step", "e.g. `query = concat(x, "
                     f"prev({att.name}))`: x_t and h~_(t-1) (LSTMN eq. 4)")
            return
        if n.id in [r for r, how in expr_links(att.query) if how == "read"]:
            self.err(att.query.loc, f"the query of `{att.name}` reads `{n.name}` of this step, "
                     f"which the step computes after `{att.name}` (`state = {att.name}`)",
                     f"read the previous step: `prev({att.name})` (h~_(t-1), LSTMN eq. 4) or "
                     f"`prev({n.name})`")
            return
        ctx, h = self.cm.shapes.get(att.id), self.cm.shapes.get(n.id)
        if ctx is not None and h is not None and ctx.axes != h.axes:
            self.err(att.query.loc, f"attention `{att.name}` is the state of `{n.name}`: one "
                     f"context per step of `{h.axes[-1]}`, but its context is {ctx}",
                     f"query it with one vector per step, e.g. `query = concat(x, "
                     f"prev({att.name}))` (LSTMN eq. 4)")
            return
        defaults = type(att).fields
        for key, default in defaults.items():
            if key not in _KEPT and getattr(att, key) != default:
                word = att.head_mechanisms[0].fn if key == "head_mechanisms" else \
                    _HOW.get(key, key)
                self.err(att.loc, f"attention `{att.name}` is the state of `{n.name}`, so its "
                         f"weights are one scalar per earlier state, applied to the cells too; "
                         f"`{word}` is set", f"drop `{word}`: a state attention takes `query`, "
                         "`features`, `score` and `align`")
                return
        align = mech.align(att.align.fn)
        if align.gate or align.holds("step_start", att.align):
            self.err(att.align.loc, f"`align = {att.align.fn}` needs the query's position among "
                     "all the keys or gates the values; the state attention at step t sees only "
                     "the states before t", "use `align = global` (LSTMN eq. 5), `sparsemax` "
                     "or `entmax`")
