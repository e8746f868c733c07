"""The fit of a module's masks, score modifiers and alignment: a structural mask or a
mask input (``mask = m``), graph attention (``mask = adj``, GAT's score, ``self_loops``),
position terms and biases on the scores (``position``, ``bias``), local alignment's
window. Each reads what the mechanism needs off its record in ``taxcompile/mechanisms/``
(``graph``, ``qk``, ``pairs``, ``centred``, ``caps``, …) and the statement's
``attention.Fit``; it reports the first misfit and returns False."""

from __future__ import annotations

from .. import mechanisms as mech
from .attention import Fit
from .core import penalised
from .policy import policy_fits


class MechanismFits:
    """``masks_fit``, ``modifiers_fit`` and ``align_fits``."""

    def masks_fit(self, f: Fit) -> bool:
        """A structural mask (``mask = causal``), a mask input (``mask = m``, ``causal * m``)
        and graph attention (``mask = adj``, ``activated_concat``, ``self_loops``): what
        they need of the module."""
        n, q, mode, groups, attended, where = f.n, f.q, f.mode, f.groups, f.attended, f.where
        if n.mask != "none":
            if mode != "sequence" or f.ctx_axes[-1] != attended:
                self.err(n.loc, f"{where}: the {n.mask} mask relates positions of one sequence, "
                         "so query and keys must run over the same axis",
                         "masks are for self-attention (`query = project(F)`, `keys = F`)")
                return False
        score, align = mech.SCORES[n.score.fn], mech.ALIGNS[n.align.fn]
        mi = self.cm.model.node(n.mask_input) if n.mask_input else None
        graph = mi is not None and mi.kind == "graph"
        if score.graph and not graph:
            self.err(n.score.loc, "the activated concat score act(a^T [W h_i || W h_j]) is GAT's "
                     "(Velickovic et al. eq. 1-3): it scores the edges of a graph, and "
                     f"{where} has no graph mask", "declare `input adj: graph[N]` and set "
                     "`mask = adj`; over a sequence use `additive(…)` (eq. 6)")
            return False
        if n.self_loops and not graph:
            self.err(n.loc, f"{where}: `self_loops` adds the edge i -> i to a graph, and the "
                     "module has no graph mask", "set `mask = adj` with `input adj: graph[N]`, "
                     "or drop `self_loops`")
            return False
        if n.out_bias is not None and not graph:
            self.err(n.loc, f"{where}: `bias = {str(n.out_bias).lower()}` switches graph "
                     "attention's output bias, and the module has no graph mask", "set "
                     "`mask = adj` with `input adj: graph[N]`, or give `bias` a score bias "
                     "(`alibi`, `gaussian(…)`)")
            return False
        if mi is None:
            return True
        if mode != "sequence" or groups:
            self.err(n.loc, f"{where}: mask `{mi.id}` gives one row of keys per query position, "
                     "so the query must be a sequence over its own axis and the keys have no "
                     "other axes (one attention per example)",
                     "a query with one vector per position, e.g. `query = project(x)`")
            return False
        axes = (q.axes[-1], attended)
        if mi.kind == "mask" and tuple(mi.axes) != axes:
            self.err(n.loc, f"{where}: mask `{mi.id}` is over ({', '.join(mi.axes)}), and the "
                     f"module's query and keys over ({', '.join(axes)})",
                     f"declare `input {mi.id}: mask[{', '.join(axes)}]`")
            return False
        if graph and axes != (mi.axes[0], mi.axes[0]):
            self.err(n.loc, f"{where}: graph `{mi.id}` relates the nodes of axis "
                     f"`{mi.axes[0]}`, and the module's query and keys are over "
                     f"({', '.join(axes)})", "graph attention: each node's features attend "
                     "over its neighbours' (query, keys and values over the graph's axis)")
            return False
        refuse = None
        if align.centred or n.position or n.bias or n.affinity or n.capsules \
                or align.gate or n.coverage:
            refuse = ("local alignment" if align.centred else "a position term"
                      if n.position else "a score bias" if n.bias else "an affinity matrix"
                      if n.affinity else "capsules" if n.capsules else "a sigmoid gate"
                      if align.gate else "coverage")
        elif graph and (not align.plain or n.dimensionality == "multi"
                        or penalised(n) or n.coverage or n.share or n.mask != "none"):
            refuse = (f"`{n.align.fn}` alignment" if not align.plain else
                      "multi-dimensional weights" if n.dimensionality == "multi" else
                      "a penalty" if penalised(n) else
                      "`share`" if n.share else f"the {n.mask} mask")
        if refuse:
            # (coverage is the last of the first list: nothing else refused)
            coverage = n.coverage and not (align.centred or n.position or n.bias or n.affinity
                                           or n.capsules or align.gate)
            why = ("graph attention normalises each node's scores over its neighbours "
                   "(Velickovic et al. eq. 3) with one softmax per head" if graph else
                   "coverage scores the query positions one at a time (See et al. eq. 10-11) "
                   "over all the keys" if coverage else
                   "a mask input is the whole (B, Lq, Lk) keep matrix")
            self.err(n.loc, f"{where}: mask `{mi.id}` cannot be combined with {refuse}: {why}",
                     "drop one of the two")
            return False
        if graph and not score.graph:
            self.err(n.score.loc, f"{where}: graph attention scores the edges with GAT's "
                     f"activated concat score, not `{n.score.fn}`", "write `score = "
                     "activated_concat(act = leaky_relu(0.2))` (Velickovic et al. eq. 1)")
            return False
        if graph and n.heads > 1 and n.heads_out == "project":
            self.err(n.loc, f"{where}: GAT joins its heads by concatenation or by their mean "
                     "(Velickovic et al. eq. 5-6), with no W_O", "set `heads_out = concat` "
                     "(hidden layers) or `heads_out = mean` (the output layer)")
            return False
        return True

    def modifiers_fit(self, f: Fit) -> bool:
        """Score modifiers (``position``, ``bias``) relate query position i to key position j
        of one sequence; relative and rotary positions enter the q·k term, so the score must
        have one; rotary turns pairs of features, so a head's width must be even."""
        n, k, mode, ctx_axes, attended, where = f.n, f.k, f.mode, f.ctx_axes, f.attended, f.where
        for m in (n.position, n.bias):
            if m is None:
                continue
            record = mech.MODIFIERS[m.fn]
            what = f"`{'position' if m is n.position else 'bias'} = {m.fn}`"
            if mode != "sequence" or ctx_axes[-1] != attended or n.affinity is not None:
                self.err(m.loc, f"{where}: {what} relates query position i to key position j "
                         "of one sequence, but this module has no query sequence over its "
                         "keys' axis",
                         "score modifiers are for self-attention (`query = project(F)`, "
                         "`keys = F`)")
                return False
            if record.qk and not mech.SCORES[n.score.fn].qk:
                self.err(m.loc, f"{where}: {what} enters the q·k term of the score, and the "
                         f"`{n.score.fn}` score has none",
                         "use `score = scaled_multiplicative` (or `multiplicative`), or a "
                         "`bias = …` added to any score")
                return False
            if n.dimensionality == "multi":
                self.err(m.loc, f"{where}: {what} gives one term per pair of positions; "
                         "multi-dimensional attention scores every feature (eq. 31)",
                         "drop the modifier or use `dimensionality = single`")
                return False
            if "score_terms" not in n.align.record.caps:  # terms added to its scores
                self.err(m.loc, f"{where}: {what} is added to the scores before a normalised "
                         f"alignment over all the keys; `{n.align.fn}` alignment is not one",
                         "use `align = global` (or `sparsemax`, `entmax`)"
                         + ("; the Gaussian bias is itself a soft local window (Yang et al.)"
                            if mech.ALIGNS[n.align.fn].centred else ""))
                return False
            d_head = k.dim // n.heads
            if record.pairs and d_head % 2:
                self.err(m.loc, f"{where}: rotary positions turn pairs of features, but each "
                         f"head has d_k / heads = {k.dim} / {n.heads} = {d_head}, an odd width",
                         "give the keys and query an even width per head")
                return False
        return True


    def align_fits(self, f: Fit) -> bool:
        """Local alignment centres its window on a position the query gives (eq. 27-28); a
        reinforced alignment's policy reads one vector per example (``policy.py``)."""
        al = f.n.align
        if not policy_fits(self, f):
            return False
        if mech.ALIGNS[al.fn].centred:
            if f.mode == "none":
                self.err(al.loc, "local alignment centres a window on a position the query "
                         "gives (eq. 27-28); this module has no query")
                return False
            if al.position == "monotonic" and f.mode != "sequence":
                self.err(al.loc, "monotonic local alignment sets p = the query's position "
                         "(eq. 27), so the query must be a sequence",
                         "use `position = predictive` (eq. 28)")
                return False
        return True
