"""Drop-in layers: one attention statement of a spec as a standalone ``nn.Module``.

``taxcompile compile SPEC --layer NAME -o out.py`` writes a file with the attention class the
full model uses for that statement (planned by ``classes.attention_class`` and rendered by
``attention.py.j2``: the same text, not a second implementation), its helpers, a ``Config``
with the statement's sizes and a thin ``Layer`` wrapper (``templates/codegen/layer.py.j2``)
that owns the query, key and value projections and takes ``forward(q, k, v, mask=None)``.

A drop-in layer takes queries, keys and values that are features or projections of
features (``project(F)``, eq. 1 and 35); a learned query (eq. 34) or no query (eq. 33) is
the layer's own. Keys built by other operators (an RNN, a concatenation, …) or an affinity
matrix (co-attention) belong to their model and are refused with a ``LayerError``."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import checks, ir
from .. import mechanisms as mech
from .classes import attention_class, dot_form, fast_path
from .emit import env, names
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
    kind: str  # "input" (as given) | "project" (W x, eq. 1 / 35) | "learned" | "none" | "keys"
    d_in: int = 0  # the width forward() is given
    d: int = 0  # the width the attention class reads


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
    if isinstance(e, ir.Ref):
        d = cm.shapes[e.node].dim
        return Role(r, "input", d, d)
    if isinstance(e, ir.Op) and e.fn == "project" and isinstance(e.args[0], ir.Ref):
        d_in = cm.shapes[e.args[0].node].dim
        d = e.param("d") if e.param("d") is not None else d_in
        return Role(r, "project", d_in, int(d))
    if isinstance(e, ir.Op) and e.fn == "learned" and r == "q" and e.param("n") is None:
        return Role(r, "learned", 0, int(e.param("d")))
    if isinstance(e, ir.Op) and e.fn == "learned":  # the layer has one learned query at most
        raise LayerError(f"the {what} of attention `{n.hop.template if n.hop else n.id}` "
                         f"{'is' if r == 'q' else 'are'} a learned set `learned(K, d)`: a "
                         "drop-in layer takes query, keys and values as tensors; pass the "
                         "set as one, or take the layer of a statement that projects it "
                         "(`query = project(z)` with `feature z = learned(K, d)`)")
    shown = e.fn + "(…)" if isinstance(e, ir.Op) else e.kind
    raise LayerError(f"the {what} of attention `{n.hop.template if n.hop else n.id}` "
                     f"{'is' if r == 'q' else 'are'} "
                     f"`{shown}`: a drop-in layer takes a feature or project(feature) as "
                     "query, keys and values (or a learned query, or none)")


def generate(cs: checks.CheckedSpec, cm: checks.CheckedModel, name: str, source: str) -> str:
    """The text of the drop-in layer file for attention statement ``name`` of ``cm``."""
    from ..files import seal
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
    reg = _Classes(cm.model)
    cls = attention_class(reg, n)
    reg.helpers.add("check_mask")
    view = reg.classes[cls].view
    assert isinstance(reg.classes[cls], AttentionClass)
    e = env()
    helpers = [e.get_template(f"helpers/{h}.py.j2").render().rstrip()
               for h in sorted(reg.helpers)]
    klass = e.get_template("attention.py.j2").render(a=view).rstrip()
    args = [a for a in mech.constructor(n, n.dropout is not None, None,
                                          q.kind != "none" or bool(n.capsules)) if a.passed(n)]
    fields = config_fields(cm, n, q, k, v, args)
    vk = v if v.kind != "keys" else k
    widths = {"d_q": width(k, "k") if checks.learned_capsules(n) else width(q, "q"),
              "d_k": width(k, "k"), "d_v": width(vk, "v" if v.kind != "keys" else "k")}
    # the model's call (codegen/attention.py) is built from the same list of arguments
    ctor = [f"{a.name}={widths.get(a.name, f'cfg.{a.name}')}" for a in args]
    shown = n.hop.template if n.hop else n.id
    label = cs.spec.paper.cite or cs.spec.paper.id
    call = wrap(f"self.attn = {cls}({', '.join(ctor)})", 8, 100)
    ctx = dict(
        source=safe_source(source), shown=shown, model=cm.model.name, cite=safe(label),
        cls=cls, view=view, q=q, k=k, v=v, fields=fields, helpers=helpers, klass=klass,
        ctor=call, fast=bool(fast_path(n, dot_form(n))),
        extras=bool(mech.align(n.align.fn).extras) or n.penalty is not None or bool(n.capsules),
        structural=n.mask, start=start_default(cm, n) if view.start else "",
        shared_qk=mech.align(n.align.fn).shared_qk)
    text = e.get_template("layer.py.j2").render(**ctx, imports=False)
    used = names(text)
    # sealed: the header carries the hash of the rest, so that `compile` replaces only a
    # layer file it wrote and nobody edited (files.sealed)
    return seal(e.get_template("layer.py.j2").render(**ctx, imports=True, math="math" in used,
                                                     functional="F" in used,
                                                     warnings="warnings" in used,
                                                     flex="flex_attention" in used))


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


def width(r: Role, which: str) -> str:
    return f"cfg.d_{which}_proj" if r.kind == "project" else \
        f"cfg.d_{which}" if r.kind in ("input", "learned") else "0"


def config_fields(cm, n: ir.Attention, q: Role, k: Role, v: Role,
                  args: list[mech.CtorArg]) -> list[tuple[str, ...]]:
    """(field, type, value, comment) of the layer's Config, in order: the widths of what
    forward() is given, then one field per constructor argument the statement sets."""
    out = []
    for r, what in ((q, "queries"), (k, "keys"), (v, "values")):
        if r.kind in ("input", "project"):
            out.append((f"d_{r.name}", "int", str(r.d_in), f"width of the {what} forward() is given"))
        if r.kind == "project":
            out.append((f"d_{r.name}_proj", "int", str(r.d), f"width of W_{r.name.upper()} "
                        f"{r.name} (eq. {'35' if r.name == 'q' else '1'})"))
        if r.kind == "learned":
            out.append(("d_q", "int", str(r.d), "width of the learned query (eq. 34)"))
    out.append(("heads", "int", str(n.heads), "attention heads (eq. 38)"))
    d_w = getattr(n.score, "d_w", None) or (q.d if q.kind != "none" and not checks.learned_capsules(n) else k.d)
    computed = {"d_w": d_w, "n_keys": cm.sizes[cm.attention[n.id].attended]}
    for a in args:
        if a.name in ("d_q", "d_k", "d_v", "heads"):
            continue
        value = computed[a.name] if a.name in computed else a.value(n)
        out.append((a.name, a.type, mech.literal(value), a.comment))
    return out
