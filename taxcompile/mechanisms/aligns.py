"""Alignment functions, align(e_l; e) (eq. 3, 25-29): one record each."""

from __future__ import annotations

from ..params import P, enum, pint
from .record import CtorArg, Mechanism


def _local_label(al) -> str:
    return f"local, D = {al.D}, {al.position}" + (", gaussian" if al.gaussian else "")


def _local_part(al) -> str:
    return "Local" + ("Monotonic" if al.position == "monotonic" else "")


# Why a CRF alignment reads as Global (seed 000 names it structured attention, a value the
# survey's Table III does not have): every position gets a weight, none is sampled and
# there is no window; with zero transitions it is the sigmoid gate, which reads Global.
CRF_REASON = ("structured attention (Kim et al.; seed 000): the marginals p(z_l = 1) of a "
              "linear-chain CRF over the keys, which the survey's alignments read as global: "
              "every position is weighted by a deterministic, differentiable expectation, none "
              "is sampled (hard, reinforced) and no window is cut (local); the transitions "
              "only couple neighbouring weights")

# Zhao et al. 2019's explicit sparse attention (x-transformers' `attn_sparse_topk`): a
# softmax over the k largest scores of each query. Written as an alignment beside sparsemax
# and entmax because, like them, it replaces the softmax and leaves exact zeros.
TOPK_REASON = ("top-k sparse attention (Zhao et al. 2019): a softmax over each query's k = {k} "
               "largest scores, exact zeros elsewhere, which reads as sparse (seed 000's value, "
               "as sparsemax): the kept subset follows the scores, not a window around a "
               "position (local), nothing is sampled (hard) and no policy picks it (reinforced)")

# What a reinforced alignment's policy reads beside each key (`policy = s`, RBAN's aspect)
# reaches the module by a policy edge of the graph, not a query edge: the classifier notes it
# under the query type the query edge gives, and adds none.
POLICY_REASON = ("the policy of {module} reads {src} beside each key (a policy edge, not a "
                 "query edge): it picks the keys the softmax runs over and is no query of the "
                 "attention (Wang et al.'s aspect), so the query type is read from the query "
                 "alone")
# Kitaev et al. 2020's LSH attention (Reformer): each query keeps the keys that hash to its
# bucket in some round (within its sorted chunk and the one before), a softmax over those.
LSH_REASON = ("LSH attention (Kitaev et al. 2020, Reformer; seed 002's efficient attention): "
              "a softmax over the keys that share the query's hash bucket (buckets = {buckets}, "
              "rounds = {rounds}, chunks of {chunk}), exact zeros elsewhere, which reads as "
              "sparse (as top-k): the kept subset follows the hashed content of q and k, not a "
              "window around a position (local), nothing is sampled (hard: the rotations only "
              "place the buckets) and no policy picks it (reinforced)")

# Ramapuram et al. 2024's sigmoid attention: each weight sigmoid(e_ij + b) on its own, with
# b = -log n (n keys) by default, so that the weights start summing to about 1. Not Oktay et
# al.'s gate (`sigmoid`, one gate per key position, c_l = a_l v_l): a query still mixes the
# values of all its keys. The survey has no value for an unnormalised weighting of every key;
# its closest is global (docs/fidelity.md).
SIGMOID_ATTN_REASON = ("sigmoid attention (Ramapuram et al. 2024): each weight sigmoid(e_ij + b) "
                       "on its own, b = {b}, not normalised over the keys; the survey has no "
                       "value for it and its closest is global: every key the query may see is "
                       "weighted, none is sampled (hard), no window is cut (local) and no "
                       "subset is picked (reinforced, sparse)")


# Wu et al. 2019's LightConv: a depthwise convolution whose kernel of width k is softmax-
# normalised and shared by the d / H channels of each of H heads, as attention: a_ij =
# softmax(W_h)[j - i + P] inside the kernel's window around position i (P = (k - 1) // 2, or
# k - 1 under a causal mask), zero outside it, no renormalisation at the sequence's edges.
# Its weights are its own (`score = none`), a window around the query's position: Local,
# the survey's closest value (a window of keys, normalised over the kernel's positions).
LIGHTCONV_REASON = ("LightConv (Wu et al. 2019): each head's softmax-normalised kernel of width "
                    "k = {kernel} over the keys around the query's own position (p = t), a "
                    "depthwise convolution shared by the head's channels, which reads as local "
                    "(the survey's closest value: a window of D = (k - 1) / 2 keys around a "
                    "monotonic position, its weights a learned function of the distance "
                    "alone, normalised over the kernel, not the scores)")


def _sigmoid_b(al) -> str:
    return "-log n (n keys)" if al.bias is None else f"{al.bias:g}"


ALIGNS: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("align", "global", aliases=("soft",), reading="Global",
              reason="softmax over all keys (eq. 25)", label="global", class_part="",
              doc="global (soft) alignment (eq. 25)", template="align/global.py.j2",
              helpers=("masked_softmax",), plain=True, fast="sdpa", normalised=True,
              caps=("score_terms",),
              recognised_by=("softmax_over_scores", "fused_sdpa", "edge_softmax")),
    Mechanism("align", "hard", reading="Hard", reason="samples one key (eq. 26)", label="hard",
              class_part="Hard", doc="hard alignment: sample one position (eq. 26)",
              template="align/hard.py.j2", helpers=("masked_softmax",), extras=("log_prob",),
              picks_one=True, needs=("H",), log_prob="query", recognised_by=("pick_of_weights",)),
    Mechanism("align", "local",
              (pint("D"), enum("position", ("monotonic", "predictive"), "predictive"),
               P("gaussian", "bool", False, True), P("sigma", "float", False)),
              reading="Local",
              reason="a window of D = {D} around a {position} position (eq. 27-29)",
              label=_local_label, class_part=_local_part,
              doc="local alignment, {position} position (eq. 27-29)",
              ctor=(CtorArg("window", "int", owner="align", field="D",
                            comment="D: keys within |l - p| <= D (eq. 27)"),),
              template="align/local.py.j2", helpers=("masked_softmax",),
              # O(L D): a band of keys (monotonic: p_t = t) or the window gathered
              fast=lambda al: "band" if al.position == "monotonic" else "gather",
              centred=True, step_start=lambda al: al.position == "monotonic",
              by_query_index=True, caps=("window",),
              recognised_by=("banded_position_mask", "gaussian_of_key_positions",
                             "unfolded_key_windows")),
    # `policy = s`: the agent's state is each key with s (RBAN's aspect, Wang et al. 2019)
    Mechanism("align", "reinforced", (P("policy", "node", False),), reading="Reinforced",
              reason=lambda al: "soft alignment over a subset an agent selects" + (
                  f", its policy reading each key with `{al.policy}` (Wang et al.'s aspect)"
                  if al.policy else ""),
              label=lambda al: "reinforced" + (f", policy reads {al.policy}" if al.policy else ""),
              class_part=lambda al: ("Conditioned" if al.policy else "") + "Reinforced",
              doc=lambda al: "reinforced alignment: a policy picks the subset, softmax over it" + (
                  "; the policy reads policy_in beside each key (Wang et al. 2019)"
                  if al.policy else ""),
              ctor=(CtorArg("d_p", "int", owner="align", field="policy",
                            comment="d_p: the width of what the policy reads beside each key"),),
              template="align/reinforced.py.j2", helpers=("masked_softmax",),
              extras=("log_prob",), fast="sdpa", log_prob="example",
              recognised_by=("policy_mask",)),
    Mechanism("align", "sparsemax", reading="Sparse", reason="sparsemax", label="sparsemax",
              class_part="Sparsemax", doc="sparsemax alignment (seed 000)",
              template="align/sparsemax.py.j2", helpers=("sparsemax",), normalised=True,
              caps=("score_terms",), recognised_by=("clamped_threshold",)),
    Mechanism("align", "entmax", reading="Sparse", reason="entmax-1.5", label="entmax",
              class_part="Entmax", doc="1.5-entmax alignment", template="align/entmax.py.j2",
              helpers=("entmax15",), normalised=True, caps=("score_terms",),
              recognised_by=("squared_clamped_threshold",)),
    # Oktay et al.'s attention gates: Table III reads them as Global
    Mechanism("align", "sigmoid", reading="Global",
              reason="a sigmoid gate on every position, not normalised over the keys (Oktay "
                     "et al.'s attention gate), which the survey reads as global: no key is "
                     "left out, none is sampled",
              label="sigmoid", class_part="Sigmoid",
              doc="a sigmoid gate per key position, c_l = a_l v_l (Oktay et al.)",
              note="Per position: a_l = sigmoid(e_l + b_psi) from key l and the query at l (or "
                   "one query for all), c_l = a_l v_l: the values keep their positions.",
              template="align/sigmoid.py.j2", gate=True, caps=("per_key",),
              recognised_by=("sigmoid_per_key",),
              not_distribution="a sigmoid gate's weights are not normalised over the keys"),
    # Kim et al.'s structured attention: a linear-chain CRF over the attended positions
    Mechanism("align", "crf", (P("normalize", "bool", False, False),), reading="Global",
              reason=lambda al: CRF_REASON + (", normalised by lambda = sum_l a_l (Kim et al.'s "
                                              "NMT variant)" if al.normalize else ""),
              label=lambda al: "crf" + (", normalised" if al.normalize else ""),
              class_part="CRF",
              not_distribution=lambda al: "" if al.normalize else (
                  "a CRF's marginals p(z_l = 1) are not normalised over the keys "
                  "(`crf(normalize = true)` divides them by their sum)"),
              doc="structured attention: a linear-chain CRF's marginals p(z_l = 1) (Kim et al.)",
              template="align/crf.py.j2", helpers=("crf_marginals",),
              recognised_by=("forward_backward_marginals",)),
    Mechanism("align", "topk", (pint("k"),), reading="Sparse", reason=TOPK_REASON,
              label="top-{k}", class_part="TopK",
              doc="top-k alignment: a softmax over each query's k largest scores (Zhao et al.)",
              ctor=(CtorArg("topk", "int", owner="align", field="k", sym="k",
                            comment="k: the scores each query keeps (Zhao et al. 2019)"),),
              template="align/topk.py.j2", helpers=("masked_softmax",), normalised=True,
              caps=("score_terms",), recognised_by=("topk_of_scores",)),
    Mechanism("align", "sigmoid_attn", (P("bias", "float", False, sign="any"),),
              reading="Global", reason=lambda al: SIGMOID_ATTN_REASON.format(b=_sigmoid_b(al)),
              label=lambda al: f"sigmoid attention, b = {_sigmoid_b(al)}",
              class_part="SigmoidWeighted",
              doc=lambda al: "sigmoid attention: a_ij = sigmoid(e_ij + b) per key, not "
                             f"normalised, b = {_sigmoid_b(al)} (Ramapuram et al. 2024)",
              ctor=(CtorArg("sigmoid_bias", "float | None", "None", owner="align", field="bias",
                            sym="bias", comment="b: added to every score before the sigmoid "
                            "(None: -log n, n keys)"),),
              template="align/sigmoid_attn.py.j2", caps=("score_terms",),
              recognised_by=("sigmoid_over_scores_times_values",), title="sigmoid attention",
              not_distribution="sigmoid attention weighs each key by its own sigmoid(e + b): "
                               "the weights are not normalised over the keys"),
    Mechanism("align", "lightconv", (pint("kernel", hi=1024), P("weight_dropout", "prob", False, 0.0)),
              reading="Local", reason=LIGHTCONV_REASON,
              label=lambda al: f"lightconv, k = {al.kernel}" + (
                  f", DropConnect {al.weight_dropout:g}" if al.weight_dropout else ""),
              class_part="LightConv",
              doc="LightConv (Wu et al. 2019): a_ij = softmax(W_h)[j - i + P], each head's "
                  "kernel of width k softmax-normalised and shared by its channels",
              ctor=(CtorArg("kernel", "int", owner="align", field="kernel", sym="kernel",
                            comment="k: the LightConv kernel's width (Wu et al. 2019)"),
                    CtorArg("weight_dropout", "float", "0.0", owner="align",
                            field="weight_dropout", sym="weight_dropout",
                            comment="DropConnect on the normalised kernel in training")),
              template="align/lightconv.py.j2", by_query_index=True, caps=("own_weights",
                                                                          "window"),
              fast="chunks", helpers=("lightconv_context",),
              recognised_by=("softmaxed_kernel_spread",), title="LightConv",
              outside_matrix="makes its weights without scores (`score = none`), from each "
                             "query's position: a sequence's own self-attention only",
              requires=("no_score", "query"),
              excludes=("multi_dimensional", "affinity", "capsules", "coverage", "position",
                        "bias", "adds_keys", "mixes_heads"),
              conflict=("LightConv", "its weights are a kernel over the keys' positions "
                        "around each query's, shared by a head's channels"),
              not_distribution="LightConv's weights are its kernel's taps around each query, "
                               "not renormalised at the sequence's edges nor where a mask "
                               "hides a key"),
    Mechanism("align", "lsh", (pint("buckets", lo=2), pint("rounds", False, 1),
                               pint("chunk", False, 64)),
              reading="Sparse", reason=LSH_REASON,
              label="lsh, {buckets} buckets x {rounds}", class_part="LSH",
              doc="LSH alignment: a softmax over the keys in the query's hash bucket (Kitaev "
                  "et al.)",
              ctor=(CtorArg("buckets", "int", owner="align", field="buckets", sym="buckets",
                            comment="buckets: hash buckets per round (Kitaev et al. 2020)"),
                    CtorArg("rounds", "int", owner="align", field="rounds", sym="rounds",
                            comment="rounds: hash rounds, their outputs combined"),
                    CtorArg("chunk", "int", owner="align", field="chunk", sym="chunk",
                            comment="chunk: sorted positions per chunk (each sees 2 chunks)")),
              template="align/lsh.py.j2", helpers=("masked_softmax", "lsh_buckets",
                                                   "lsh_context"),
              needs=("H",), fast="chunks", normalised=True, by_query_index=True,
              shared_qk=True, caps=("score_terms",), recognised_by=("hashed_bucket_mask", "hash_sorted_chunks"),
              outside_matrix="hashes the queries and the keys alike: the query must be the keys",
              # what the sort-and-chunk path does not compute (and the explicit path must
              # give the same numbers)
              excludes=("multi_dimensional", "affinity", "capsules", "pair_mask", "coverage",
                        "position", "bias", "qk_norm", "kv_heads", "adds_keys", "mixes_heads"),
              conflict=("LSH attention", "its sorted chunks compute plain q^T k scores over "
                        "one sequence's keys")),
)}

# Graph attention (GAT, eq. 3): a softmax over each node's neighbours, read as global.
GRAPH_REASON = ("a softmax over each node's neighbours in graph {graph} (Velickovic et al. "
                "eq. 3): global alignment over the neighbours, every neighbour weighted, none "
                "sampled and no window")
