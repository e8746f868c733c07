"""The plan of ``crf(x, tags)``, a linear-chain CRF output layer (``crf_output.py`` has its
shape rule): the model returns the emissions, and ``Model.loss`` / ``Model.decode`` call
the layer's ``nll`` (the forward algorithm) and ``decode`` (Viterbi) on them
(``helpers/crf_tagger.py.j2``, ``crf_loss.py.j2``)."""

from __future__ import annotations

from .. import ir
from ..ops import plan_rule
from .features import resized
from .plan import LossPlan

SUFFIX = "crf"


@plan_rule("crf")
def crf(p, e, a, n):
    x, k = a[0], p.p(e, "tags")
    p.helpers.add("crf_tagger")
    mod = p.module(n, SUFFIX, f"LinearChainCRF({x.dim}, {k})",
                   "emissions W x + b and tag transitions (a linear-chain CRF)")
    return resized(x, f"{mod}({x.name})", e.param("tags"), k)


def plan_loss(p, outputs: list, penalty: bool) -> LossPlan | None:
    """The loss of the first crf output (its NLL) and its decoding; None without one."""
    crfs = [o for o in outputs if isinstance(o, ir.Node) and isinstance(o.expr, ir.Op)
            and o.expr.fn == "crf"]
    if not crfs:
        return None
    pick = crfs[0]
    read = ".output" if len(outputs) == 1 else f".output[{pick.id!r}]"
    v = p.frame.vars[pick.id]
    shape = p.shape(p.cm.shapes[pick.id], dim=v.dim).replace("cfg.", "")
    module = p.frame.owner.by_key[p.share_key(pick) + (SUFFIX,)]
    return LossPlan(name=pick.id, read=read, shape=shape, target=None, penalty=penalty,
                    crf=module)
