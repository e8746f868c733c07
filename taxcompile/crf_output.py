"""The front end's checks of the two CRFs (issue 25).

``crf(x, tags)``, a linear-chain CRF output layer (Lafferty et al.; the tagger of Winata et
al. and of pytorch-crf): emissions W x + b, (…, L, tags), over the positions of x's last
axis, scored with tag transitions. The generated model returns the emissions;
``Model.loss`` is the CRF's negative log-likelihood (the forward algorithm) and
``Model.decode`` the Viterbi path (``codegen/crf_output.py``). Its shape rule is a
``check.Checker`` rule registered in ``ops.OPS``; ``check`` imports this module.

Structured attention (``align = crf``): where its weights are not a distribution over the
keys (``checks`` asks ``unnormalised``). No torch here (the front end)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ir, ops
from .check.core import Shape, _name

if TYPE_CHECKING:
    from .check import Checker

# Structured attention (`align = crf`, Kim et al.): its marginals p(z_l = 1) each lie in
# (0, 1) but do not sum to 1 over the keys unless divided by their sum.
UNNORMALISED = ("a CRF's marginals p(z_l = 1) are not normalised over the keys "
                "(`crf(normalize = true)` divides them by their sum)")


def unnormalised(n: ir.Attention) -> bool:
    """Whether ``n``'s weights are a structured attention's raw marginals (checks reads it
    where a distribution over the keys is needed: `.weights`, `supervised`)."""
    return n.align.fn == "crf" and not n.align.normalize


@ops.shape_rule("crf")
def shape_crf(self: "Checker", e: ir.Op, a, nid):
    """(…, L, d) -> (…, L, tags): one emission per position and tag, as an output."""
    node = self.cm.model.by_id.get(nid)
    if not (isinstance(node, ir.Node) and node.kind_ == "output" and node.expr is e):
        self.err(e.loc, "`crf` is an output layer: its emissions are scored as a whole tag "
                 "sequence by the model's loss and decode, not read as a feature",
                 "write it as a whole output: `output tags = crf(x, K)`")
        return None
    if not self._seq(e, a[0], "tags each position of a sequence"):
        return None
    if a[0].dim is None:
        self.err(e.args[0].loc, f"`crf` reads features, but `{_name(e.args[0])}` holds token "
                 f"ids {a[0]}", "embed them first: `crf(embed(x, d), K)`")
        return None
    return Shape(a[0].axes, int(e.param("tags")))
