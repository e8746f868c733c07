"""Mechanisms on a multi-head module's heads that users of x-transformers reach for:
talking heads (Shazeer et al. 2020), learned memory key/values (x-transformers'
`num_mem_kv`) and per-head value gates (`gate_value_heads`). Each is a field of the
statement (`talking_heads = true | pre | post`, `mem_kv = 4`, `head_gates = true`: `true`
is the record with its defaults, `false` none, another value its first parameter), an
``ir.Mech`` in ``ir.Attention.head_mechanisms``, and a template under
templates/codegen/heads/ whose slots `attention.py.j2` calls. None changes the survey's reading of the heads (Multi-Head); the
classifier adds each one's reason (``heads_reading``)."""

from __future__ import annotations

from ..params import P, enum, pint
from .others import HEADS_OUT
from .record import CtorArg, Mechanism

TALKING_REASON = ("talking heads (Shazeer et al. 2020) mix the heads' {which} with a learned "
                  "H x H matrix; each head still scores its own projections of q and k, so "
                  "the module stays multi-head (eq. 38-40)")

# Ye et al. 2024's differential attention: each head's q and k in two halves, two softmax
# maps, the second subtracted with a learned weight lambda, and each head's context RMS-
# normalised and scaled by (1 - lambda_init). Still one context per head: Multi-Head.
DIFFERENTIAL_REASON = ("differential attention (Ye et al. 2024): each head's q and k split in "
                       "two, two softmax maps, softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 "
                       "K2^T / sqrt(d)) with a learned lambda (lambda_init = {lambda_init}); "
                       "each head still scores its own projections and gives one context, so "
                       "the module stays multi-head (eq. 38-40)")
# lambda_init at layer l (1-based) where a repeat's hop leaves it unset (Ye et al. sec. 2.1):
# as code (`{math}`: the generated file's math module), and as the reason says it
LAMBDA_BY_DEPTH = ("lambda_init", "0.8 - 0.6 * {math}.exp(-0.3 * ({l} - 1))",
                   "0.8 - 0.6 exp(-0.3 (l - 1)) at layer l")

HEAD_MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (
    # before the others: its norm of each head's context comes before a head gate scales it
    Mechanism("trait", "differential", (P("lambda_init", "float", False, 0.8, below=1.0),),
              reason=DIFFERENTIAL_REASON,
              label=lambda m: "differential, lambda_init " + (
                  "by depth" if m.lambda_init is None else f"= {m.lambda_init:g}"),
              class_part="Differential",
              doc="Differential attention (Ye et al. 2024): each head's q and k in two halves, "
                  "a = softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d)), lambda = "
                  "exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init; each head's context RMS-"
                  "normalised, times (1 - lambda_init).",
              ctor=(CtorArg("lambda_init", "float", "0.8", owner="heads", field="lambda_init",
                            sym="lambda_init", mechanism="differential",
                            comment="lambda_init: lambda's constant part (Ye et al.: 0.8 - "
                                    "0.6 exp(-0.3 (l - 1)) at layer l)"),),
              template="heads/differential.py.j2", requires=("dot", "score_terms"),
              excludes=("multi_dimensional", "coverage", "affinity", "capsules", "position",
                        "bias", "qk_norm", "kv_heads", "adds_keys", "mixes_heads"),
              conflict=("differential attention", "it splits each head's q and k of a "
                        "dot-product score into two softmax maps over one sequence's keys"),
              by_depth=(LAMBDA_BY_DEPTH,),
              recognised_by=("difference_of_softmax_maps",), title="differential attention",
              not_distribution="differential attention's weights are a difference of two "
                               "softmax maps, a1 - lambda a2: some are negative, and they are "
                               "not normalised over the keys"),
    # mix: the heads' scores before the alignment ("pre"), their weights after it ("post")
    Mechanism("trait", "talking_heads", (enum("mix", ("pre", "post", "both"), "both"),),
        reading="Multi-Head", reason=lambda m: TALKING_REASON.format(
        which={"pre": "scores before the alignment", "post": "weights after it",
               "both": "scores before the alignment and their weights after it"}[m.mix]),
        label=lambda m: {"pre": "talking heads (scores)", "post": "talking heads (weights)",
                         "both": "talking heads"}[m.mix],
        class_part="TalkingHeads",
        doc=lambda m: "Talking heads (Shazeer et al. 2020): " + {
            "pre": "e'_h = sum_g P_hg e_g before the alignment",
            "post": "a'_h = sum_g Q_hg a_g after the alignment",
            "both": "e'_h = sum_g P_hg e_g before the alignment, a'_h = sum_g Q_hg a_g "
                    "after it"}[m.mix] + "; P and Q start as the identity.",
        template="heads/talking_heads.py.j2", caps=("mixes_heads",), requires=("heads",),
        excludes=("multi_dimensional", "coverage", "edges"),
        conflict=("talking heads", "they mix the H x H scores or weights of a module's heads")),
    Mechanism("trait", "mem_kv", (pint("mem_kv", hi=4096),),
              reason="{mem_kv} learned memory key/value pairs per head join every sequence's "
                     "keys (x-transformers' num_mem_kv): more keys to align over, the same "
                     "heads, scores and alignment",
              label="{mem_kv} memory key/values", class_part="Memory",
              doc="Memory key/values (x-transformers' num_mem_kv): mem_kv learned keys and "
                  "values per head before every sequence's keys, never masked; a covers the "
                  "sequence's keys, extras[\"memory\"] the memory's (N, H, Lq, mem_kv).",
              ctor=(CtorArg("mem_kv", "int", owner="heads", field="mem_kv",
                            comment="learned memory key/values per head", mechanism="mem_kv"),),
              template="heads/mem_kv.py.j2", caps=("adds_keys",), requires=("dot", "query"),
              excludes=("multi_dimensional", "coverage", "affinity", "position", "bias",
                        "window"),
              conflict=("memory key/values", "they join the keys of a dot-product score "
                        "over one sequence, with no position in it")),
    Mechanism("trait", "head_gates",
              reason="each head's context is gated by sigmoid(w_h^T q + b_h) (x-transformers' "
                     "gate_value_heads): a scale per head and query after the alignment, the "
                     "same heads, scores and weights",
              label="head gates", class_part="HeadGated",
              doc="Head gates (x-transformers' gate_value_heads): each head's context times "
                  "sigmoid(w_h^T q + b_h), from the query input; w = 0, b = 10 at the start.",
              template="heads/head_gates.py.j2", requires=("query",),
              excludes=("affinity", "capsules", "per_key"),
              conflict=("head gates", "they scale each head's context by a gate from the "
                        "query, after a softmax-like alignment")),
)}


def present(n) -> list[Mechanism]:
    """The records of the head mechanisms statement ``n`` has, in class-name order."""
    return [m.record for m in n.head_mechanisms]


def heads_reading(n) -> str:
    """The reasons the classifier adds to a module's Multi-Head cell ('' without any): the
    head mechanisms', then the way the heads join (routing by agreement has one)."""
    joined = HEADS_OUT[n.heads_out].text("reason", n)
    return "".join("; " + m.record.text("reason", m) for m in n.head_mechanisms) + \
        ("; " + joined if joined else "")


def class_key(n) -> str:
    """The head mechanisms' part of an attention class's key ('' without any, so that the
    other modules' keys stay as they were): each one's name and its parameters that are
    no constructor argument (talking heads' `mix` makes another class, `mem_kv` does not)."""
    return repr([(m.fn, [(k, v) for k, v in m.params
                         if k not in {a.field for a in m.record.ctor}])
                 for m in n.head_mechanisms]) if n.head_mechanisms else ""
