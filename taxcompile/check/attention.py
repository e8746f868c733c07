"""Attention statements: the shapes of a module's query, keys and values, how its query
meets its keys (``Fit.mode``), and whether each of its mechanisms fits them (Table II,
eq. 12-45), e.g. multiplicative scores need d_q = d_k. What a mechanism needs is read off
its record in ``taxcompile/mechanisms/`` (``equal_qk``, ``hidden``, ``affinity``, …), never
from its name. ``attention`` builds a ``Fit`` and hands it to each part in turn: the score
(``score_fits``), co-attention (``coattention_fits``), heads, dimensionality and capsules
(``heads_fit``), then ``fits`` (masks, score modifiers, alignments) and ``penalties``."""

from __future__ import annotations


from .. import ir, module_checks
from ..frozen import Positional
from .. import mechanisms as mech
from ..mechanisms import needs
from ..lower import SCORES_WITHOUT_QUERY
from .grouped import grouped_fit, qk_norm_fits
from .lsh import lsh_fits
from .segment import segment_fits
from .core import (AttentionInfo, Shape, _base_ref, _name, context_dim, learned_capsules,
                   learned_set)


class Fit(Positional):
    """What the checks of one attention statement share: its query, keys and values, the
    axis it attends over and the keys' other axes (``groups``: one attention per group),
    how its query meets its keys, and its context's axes."""

    n: ir.Attention
    q: Shape | None
    k: Shape
    v: Shape
    attended: str  # the axis the weights are normalised over
    groups: tuple[str, ...]
    # "none" | "single" (one query per group) | "sequence" (one per position) | "capsules"
    # (one per class: an earlier capsule module's output) | "other" (a gate's; refused)
    mode: str
    ctx_axes: tuple[str, ...]  # the context's axes (before a capsule axis)
    cax: str | None  # the classes' axis of a query that is a capsule module's output

    @property
    def where(self) -> str:
        return f"attention `{self.n.name}`"


class AttentionChecks:
    """``Checker.attention`` and the fit of a module's score, co-attention and heads."""

    def attention(self, n: ir.Attention) -> Shape | None:
        f = self.roles(n)
        if f is None:
            return None
        if (refused := module_checks.refusal(n)) is not None:
            self.err(*refused)
            return None
        if (refused := needs.refusal(n)) is not None:  # its records' requires / excludes
            m, message, hint = refused
            self.err(m.loc, message, hint)
            return None
        if mech.ALIGNS[n.align.fn].shared_qk and not lsh_fits(self, f):
            return None
        if n.kv_heads and (f := grouped_fit(self, f)) is None:
            return None
        if n.qk_norm is not None and not qk_norm_fits(self, f):
            return None
        f = self.score_fits(f)
        if f is None:
            return None
        f = self.coattention_fits(f)
        if f is None or not self.heads_fit(f) or not self.masks_fit(f):
            return None
        if (n.position or n.bias) and not self.modifiers_fit(f):
            return None
        if n.memory is not None and not segment_fits(self, f):
            return None
        if not self.align_fits(f) or not self.penalties_fit(f):
            return None
        q, k = f.q, f.k
        self.cm.attention[n.id] = AttentionInfo(f.attended, f.groups, f.mode,
                                                q.dim if q is not None else None, k.dim, f.v.dim)
        ctx_axes = f.ctx_axes
        if f.cax is not None:
            ctx_axes = ctx_axes + (f.cax,)  # the query's classes
        elif n.capsules:
            axis = f"{n.id}.capsules"
            self.cm.sizes[axis] = n.capsules
            self.cm.axis_origin[axis] = n.id
            ctx_axes = ctx_axes + (axis,)
        return Shape(ctx_axes, context_dim(n, f.v.dim))

    def roles(self, n: ir.Attention) -> Fit | None:
        """The shapes of the keys, values and query, and how the query meets the keys."""
        k = self.shape(n.keys, n.id)
        v = self.shape(n.values, n.id)
        q = self.shape(n.query, n.id) if n.query is not None else None
        if k is None or v is None or (n.query is not None and q is None):
            return None
        for what, s, e in (("keys", k, n.keys), ("values", v, n.values),
                           ("query", q, n.query)):
            if s is not None and s.dim is None:
                self.err(e.loc, f"the {what} `{_name(e)}` are token ids; embed them first")
                return None
        if not k.axes:
            self.err(n.keys.loc, f"attention `{n.name}` attends over `{_name(n.keys)}`, a single "
                     f"vector {k}", "keys need a sequence, set or grid axis to attend over")
            return None
        if k.axes != v.axes:
            self.err(n.values.loc, f"values {v} and keys {k} must have the same positions")
            return None
        attended, groups = k.axes[-1], k.axes[:-1]
        mode = "none"
        ctx_axes: tuple[str, ...] = groups
        # capsules over multi-hop attention (eq. 41-43): the query is an earlier capsule
        # module's output, one row per class, and this module's capsules are those rows
        cax = self.capsule_axis(q) if n.capsules and q is not None else None
        if q is not None:
            if cax is not None and q.axes[:-1] == groups:
                mode = "capsules"  # one query per class
            elif len(q.axes) == len(k.axes) and q.axes[:-1] == groups:
                mode, ctx_axes = "sequence", q.axes
            elif q.axes == groups[: len(q.axes)]:
                mode = "single"
            elif mech.ALIGNS[n.align.fn].gate:
                mode = "other"  # gate_fits says why a gate cannot take it
            else:
                self.err(n.query.loc, f"query {q} does not fit keys {k}",
                         "a query is one vector per group of keys, or one per position of a "
                         "sequence whose other axes match the keys'")
                return None
        return Fit(n, q, k, v, attended, groups, mode, ctx_axes, cax)

    def capsule_axis(self, q: Shape) -> str | None:
        """The classes' axis when ``q`` is a capsule module's output (or a stream built from
        one, e.g. ``q + att`` in a hop): one row per class."""
        ax = q.axes[-1] if q.axes else None
        o = self.cm.model.by_id.get(self.cm.axis_origin.get(ax)) if ax else None
        return ax if isinstance(o, ir.Attention) and o.capsules else None

    def score_fits(self, f: Fit) -> Fit | None:
        """The score function against the query and keys (a gate's context stays at the
        keys' positions)."""
        n, q, k, where = f.n, f.q, f.k, f.where
        sc, score = n.score, mech.SCORES[n.score.fn]
        if mech.ALIGNS[n.align.fn].gate:
            if not self.gate_fits(f):
                return None
            f = f.replace(ctx_axes=k.axes)  # the gated values, at the keys' positions
        if q is None and sc.fn not in SCORES_WITHOUT_QUERY:
            scores = " and ".join(f"`{s}`" for s in SCORES_WITHOUT_QUERY)
            self.err(n.loc, f"{where} has no query, which only the {scores} scores allow (eq. 33)",
                     "give a learned query, `query = learned(d)` (eq. 34), or a projection of "
                     "the features, `query = project(F)` (eq. 35)")
            return None
        if score.equal_qk and q.dim != k.dim:
            self.err(sc.loc, f"the {sc.fn.replace('_', ' ')} score needs d_q = d_k, but the query "
                     f"has {q.dim} and the keys have {k.dim}",
                     f"project one side, e.g. `query = project({_written(n, n.query)}, "
                     f"{k.dim})`")
            return None
        if score.linear and q is not None:
            self.err(sc.loc, "the concat score w^T W [q; k_l] = w^T W1 q + w^T W2 k_l is linear: "
                     "the query adds the same number to every key's score, which the alignment "
                     "cancels, so the query would be ignored",
                     "use `score = additive(…)` (a non-linearity between q and k, eq. 6), or "
                     "score the keys alone by dropping the query (eq. 33)")
            return None
        if score.per_key:
            size = self.cm.sizes.get(f.attended)
            if size is None:
                self.err(sc.loc, f"the location score predicts one weight per key from the query "
                         f"alone, so `{f.attended}` needs a fixed length",
                         f"give the axis a length where the input is declared, e.g. "
                         f"`(…, {f.attended} = 50)`")
                return None
        return f

    def gate_fits(self, f: Fit) -> bool:
        """A sigmoid gate (Oktay et al.): one weight per key position from that position's
        key and query alone, e_l = w^T act(W1 q_l + W2 k_l + b), a_l = sigmoid(e_l + b_psi)."""
        n, q, k, mode = f.n, f.q, f.k, f.mode
        where, sc = f.where, n.score
        score = mech.SCORES[sc.fn]
        if not score.act_sum and not (score.linear and q is None):
            self.err(sc.loc, f"{where}: a sigmoid gate scores each position on its own with the "
                     "additive form w^T act(W1 q_l + W2 k_l + b) (eq. 6, Oktay et al.); the "
                     f"{sc.fn.replace('_', ' ')} score is not computed per position",
                     "use `score = additive(…)`")
            return False
        if mode == "other" or mode == "sequence" and q.axes != k.axes:
            self.err(n.query.loc, f"{where}: a sigmoid gate pairs each key position with the "
                     f"query at the same position, but the query {q} and the keys {k} run "
                     "over different positions", "resample the query to the keys' grid, e.g. "
                     "`upsample(g, 2)`, `maxpool(g, 2)` or `resize(g, x)`")
            return False
        why = {"affinity": "an affinity matrix relates pairs of positions",
               "capsules": "capsules weigh all keys for one query per class",
               "mask": "a mask relates pairs of positions of one sequence",
               "penalty": "the penalty compares rows of weights that sum to 1"}
        given = {"affinity": n.affinity, "capsules": n.capsules, "mask": n.mask != "none",
                 "penalty": n.coverage
                 or any(rec.rows or rec.several_heads[0] for rec, _ in mech.penalties(n))}
        for name, reason in why.items():
            if given[name]:
                self.err(n.loc, f"{where}: a sigmoid gate weighs each position on its own, so "
                         f"it takes no `{name}` ({reason})",
                         f"drop `{name}`, or use a softmax alignment")
                return False
        return True

    def coattention_fits(self, f: Fit) -> Fit | None:
        """An affinity matrix (eq. 12-16): its two inputs are the query's and the keys'
        positions; a pooled score gives one context per input."""
        n, where = f.n, f.where
        sc, score = n.score, mech.SCORES[n.score.fn]
        if n.affinity is not None:
            if not self.affinity_fits(f):
                return None
            if score.affinity == "pooled":
                f = f.replace(mode="single", ctx_axes=f.groups)  # eq. 14-16: one per input
        elif score.needs_affinity:
            self.err(sc.loc, f"the `{sc.fn}` score reads an affinity matrix (eq. 12-16)",
                     "add `affinity = NAME` with `affinity NAME = affinity(A, B)`")
            return None
        if n.affinity is not None and n.capsules:
            self.err(n.loc, f"{where} takes its queries from the other input through affinity "
                     f"`{n.affinity}` (eq. 14-15), but capsule-based attention learns one query "
                     "per class (eq. 43): a capsule has no query from the other input",
                     "drop `capsules`, or attend with learned capsule queries in another module")
            return None
        if n.affinity is not None and mech.ALIGNS[n.align.fn].centred \
                and score.affinity == "pooled":
            self.err(n.align.loc, f"{where}: the `{sc.fn}` score reads the whole other input "
                     f"through affinity `{n.affinity}` (eq. 14-16), one context per input: "
                     "there is no query position or vector for local alignment's centre p "
                     "(eq. 27-28)", "use `align = global` (or `sparsemax`, `entmax`), or "
                     "`score = affinity` (one context per query position)")
            return None
        if n.affinity is not None and score.needs_affinity and (
                n.heads > 1 or n.dimensionality == "multi"):
            what = "heads" if n.heads > 1 else "multi-dimensional weights"
            eq = "eq. 16" if score.affinity == "pooled" else "eq. 12-13"
            self.err(n.loc, f"{where}: the `{sc.fn}` score reads its scores off affinity "
                     f"`{n.affinity}` ({eq}), one number per pair of positions with no "
                     f"weights of its own, so it cannot have {what} (eq. 38 projects each "
                     "head's query and keys; eq. 31 scores each feature)",
                     "use `score = additive(…)`, whose per-head W_q, W_k and w (or W_d) extend "
                     "eq. 14-15")
            return None
        return f

    def affinity_fits(self, f: Fit) -> bool:
        n, q, k = f.n, f.q, f.k
        aff = self.cm.shapes.get(n.affinity)
        if aff is None:
            return False
        pair = set(aff.axes[-2:])
        if q is None or k.axes[-1] not in pair or q.axes[-1:] == () or q.axes[-1] not in pair \
                or q.axes[-1] == k.axes[-1]:
            self.err(n.loc, f"attention `{n.name}` uses affinity `{n.affinity}` over "
                     f"{' and '.join(sorted(pair))}: its keys must run over one of them and its "
                     "query over the other", "parallel co-attention: the keys of one input are "
                     "the query of the other (eq. 12-15)")
            return False
        return True

    def heads_fit(self, f: Fit) -> bool:
        """Heads split q, k and v evenly (eq. 38); multi-dimensional weights (eq. 30-32);
        capsules (eq. 41-45)."""
        n, q, k, v, where = f.n, f.q, f.k, f.v, f.where
        sc = n.score
        if n.heads > 1:
            dims = (("d_q", q.dim if q is not None else None), ("d_k", k.dim), ("d_v", v.dim))
            for what, d in dims:
                if d is not None and d % n.heads:
                    self.err(n.loc, f"{where}: {what} = {d} is not divisible by heads = {n.heads}",
                             "each head gets an equal slice (eq. 38)")
                    return False
            # a join's equal parts side by side are the context (routing's output capsules)
            wide = v.dim and v.dim // (n.kv_heads or n.heads) * n.heads
            name, _, what = n.join.record.parts if n.join is not None else ("", "", "")
            if name and wide and wide % n.join.param(name):
                self.err(n.join.loc, f"{where}: `{name} = {n.join.param(name)}` of "
                         f"`{n.join.fn}` cannot split the context's {wide} features evenly "
                         f"({what})", f"choose `{name}` dividing {wide}")
                return False
        if n.dimensionality == "multi":
            if not mech.SCORES[sc.fn].hidden:
                self.err(sc.loc, f"multi-dimensional attention scores each feature with "
                         f"W_d^T act(W1 q + W2 k + b) (eq. 31); `{sc.fn}` gives one number per key",
                         "use `score = additive(…)`")
                return False
            if mech.ALIGNS[n.align.fn].picks_one:
                self.err(n.align.loc, "hard alignment picks one value vector (eq. 26); "
                         "multi-dimensional weights need a distribution per feature (eq. 32)",
                         "use `dimensionality = single` with `align = hard`, or a soft "
                         "alignment with `dimensionality = multi`")
                return False
        if n.capsules:
            cax = f.cax
            if learned_set(n.query):
                self.err(n.query.loc, f"{where}: capsule-based attention has one learned query "
                         f"per class (eq. 43), from one vector `learned(d)`; this query is a "
                         f"learned set of {learned_set(n.query)} vectors",
                         f"write `query = learned({f.q.dim})`: `capsules = {n.capsules}` makes "
                         "one query per class of it")
                return False
            if not learned_capsules(n) and cax is None:
                self.err(n.loc, f"{where}: capsule-based attention learns one query per class "
                         "(eq. 43)", "write `query = learned(d)`, or over several hops the "
                         "output of an earlier capsule module, one query per class (eq. 41-43)")
                return False
            if cax is not None and self.cm.sizes.get(cax) != n.capsules:
                self.err(n.loc, f"{where}: the query holds {self.cm.sizes.get(cax)} capsules' "
                         f"outputs, one per class, but this module has capsules = {n.capsules}",
                         f"write `capsules = {self.cm.sizes.get(cax)}` (one capsule per class, "
                         "eq. 43)")
                return False
            if n.heads > 1 and n.heads_out == "mean":
                self.err(n.loc, f"{where}: each capsule's probability reads its whole context, "
                         "p_c = sigmoid(w_c^T c_c + b_c) with c_c of width d_v (eq. 44), but "
                         "`heads_out = mean` gives d_v / H",
                         "use `heads_out = project` (c_c = W_O concat(c_c^(1), ..., c_c^(H)), "
                         "eq. 40) or `heads_out = concat`")
                return False
        return True


def _written(n, e) -> str:
    """The name a hint writes for the feature ``e`` reads, as the spec writes it at ``n``:
    an updated feature by its name (`q`, not the version `q@2`), a node of ``n``'s own hop
    without the hop's prefix (`x`, not `enc[2].x`)."""
    ref = _base_ref(e)
    if ref is None:
        return "…"
    ref = ref.split("@")[0]
    prefix = n.id.rpartition(".")[0] + "."
    return ref[len(prefix):] if n.hop is not None and ref.startswith(prefix) else ref
