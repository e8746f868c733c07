"""The generated model's ``loss(out, target)`` (issue 24): the cross-entropy of a
``classify`` output, with the shift of an autoregressive output (x-transformers'
AutoregressiveWrapper: the logits at position t predict token t + 1 of the sequence given to
forward()) and ``ignore_index``, plus the attention penalties when the model has some."""

from __future__ import annotations

from .. import ir
from ..operators import crf_output
from . import generate
from .plan import LossPlan


def plan_loss(p, outputs: list, penalty: bool) -> LossPlan | None:
    """None when no output is a ``classify`` (logits): the loss of other outputs (weights,
    features) is the user's."""
    if (crf := crf_output.plan_loss(p, outputs, penalty)) is not None:  # NLL, Viterbi
        return crf
    logits = [o for o in outputs if isinstance(o, ir.Node) and isinstance(o.expr, ir.Op)
              and o.expr.fn == "classify"]
    if not logits:
        return None
    t = generate.target(p.m)
    over = [o for o in logits if t is not None and p.cm.shapes[o.id].axes[-1:] == t.axes[-1:]]
    pick = (over or logits)[0]
    read = ".output" if len(outputs) == 1 else f".output[{pick.id!r}]"
    v = p.frame.vars[pick.id]
    shape = p.shape(p.cm.shapes[pick.id], dim=v.dim)
    return LossPlan(name=pick.id, read=read, shape=shape, target=t.id if over else None,
                    penalty=penalty)
