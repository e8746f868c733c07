"""Mechanisms on a multi-head module's heads that users of x-transformers reach for (issue
25): talking heads (Shazeer et al. 2020), learned memory key/values (x-transformers'
`num_mem_kv`) and per-head value gates (`gate_value_heads`). Each is a field of the
statement (`talking_heads = true`, `mem_kv = 4`, `head_gates = true`), an
``ir.Attention`` field, and a template under templates/codegen/heads/ whose slots
`attention.py.j2` calls. None changes the survey's reading of the heads (Multi-Head); the
classifier adds each one's reason (``heads_reading``)."""

from __future__ import annotations

from .others import HEADS_OUT
from .record import CtorArg, Mechanism

TALKING_REASON = ("talking heads (Shazeer et al. 2020) mix the heads' {which} with a learned "
                  "H x H matrix; each head still scores its own projections of q and k, so "
                  "the module stays multi-head (eq. 38-40)")

HEAD_MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("trait", "talking_heads", reading="Multi-Head", reason=lambda n: TALKING_REASON.format(
        which={"pre": "scores before the alignment", "post": "weights after it",
               "both": "scores before the alignment and their weights after it"}[
            n.talking_heads]),
        label=lambda n: {"pre": "talking heads (scores)", "post": "talking heads (weights)",
                         "both": "talking heads"}[n.talking_heads],
        class_part="TalkingHeads",
        doc=lambda n: "Talking heads (Shazeer et al. 2020): " + {
            "pre": "e'_h = sum_g P_hg e_g before the alignment",
            "post": "a'_h = sum_g Q_hg a_g after the alignment",
            "both": "e'_h = sum_g P_hg e_g before the alignment, a'_h = sum_g Q_hg a_g "
                    "after it"}[n.talking_heads] + "; P and Q start as the identity.",
        template="heads/talking_heads.py.j2"),
    Mechanism("trait", "mem_kv",
              reason="{mem_kv} learned memory key/value pairs per head join every sequence's "
                     "keys (x-transformers' num_mem_kv): more keys to align over, the same "
                     "heads, scores and alignment",
              label="{mem_kv} memory key/values", class_part="Memory",
              doc="Memory key/values (x-transformers' num_mem_kv): mem_kv learned keys and "
                  "values per head before every sequence's keys, never masked; a covers the "
                  "sequence's keys, extras[\"memory\"] the memory's (N, H, Lq, mem_kv).",
              ctor=(CtorArg("mem_kv", "int", field="mem_kv", sym="mem_kv",
                            comment="learned memory key/values per head"),),
              template="heads/mem_kv.py.j2"),
    Mechanism("trait", "head_gates",
              reason="each head's context is gated by sigmoid(w_h^T q + b_h) (x-transformers' "
                     "gate_value_heads): a scale per head and query after the alignment, the "
                     "same heads, scores and weights",
              label="head gates", class_part="HeadGated",
              doc="Head gates (x-transformers' gate_value_heads): each head's context times "
                  "sigmoid(w_h^T q + b_h), from the query input; w = 0, b = 10 at the start.",
              template="heads/head_gates.py.j2"),
)}


def present(n) -> list[Mechanism]:
    """The records of the head mechanisms statement ``n`` has, in class-name order."""
    on = {"talking_heads": bool(getattr(n, "talking_heads", "")),
          "mem_kv": bool(getattr(n, "mem_kv", 0)), "head_gates": getattr(n, "head_gates", False)}
    return [HEAD_MECHANISMS[name] for name, yes in on.items() if yes]


def heads_reading(n) -> str:
    """The reasons the classifier adds to a module's Multi-Head cell ('' without any): the
    head mechanisms', then the way the heads join (routing by agreement has one)."""
    joined = HEADS_OUT[n.heads_out].text("reason", n)
    return "".join("; " + rec.text("reason", n) for rec in present(n)) + \
        ("; " + joined if joined else "")


def class_key(n) -> str:
    """The head mechanisms' part of an attention class's key ('' without any, so that the
    other modules' keys stay as they were)."""
    on = [rec.name for rec in present(n)]
    return repr((on, n.talking_heads)) if on else ""
