"""The generated model's ``loss(out, target)``: the cross-entropy of a
``classify`` output, with the shift of an autoregressive output (x-transformers'
AutoregressiveWrapper: the logits at position t predict token t + 1 of the sequence given to
forward()) and ``ignore_index``, plus the attention penalties when the model has some."""

from __future__ import annotations

import dataclasses

from .. import ir
from ..operators import crf_output
from . import generate
from .plan import LossPlan


def _kind(p, o) -> str:
    """How output ``o``'s logits are read: ``classes`` (C > 1 classes: cross-entropy over
    them), ``positions`` (one score per position, `classify(x, 1)` over a sequence or a grid:
    a pointer, cross-entropy over the positions, as QANet's and BiDAF's start and end) or
    ``binary`` (one logit per example: the sigmoid's cross-entropy). Cross-entropy over one
    class would always be 0."""
    shape = p.cm.shapes[o.id]
    if shape.dim != 1:
        return "classes"
    return "positions" if shape.axes else "binary"


def _head(p, o, outputs: list, target, penalty: bool) -> LossPlan:
    read = ".output" if len(outputs) == 1 else f".output[{o.id!r}]"
    v = p.frame.vars[o.id]
    shape = p.shape(p.cm.shapes[o.id], dim=v.dim)
    kind = _kind(p, o)
    if kind != "classes":
        p.helpers.add("output_loss")
    return LossPlan(name=o.id, read=read, shape=shape, target=target, penalty=penalty,
                    kind=kind)


def plan_loss(p, outputs: list, penalty: bool, sampled: bool = False) -> LossPlan | None:
    """None when no output is a ``classify`` (logits): the loss of other outputs (weights,
    features) is the user's. A decoder's loss is that of its output over the target; a
    model with several logits outputs and no target sums theirs (``target`` a dict).
    ``sampled``: an alignment samples positions (hard, reinforced), which no gradient
    reaches, so the loss adds their REINFORCE term (the per-example loss as the reward)."""
    if (crf := crf_output.plan_loss(p, outputs, penalty)) is not None:  # NLL, Viterbi
        if sampled:  # the reward: each sequence's NLL
            p.helpers.add("reinforce")
            crf = dataclasses.replace(crf, sampled=True)
        return crf
    plan = _plan(p, outputs, penalty)
    if plan is not None and sampled:
        p.helpers.update(("example_loss", "output_loss", "reinforce"))  # (loss_terms)
        plan = dataclasses.replace(plan, sampled=True)
    return plan


def _plan(p, outputs: list, penalty: bool) -> LossPlan | None:
    logits = [o for o in outputs if isinstance(o, ir.Node) and isinstance(o.expr, ir.Op)
              and o.expr.fn == "classify"]
    if not logits:
        return None
    t = generate.target(p.m)
    over = [o for o in logits if t is not None and p.cm.shapes[o.id].axes[-1:] == t.axes[-1:]]
    if over or len(logits) == 1:
        return _head(p, (over or logits)[0], outputs, t.id if over else None, penalty)
    p.helpers.add("output_loss")
    heads = [_head(p, o, outputs, None, penalty) for o in logits]
    return dataclasses.replace(heads[0], others=tuple(heads[1:]))
