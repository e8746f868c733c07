"""Outputs of a module beyond its context: the terms it adds to the training loss (Lin et
al.'s penalty, Xu et al.'s doubly stochastic one, See et al.'s coverage and its loss, Li et
al.'s disagreement, supervised attention) and what each needs of the module's weights
(one distribution over the keys per query position, several heads, …)."""

from __future__ import annotations

from .. import ir
from .. import mechanisms as mech
from ..diagnostics import article
from .attention import Fit
from .values import not_distribution


class PenaltyChecks:
    """``penalties_fit``, ``coverage_fits`` and ``supervision_fits``."""

    def penalties_fit(self, f: Fit) -> bool:
        """The penalties and coverage of a module, in turn."""
        n, mode, groups, where = f.n, f.mode, f.groups, f.where
        heads = [rec.several_heads for rec, _ in mech.penalties(n) if rec.several_heads[0]]
        if heads and n.heads < 2:
            self.err(n.loc, f"{where}: {heads[0][0].format(heads=n.heads)}", heads[0][1])
            return False
        rows = [rec.rows for rec, _ in mech.penalties(n) if rec.rows]
        if rows and (mode != "sequence" or n.dimensionality == "multi" or n.capsules
                     or n.affinity is not None or groups):
            self.err(n.loc, f"{where}: {rows[0]}, one weight per key and query", "give the "
                     "module a query sequence (a decoder's states) and single-dimensional "
                     "weights")
            return False
        if not self.coverage_fits(f):
            return False
        target = [(rec, m) for rec, m in mech.penalties(n) if rec.target]
        if target and not self.supervision_fits(f, *target[0]):
            return False
        return True

    def coverage_fits(self, f: Fit) -> bool:
        """``coverage = true`` (See et al. eq. 10-11), ``penalty = coverage(λ)`` (eq. 12-13)
        and a penalty that needs a query (its record's ``no_query``: Li et al.'s
        disagreement on the values)."""
        n, mode, groups, where = f.n, f.mode, f.groups, f.where
        one_row = (mode != "sequence" or n.dimensionality == "multi" or n.capsules
                   or n.affinity is not None or bool(groups))
        if n.coverage and not mech.SCORES[n.score.fn].act_sum:
            self.err(n.score.loc, f"{where}: coverage enters the score inside the additive "
                     "form, e_i^t = vᵀ tanh(W_h h_i + W_s s_t + w_c c_i^t + b) (See et al. "
                     f"eq. 11); the {n.score.fn.replace('_', ' ')} score has no such term",
                     "use `score = additive(…)`, or `penalty = coverage(λ)` alone (eq. 12-13 "
                     "need no coverage in the score)")
            return False
        if n.coverage and (one_row or n.query is None):
            self.err(n.loc, f"{where}: the coverage c^t sums the weights of the earlier query "
                     "positions (See et al. eq. 10), so the module needs a query sequence (a "
                     "decoder's states) and single-dimensional weights over one key sequence",
                     "give the module `query = …` over a sequence, or drop `coverage`")
            return False
        if n.coverage and (n.share is not None or n.position is not None or n.bias is not None
                           or not mech.ALIGNS[n.align.fn].normalised):
            what = ("`share`" if n.share is not None else "a position term or score bias"
                    if n.position or n.bias else f"`{n.align.fn}` alignment")
            self.err(n.loc, f"{where}: coverage is built for a module of its own with "
                     "w_c c_i^t inside its additive score and a normalised alignment over all "
                     f"the keys (See et al. eq. 10-11); {what} is not combined with it",
                     "use `align = global` (or `sparsemax`, `entmax`) without `share`, "
                     "`position` or `bias`")
            return False
        for rec, v in mech.penalties(n):  # one that reads each head's own values, say
            if n.query is None and (why := rec.text("no_query", v)):
                self.err(n.loc, f"{where}: {why}", rec.no_query_hint)
                return False
        return True

    def supervision_fits(self, f: Fit, rec: mech.Mechanism, sup: ir.Mech) -> bool:
        """A penalty with a target (its record's ``target``; ``penalty = supervised(gold,
        …)``, Liu et al. 2016): the target is an ``alignment`` input over the module's query
        positions and keys, (Lq, Lk), and the weights are one distribution over the keys per
        query position."""
        n, groups, where = f.n, f.groups, f.where
        target = sup.param(rec.target)
        gold = self.cm.model.by_id.get(target)
        if not (isinstance(gold, ir.Input) and gold.kind == "alignment"):
            what = (f"{article(gold.kind)} `{gold.kind}` input" if isinstance(gold, ir.Input)
                    else f"{article(gold.kind_)} {gold.kind_}" if gold is not None else "unknown")
            self.err(sup.loc, f"{where}: `{rec.name}` compares the weights with a target "
                     f"alignment, but `{target}` is {what}",
                     "declare the target as `input gold: alignment[T, S]` (rows sum to 1, or "
                     "are all zero where a query position is aligned to nothing)")
            return False
        why = ("its weights are per feature (eq. 30-32)" if n.dimensionality == "multi" else
               "its weights are per class (eq. 43-45)" if n.capsules else
               not_distribution(n) or
               (f"it attends once per group of {', '.join(groups)}" if groups else None))
        if why:
            self.err(sup.loc, f"{where}: `{rec.name}` compares one distribution over the keys "
                     f"per query position with the target alignment, but {why}",
                     "supervise a single-dimensional module without groups whose weights are "
                     "a distribution over its keys (a softmax, sparsemax, entmax, top-k, …)")
            return False
        want = f.ctx_axes + (f.attended,)
        if gold.axes != want:
            shown = ", ".join(want)
            self.err(sup.loc, f"{where}: the target alignment `{gold.id}` has axes "
                     f"({', '.join(gold.axes)}), but the module's weights have "
                     f"({shown}) (query positions, keys)",
                     f"declare it as `input {gold.id}: alignment[{shown}]`")
            return False
        return True

