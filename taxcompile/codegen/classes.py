"""Attention classes: one per mechanism combination, rendered by ``attention.py.j2``, which
composes the templates that the statement's mechanisms' records name (``score/<fn>.py.j2``,
``align/<fn>.py.j2``, ``position/…``, ``bias/…``, ``penalty/…``): nothing here or there
tests a mechanism's name."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from .. import ir
from .. import mechanisms as mech
from ..checks import learned_capsules, share_kind
from .acts import act_call, act_fn
from .expr import ATOM
from .pretty import wrap
from .plan import AttentionClass
from .stages import STAGES, steps


@dataclass(frozen=True)
class Templates:
    """The templates of a statement's mechanisms, from their records: its score, its
    alignment, how its heads join, its position term and bias (``mods``, in that order) and
    the other mechanisms with lines in the class (coverage, penalties: ``extra``)."""

    score: str
    align: str
    heads_out: str
    mods: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()


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
    affinity: bool
    score: ir.Mech
    align: ir.Mech
    lq: str
    init_args: tuple[str, ...]
    init_names: tuple[str, ...]  # the names of init_args, in their order
    dot: str | None  # a dot-product score: what it computes (its template sets the scale)
    fast: str | None
    act: Callable[[str], str]
    act_fn: str
    line: Callable[..., str] = lambda text, indent=8: fit(text, indent)
    heads_out: str = "project"  # how several heads join: W_O (eq. 40), concat or mean
    c_width: str = "d_v"  # the context's width
    gate: bool = False  # sigmoid alignment: one gate per key position, c_l = a_l v_l
    dropout: bool = False  # dropout on the weights (a constructor argument, 0 = none)
    share: str | None = None  # "keys" (eq. 9) or "swap" (eq. 14-15): another module's weights
    position: ir.Mech | None = None  # relative (Shaw et al.) or rotary positions
    bias: ir.Mech | None = None  # ALiBi or Yang et al.'s Gaussian bias on the scores
    coverage: bool = False  # See et al. eq. 10-11: w_c c_i^t in the score, a loop over queries
    heads_extra: str = ""  # a penalty's "values" / "output": return each head's V^h / O^h
    pair: bool = False  # a mask input (B, Lq, Lk) narrows the keys each query may see
    keys_once: bool = False  # project_keys(k): W2 k + b, computed once by a decoder (wk=)
    templates: Templates | None = None  # the mechanisms' templates attention.py.j2 composes
    start: bool = False  # forward() takes `start`, the first query's position (p = t, eq. 27)
    # forward() takes `offset`, query 0's position among the keys' (a position term; default
    # Lk - Lq, the last positions)
    offset: bool = False
    # forward() takes `table`, a position term's rows per distance from an earlier call
    # (generate() keeps them), and returns its own in extras["table"]
    table: bool = False
    needs: frozenset[str] = frozenset()  # locals of forward() the templates read ("H")
    score_terms: bool = False  # position terms in the scores: one score_mod for every path
    attention: ir.Attention | None = None  # the statement (the heads/ templates read it)
    scaled: bool = False  # the score divides by sqrt(d_k) (its record's `scaled`)
    kv_heads: bool = False  # grouped-query attention: self.kv_heads key/value heads
    policy: bool = False  # the alignment reads a node beside each key (forward's policy_in)
    # forward() takes `kv_cache`, generate()'s (cache, key): k and v are then the new
    # positions only, and the keys are kept after their turn (RoPE, qk-norm), per head
    held: bool = False

    @property
    def late(self) -> bool:
        """The key/value heads are repeated on the explicit path only, after the scores'
        transforms (a fused kernel or none), not before them (the other fast paths)."""
        return self.fast in (None, "sdpa")

    @property
    def early(self) -> bool:
        return not self.late

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages the class is rendered in, in order (codegen/stages.py)."""
        return tuple(s.name for s in STAGES)

    @cached_property
    def steps(self) -> dict:
        """Each stage's steps whose condition holds for this class, by stage name."""
        return steps(self)


def fit(text: str, indent: int = 8) -> str:
    """A statement of a template written at 8 columns (``indent`` once re-indented),
    wrapped to 100 columns: an activation with parameters can make it long."""
    return ("\n" + " " * 8).join(wrap(text, indent, 100))


def keys_once(p, n: ir.Attention) -> bool:
    """Whether the class projects its keys apart from the query (``project_keys``: W2 k_l + b
    of eq. 6), so that a decoder computes it once per sequence, not at every step."""
    return mech.score(n.score.fn).keys_once and n.query is not None and \
        not learned_capsules(n) and not n.affinity and share_of(p, n) != "keys"


def dot_form(n: ir.Attention) -> str | None:
    """What a score that is a dot product of (transformed) q and k, e = q'^T k' * scale,
    computes (its record's ``dot``): the scores a fused attention kernel can compute. Its
    scale is its template's (``score/<fn>.py.j2`` sets ``dot``)."""
    if n.query is None and not n.capsules or n.affinity or n.dimensionality == "multi":
        return None
    return mech.score(n.score.fn).text("dot", n.score) or None


def fast_path(n: ir.Attention, dot: str | None) -> str | None:
    """Which fast path the module takes when nobody asks for its weights: "sdpa" (a fused
    kernel), "band" or "gather" (local attention in O(L D)), "blocks" (multi-dimensional
    additive attention over blocks of queries), "flex" (a term in the scores as
    FlexAttention's score_mod), "chunks" (the alignment's own kernel: LSH sorted by bucket,
    O(L chunk); a kernel over the keys' positions as a convolution, O(L k)), or None."""
    if mech.class_penalty(n) or n.coverage or n.head_mechanisms:
        return None
    al = n.align.record
    if any(rec.in_scores for rec, _ in mech.modifiers(n)):
        # a position term in the scores: FlexAttention's score_mod under torch.compile (a^V
        # in the values needs the weights, so Shaw's values term takes the explicit path)
        flexible = dot is not None and al.plain and not (
            n.position is not None and getattr(n.position, "values", False))
        return "flex" if flexible else None
    if dot is None:
        rows = mech.score(n.score.fn).rows_fast
        multi_rows = n.dimensionality == "multi" and (n.query is not None or n.capsules) \
            and not n.affinity
        if rows and multi_rows and al.plain:
            return rows
        # weights of the alignment's own (a learned kernel's): its own kernel for the context,
        # which reads the padding and the structural mask only (not a mask input's pairs, nor
        # values in fewer heads than the queries')
        own = "own_weights" in al.caps and n.mask_input is None and not n.kv_heads
        return (al.text("fast", n.align) or None) if own else None
    return al.text("fast", n.align) or None


def share_of(p, n: ir.Attention) -> str | None:
    """How ``n`` uses another module's weights, when that changes its class: "keys" (eq. 9)
    or "swap" (eq. 14-15); "same" (one module) needs no class of its own."""
    if n.share is None:
        return None
    kind = share_kind(n, p.m.node(n.share))
    return kind if kind != "same" else None


def class_key(p, n: ir.Attention) -> str:
    """What makes two statements one class: their mechanisms and the values that are no
    constructor argument (a parameter its record passes to the constructor, such as local
    alignment's D or top-k's k, does not make another class)."""
    query = "none" if n.query is None else "capsules" if learned_capsules(n) else "given"
    return repr((_unpassed(n.score), _unpassed(n.align), n.heads > 1,
                 n.heads > 1 and query != "none",
                 n.dimensionality, bool(n.capsules), query, bool(n.affinity),
                 n.heads_out, share_of(p, n) == "keys")) + modifier_key(n) + coverage_key(n) + \
        ("+pair_mask" if n.mask_input is not None else "") + mech.heads.class_key(n) \
        + ("+kv_heads" if n.kv_heads else "") + ("+qk_norm" if n.qk_norm is not None else "") \
        + repr([a.name for a in n.align.record.ctor if a.value(n) is not None]) \
        + (repr(_unpassed(n.loss_term)) if n.loss_term is not None and mech.class_penalty(n)
           else "")


def _unpassed(m: ir.Mech) -> tuple:
    """A mechanism's name and the parameters that are no constructor argument (those that
    make another class)."""
    ctor = {a.field for a in m.record.ctor}
    return m.fn, [(k, v) for k, v in m.params if k not in ctor]


def coverage_key(n: ir.Attention) -> str:
    """Coverage in the score (See et al.) and the heads' tensors a disagreement penalty
    reads (Li et al.): '' without them, so the other modules' keys stay as they were."""
    heads = mech.heads_extra(n)
    return repr((n.coverage, heads)) if n.coverage or heads else ""


def modifier_key(n: ir.Attention) -> str:
    """The score modifiers' part of the class key: '' without any (the keys of the modules
    without them stay as they were); k and the rotary base are constructor arguments."""
    mods = [_unpassed(m) for m in (n.position, n.bias) if m is not None]
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
    args = mech.constructor(n, dropout, share, query != "none" or bool(n.capsules))
    score, align = mech.score(n.score.fn), mech.align(n.align.fn)
    lq = "C" if n.capsules else ("1" if query == "none" or one_per_input(n) else "Lq")
    p.helpers.update(mech.MASKS[n.mask].helpers + align.helpers)
    p.helpers.update(h for rec, _ in mech.modifiers(n) for h in rec.helpers)
    if mech.cached_inside(n):  # forward()'s kv_cache
        p.helpers.add("extend_cache")
    dot = dot_form(n)
    fast = fast_path(n, dot)
    if fast in ("band", "gather"):
        p.helpers.update({f"local_{fast}", "local_flex"})
    elif fast == "blocks":
        p.helpers.add("additive_context")
    elif fast == "flex":
        p.helpers.add("flex_context")
    gate = align.gate
    if query != "none" and not n.affinity and not gate:
        p.helpers.update(score.query_helpers)
    doc = class_doc(n, dropout, share)
    cut = doc.index("")
    extra = [rec for rec, _ in mech.penalties(n) if rec.template]
    if n.loss_term is not None and mech.class_penalty(n):  # (a call's: in the model)
        p.helpers.update(n.loss_term.record.helpers)
    if n.coverage:
        extra.insert(0, mech.TRAITS["coverage"])
    if n.qk_norm is not None:
        extra.insert(0, n.qk_norm.record)
    if n.kv_heads:
        extra.insert(0, mech.TRAITS["kv_heads"])
    mods = [rec for rec, _ in mech.modifiers(n)]
    extra += mech.heads.present(n)
    heads_out = n.heads_out if n.heads > 1 else "project"
    view = AttentionView(
        cls=name, title="\n    ".join(doc[:cut]), doc=tuple(doc[cut + 1:]),
        query="capsules" if learned_capsules(n) else query,
        query_note="no query: self-attentive (eq. 33)", split=split, heads=n.heads,
        multi=n.dimensionality == "multi", capsules=n.capsules,
        affinity=bool(n.affinity), score=n.score, align=n.align, lq=lq,
        init_args=mech.signature(args), init_names=tuple(x.name for x in mech.ordered(args)),
        dot=dot, fast=fast,
        act=lambda x, prec=ATOM, act=getattr(n.score, "act", None): act_call(act, x, prec),
        act_fn=act_fn(getattr(n.score, "act", None)),
        heads_out=heads_out, c_width=context_width(n),
        gate=gate, dropout=dropout, share=share, position=n.position, bias=n.bias,
        coverage=n.coverage, heads_extra=mech.heads_extra(n),
        pair=n.mask_input is not None, keys_once=keys_once(p, n),
        templates=Templates(score.template, align.template, mech.HEADS_OUT[heads_out].template,
                            tuple(m.template for m in mods), tuple(m.template for m in extra)),
        start=align.holds("step_start", n.align),
        offset=any(m.counts_past for m in mods),
        table=any(m.step_table for m in mods),
        needs=frozenset(x for rec in (align, *extra) for x in rec.needs),
        score_terms=any(m.in_scores for m in mods), attention=n, scaled=score.scaled,
        kv_heads=bool(n.kv_heads), policy=bool(mech.align_reads(n.align)),
        held=mech.cached_inside(n))
    p.classes[name] = AttentionClass(name, view)
    p.class_key[key] = name
    return name


def one_per_input(n: ir.Attention) -> bool:
    """A score that reduces an affinity matrix's query rows to one score per key: one
    context per input (eq. 14-16), not one per query position."""
    return bool(n.affinity) and bool(mech.score(n.score.fn).affinity_rows)


def context_width(n: ir.Attention) -> str:
    """The context's width in the class docstring (checks.context_dim)."""
    if n.kv_heads:  # H heads of d_v / G (templates/codegen/heads/kv_heads.py.j2)
        return "d_v * H / G" if n.heads_out != "mean" else "d_v / G"
    if n.heads < 2 or mech.HEADS_OUT[n.heads_out].full_width:  # W_O or routing
        return "d_v"
    if n.query is not None:  # H slices of d_v / H (eq. 38)
        return "d_v" if n.heads_out == "concat" else "d_v / H"
    return "H * d_v" if n.heads_out == "concat" else "d_v"


def class_name(n: ir.Attention, share: str | None = None) -> str:
    """Named after its mechanisms, e.g. ``MultiHeadScaledMultiplicativeAttention``: modules
    with the same mechanisms share the class."""
    t = mech.TRAITS
    has = {"queryless": n.query is None, "heads": n.heads > 1, "capsules": bool(n.capsules),
           "multi_dimensional": n.dimensionality == "multi", "coattention": bool(n.affinity),
           "shared_keys": share == "keys", "coverage": n.coverage, "kv_heads": bool(n.kv_heads)}
    parts = [t[name].class_part for name, on in has.items() if on]
    if n.qk_norm is not None:
        parts.append(n.qk_norm.record.text("class_part", n.qk_norm))
    parts += [rec.text("class_part", m) for rec, m in mech.modifiers(n)]
    parts += [m.record.text("class_part", m) for m in n.head_mechanisms]
    if n.heads > 1:  # routing by agreement ("Routed"); W_O, concat and mean add nothing
        parts.append(mech.HEADS_OUT[n.heads_out].class_part)
    parts.append(mech.score(n.score.fn).text("class_part", n.score))
    parts.append(mech.align(n.align.fn).text("class_part", n.align))
    return "".join(parts) + "Attention"


def class_doc(n: ir.Attention, dropout: bool = False, share: str | None = None) -> list[str]:
    """The class docstring: each mechanism's line from its record."""
    t, score, align = mech.TRAITS, mech.score(n.score.fn), mech.align(n.align.fn)
    setting = ("shared_keys_multi" if n.dimensionality == "multi" else "shared_keys") \
        if share == "keys" else "affinity" if n.affinity else "no_query" if n.query is None \
        else ""
    sc = score.variant_doc(setting) or score.text("doc", n.score)
    lines = textwrap.wrap(f"Attention with the {sc}, {align.text('doc', n.align)}.", 92) + [""]
    if n.heads > 1:
        joined = mech.HEADS_OUT[n.heads_out].doc
        how = t["heads"].variant_doc("split" if n.query is not None else "rows")
        lines.append(t["heads"].doc + how.format(joined=joined))
    if n.kv_heads:
        lines.append(t["kv_heads"].doc)
    if n.qk_norm is not None:
        lines.append(n.qk_norm.record.text("doc", n.qk_norm))
    if n.dimensionality == "multi":
        lines.append(t["multi_dimensional"].doc)
    if n.capsules:
        lines.append(t["capsules"].variant_doc("learned" if learned_capsules(n) else "hops"))
    if align.gate:
        lines.append(align.text("note", n.align))
    else:
        lines.append(mech.MASKS[n.mask].doc)
        if n.mask_input is not None:
            lines.append(t["pair_mask"].doc)
    scaled = mech.score(n.score.fn).scaled
    lines += [rec.text("doc", m, scaled=scaled) for rec, m in mech.modifiers(n)]
    if n.coverage:
        lines.append(t["coverage"].doc)
    if mech.heads_extra(n):  # the heads' tensors a penalty reads (its record's doc)
        lines.append(n.loss_term.record.text("doc", n.loss_term))
    lines += [m.record.text("doc", m) for m in n.head_mechanisms]
    if n.loss_term is not None and mech.class_penalty(n) and n.loss_term.record.doc:
        lines.append(n.loss_term.record.text("doc", n.loss_term))
    if dropout:
        lines.append(t["dropout"].doc)
    if share in ("keys", "swap"):
        lines.append(t["shared_keys" if share == "keys" else "swapped_keys"].doc)
    cut = lines.index("") + 1
    return lines[:cut] + [w for line in lines[cut:] for w in textwrap.wrap(line, 92)]
