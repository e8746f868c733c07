"""Drop-in layers: one attention statement of a spec as a standalone ``nn.Module``.

``taxcompile compile SPEC --layer NAME -o out.py`` writes a file with the attention class the
full model uses for that statement (planned by ``classes.attention_class`` and rendered by
``attention.py.j2``: the same text, not a second implementation, rendered with the per-query
mask and query-position arguments the model's variants use), its helpers, a ``Config`` with
the statement's sizes (``layer_config.py``: every width checked against the others) and a
thin ``Layer`` wrapper (``templates/codegen/layer.py.j2``) that owns the query, key and value
projections and the statement's learned query, keys, values and memory slots, and is called
as ``nn.MultiheadAttention`` and ``F.scaled_dot_product_attention`` are: ``forward(q, k, v,
*, mask=None, is_causal=False, positions=None, need_weights=False)``, the output alone or
(output, weights).

A drop-in layer takes queries, keys and values that are features or projections of
features (``project(F)``, eq. 1 and 35); a learned query (``learned(d)``, ``learned(K, d)``
or a projection of one, eq. 34) or no query (eq. 33) is the layer's own, and so are learned
keys and values and the memory slots put before them (``layer_kv.py``). Keys built by other
operators (an RNN, a concatenation, …) or an affinity matrix (co-attention) belong to their
model and are refused with a ``LayerError``."""

from __future__ import annotations

import textwrap

from dataclasses import dataclass, field, replace

from .. import checks, ir
from .. import mechanisms as mech
from . import depth, kv_width, layer_kv
from .classes import attention_class, dot_form, fast_path
from .emit import env
from .imports import recording
from .layer_config import fields_and_checks, is_learned, learned_shape, raise_lines, reads
from .plan import AttentionClass
from .pretty import wrap


class LayerError(Exception):
    """The statement cannot be a drop-in layer (the message says why)."""


@dataclass
class _Classes:
    """What ``classes.attention_class`` reads and fills: the planner's class registry."""

    m: ir.Model | None = None  # the model (a class is shared by modules of one family)
    helpers: set = field(default_factory=set)
    classes: dict = field(default_factory=dict)
    class_key: dict = field(default_factory=dict)
    blocks: list = field(default_factory=list)


@dataclass(frozen=True)
class Role:
    """How the layer gets one of q, k, v from what forward() is given."""

    name: str  # "q" | "k" | "v"
    kind: str  # "input" (as given) | "project" (W x, eq. 1 / 35) | "none" | "keys"
    d_in: int = 0  # the width forward() is given (or of the learned vectors)
    d: int = 0  # the width the attention class reads
    # the shape of the learned parameter it is built from, (d,) or (K, d) (eq. 34): the
    # layer's own, and forward() is given nothing; () for a tensor forward() is given
    own: tuple[int, ...] = ()
    sized: bool = False  # project(x, d): the spec gives the projection's width
    # prepend(x, learned(M, d)) / prepend(x, M): the shape of the memory slots the layer puts
    # before the keys (values) forward() is given, (M, d) or (d,); () for none
    slots: tuple[int, ...] = ()
    param: str = ""  # the name of the learned keys' (values', slots') parameter: the model's
    scale: str = ""  # the scale of its N(0, 1) initialisation, as the model's
    # the feature a learned array was named as (`feature s = learned(K, d)`, read as `s`):
    # the model's parameter is that feature's, not the statement's; "" when written inline
    origin: str = ""


def find(cm: checks.CheckedModel, name: str) -> ir.Attention:
    """The attention statement called ``name``: its name in a repeat (``encoder.self``: the
    first hop's weights and sizes), its id (``encoder[2].self``), or its plain name when one
    statement has it."""
    atts = cm.model.attentions
    for a in atts:
        if a.id == name or (a.hop is not None and a.hop.template == name):
            return a
    plain = [a for a in atts if a.name == name]
    templates = sorted({a.hop.template if a.hop else a.id for a in plain})
    if len(templates) == 1:
        return plain[0]
    known = sorted({a.hop.template if a.hop else a.id for a in atts})
    if templates:
        raise LayerError(f"`{name}` names {len(templates)} attention statements of model "
                         f"`{cm.model.name}`: say which, one of {', '.join(templates)}")
    raise LayerError(f"model `{cm.model.name}` has no attention statement `{name}`; "
                     f"its attention statements: {', '.join(known)}")


def role(cm: checks.CheckedModel, n: ir.Attention, r: str, e: ir.Expr | None) -> Role:
    what = {"q": "query", "k": "keys", "v": "values"}[r]
    if e is None or (r == "q" and checks.learned_capsules(n)):
        return Role(r, "none")
    if r == "v" and n.values == n.keys:
        return Role(r, "keys")
    if isinstance(e, ir.Op) and e.fn == "prev":
        # a decoder's query s_(t-1) (Bahdanau et al.): the layer takes the query tensor
        # as given, one row per query position, and has no step loop of its own
        e = e.args[0]
    projected = isinstance(e, ir.Op) and e.fn == "project"
    src = e.args[0] if projected else e
    origin = ""
    if (named := learned_feature(cm, src)) is not None:  # s, s = learned(K, d)
        origin, src = named.name, named.expr
    own: tuple[int, ...] = ()
    slots: tuple[int, ...] = ()
    param = scale = ""
    mem = src.args[1] if isinstance(src, ir.Op) and src.fn == "prepend" and len(
        src.args) > 1 else None
    if (named := learned_feature(cm, mem)) is not None:  # prepend(x, s), s = learned(M, d)
        origin, mem = named.name, named.expr
    if r != "q" and isinstance(src, ir.Op) and src.fn == "prepend" and isinstance(
            src.args[0], ir.Ref) and (len(src.args) == 1 or is_learned(mem)):
        # memory slots: the layer puts them before the keys (values) it is given
        d_in = cm.shapes[src.args[0].node].dim
        if len(src.args) == 1:  # prepend(x, n): the op's own vectors (operators/blocks.py)
            slots, param, scale = (int(src.param("n", 1)), d_in), f"{r}_prepend", "0.02"
        else:
            slots, param = learned_shape(mem), learned_name(r, mem)
        src = src.args[0]
    if is_learned(src):
        own = learned_shape(src)
        d_in = own[-1]
        if r != "q":
            param = learned_name(r, src)
    elif isinstance(src, ir.Ref):
        d_in = cm.shapes[src.node].dim
    else:
        shown = e.fn + "(…)" if isinstance(e, ir.Op) else e.kind
        raise LayerError(f"the {what} of attention `{n.hop.template if n.hop else n.id}` "
                         f"{'is' if r == 'q' else 'are'} `{shown}`: a drop-in layer takes a "
                         "feature or project(feature) as query, keys and values, learned "
                         "ones (learned(K, d)), or a feature after learned memory slots "
                         "(prepend(x, learned(M, d))), or no query")
    scale = scale or f"cfg.d_{r} ** -0.5"  # learned(…): N(0, 1) / sqrt(d), as the model's
    if not projected:
        return Role(r, "input", d_in, d_in, own, slots=slots, param=param, scale=scale,
                    origin=origin)
    d = e.param("d")
    if d is None and kv_width.inferred(n, e):  # kv_heads heads of the query heads' width
        d = n.kv_heads * (cm.attention[n.id].d_q // n.heads)
    return Role(r, "project", d_in, int(d if d is not None else d_in), own,
                sized=e.param("d") is not None, slots=slots, param=param, scale=scale,
                origin=origin)


def learned_feature(cm: checks.CheckedModel, e: ir.Expr) -> ir.Node | None:
    """The feature ``e`` reads when it is a learned array by name (``feature s = learned(K,
    d)``, not updated since): the layer owns it as it owns ``learned(K, d)`` written inline."""
    if not isinstance(e, ir.Ref):
        return None
    node = cm.model.by_id.get(e.node)
    if isinstance(node, ir.Node) and node.kind_ == "feature" and is_learned(node.expr):
        return node
    return None


def learned_name(r: str, e: ir.Op) -> str:
    """The layer's name of the parameter of ``learned(…)`` in the keys (r = "k") or values:
    the model's (codegen/features.py), less the statement's prefix, as ``k_proj`` is."""
    return f"{r}_learned" if len(learned_shape(e)) == 2 else f"{r}_q"


def per_query_mask(n: ir.Attention) -> str:
    """Why statement ``n`` cannot take a mask per query (an (Lq, Lk) or (B, Lq, Lk) mask,
    is_causal), as the reasons check/fits.py gives for a mask input; '' where it can."""
    al = mech.align(n.align.fn)
    if n.query is None:
        return "it has no query (eq. 33): one row of weights per head, no query positions"
    if n.capsules:
        return "its queries are its capsules' (eq. 41-43), one per class, not positions"
    if al.centred:
        return "its local alignment takes each query's window of keys itself (eq. 27-29)"
    if al.gate:
        return "its sigmoid gate weighs each key position on its own, over no keys"
    if n.coverage:
        return "coverage scores the queries one at a time over all the keys (See et al.)"
    if "pair_mask" in al.excludes:
        return f"{al.conflict[0]}: {al.conflict[1]}"
    return ""


def generate(cs: checks.CheckedSpec, cm: checks.CheckedModel, name: str, source: str) -> str:
    """The text of the drop-in layer file for attention statement ``name`` of ``cm``; it
    imports the module names its code wrote as it was planned and rendered (imports.py)."""
    from ..files import seal

    used: set[str] = set()
    with recording(used):
        ctx, helpers = _planned(cs, cm, name, source)
        template = env().get_template("layer.py.j2")
        template.render(**ctx, imports=False, uses=())
    # sealed: the header carries the hash of the rest, so that `compile` replaces only a
    # layer file it wrote and nobody edited (files.sealed)
    return seal(template.render(**ctx, imports=True, uses=used,
                                flex_import=bool({"local_flex", "flex_context"} & helpers)))


def _planned(cs: checks.CheckedSpec, cm: checks.CheckedModel, name: str,
             source: str) -> tuple[dict, set[str]]:
    """The layer template's context for attention statement ``name`` and the helpers it
    holds."""
    from . import safe_source

    n = find(cm, name)
    if n.affinity:
        raise LayerError(f"attention `{name}` reads an affinity matrix (co-attention, eq. "
                         "12-16): it belongs to its model, not a drop-in layer")
    if n.mask_input is not None:
        kind = cm.model.node(n.mask_input).kind
        raise LayerError(f"attention `{name}` reads its {kind} input `{n.mask_input}` "
                         f"(`mask = {n.mask_input}`): it belongs to its model, not a drop-in "
                         "layer" + ("; the model's file has the graph attention class"
                                    if kind == "graph" else ""))
    for param, src in mech.align_reads(n.align):  # reinforced's `policy = s`
        raise LayerError(f"attention `{name}` reads `{src}` in its alignment (`{param} = "
                         f"{src}`): it belongs to its model, not a drop-in layer")
    if n.share is not None:
        raise LayerError(f"attention `{name}` uses the weights of `{n.share}` (`share =`): it "
                         "belongs to its model; take the layer of the statement it shares")
    q, k, v = (role(cm, n, r, e) for r, e in (("q", n.query), ("k", n.keys), ("v", n.values)))
    if why_not := layer_kv.refusal(q, k, v):
        raise LayerError(f"attention `{name}`: {why_not}; it belongs to its model")
    reg = _Classes(cm.model)
    cls = attention_class(reg, n)
    planned = reg.classes[cls]
    assert isinstance(planned, AttentionClass)
    why = per_query_mask(n)
    # the model's class, with the arguments its variants take: a mask per query (a mask
    # input's pair_mask) and query 0's position for its structural mask (a position term's
    # offset), which forward()'s mask, is_causal and positions reach
    shared_qk = mech.align(n.align.fn).shared_qk  # LSH: Lq = Lk, and its own causal mask
    view = replace(planned.view, pair=not why, offset=planned.view.offset or (
        n.mask != "none" and not shared_qk))
    reg.helpers.update({"key_keep"} | ({"query_offset"} if view.offset else set()))
    e = env()
    helpers = [e.get_template(f"helpers/{h}.py.j2").render().rstrip()
               for h in sorted(reg.helpers)]
    klass = e.get_template("attention.py.j2").render(a=view).rstrip()
    args = [a for a in mech.constructor(n, n.dropout is not None, None,
                                          q.kind != "none" or bool(n.capsules))
            if a.passed(n) or depth.pattern(n, a)]  # (one by depth: from Config.depth)
    config = fields_and_checks(cm, n, q, k, v, args)
    read = reads(n, q, k, v)
    # the model's call (codegen/attention.py) is built from the same list of arguments; the
    # widths are Config.widths()'s: q, k, v as the class reads them
    widths = {"d_q": "q", "d_k": "k", "d_v": "v", "d_w": "d_w"}
    ctor = [f"{a.name}=w[{widths[a.name]!r}]" if a.name in widths else
            f"{a.name}={depth.at_layer(depth.pattern(n, a), 'cfg.depth')}" if depth.pattern(n, a) else
            f"{a.name}=cfg.{a.name}" for a in args]
    shown = n.hop.template if n.hop else n.id
    label = cs.spec.paper.cite or cs.spec.paper.id
    call = wrap(f"self.attn = {cls}({', '.join(ctor)})", 8, 100)
    fast = fast_path(n, dot_form(n))
    own = "its queries are learned, at no position" if q.own else \
        "its keys are learned, at no position" if k.own else why
    refusal = raise_lines("`is_causal`: this attention takes no causal mask per call, as "
                          f"{own}" + ("; Config(mask='causal') gives its own"
                                      if n.mask != "none" else ""), 12 if n.mask != "none" else 8)
    more = (["pair_mask=pair"] if view.pair else []) + \
        (["offset=positions"] if view.offset else []) + (["start=start"] if view.start else []) + \
        ([f"need_weights=need_weights{' or pair is not None' if fast == 'flex' else ''}"]
         if fast else [])
    forward_call = wrap(f"c, a, extras = self.attn({', '.join(['q, k, v, key_mask'] + more)})",
                        8, 100)
    checked = wrap("key_mask, pair = layer_mask(mask, B, Lq, Lk, validate" +
                   (f", {why!r})" if why else ")"), 8, 100)
    ctx = dict(
        checked=checked, why_doc=textwrap.wrap(f"A mask per query is refused: {why}.", 80),
        causal_doc=textwrap.wrap("is_causal: " + ("only with Config.mask = causal (already "
                                                  "causal)" if n.mask != "none" else "refused")
                                 + f": {own}.", 84),
        about=about(view, bool(q.own), k),
        **layer_kv.context(q, k, v, view), causal_refusal=refusal, call=forward_call,
        source=safe_source(source), shown=shown, model=cm.model.name, cite=safe(label),
        cls=cls, view=view, q=q, k=k, v=v, config=config, helpers=helpers, klass=klass,
        ctor=call, fast=bool(fast), flex=fast == "flex", why=why,
        structural="mask" in {f.name for f in config.fields}, mask=n.mask,
        start=start_default(cm, n) if view.start else "",
        shared_qk=shared_qk, width=read["v"])
    return ctx, reg.helpers


def about(view, own: bool, k: Role) -> str:
    """The module docstring's paragraph on what the file holds."""
    variants = [x for x, on in (("a mask per query", view.pair),
                                ("the position of the first query", view.offset)) if on]
    return textwrap.fill(
        "The class below is the one the full model uses for this statement" +
        (f" (with the arguments its variants take: {' and '.join(variants)})" if variants
         else "") + ". `Layer` adds the spec's query, key and value projections" +
        (" and its learned query" if own else "") +
        (" and its learned keys and values" if k.own else "") +
        (" and its memory slots (put before the keys it is given)" if k.slots else "") +
        " and is called as nn.MultiheadAttention and F.scaled_dot_product_attention are.", 92)


def start_default(cm: checks.CheckedModel, n: ir.Attention) -> str:
    """Where the layer puts its queries when forward() is given no ``start`` (a window
    centred at the query's position, local-m): "last", the last Lq of the keys' positions,
    for a statement over its own query sequence (as its structural mask does); "first", each
    sequence from 0, for queries of another sequence (Luong et al.'s target over the
    source)."""
    info = cm.attention[n.id]
    own = info.query_mode == "sequence" and cm.shapes[n.id].axes[-1] == info.attended
    return "last" if own else "first"


def safe(text: str) -> str:
    from .names import safe_text

    return safe_text(text)
