"""Attention statements: their fields, the keys, values and query as feature expressions,
and the mechanisms they name, each read from its record in the registry
(``taxcompile/mechanisms``): the score and the alignment (their parameters and aliases),
the position term and the bias, the mask, the way heads join; the penalty is lowered in
``penalties``. Errors of this kind: an unknown or repeated field, no keys or no score, an
unknown mechanism or parameter, a value out of range, a `mask`, `share` or `affinity` that
names the wrong kind of thing. Whether a mechanism fits the statement (its query, keys,
heads, the records' requirements, Table II) is checked in checks.py on the IR."""

from __future__ import annotations

from .. import ast, ir
from .. import mechanisms as mech
from ..diagnostics import article
from ..mechanisms import spellings
from ..params import P
from ..suggest import suggest
from .base import Defining
from .features import Features
from .heads import FIELDS as HEAD_FIELDS
from .heads import head_fields
from .inputs import MASK_KINDS
from .mechanisms import Mechanisms
from .names import POISONED, Scope
from .penalties import Penalties
from .routing import routed, routing_field
from .segment import segment_memory

# The parameters of each mechanism a statement names come from its record
# (taxcompile/mechanisms), aliases included (`dot`, `soft`).
SCORE_SPELLINGS = spellings(mech.SCORES)
SCORES: dict[str, tuple[P, ...]] = {k: m.params for k, m in SCORE_SPELLINGS.items()}

# Scores that score the keys alone when a module has no query (eq. 33).
SCORES_WITHOUT_QUERY = mech.WITHOUT_QUERY

ALIGN_SPELLINGS = spellings(mech.ALIGNS)  # `soft` is `global` (eq. 25)
ALIGNS: dict[str, tuple[P, ...]] = {k: m.params for k, m in ALIGN_SPELLINGS.items()}

# Masks over one sequence (their records say which keys each keeps).
MASKS = P("mask", "enum", False, "none", tuple(mech.MASKS))

ATTENTION_FIELDS = ("query", "keys", "values", "features", "score", "align", "dimensionality",
                    "heads", "capsules", "mask", "penalty", "affinity", "heads_out", "dropout",
                    "share", "position", "bias", "coverage", "self_loops", "kv_heads",
                    "qk_norm", "mem_len") + HEAD_FIELDS
# Score modifiers: position terms in q and k (`position = …`) and additive biases on the
# scores before the alignment (`bias = …`); docs/codegen.md has their equations.
POSITIONS: dict[str, tuple[P, ...]] = {k: m.params for k, m in mech.POSITIONS.items()}
BIASES: dict[str, tuple[P, ...]] = {k: m.params for k, m in mech.BIASES.items()}
# Query-key normalisation: `qk_norm = l2(…)` (or `true`), its record's parameters.
# How a multi-head module joins its heads' contexts (the records of mechanisms.HEADS_OUT).
# a way of joining heads that has required parameters is listed as the call it needs
# (`routing(capsules = …)`); lowering/routing.py reads that call before this enum is tried
HEADS_OUT = P("heads_out", "enum", False, "project", tuple(
    rec.name + ("(" + ", ".join(f"{p.name} = …" for p in rec.params if p.required) + ")"
                if any(p.required for p in rec.params) else "")
    for rec in mech.HEADS_OUT.values()))


class Attentions(Features, Penalties, Mechanisms):
    """Attention statements (a part of ``lower.Lowerer``)."""

    def attention(self, s: ast.Attention, scope: Scope) -> None:
        self.defining = Defining(s.name, False)
        node_id = self.bind(scope, s.name, s.pos, "attention")
        if node_id is None:
            return
        f = self.attention_fields(s)
        before = len(self.c.diagnostics)
        if "features" in f and ("keys" in f or "values" in f):
            other = f.get("keys") or f["values"]
            self.err(other.pos, f"`{other.name}` conflicts with `features`",
                     "`features = F` sets both keys and values; give either it or `keys`/`values`")
        keys_f = f.get("keys") or f.get("features")
        if keys_f is None:
            self.err(s.pos, f"attention `{s.name}` has no keys",
                     "say what it attends over: `features = F`, or `keys = …` and `values = …`")
            return
        keys = self.expr(keys_f.value, scope)
        values_f = f.get("values") or f.get("features")
        values = self.expr(values_f.value, scope) if values_f and values_f is not keys_f else keys
        query = self.expr(f["query"].value, scope) if "query" in f else None
        score = self.score(f.get("score"), s)
        align = self.align(f.get("align"), s, scope)
        traits = self.attention_traits(f, s, scope)
        traits.update(head_fields(self, f, scope))
        traits.update(routing_field(self, f, traits))
        links = self.attention_links(f, scope)
        position = self.modifier(f.get("position"), "position", "position term")
        bf = f.get("bias")  # `bias = true | false`: graph attention's output bias
        on = bf.value.name if bf and isinstance(bf.value, ast.Ref) else None
        out_bias = on == "true" if on in ("true", "false") else None
        bias = self.modifier(bf if out_bias is None else None, "bias", "score bias")
        qk_norm = self.qk_norm(f.get("qk_norm"))
        memory = segment_memory(self, f.get("mem_len"), scope)
        if len(self.c.diagnostics) > before or keys is None or values is None or score is None \
                or align is None or traits["heads"] is None or traits["capsules"] is None:
            return
        self.add_node(ir.Attention(
            id=node_id, name=s.name, query=query, keys=keys, values=values,
            score=score, align=align, position=position, bias=bias, **traits, **links,
            hop=self.hop_of(scope, s.name), loc=self.loc(s.pos), out_bias=out_bias,
            qk_norm=qk_norm, memory=memory), s.pos)

    def attention_fields(self, s: ast.Attention) -> dict[str, ast.Field]:
        """The statement's fields by name (an unknown or repeated one is reported)."""
        f: dict[str, ast.Field] = {}
        for fld in s.fields:
            if fld.name not in ATTENTION_FIELDS:
                self.err(fld.pos, f"unknown attention field `{fld.name}`",
                         suggest(fld.name, ATTENTION_FIELDS))
            elif fld.name in f:
                self.err(fld.pos, f"field `{fld.name}` is given twice")
            else:
                f[fld.name] = fld
        return f

    def attention_traits(self, f: dict[str, ast.Field], s: ast.Attention,
                         scope: Scope) -> dict[str, object]:
        """The fields of ``ir.Attention`` set by the statement's plain values: heads,
        capsules, dimensionality, mask, penalties, coverage, dropout and their Config
        expressions (``heads`` or ``capsules`` None: an error is recorded)."""
        dims = "single"
        if "dimensionality" in f:
            dims = self.as_param(P("dimensionality", "enum", choices=("single", "multi")),
                                 f["dimensionality"].value, scope, "`dimensionality`") or "single"
        heads = self.as_int(f["heads"].value, scope, "`heads`", 1, 1024) if "heads" in f else 1
        capsules = (self.as_int(f["capsules"].value, scope, "`capsules`", 2, 1024)
                    if "capsules" in f else 0)
        mask, mask_input = MASKS.default, None
        if "mask" in f:
            mask, mask_input = self.mask_field(f["mask"].value, scope)
        self_loops = self.flag(f, "self_loops", scope)
        penalties = self.penalty(f["penalty"], scope) if "penalty" in f else {}
        coverage = self.flag(f, "coverage", scope)  # See et al.'s coverage vector
        heads_out = (self.as_param(HEADS_OUT, f["heads_out"].value, scope, "`heads_out`")
                     if "heads_out" in f and not routed(f["heads_out"].value)
                     else HEADS_OUT.default)  # routing(…) is lowered in routing.py
        if "heads_out" in f and heads == 1:
            self.err(f["heads_out"].pos, "`heads_out` joins the contexts of several heads, "
                     f"but attention `{s.name}` has one", "set `heads = H`, or drop `heads_out`")
        dropout = (self.as_param(P("dropout", "prob"), f["dropout"].value, scope, "`dropout`")
                   if "dropout" in f else None)
        kv_heads = self.kv_heads(f, heads, s, scope) if "kv_heads" in f else 0
        syms = {k: t for k in ("heads", "capsules", "dropout", "kv_heads") if k in f
                and (t := self.sym(f[k].value, scope))}
        return dict(dimensionality=dims, heads=heads, heads_out=heads_out or HEADS_OUT.default,
                    capsules=capsules, mask=mask or MASKS.default, mask_input=mask_input,
                    self_loops=self_loops, coverage=coverage, dropout=dropout, **penalties,
                    kv_heads=kv_heads or 0, sym=tuple(sorted(syms.items())))

    def kv_heads(self, f: dict[str, ast.Field], heads: int | None, s: ast.Attention,
                 scope: Scope) -> int | None:
        """`kv_heads = g`: grouped-query attention's key/value heads (its record's fit)."""
        fld = f["kv_heads"]
        g = self.as_int(fld.value, scope, "`kv_heads`", 1, 1024)
        if g is None or heads is None:
            return None
        if heads == 1:
            self.err(fld.pos, f"`kv_heads` shares key/value heads among query heads, but "
                     f"attention `{s.name}` has one head", "set `heads = H` (kv_heads divides "
                     "H), or drop `kv_heads`")
            return None
        if heads % g:
            self.err(fld.value.pos, f"kv_heads = {g} does not divide heads = {heads}",
                     "each key/value head serves heads / kv_heads query heads (Ainslie et al. "
                     f"2023): a divisor of {heads}, 1 for multi-query attention")
            return None
        return g

    def flag(self, f: dict[str, ast.Field], name: str, scope: Scope) -> bool:
        """A `true`/`false` field (False when not given, or not lowered)."""
        return name in f and bool(self.as_param(P(name, "bool"), f[name].value, scope,
                                                f"`{name}`"))

    def attention_links(self, f: dict[str, ast.Field], scope: Scope) -> dict[str, str | None]:
        """``share`` (the module whose weights this one uses) and ``affinity`` (the
        affinity matrix it reads): node ids, None when not given or not lowered."""
        share = self.link(f, "share", scope, "`share` names another attention module whose "
                          "weights this one uses")
        affinity = self.link(f, "affinity", scope, "`affinity` names an affinity matrix "
                             "declared with `affinity NAME = affinity(A, B, …)`")
        if affinity is not None:
            v = f["affinity"].value
            if self.m.roles.get(affinity) not in (None, "affinity"):
                self.err(v.pos, f"`{v.name}` is not an affinity matrix")
                affinity = None
            elif affinity not in self.m.ids:
                self.err(v.pos, f"affinity matrix `{v.name}` must be declared before it is used")
                affinity = None
        return dict(share=share, affinity=affinity)

    def link(self, f: dict[str, ast.Field], name: str, scope: Scope, usage: str) -> str | None:
        """The node a field names (None when not given, or not a name: ``usage`` says)."""
        if name not in f:
            return None
        v = f[name].value
        if not isinstance(v, ast.Ref):
            self.err(v.pos, usage)
            return None
        return self.resolve(v, scope)

    def mask_field(self, e: ast.Expr, scope: Scope) -> tuple[str | None, str | None]:
        """``mask = causal``, ``mask = m`` (a mask or graph input), ``mask = causal * m``:
        the structural mask and the mask input (an error is recorded when neither fits)."""
        parts = [e.left, e.right] if isinstance(e, ast.BinOp) and e.op == "*" else [e]
        structural, data = None, None
        for x in parts:
            look = (scope.lookup(x.name) if isinstance(x, ast.Ref) and len(x.parts) == 1
                    else None)
            if look is POISONED:
                return None, None  # refused where it is defined, and reported there
            found = look[1] if look and look[0] == "node" else None
            node = next((n for n in self.m.nodes if n.id == found), None) if found else None
            if isinstance(node, ir.Input):
                kind = node.kind
                if kind not in MASK_KINDS or data is not None:
                    self.err(x.pos, f"`{x.name}` is {article(kind)} {kind} input, not a mask"
                             if kind not in MASK_KINDS else "`mask` combines one mask input "
                             "at most", "declare `input m: mask[T, S]` (a (B, T, S) bool "
                             "mask) or `input adj: graph[N]`, and write `mask = m`")
                    return None, None
                data = found
            elif isinstance(x, ast.Ref) and len(x.parts) == 1 and x.name in MASKS.choices \
                    and structural is None and (len(parts) == 1 or x.name != "none"):
                structural = x.name
            else:
                got = x.name if isinstance(x, ast.Ref) else "this"
                self.err(x.pos, f"`mask` cannot be `{got}`",
                         "a structural mask (`causal`, `forward`, `backward`), a mask or graph "
                         "input declared above, or both: `mask = causal * m`")
                return None, None
        return structural or "none", data

    def score(self, fld: ast.Field | None, s: ast.Attention) -> ir.Mech | None:
        if fld is None:
            self.err(s.pos, f"attention `{s.name}` has no score function",
                     "add e.g. `score = additive(d_w = 256)` or `score = scaled_multiplicative` "
                     "(Table II)")
            return None
        return self.mechanism("score", fld, SCORE_SPELLINGS, "score")  # dot: multiplicative

    def modifier(self, fld: ast.Field | None, kind: str, what: str) -> ir.Mech | None:
        """``position = relative(k = 16, values = true)`` / ``rotary``, ``bias = alibi`` /
        ``gaussian``: a score modifier (an error is recorded when it does not lower)."""
        if fld is None:
            return None
        return self.mechanism(kind, fld, mech.POSITIONS if kind == "position" else mech.BIASES,
                              what)

    def qk_norm(self, fld: ast.Field | None) -> ir.Mech | None:
        """`qk_norm = true | false | l2(scale = 10, groups = 1, dim_scale = false) | rms`:
        query-key normalisation, a form of ``mechanisms.QK_NORMS`` (`true`: the first with
        its defaults; an error is recorded when it does not lower)."""
        if fld is None:
            return None
        v = fld.value
        if isinstance(v, ast.Ref) and len(v.parts) == 1 and v.name in ("true", "false"):
            if v.name == "false":
                return None
            first = next(iter(mech.QK_NORMS.values()))
            return ir.Mech(kind="qk_norm", fn=first.name, params=tuple(
                (p.name, p.default) for p in first.params), loc=self.loc(v.pos))
        return self.mechanism("qk_norm", fld, spellings(mech.QK_NORMS),
                              "query-key normalisation")

    def align(self, fld: ast.Field | None, s: ast.Attention, scope: Scope) -> ir.Mech | None:
        if fld is None:
            return ir.Mech(kind="align", fn="global", loc=self.loc(s.pos))
        return self.mechanism("align", fld, ALIGN_SPELLINGS, "alignment", scope)
