"""Mechanisms named by a statement's fields, lowered by one function for every kind: a
name (`align = local(D = 4)`, `mem_kv = 4`) is looked up among its kind's records in the
registry (``taxcompile/mechanisms``, aliases included), its arguments are checked against
the record's ``params`` (positional or by name, each by its ``P``: a node's name resolved
to its id, a number in its range and sign), every parameter it does not set takes its
record's default (None for one its record's ``by_depth`` computes from the layer, in a
repeat's hop), and each argument written as a constant expression keeps it as its
``Config`` expression. The result is an ``ir.Mech``, which checks itself against the
registry when it is built. Errors of this kind: an unknown mechanism (with the nearest
name), an unknown, repeated or missing parameter, a value of the wrong type, range or sign;
whether the mechanism fits its statement is checked in checks.py on the IR."""

from __future__ import annotations

from .. import ast, ir
from ..diagnostics import article
from ..params import P
from ..suggest import suggest
from .names import Scope


def by_depth(rec, scope: Scope | None) -> set[str]:
    """The parameters of ``rec`` that a statement in ``scope`` takes from its layer where
    the spec leaves them unset (the record's ``by_depth``): those of a statement in a
    `repeat` whose hops have weights of their own (a shared repeat's one module has one
    value, its default)."""
    hop = scope.hop if scope is not None else None
    if hop is None or hop.shared:
        return set()
    return {name for name, _, _ in rec.by_depth}


class Mechanisms:
    """Mechanism fields (a part of ``lower.Lowerer``)."""

    def mechanism(self, kind: str, fld: ast.Field, table: dict, what: str,
                  scope: Scope | None = None) -> ir.Mech | None:
        """The ``ir.Mech`` of the mechanism ``fld`` names among ``table`` (its kind's
        spellings: name -> record); None when it does not lower (an error is recorded)."""
        name, params, syms = self._mechanism(fld, {k: m.params for k, m in table.items()},
                                             what, scope)
        if not name:
            return None
        rec = table[name]  # an alias (`soft`) is lowered to its record's name (`global`)
        return ir.Mech(kind=kind, fn=rec.name, params=tuple(
            (p.name, params.get(p.name)) for p in rec.params),
            sym=tuple(sorted(syms.items())), loc=self.loc(fld.value.pos))

    def switch(self, kind: str, fld: ast.Field, rec, scope: Scope) -> ir.Mech | None | bool:
        """A mechanism that is a field of its own (`mem_kv = 4`, `talking_heads = pre`,
        `head_gates = true`): `false` is none (None), `true` the record with its defaults,
        another value its first parameter. False when it does not lower. Its location is
        the field's name, which names the mechanism."""
        v = fld.value
        if isinstance(v, ast.Ref) and len(v.parts) == 1 and v.name in ("true", "false"):
            if v.name == "false":
                return None
            missing = [p.name for p in rec.params if p.required]
            if missing:
                self.err(v.pos, f"`{fld.name}` needs a value for `{missing[0]}`, not `true`",
                         f"e.g. `{fld.name} = 4`")
                return False
            unset = by_depth(rec, scope)
            return ir.Mech(kind=kind, fn=rec.name, params=tuple(
                (p.name, None if p.name in unset else p.default) for p in rec.params),
                loc=self.loc(fld.pos))
        if not rec.params:
            self.err(v.pos, f"`{fld.name}` is `true` or `false`")
            return False
        first = rec.params[0]
        value = self.mechanism_param(first, v, scope, f"`{fld.name}`")
        if value is None:
            return False
        sym = self.sym(v, scope) if first.type in ("int", "float") else None
        unset = by_depth(rec, scope)
        return ir.Mech(kind=kind, fn=rec.name, params=((first.name, value), *(
            (p.name, None if p.name in unset else p.default) for p in rec.params[1:])),
            sym=((first.name, sym),) if sym else (), loc=self.loc(fld.pos))

    def _mechanism(self, fld: ast.Field | None, table: dict, what: str,
                   scope: Scope | None = None):
        """The mechanism a field names, its parameters and their Config expressions:
        (name, params, syms); name None when the field is absent, False on an error. A
        node parameter (reinforced's `policy = s`) is resolved in ``scope`` to a node id."""
        if fld is None:
            return None, {}, {}
        e = fld.value
        if isinstance(e, ast.Ref) and len(e.parts) == 1:
            name, kwargs, pos_args = e.name, (), ()
        elif isinstance(e, ast.Call):
            name, kwargs, pos_args = e.fn, e.kwargs, e.args
        else:
            self.err(e.pos, f"expected {article(what)} {what} function", suggest("", table))
            return False, {}, {}
        if name not in table:
            self.err(e.pos, f"unknown {what} function `{name}`", suggest(name, table))
            return False, {}, {}
        sig = table[name]
        params: dict[str, ir.Scalar] = {}
        syms: dict[str, str] = {}

        def take(p: P, a: ast.Expr) -> bool:
            v = self.mechanism_param(p, a, scope, f"`{p.name}` of `{name}`")
            if v is None:
                return False
            params[p.name] = v
            # a number written as a constant expression keeps it: a Config field
            if p.type in ("int", "float") and (t := self.sym(a, None)):
                syms[p.name] = t
            return True

        for i, a in enumerate(pos_args):
            if i >= len(sig):
                params = ", ".join(f"`{p.name}`" for p in sig)
                self.err(a.pos, f"`{name}` takes {len(sig)} argument(s): "
                         f"{params or 'none'}")
                return False, {}, {}
            if not take(sig[i], a):
                return False, {}, {}
        names = {p.name: p for p in sig}
        for k in kwargs:
            if k.name not in names:
                owners = [f"`{o}`" for o, sg in table.items() if any(p.name == k.name for p in sg)]
                self.err(k.pos, f"`{name}` has no parameter `{k.name}`",
                         f"`{k.name}` is a parameter of {', '.join(owners)}" if owners else
                         suggest(k.name, names) if names else f"`{name}` takes no parameters")
                return False, {}, {}
            if not take(names[k.name], k.value):
                return False, {}, {}
        for p in sig:
            if p.name not in params:
                if p.required:
                    self.err(e.pos, f"`{name}` needs `{p.name}`",
                             f"e.g. `{name}({p.name} = 10)`")
                    return False, {}, {}
                if p.default is not None:
                    params[p.name] = p.default
        return name, params, syms

    def mechanism_param(self, p: P, e: ast.Expr, scope: Scope | None, what: str):
        """A mechanism's parameter: a constant, or for a node parameter the id of the node
        it names (a name only: an expression has no node of its own to read)."""
        if p.type == "scale":  # the similarity's beta: `learned`, or a positive number
            if isinstance(e, ast.Ref) and len(e.parts) == 1 and e.name == "learned":
                return "learned"
            if (isinstance(e, ast.Ref) and e.name not in self.consts
                    and e.name not in self.poisoned):
                self.err(e.pos, f"{what} must be `learned` or a positive number, got "
                         f"`{e.name}`", "e.g. `scale = learned` (beta learned, from 10) or "
                         "`scale = 4` (NTM's key strength beta; 1 is Table II's cosine)")
                return None
            return self.as_param(P(p.name, "float"), e, None, what)
        if p.type != "node":
            return self.as_param(p, e, None, what)
        if not isinstance(e, ast.Ref) or scope is None:
            self.err(e.pos, f"{what} names a feature or an input, not an expression",
                     f"declare it first, e.g. `feature s = mean(embed(aspect, 300))`, then "
                     f"write `{p.name} = s`")
            return None
        return self.resolve(e, scope)
