"""Score functions, score(q, k_l) (eq. 2; Table II): one record each."""

from __future__ import annotations

from ..params import SAME_WIDTH_ACTS, Act, P, act, enum, pint
from .record import CtorArg, Mechanism

# d_w: the hidden width of W1 q + W2 k (the additive and concat scores)
D_W = CtorArg("d_w", "int", owner="score", field="d_w", comment="width of the score's hidden layer")
# the keys' fixed length: Luong et al.'s location score W_a q has one output per key
N_KEYS = CtorArg("n_keys", "int", comment="the keys' fixed length")


def _score(name: str, reading: str, doc: str, *params: P, part: str | None = None,
           **more) -> Mechanism:
    return Mechanism(
        "score", name, params, reading=reading, reason=f"uses the {name.replace('_', ' ')} score",
        label=name.replace("_", " "), class_part=part if part is not None else
        "".join(w.capitalize() for w in name.split("_")), doc=doc,
        template=f"score/{name}.py.j2", **more)


def _similarity_part(s) -> str:
    return "Similarity" + ("L2" if s.param("kind") == "l2" else "Cosine")


def _similarity_doc(s) -> str:
    beta = ("" if s.scale is None else ", times a learned temperature" if s.scale == "learned"
            else f", times {s.scale:g}")
    return f"similarity score ({s.param('kind') or 'cosine'}{beta}) (Table II)"


def _similarity_dot(s) -> str | None:
    """Cosine similarity is a dot product of the normalised q and k; l2 is not."""
    if s.param("kind") == "l2":
        return None
    return ("cos(q, k_l) (Table II, similarity)" if s.scale is None
            else "beta cos(q, k_l) (Table II, similarity; NTM's key strength)")


# `scale = 4.0` or `scale = learned`: the similarity's temperature beta (NTM's key strength).
# Its own type: the lowering accepts `learned` or a positive number (lowering/attention.py).
SIMILARITY_SCALE = P("scale", "scale", False, None)


# The affinity matrix's forms (`affinity(a, b, form = …)`), read as Table II's scores.
AFFINITY_READING = {"dot": "Multiplicative", "scaled_dot": "Scaled Multiplicative",
                    "trilinear": "Multiplicative", "bilinear": "General"}
AFFINITY_ACTIVATED = "Activated General"  # a bilinear affinity with an activation
# The forms that multiply the pair's features element-wise, so both have one width (eq. 13)
AFFINITY_EQUAL_WIDTH = ("trilinear", "dot", "scaled_dot")


def affinity_reading(s, form: str = "bilinear", act: str = "none", **_) -> str:
    if form == "bilinear" and act != "none":
        return AFFINITY_ACTIVATED
    return AFFINITY_READING[form]


def affinity_reason(how: str):
    def reason(s, form: str = "bilinear", affinity: str = "", **_) -> str:
        extra = (" (w^T[k_i; k_j; k_i∘k_j]: an element-wise product of the pair, eq. 13)"
                 if form == "trilinear" else "")
        return f"scores with {how} of the {form} affinity {affinity}{extra}"
    return reason


# Why the scores over an affinity matrix stand outside the combination matrix's one module
AFFINITY_ONLY = "scores over an affinity matrix: parallel co-attention's pairs (CO_SCORES)"


SCORES: dict[str, Mechanism] = {m.name: m for m in (
    _score("additive", "Additive", "additive score w^T act(W1 q + W2 k + b) (eq. 6)",
           pint("d_w", False), act("tanh"), P("bias", "bool", False, True), ctor=(D_W,),
           query_helpers=("additive_score",), rows_fast="blocks", hidden=True, act_sum=True,
           recognised_by=("learned_vector_over_activation",),
           affinity="pooled", affinity_rows="sum", keys_once=True, docs=(
               ("no_query", "additive score of the keys alone, w^T act(W k + b) (eq. 33)"),
               ("affinity", "aggregate additive score over an affinity matrix (eq. 14-15)"),
               ("shared_keys", "additive score w^T act(W1 q + W k + b), W, b and w those of "
                               "eq. 7 (eq. 9)"),
               ("shared_keys_multi", "additive score W_d^T act(W1 q + W k + b), W, b and W_d "
                                     "those of eq. 7 (eq. 9, 31)"))),
    _score("concat", "Additive", "concat score w^T W [q; k] (Table II)", pint("d_w", False),
           ctor=(D_W,), hidden=True, linear=True, recognised_by=("learned_vector_over_activation",),
           docs=(("no_query", "concat score of the keys alone, w^T W k (Table II, eq. 33)"),)),
    _score("multiplicative", "Multiplicative", "multiplicative score q^T k (Table II)",
           aliases=("dot",),  # Luong et al.'s name for q^T k
           dot="q^T k_l (Table II, multiplicative)", equal_qk=True, qk=True,
           recognised_by=("matmul_product",)),
    _score("scaled_multiplicative", "Scaled Multiplicative",
           "scaled multiplicative score q^T k / sqrt(d_k) (Table II)",
           aliases=("scaled_dot",),  # the affinity form's name for it
           dot="q^T k_l / sqrt(d_k)", scaled=True, equal_qk=True, qk=True,
           recognised_by=("matmul_product", "fused_sdpa")),
    _score("general", "General", "general score k^T W q (Table II)", dot="k_l^T W q",
           recognised_by=("matmul_product",)),
    _score("biased_general", "Biased General", "biased general score k^T (W q + b) (Table II)",
           dot="k_l^T (W q + b)", recognised_by=("matmul_product",)),
    _score("activated_general", "Activated General",
           "activated general score act(k^T W q + b) (Table II)", act("tanh"),
           recognised_by=("activated_product",)),
    _score("similarity", "Similarity", _similarity_doc,
           enum("kind", ("cosine", "l2"), "cosine"), SIMILARITY_SCALE, part=_similarity_part,
           dot=_similarity_dot, equal_qk=True, recognised_by=("matmul_product",)),
    _score("location", "Location", "location score W_a q (Luong et al.)", ctor=(N_KEYS,),
           per_key=True, recognised_by=("per_key_map",)),
    # co-attention (eq. 12-16): the scores are an affinity matrix's rows, or their maximum;
    # Table II's reading is the affinity's form
    Mechanism("score", "affinity", reading=affinity_reading, reason=affinity_reason("its rows"),
              label="affinity", class_part="Affinity",
              doc="scores read off an affinity matrix (eq. 12-13)",
              template="score/affinity.py.j2", affinity="rows", needs_affinity=True,
              recognised_by=("affinity_matrix",), outside_matrix=AFFINITY_ONLY),
    Mechanism("score", "max_pool", reading=affinity_reading,
              reason=affinity_reason("the maximum of each row"), label="max pool",
              class_part="MaxPool", doc="max-pooled affinity scores (eq. 16)",
              template="score/max_pool.py.j2", affinity="pooled", needs_affinity=True,
              affinity_rows="max", recognised_by=("affinity_matrix",),
              outside_matrix=AFFINITY_ONLY),
    # GAT (Velickovic et al.): act(a^T [q_i || k_j]), a split into a_dst and a_src, over a
    # graph: the concat form of the additive family (Table II), the activation after the
    # weight vector rather than before it. Its class is graph_attention.py.j2.
    Mechanism("score", "activated_concat",
              (P("act", "act", False, Act(fn="leaky_relu", params=(("slope", 0.2),)),
                 SAME_WIDTH_ACTS),),
              reading="Additive",
              reason="uses GAT's activated concat score e_ij = act(a^T [W h_i; W h_j]), act = "
                     "{act}: a weight vector over the concatenated query and key (the concat "
                     "form of the additive score, Table II), the activation after it",
              label="activated concat", class_part="Graph",
              doc="activated concat score act(a^T [W h_i; W h_j]) (Velickovic et al. eq. 1)",
              template="graph_attention.py.j2", helpers=("masked_softmax", "edge_sum"), graph=True,
              caps=("edges",), recognised_by=("edge_softmax",),
              outside_matrix="scores the edges of a graph only (`mask = adj`, GAT)"),
    # No score at all, for an alignment whose weights are its own (a learned kernel over
    # relative positions): nothing is computed, and Table III's scoring cell gets no value
    # from it (its template defines no slot).
    Mechanism("score", "none", reading="",
              reason="computes no score: its alignment's weights are its own", label="no score",
              class_part="", doc="alignment's own weights (no score)",
              template="score/none.py.j2", caps=("no_score",),
              recognised_by=("softmaxed_kernel_spread",),
              outside_matrix="computes no scores: only beside an alignment whose weights are "
                             "its own",
              requires=("own_weights",),
              conflict=("`score = none`", "it computes no scores, and the alignment weighs "
                        "the keys by them")),
)}

# Scores that score the keys alone when a module has no query (eq. 33).
WITHOUT_QUERY = ("additive", "concat")
