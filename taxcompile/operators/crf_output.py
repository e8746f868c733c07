"""The two CRFs.

``crf(x, tags)``, a linear-chain CRF output layer (Lafferty et al.; the tagger of Winata et
al. and of pytorch-crf): emissions W x + b, (…, L, tags), over the positions of x's last
axis, scored with tag transitions. The generated model returns the emissions;
``Model.loss`` is the CRF's negative log-likelihood (the forward algorithm) and
``Model.decode`` the Viterbi path: they call the layer's ``nll`` and ``decode``
(``helpers/crf_tagger.py.j2``, ``crf_loss.py.j2``; ``plan_loss`` plans them).
"""

from __future__ import annotations

from .. import ir
from ..shapes import Shape, expr_name
from .record import node, op, pint

SUFFIX = "crf"  # the layer's module: `<statement>_crf`


def shape_crf(self, e: ir.Op, a, nid):
    """(…, L, d) -> (…, L, tags): one emission per position and tag, as an output."""
    node_ = self.cm.model.by_id.get(nid)
    if not (isinstance(node_, ir.Node) and node_.kind_ == "output" and node_.expr is e):
        self.err(e.loc, "`crf` is an output layer: its emissions are scored as a whole tag "
                 "sequence by the model's loss and decode, not read as a feature",
                 "write it as a whole output: `output tags = crf(x, K)`")
        return None
    if not self._seq(e, a[0], "tags each position of a sequence"):
        return None
    if a[0].dim is None:
        self.err(e.args[0].loc, f"`crf` reads features, but `{expr_name(e.args[0])}` holds "
                 f"token ids {a[0]}", "embed them first: `crf(embed(x, d), K)`")
        return None
    return Shape(a[0].axes, int(e.param("tags")))


def plan_crf(p, e, a, n):
    x, k = a[0], p.p(e, "tags")
    p.helpers.add("crf_tagger")
    mod = p.module(n, SUFFIX, lambda: f"LinearChainCRF({x.dim}, {k})",
                   "emissions W x + b and tag transitions (a linear-chain CRF)")
    return p.kit.resized(x, f"{mod}({x.name})", e.param("tags"), k)


def plan_loss(p, outputs: list, penalty: bool):
    """The ``LossPlan`` of the first crf output (its NLL) and its decoding; None without
    one."""
    crfs = [o for o in outputs if isinstance(o, ir.Node) and isinstance(o.expr, ir.Op)
            and o.expr.fn == "crf"]
    if not crfs:
        return None
    pick = crfs[0]
    read = ".output" if len(outputs) == 1 else f".output[{pick.id!r}]"
    v = p.frame.vars[pick.id]
    shape = p.cm.shapes[pick.id]
    module = p.frame.owner.by_key[p.share_key(pick) + (SUFFIX,)]
    return p.kit.LossPlan(name=pick.id, read=read, shape=p.shape(shape, dim=v.dim), target=None,
                          penalty=penalty, crf=module, positions=p.shape(Shape(shape.axes, None)))


OPS = {o.name: o for o in (
    # a linear-chain CRF tagger (Lafferty et al.; Winata et al.'s output layer): emissions
    # W x + b over the last axis's positions, tag transitions, NLL loss and Viterbi decoding
    op("crf", node(), pint("tags"), shape=shape_crf, plan=plan_crf),
)}
