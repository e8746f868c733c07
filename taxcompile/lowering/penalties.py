"""The ``penalty`` field of an attention statement: a term of the training loss. The
penalties' records (``mechanisms.PENALTIES``) say how a spec writes each (a call
``penalty = NAME(…)``, or Lin et al.'s bare coefficient ``penalty = λ``); each is lowered
into ``ir.Attention.loss_term``, an ``ir.Mech`` that its record's call or template
computes: as every other mechanism is (``lowering/mechanisms.py``: its parameters checked
against its record), or where its mistakes have words of their own (Li et al.'s
disagreement, supervised attention) by a function here. Errors of this kind: a wrong number or kind of arguments, a coefficient out of range. Whether a
supervised penalty's target is an alignment input of the right axes is checked in
checks.py."""

from __future__ import annotations

from .. import ast, ir
from .. import mechanisms as mech
from ..ops import P
from .constants import Constants
from .names import Scope



def called() -> dict[str, mech.Mechanism]:
    """The penalties written as a call, by name (read at each use: a registry extension
    may add one)."""
    return {m.name: m for m in mech.PENALTIES.values() if not m.bare}


# The one written as a bare coefficient (Lin et al.'s `penalty = λ`).
BARE = next(m for m in mech.PENALTIES.values() if m.bare)


class Penalties(Constants):
    """The ``penalty`` field (a part of ``lower.Lowerer``)."""

    def penalty(self, fld: ast.Field, scope: Scope) -> dict[str, object]:
        """``penalty = …`` -> {the ``ir.Attention`` field it fills: its value, None when it
        does not lower (the error is recorded)}."""
        v, table = fld.value, called()
        if isinstance(v, ast.Ref) and len(v.parts) == 1 and v.name in table and not (
                (scope.lookup(v.name) if scope else None) or v.name in self.consts):
            # a penalty's bare name (`penalty = coverage`) is its call with no arguments; a
            # `let` of that name stays Lin et al.'s coefficient
            v = ast.Call(pos=v.pos, fn=v.name, args=(), kwargs=())
        m = table.get(v.fn) if isinstance(v, ast.Call) else None
        if m is None:  # the bare coefficient: its record's one parameter
            first = BARE.params[0]
            lam = self.as_param(first, v, scope, "`penalty`")
            return {"loss_term": None if lam is None else ir.Mech(
                kind="penalty", fn=BARE.name, params=((first.name, lam),), loc=self.loc(v.pos))}
        read = ARGUMENTS.get(m.name)  # arguments read by a function of their own, below
        if read is not None:
            return {"loss_term": read(self, m, v, scope)}
        # a record and its template: a mechanism as any other
        return {"loss_term": self.mechanism("penalty", ast.Field(pos=fld.pos, name=fld.name,
                                            value=v), {m.name: m}, "penalty", scope)}

    def disagreement_penalty(self, m: mech.Mechanism, v: ast.Call,
                             scope: Scope) -> ir.Mech | None:
        """``penalty = disagreement(lambda, on = subspace | position | output)``: Li et al.'s
        -lambda D (2018, eq. 5-7)."""
        extra = [k for k in v.kwargs if k.name != "on"]
        if len(v.args) > 1 or extra:
            self.err(extra[0].pos if extra else v.args[1].pos, "`disagreement` takes its "
                     "coefficient lambda and `on = subspace | position | output` (Li et al. "
                     "eq. 5-7)", "e.g. `penalty = disagreement(1.0, on = output)`")
            return None
        on = next((k for k in v.kwargs if k.name == "on"), None)
        if on is None:
            self.err(v.pos, "`disagreement` needs `on = subspace | position | output`: the "
                     "heads' values (eq. 5), weights (eq. 6) or outputs (eq. 7)",
                     "e.g. `penalty = disagreement(1.0, on = output)`")
            return None
        lam = (self.as_param(param(m, "lambda"), v.args[0], scope,
                             "`lambda` of `disagreement`") if v.args else 1.0)
        where = self.as_param(param(m, "on"), on.value, scope, "`on` of `disagreement`")
        if lam is None or where is None:
            return None
        return ir.Mech(kind="penalty", fn=m.name, params=(("lambda", float(lam)), ("on", where)),
                       loc=self.loc(v.pos))

    def supervised(self, m: mech.Mechanism, v: ast.Call,
                   scope: Scope) -> ir.Mech | None:
        """``supervised(gold, lambda, loss = squared | cross_entropy)``: supervised
        attention (Liu et al. 2016, Mi et al. 2016); ``gold`` is checked in checks.py."""
        usage = "e.g. `penalty = supervised(gold, 1.0, loss = cross_entropy)`"
        if not v.args or len(v.args) > 2 or not isinstance(v.args[0], ast.Ref):
            self.err(v.pos, "`supervised` takes the target alignment input and the "
                     "coefficient lambda", usage)
            return None
        lam = (self.as_param(param(m, "lambda"), v.args[1], scope, "`lambda` of `supervised`")
               if len(v.args) > 1 else 1.0)
        loss = param(m, "loss").default
        for k in v.kwargs:
            if k.name != "loss":
                self.err(k.pos, f"`supervised` has no parameter `{k.name}`", usage)
                return None
            loss = self.as_param(param(m, "loss"), k.value, scope, "`loss` of `supervised`")
        gold = self.resolve(v.args[0], scope, "input")
        if gold is None or lam is None or loss is None:
            return None
        return ir.Mech(kind="penalty", fn=m.name, params=(
            ("gold", gold), ("lambda", float(lam)), ("loss", loss)), loc=self.loc(v.args[0].pos))


def param(m: mech.Mechanism, name: str) -> P:
    """A penalty's parameter as its record declares it (its type, range and choices)."""
    return next(p for p in m.params if p.name == name)


# The penalties whose call's arguments a function of their own reads (its words for a
# mistake are its own), by record; the others' are read from their records' ``params``.
ARGUMENTS = {
    "disagreement": Penalties.disagreement_penalty,
    "supervised": Penalties.supervised,
}
