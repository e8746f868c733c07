"""The other attention-level mechanisms: structural masks, how heads join, penalties (terms
of the training loss), the traits of a module (its heads, dimensionality, capsules, …) and
the forms of query-key normalisation."""

from __future__ import annotations

from ..params import P
from .record import CtorArg, Mechanism

# which keys a query position may see besides the padding (a constructor argument: one
# class serves every mask)
MASK_ARG = CtorArg("mask", "str", '"none"', field="mask", unset="none",
                   comment="which keys a query position may see")
MASK_DOC = ("mask: which keys a query position may see besides the padding: \"none\", "
            "\"causal\" (j <= i), \"forward\" (j < i) or \"backward\" (j > i, DiSAN).")


def _mask(name: str, keeps: str, hides_later: bool = False) -> Mechanism:
    return Mechanism("mask", name, reason=f"keys with {keeps}" if keeps else "",
                     label=f"{name} mask" if name != "none" else "", doc=MASK_DOC,
                     ctor=(MASK_ARG,), helpers=("key_keep",), hides_later=hides_later)


# Masks over one sequence: causal hides later positions (j > i); DiSAN's directional masks
# hide the position itself too: forward keeps j < i, backward keeps j > i.
MASKS: dict[str, Mechanism] = {m.name: m for m in (
    _mask("none", ""), _mask("causal", "j <= i", True), _mask("forward", "j < i", True),
    _mask("backward", "j > i"),
)}

# How a multi-head module joins its heads' contexts: W_O concat (eq. 40), the plain concat
# (Lin et al.'s flattened M), their mean (GAT's last layer), or routing by agreement into
# output capsules (Li et al. 2019, seed 000 ref. [25]; Sabour et al. 2017's dynamic routing).
HEADS_OUT: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("heads_out", "project", label="", doc="joined by W_O",
              template="heads_out/project.py.j2", full_width=True),
    Mechanism("heads_out", "concat", label="heads concatenated", doc="concatenated, no W_O",
              template="heads_out/concat.py.j2"),
    Mechanism("heads_out", "mean", label="heads averaged", doc="averaged, no W_O",
              template="heads_out/mean.py.j2"),
    Mechanism("heads_out", "routing", (P("capsules", "int"), P("iters", "int", False, 3)),
              reading="Multi-Head",
              reason=lambda n: f"routing by agreement (Li et al. 2019) aggregates its {n.heads} "
                     f"heads' contexts, the input capsules, into {n.join.capsules} output "
                     "capsules in place of W_O concat: each head still has its own projections "
                     "of q, k and v, its scores and its context (eq. 38-40), so the module "
                     "stays multi-head",
              label="heads routed into {capsules} capsules ({iters} iterations)",
              class_part="Routed",
              doc="routed by agreement (Li et al. 2019) into Nc = out_capsules output capsules "
                  "side by side: votes u_hn = W_hn c_h, b_hn = 0; routing_iters times: "
                  "C_hn = softmax_n(b_hn), s_n = sum_h C_hn u_hn, o_n = squash(s_n), "
                  "b_hn += u_hn^T o_n",
              ctor=(CtorArg("out_capsules", "int", owner="join", field="capsules",
                            sym="capsules",
                            comment="output capsules the heads are routed into (Li et al. 2019)"),
                    CtorArg("routing_iters", "int", owner="join", field="iters", sym="iters",
                            comment="iterations of routing by agreement")),
              template="heads_out/routing.py.j2", full_width=True,
              parts=("capsules", "out_capsules",
                     "the output capsules side by side are the context"),
              excludes=("capsules", "edges"),
              conflict=("routing by agreement", "it routes the heads' own contexts into "
                        "output capsules in place of W_O; capsule-based attention has a "
                        "learned query per class (eq. 43-45), graph attention joins its heads "
                        "in its own kernel (eq. 5-6)")),
)}

# Terms of the training loss. None changes a module's score, alignment, wiring or heads,
# so none changes a cell of the row.
LOSS_REASON = "a term of the training loss: no cell of the row changes"
_DISAGREEMENT = {"subspace": "5: cos(V^i, V^j)", "position": "6: |A^i * A^j|",
                 "output": "7: cos(O^i, O^j)"}


def _disagreement_call(d, a: str, qmask: str, kmask: str) -> str:
    """The model's call of the helper over the heads' tensors (or weights) ``a``: the keys'
    padding mask for the values (eq. 5), the queries' for the weights and outputs."""
    keep = kmask if d.on == "subspace" else qmask
    return f"disagreement_penalty({a}, {keep}, {float(d.param('lambda'))!r}, {d.on != 'position'})"


def _disagreement_doc(d) -> str:
    """The docstring line of the heads' tensors the penalty reads ('' for the weights)."""
    if d.on == "position":
        return ""
    return "extras[\"heads\"]: each head's " + (
        "values V^h (Li et al. eq. 5)" if d.on == "subspace" else
        "output O^h (Li et al. eq. 7)") + ", for the disagreement penalty."


PENALTIES: dict[str, Mechanism] = {m.name: m for m in (
    # Lin et al.: ||A A^T - I||_F^2, `penalty = λ`
    Mechanism("penalty", "frobenius", (P("lambda", "float"),), reason=LOSS_REASON,
              label="penalty {lambda:g}", extras=("penalty",), template="penalty/frobenius.py.j2",
              needs=("H",), bare=True,
              several_heads=("the penalty ||AAᵀ − I||²_F compares several rows of attention",
                             "set `heads = r` (Lin et al.: r rows)"),
              single="the penalty ||AAᵀ − I||²_F compares rows of one weight per key (Lin "
                     "et al.); multi-dimensional weights (eq. 30-32) have one per key and "
                     "feature"),
    Mechanism("penalty", "doubly_stochastic", (P("lambda", "float", False, 1.0),),
              reason=LOSS_REASON,
              label="doubly stochastic penalty {lambda:g}",
              doc="lambda sum_i (1 - sum_t a_ti)^2 (Xu et al. eq. 14)",
              helpers=("doubly_stochastic_penalty",),
              call="doubly_stochastic_penalty({a}, {qmask}, {kmask}, {lambda!r})",
              rows="the doubly stochastic penalty sums each key's weights over the query "
                   "positions (Xu et al. eq. 14)"),
    Mechanism("penalty", "coverage", (P("lambda", "float", False, 1.0),), reason=LOSS_REASON,
              label="coverage loss {lambda:g}",
              doc="lambda sum_t sum_i min(a_i^t, c_i^t) (See et al. eq. 12-13)",
              helpers=("coverage_loss",), call="coverage_loss({a}, {qmask}, {kmask}, {lambda!r})",
              rows="the coverage loss compares each step's weights with the sum of the "
                   "earlier steps' (See et al. eq. 12-13)"),
    Mechanism("penalty", "disagreement",
              (P("lambda", "float", False, 1.0),
               P("on", "enum", True, None, ("subspace", "position", "output"))),
              reason=LOSS_REASON, label="disagreement on {on} {lambda:g}", doc=_disagreement_doc,
              helpers=("disagreement_penalty",), template="penalty/disagreement.py.j2",
              call=_disagreement_call,
              call_note=lambda d: f"-lambda D_{d.on}, D = -(1/H^2) sum_i sum_j of eq. "
                                  f"{_DISAGREEMENT[d.on]} (Li et al. 2018)",
              heads_extra=lambda d: {"subspace": "values", "output": "output"}.get(d.on, ""),
              several_heads=("the disagreement penalty compares pairs of heads (Li et al. eq. "
                             "5-7), but the module has {heads}", "set `heads = H`, H ≥ 2"),
              single="the disagreement penalty compares the heads' weight matrices (Li et "
                     "al. eq. 5-7); multi-dimensional weights (eq. 30-32) are not combined "
                     "with it",
              no_query=lambda d: "without a query every head reads the same values, so "
                                 "cos(V^i, V^j) = 1 for every pair (Li et al. eq. 5)"
                                 if d.on == "subspace" else "",
              no_query_hint="use `on = position` or `on = output`, or give the module a query "
                            "(heads then split the values, eq. 38)"),
    Mechanism("penalty", "supervised",
              (P("gold", "node"), P("lambda", "float", False, 1.0),
               P("loss", "enum", False, "squared", ("squared", "cross_entropy"))),
              reason=LOSS_REASON,
              label=lambda sup: f"supervised by {sup.gold} ({sup.loss.replace('_', ' ')}, "
                                f"{sup.param('lambda'):g})",
              doc=lambda sup: {"squared": "lambda sum (a - gold)^2 (Liu et al. 2016)",
                               "cross_entropy": "-lambda sum gold log a (Mi et al. 2016)"}[
                  sup.loss],
              helpers=("supervised_penalty",), target="gold",
              call="supervised_penalty({a}, {target}, {qmask}, {kmask}, {lambda!r}, \"{loss}\")"),
)}

# The traits of a module beyond its score and alignment, in the order its class name
# lists them. A trait with constructor arguments adds them to every class that has it.
TRAITS: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("query", "queryless", class_part="Queryless",
              doc="no query: self-attentive (eq. 33)"),
    Mechanism("trait", "heads", class_part="MultiHead", label="{heads} heads",
              reading="Multi-Head", doc="Multi-head (eq. 38-40): ", docs=(
                  ("split", "q, k, v split into H slices, one score per head, contexts "
                            "{joined}."),
                  ("rows", "H rows of weights over the same keys (Lin et al.'s r-row "
                           "annotation matrix), contexts {joined}."))),
    Mechanism("trait", "capsules", class_part="Capsule", label="{capsules} capsules",
              reading="Capsule-Based", docs=(
                  ("learned", "Capsule-based (eq. 43-45): a learned query per class, p_c and "
                              "r_c."),
                  ("hops", "Capsule-based over hops (eq. 41-45): row c of the query, an "
                           "earlier capsule module's output, is capsule c's query; p_c and "
                           "r_c.")),
              ctor=(CtorArg("capsules", "int", field="capsules", comment="classes (eq. 43)"),),
              extras=("capsule",), helpers=("pool",)),
    Mechanism("trait", "multi_dimensional", class_part="MultiDim", label="multi-dimensional",
              reading="Multi-Dimensional",
              doc="Multi-dimensional (eq. 30-32): one weight per key and feature."),
    Mechanism("trait", "coattention", class_part="CoAttention"),  # an affinity matrix's rows
    Mechanism("trait", "shared_keys", class_part="SharedKey",  # eq. 9: another module's W, b, w
              ctor=(CtorArg("share", "nn.Module"),),
              doc="share: the module with no query (eq. 7) whose W, b and w this one uses; "
                  "it adds its own W1 for the query (eq. 9, 6)."),
    Mechanism("trait", "coverage", class_part="Coverage", label="coverage",  # See et al.
              template="coverage.py.j2",
              doc="Coverage (See et al. 2017, eq. 10-11): e_i^t = w^T act(W1 q_t + W2 k_i + "
                  "w_c c_i^t + b), c^t = sum_{t' < t} a^{t'}, one query position at a time; "
                  "coverage: c before the first query, (N, H, Lk), or None (zeros)."),
    Mechanism("trait", "dropout", label="dropout {dropout:g}",
              ctor=(CtorArg("dropout", "float", "0.0", field="dropout",
                            comment="dropout on the attention weights, in training"),),
              doc="dropout: the probability of zeroing each attention weight in training "
                  "(after the alignment, before the values are weighted; the weights "
                  "returned are those before dropout)."),
    # eq. 14-15: the co-attention module of the other direction over the same affinity
    Mechanism("trait", "swapped_keys", ctor=(CtorArg("share", "nn.Module | None", "None"),),
              doc="share: the co-attention module of the other direction over the same "
                  "affinity matrix, whose W_k is this one's W_q and W_q its W_k (eq. 14-15: "
                  "one W1 and W2); w stays per direction."),
    # Ainslie et al. 2023 (GQA; kv_heads = 1: Shazeer 2019's multi-query attention): still
    # H query heads with one context each, so the row reads Multi-Head, with this reason.
    Mechanism("trait", "kv_heads", class_part="GroupedQuery", label="{kv_heads} key/value heads",
              reading="Multi-Head",
              reason="shares {kv_heads} key/value heads among its {heads} query heads "
                     "(grouped-query attention shares keys and values among query heads; it is "
                     "still several query heads, one context each: multi-head)",
              doc="Grouped-query (Ainslie et al. 2023; kv_heads = 1: multi-query, Shazeer "
                  "2019): k and v hold G = kv_heads heads of the query heads' width (d_k = G * "
                  "d_q / H), query head j reads key/value head j // (H / G); the context is "
                  "the H heads side by side (H * d_v / G).",
              ctor=(CtorArg("kv_heads", "int", "0", field="kv_heads", unset=0,
                            comment="key/value heads, each shared by heads / kv_heads query "
                                    "heads (0: heads)"),),
              template="heads/kv_heads.py.j2"),
    Mechanism("trait", "pair_mask", label="mask `{mask_input}`",
              doc="pair_mask: (N, Lq, Lk) bool, True = the query may see the key, a mask "
                  "given with the data (a mask input), combined with both."),
    # Transformer-XL's segment memory (`mem_len`, Dai et al. 2019 §3.2; codegen/segment.py)
    Mechanism("trait", "segment_memory", label="segment memory of {length}",
              reason="; its keys and values also cover the last {length} positions of that "
                     "feature from the previous segment (Transformer-XL's memory, Dai et al. "
                     "section 3.2): earlier positions of the same sequence as more keys, the "
                     "queries still the segment's own positions"),
)}



def _cosine(qk, score: str = "", **_) -> str:
    """The scoring cell of a q.k score whose q and k are normalised first: l2-normalised
    whole (one group, no learned gains), s q^T k / (|q| |k|) is a cosine similarity times a
    scale, Table II's similarity; l2 in parts or with learned gains, the scale s (or
    1/sqrt(d_head)) replaces the score's own, so the cell is the scaled product the layer
    computes whichever q.k was written; RMS norms keep the score's own cell ('')."""
    if qk.rms or score not in ("Multiplicative", "Scaled Multiplicative"):
        return ""
    if not qk.dim_scale and qk.groups == 1:
        return "Similarity"
    return "Scaled Multiplicative" if qk.dim_scale or qk.scale != 1 else "Multiplicative"


# x-transformers' `attn_qk_norm` (Henry et al. 2020; Dehghani et al. 2023): q and k
# l2-normalised per head, the scale s replacing 1 / sqrt(d_k): a cosine similarity times s
_L2 = Mechanism("qk_norm", "l2",
                (P("scale", "float", False, 10.0), P("groups", "int", False, 1),
                 P("dim_scale", "bool", False, False)),
                reading=_cosine, class_part="QKNorm",
                label=lambda qk, **_: "qk-norm " + ("(RMS)" if qk.rms else "(learned gains)"
                                                    if qk.dim_scale else f"(scale {qk.scale:g})"),
                reason=lambda qk, **_: "; q and k are " + (
                    "RMS-normalised per head with a learned gain per feature before the dot "
                    "product (query-key RMS normalisation), the score's own scale kept" if qk.rms
                    else "l2-normalised per head before the dot product (query-key "
                    "normalisation), " + (
                        "with a learned gain per feature, scaled by 1/sqrt(d_k)" if
                        qk.dim_scale else f"the scale {qk.scale:g} replacing 1/sqrt(d_k)")) +
                       (": each score a cosine similarity times a scale, Table II's similarity"
                        if _cosine(qk, **_) == "Similarity" else ": a dot product of "
                        "transformed q and k, Table II's family with the scale applied"),
                doc="Query-key normalisation (x-transformers' qk_norm): q and k l2-normalised per "
                    "head in qk_groups parts, then e = qk_scale * q^T k; qk_dim_scale: a learned "
                    "gain per head and feature on each (initialised to d_head^(1/4)), and "
                    "qk_scale = 1 / sqrt(d_head); qk_rms: q and k RMS-normalised per head, times "
                    "learned gains (1 at the start), then the score as written (x-transformers' "
                    "qk_rmsnorm).",
                ctor=(CtorArg("qk_scale", "float", "10.0", owner="qk_norm", field="scale",
                              unset=10.0, comment="the scale of the normalised q^T k"),
                      CtorArg("qk_groups", "int", "1", owner="qk_norm", field="groups", unset=1,
                              comment="q and k normalised in this many parts per head"),
                      CtorArg("qk_dim_scale", "bool", "False", owner="qk_norm",
                              field="dim_scale", unset=False,
                              comment="learned gains on q and k, scale 1 / sqrt(d_head)"),
                      CtorArg("qk_rms", "bool", "False", owner="qk_norm", field="rms",
                              unset=False, comment="RMS norms with learned gains on q and k")),
                template="heads/qk_norm.py.j2", fixed=(("rms", False),), turns_keys=True)
# `qk_norm = rms` (x-transformers' `qk_rmsnorm`): the same class (its constructor's qk_rms),
# no parameters; the fields the l2 form's are read as its defaults
QK_NORMS: dict[str, Mechanism] = {m.name: m for m in (
    _L2, _L2._replace(name="rms", params=(), fixed=(
        ("scale", 10.0), ("groups", 1), ("dim_scale", False), ("rms", True))))}
