"""Attention classes: one per mechanism combination, rendered by ``attention.py.j2`` with
one template per score (``score/<fn>.py.j2``) and per alignment (``align/<fn>.py.j2``)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Callable

from .. import ir
from ..checks import learned_capsules, share_kind
from .acts import act_call, act_fn
from .names import camel
from .pretty import wrap
from .plan import AttentionClass


@dataclass(frozen=True)
class DotForm:
    """A score that is a dot product of (transformed) q and k, e = q'^T k' * scale."""

    scale: str  # applied to q @ k^T in the explicit path
    sdpa_scale: str  # the keyword for scaled_dot_product_attention
    scale_value: str
    what: str


@dataclass(frozen=True)
class AttentionView:
    """What ``attention.py.j2`` and its score/align templates read."""

    cls: str
    title: str
    doc: tuple[str, ...]
    query: str  # "given" | "none" | "capsules"
    query_note: str
    split: bool  # heads split q, k, v (eq. 38)
    heads: int
    multi: bool
    capsules: int
    penalty: float | None
    affinity: bool
    score: ir.Score
    align: ir.Align
    lq: str
    init_args: tuple[str, ...]
    dot: DotForm | None
    fast: str | None
    act: Callable[[str], str]
    act_fn: str
    line: Callable[..., str] = lambda text, indent=8: fit(text, indent)
    heads_out: str = "project"  # how several heads join: W_O (eq. 40), concat or mean
    c_width: str = "d_v"  # the context's width
    gate: bool = False  # sigmoid alignment: one gate per key position, c_l = a_l v_l
    dropout: bool = False  # dropout on the weights (a constructor argument, 0 = none)
    share: str | None = None  # "keys" (eq. 9) or "swap" (eq. 14-15): another module's weights
    position: ir.Modifier | None = None  # relative (Shaw et al.) or rotary positions
    bias: ir.Modifier | None = None  # ALiBi or Yang et al.'s Gaussian bias on the scores
    coverage: bool = False  # See et al. eq. 10-11: w_c c_i^t in the score, a loop over queries
    disagreement: str | None = None  # Li et al. eq. 5 / 7: return each head's V^h / O^h
    pair: bool = False  # a mask input (B, Lq, Lk) narrows the keys each query may see
    keys_once: bool = False  # project_keys(k): W2 k + b, computed once by a decoder (wk=)


def fit(text: str, indent: int = 8) -> str:
    """A statement of a template written at 8 columns (``indent`` once re-indented),
    wrapped to 100 columns: an activation with parameters can make it long."""
    return ("\n" + " " * 8).join(wrap(text, indent, 100))


def keys_once(p, n: ir.Attention) -> bool:
    """Whether the class projects its keys apart from the query (``project_keys``: W2 k_l + b
    of eq. 6), so that a decoder computes it once per sequence, not at every step."""
    return n.score.fn == "additive" and n.query is not None and not learned_capsules(n) \
        and not n.affinity and share_of(p, n) != "keys"


def dot_form(n: ir.Attention) -> DotForm | None:
    """Scores that are a dot product of (transformed) q and k, e = q'^T k' * scale: the
    ones a fused attention kernel can compute."""
    if n.query is None and not n.capsules or n.affinity or n.dimensionality == "multi":
        return None
    fn = n.score.fn
    if fn == "scaled_multiplicative":
        return DotForm(" / math.sqrt(k.shape[-1])", "", "k.shape[-1] ** -0.5",
                       "q^T k_l / sqrt(d_k)")
    what = {"multiplicative": "q^T k_l (Table II, multiplicative)", "general": "k_l^T W q",
            "biased_general": "k_l^T (W q + b)"}.get(fn)
    if fn == "similarity" and n.score.similarity != "l2":
        what = "cos(q, k_l) (Table II, similarity)"
    if what is None:
        return None
    return DotForm("", ", scale=1.0", "1.0", what)


def fast_path(n: ir.Attention, dot: DotForm | None) -> str | None:
    """Which fast path the module takes when nobody asks for its weights: "sdpa" (a fused
    kernel), "band" or "gather" (local attention in O(L D)), "blocks" (multi-dimensional
    additive attention over blocks of queries), or None."""
    if n.penalty is not None or n.coverage:
        return None
    if n.bias is not None or n.position is not None and n.position.fn == "relative":
        # a position term in the scores: FlexAttention's score_mod under torch.compile (a^V
        # in the values needs the weights, so Shaw's values term takes the explicit path)
        flexible = dot is not None and n.align.fn == "global" and not (
            n.position is not None and n.position.values)
        return "flex" if flexible else None
    if dot is None:
        additive_rows = n.score.fn == "additive" and n.dimensionality == "multi" and \
            (n.query is not None or n.capsules) and not n.affinity
        return "blocks" if additive_rows and n.align.fn == "global" else None
    if n.align.fn in ("global", "reinforced"):
        return "sdpa"
    if n.align.fn == "local":
        return "band" if n.align.position == "monotonic" else "gather"
    return None


def share_of(p, n: ir.Attention) -> str | None:
    """How ``n`` uses another module's weights, when that changes its class: "keys" (eq. 9)
    or "swap" (eq. 14-15); "same" (one module) needs no class of its own."""
    if n.share is None:
        return None
    kind = share_kind(n, p.m.node(n.share))
    return kind if kind != "same" else None


def class_key(p, n: ir.Attention) -> str:
    query = "none" if n.query is None else "capsules" if learned_capsules(n) else "given"
    return repr((n.score.model_dump(exclude={"loc", "sym", "d_w"}) | {"align": n.align.model_dump(
        exclude={"loc", "sym", "window"})}, n.heads > 1, n.heads > 1 and query != "none",
        n.dimensionality, bool(n.capsules), n.penalty, query, bool(n.affinity), n.align.window,
        n.heads_out, share_of(p, n) == "keys")) + modifier_key(n) + coverage_key(n) + \
        ("+pair_mask" if n.mask_input is not None else "")


def coverage_key(n: ir.Attention) -> str:
    """Coverage in the score (See et al.) and the heads' tensors a disagreement penalty
    reads (Li et al.): '' without them, so the other modules' keys stay as they were."""
    on = n.disagreement.on if n.disagreement is not None else None
    return repr((n.coverage, on)) if n.coverage or on in ("subspace", "output") else ""


def modifier_key(n: ir.Attention) -> str:
    """The score modifiers' part of the class key: '' without any (the keys of the modules
    without them stay as they were); k and the rotary base are constructor arguments."""
    mods = [(m.fn, m.values) for m in (n.position, n.bias) if m is not None]
    return repr(mods) if mods else ""


def attention_class(p, n: ir.Attention) -> str:
    """The class of ``n``'s mechanisms, planned once per combination (a structural mask,
    the attention dropout and the module whose weights eq. 14-15 share are constructor
    arguments, not another class)."""
    query = "none" if n.query is None else "given"
    split = n.heads > 1 and query != "none"
    key = class_key(p, n)
    if key in p.class_key:
        return p.class_key[key]
    family = [a for a in p.m.attentions if class_key(p, a) == key]
    dropout = any(a.dropout is not None for a in family)
    share = share_of(p, n) or next((s for a in family if (s := share_of(p, a))), None)
    name = class_name(n, share_of(p, n))
    taken = set(p.classes) | {"Model", "Config", "Output"} | {b.name for b in p.blocks}
    base, i = name, 2
    while name in taken:
        name, i = f"{base}{i}", i + 1
    init_args = ["d_q: int"] if query != "none" or n.capsules else []
    init_args += ["d_k: int", "d_v: int", "heads: int"]
    if n.score.fn in ("additive", "concat"):
        init_args.append("d_w: int")
    if n.score.fn == "location":
        init_args.append("n_keys: int")
    if n.align.fn == "local":
        init_args.append("window: int")
    if n.capsules:
        init_args.append("capsules: int")
    if n.position is not None and n.position.fn == "relative":
        init_args.append("clip: int")
    if share == "keys":
        init_args.append("share: nn.Module")
    init_args.append("mask: str = \"none\"")
    if dropout:
        init_args.append("dropout: float = 0.0")
    if share == "swap":
        init_args.append("share: nn.Module | None = None")
    if n.position is not None and n.position.fn == "rotary":
        init_args.append("base: float = 10000.0")
    helper = {"relative": "rel_distance", "rotary": "rotary", "alibi": "alibi_slopes"}
    p.helpers.update(helper[m.fn] for m in (n.position, n.bias) if m is not None and m.fn in helper)
    lq = "C" if n.capsules else ("1" if query == "none" or n.score.fn == "max_pool" or
                                 (n.affinity and n.score.fn == "additive") else "Lq")
    p.helpers.add("key_keep")
    if n.align.fn in ("global", "hard", "local", "reinforced"):
        p.helpers.add("masked_softmax")
    if n.align.fn == "sparsemax":
        p.helpers.add("sparsemax")
    if n.align.fn == "entmax":
        p.helpers.add("entmax15")
    dot = dot_form(n)
    fast = fast_path(n, dot)
    if fast in ("band", "gather"):
        p.helpers.update({f"local_{fast}", "local_flex"})
    elif fast == "blocks":
        p.helpers.add("additive_context")
    elif fast == "flex":
        p.helpers.add("flex_context")
    gate = n.align.fn == "sigmoid"
    if n.score.fn == "additive" and query != "none" and not n.affinity and not gate:
        p.helpers.add("additive_score")
    doc = class_doc(n, dropout, share)
    cut = doc.index("")
    view = AttentionView(
        cls=name, title="\n    ".join(doc[:cut]), doc=tuple(doc[cut + 1:]),
        query="capsules" if learned_capsules(n) else query,
        query_note="no query: self-attentive (eq. 33)", split=split, heads=n.heads,
        multi=n.dimensionality == "multi", capsules=n.capsules, penalty=n.penalty,
        affinity=bool(n.affinity), score=n.score, align=n.align, lq=lq,
        init_args=tuple(init_args), dot=dot, fast=fast,
        act=lambda x, act=n.score.act: act_call(act, x), act_fn=act_fn(n.score.act),
        heads_out=n.heads_out if n.heads > 1 else "project", c_width=context_width(n),
        gate=gate, dropout=dropout, share=share, position=n.position, bias=n.bias,
        coverage=n.coverage, disagreement=n.disagreement.on if n.disagreement else None,
        pair=n.mask_input is not None, keys_once=keys_once(p, n))
    p.classes[name] = AttentionClass(name, view)
    p.class_key[key] = name
    return name


def context_width(n: ir.Attention) -> str:
    """The context's width in the class docstring (checks.context_dim)."""
    if n.heads < 2 or n.heads_out == "project":
        return "d_v"
    if n.query is not None:  # H slices of d_v / H (eq. 38)
        return "d_v" if n.heads_out == "concat" else "d_v / H"
    return "H * d_v" if n.heads_out == "concat" else "d_v"


def class_name(n: ir.Attention, share: str | None = None) -> str:
    """Named after its mechanisms, e.g. ``MultiHeadScaledMultiplicativeAttention``: modules
    with the same mechanisms share the class."""
    parts = []
    if n.query is None:
        parts.append("Queryless")  # eq. 33
    if n.heads > 1:
        parts.append("MultiHead")
    if n.capsules:
        parts.append("Capsule")
    if n.dimensionality == "multi":
        parts.append("MultiDim")
    if n.affinity:
        parts.append("CoAttention")
    if share == "keys":
        parts.append("SharedKey")  # eq. 9: another module's W, b and w
    if n.coverage:
        parts.append("Coverage")  # See et al. eq. 10-11
    short = {"relative": "Rel", "rotary": "RoPE", "alibi": "ALiBi", "gaussian": "Gauss"}
    parts += [short[m.fn] for m in (n.position, n.bias) if m is not None]
    parts.append({"max_pool": "MaxPool", "affinity": "Affinity"}.get(n.score.fn, camel(n.score.fn)))
    if n.score.fn == "similarity":
        parts.append("L2" if n.score.similarity == "l2" else "Cosine")
    if n.align.fn != "global":
        parts.append(camel(n.align.fn) + ("Monotonic" if n.align.position == "monotonic" else ""))
    return "".join(parts) + "Attention"


SCORE_DOC = {
    "additive": "additive score w^T act(W1 q + W2 k + b) (eq. 6)",
    "concat": "concat score w^T W [q; k] (Table II)",
    "multiplicative": "multiplicative score q^T k (Table II)",
    "scaled_multiplicative": "scaled multiplicative score q^T k / sqrt(d_k) (Table II)",
    "general": "general score k^T W q (Table II)",
    "biased_general": "biased general score k^T (W q + b) (Table II)",
    "activated_general": "activated general score act(k^T W q + b) (Table II)",
    "location": "location score W_a q (Luong et al.)",
    "affinity": "scores read off an affinity matrix (eq. 12-13)",
    "max_pool": "max-pooled affinity scores (eq. 16)"}


def class_doc(n: ir.Attention, dropout: bool = False, share: str | None = None) -> list[str]:
    sc = SCORE_DOC.get(n.score.fn, f"similarity score ({n.score.similarity or 'cosine'}) "
                                   "(Table II)")
    if share == "keys":
        sc = ("additive score W_d^T act(W1 q + W k + b), W, b and W_d those of eq. 7 (eq. 9, "
              "31)" if n.dimensionality == "multi" else
              "additive score w^T act(W1 q + W k + b), W, b and w those of eq. 7 (eq. 9)")
    elif n.affinity and n.score.fn == "additive":
        sc = "aggregate additive score over an affinity matrix (eq. 14-15)"
    elif n.query is None and n.score.fn == "additive":
        sc = "additive score of the keys alone, w^T act(W k + b) (eq. 33)"
    elif n.query is None and n.score.fn == "concat":
        sc = "concat score of the keys alone, w^T W k (Table II, eq. 33)"
    al = {"global": "global (soft) alignment (eq. 25)",
          "hard": "hard alignment: sample one position (eq. 26)",
          "local": f"local alignment, {n.align.position} position (eq. 27-29)",
          "reinforced": "reinforced alignment: a policy picks the subset, softmax over it",
          "sparsemax": "sparsemax alignment (seed 000)",
          "entmax": "1.5-entmax alignment",
          "sigmoid": "a sigmoid gate per key position, c_l = a_l v_l (Oktay et al.)"}[n.align.fn]
    lines = textwrap.wrap(f"Attention with the {sc}, {al}.", 92) + [""]
    if n.heads > 1:
        joined = {"project": "joined by W_O", "concat": "concatenated, no W_O",
                  "mean": "averaged, no W_O"}[n.heads_out]
        lines.append("Multi-head (eq. 38-40): " + (
            f"q, k, v split into H slices, one score per head, contexts {joined}."
            if n.query is not None else
            "H rows of weights over the same keys (Lin et al.'s r-row annotation "
            f"matrix), contexts {joined}."))
    if n.dimensionality == "multi":
        lines.append("Multi-dimensional (eq. 30-32): one weight per key and feature.")
    if n.capsules:
        lines.append("Capsule-based (eq. 43-45): a learned query per class, p_c and r_c."
                     if learned_capsules(n) else
                     "Capsule-based over hops (eq. 41-45): row c of the query, an earlier "
                     "capsule module's output, is capsule c's query; p_c and r_c.")
    if n.align.fn == "sigmoid":
        lines.append("Per position: a_l = sigmoid(e_l + b_psi) from key l and the query at l (or "
                     "one query for all), c_l = a_l v_l: the values keep their positions.")
    else:
        lines.append("mask: which keys a query position may see besides the padding: \"none\", "
                     "\"causal\" (j <= i), \"forward\" (j < i) or \"backward\" (j > i, DiSAN).")
        if n.mask_input is not None:
            lines.append("pair_mask: (N, Lq, Lk) bool, True = the query may see the key, a mask "
                         "given with the data (a mask input), combined with both.")
    if n.position is not None and n.position.fn == "relative":
        lines.append("Relative positions (Shaw et al. 2018): e_ij = q_i (k_j + a^K_ij)^T"
                     + (" / sqrt(d)" if n.score.fn == "scaled_multiplicative" else "")
                     + (", c_i = sum_j a_ij (v_j + a^V_ij)" if n.position.values else "")
                     + ", a_ij = w_clip(j - i, -k, k); clip: k.")
    elif n.position is not None:
        lines.append("Rotary positions (Su et al., RoPE, half-split as GPT-NeoX): q and k of "
                     "each head turned by t * base^(-2f/d) at position t; base: 10000.")
    if n.bias is not None and n.bias.fn == "alibi":
        lines.append("ALiBi (Press et al.): -m_h |i - j| added to the scores before the "
                     "alignment, m_h = 2^(-8h/H) (the causal form under the causal mask).")
    elif n.bias is not None:
        lines.append("Gaussian bias (Yang et al. 2018): G_ij = -(j - P_i)^2 / (2 sigma_i^2) "
                     "added to the scores, P_i = I sigmoid(U_p^T tanh(W_p q_i)), sigma_i = "
                     "D_i / 2, D_i = I sigmoid(U_d^T tanh(W_p q_i)), I the length.")
    if n.coverage:
        lines.append("Coverage (See et al. 2017, eq. 10-11): e_i^t = w^T act(W1 q_t + W2 k_i + "
                     "w_c c_i^t + b), c^t = sum_{t' < t} a^{t'}, one query position at a "
                     "time; coverage: c before the first query, (N, H, Lk), or None (zeros).")
    if n.disagreement is not None and n.disagreement.on in ("subspace", "output"):
        lines.append("extras[\"heads\"]: each head's " + (
            "values V^h (Li et al. eq. 5)" if n.disagreement.on == "subspace" else
            "output O^h (Li et al. eq. 7)") + ", for the disagreement penalty.")
    if dropout:
        lines.append("dropout: the probability of zeroing each attention weight in training "
                     "(after the alignment, before the values are weighted; the weights "
                     "returned are those before dropout).")
    if share == "keys":
        lines.append("share: the module with no query (eq. 7) whose W, b and w this one uses; "
                     "it adds its own W1 for the query (eq. 9, 6).")
    elif share == "swap":
        lines.append("share: the co-attention module of the other direction over the same "
                     "affinity matrix, whose W_k is this one's W_q and W_q its W_k "
                     "(eq. 14-15: one W1 and W2); w stays per direction.")
    cut = lines.index("") + 1
    return lines[:cut] + [w for line in lines[cut:] for w in textwrap.wrap(line, 92)]
