"""Feature statements (``feature``, ``query``, ``output``, ``affinity``, ``update``) and
their expressions: names, ``att.weights``, ``+ - *`` of features, ``c - x``, and calls of
the feature models (``ops.CALLS``: each operator's parameters), the decoders' and outputs'
named parameters (``feed``, ``init``, ``init_c``, ``share``, ``tie``) included. Errors of
this kind: an unknown feature model or parameter, a missing or extra argument, a number
where a feature is expected, an update of what is no feature. Whether the arguments' shapes
fit the operator, and a decoder's step, are checked in checks.py."""

from __future__ import annotations

from .. import ast, ir
from ..ops import CALLS as OPS  # the feature models written as calls: name -> parameters
from ..ops import NAMED  # parameters that name a node (`feed = att`, `init = s0`)
from ..suggest import suggest
from .base import Defining
from .constants import Constants
from .names import POISONED, Scope

NAMED_HINT = {
    "feed": ("`feed` names the node of the decoder step that the recurrent model reads",
             "an attention module (its context) or a node computed from it, e.g. "
             "`feed = att` or Luong's `feed = h_att`"),
    "init": ("`init` names the node that gives the decoder's initial state",
             "declare it first, e.g. `feature s0 = linear(first(backward(h)), 1000, act = tanh)` "
             "and `init = s0`; or name an encoder LSTM/GRU to start from its final states"),
    "init_c": ("`init_c` names the node that gives the decoder LSTM's initial memory c_0",
               "declare it first, e.g. `feature c0 = linear(mean(a), 512, act = tanh)`"),
    "state": ("`state` names the attention over the RNN's earlier states whose context "
              "replaces its previous state (LSTMN)", "e.g. `query h = lstm(x, 128, state = "
              "intra)` with `attention intra { query = concat(x, prev(intra))  features = h }`"),
    "share": ("`share` names the statement whose module (weights) of the same operator this "
              "operation uses", "e.g. `feature k2 = linear(x2, 64, share = k1)`"),
    "tie": ("`tie` names the statement whose `embed` matrix the output layer uses as its weight",
            "e.g. `output y = classify(h, vocab, tie = src_emb)`"),
}

# how an error names a parameter, where `P of FN` would not say it
WHAT = {("learned", "n"): "the count K of `learned(K, d)`"}


class Features(Constants):
    """Feature statements and expressions (a part of ``lower.Lowerer``)."""

    def feature(self, s: ast.Feature, scope: Scope) -> None:
        self.defining = Defining(s.name, True)
        if s.role == "update":
            owner = scope.owner(s.name)
            if owner is None and scope.lookup(s.name) is POISONED:
                self.expr(s.value, scope)  # its own mistakes; the name's is reported
                return
            if owner is None:
                self.err(s.pos, f"cannot update `{s.name}`: it is not defined yet",
                         f"define it first with `feature {s.name} = …`")
                return
            old = owner.bindings[s.name]
            role = self.m.roles.get(old, "feature")
            if role not in ("feature", "query", "output"):
                self.err(s.pos, f"`{s.name}` is {'an' if role[0] in 'aeiou' else 'a'} {role}; "
                         "only features, queries and outputs can be updated")
                return
            base = old.split("@")[0]
            scope.updates[s.name] = nth = scope.updates.get(s.name, 0) + 1
            self.m.versions[base] = self.m.versions.get(base, 1) + 1
            node_id = f"{base}@{self.m.versions[base]}"
            expr = self.expr(s.value, scope)  # reads the old version
            owner.bindings[s.name] = node_id
            if expr is not None:
                self.add_node(ir.Node(kind_=role, id=node_id, name=s.name, expr=expr,
                                      # one template per `update` statement of the body
                                      hop=self.hop_of(scope, f"{s.name}@{nth}"),
                                      loc=self.loc(s.pos)), s.pos)
            return
        node_id = self.bind(scope, s.name, s.pos, s.role)
        if node_id is None:
            return
        if s.role == "affinity":
            if not (isinstance(s.value, ast.Call) and s.value.fn == "affinity"):
                self.err(s.value.pos, "an affinity matrix is `affinity(A, B, form = bilinear, act = tanh)`",
                         "eq. 12 (bilinear) or eq. 13 (trilinear)")
                return
        expr = self.call(s.value, scope, top=True) if s.role == "affinity" else \
            self.expr(s.value, scope)
        if expr is None:
            return
        self.add_node(ir.Node(kind_=s.role, id=node_id, name=s.name, expr=expr,
                              hop=self.hop_of(scope, s.name), loc=self.loc(s.pos)), s.pos)

    def expr(self, e: ast.Expr, scope: Scope) -> ir.Expr | None:
        loc = self.loc(e.pos)
        if isinstance(e, ast.Ref) and (w := self.weights_ref(e, scope)) is not None:
            # `att.weights`: the module's attention weights as a feature (checks.py)
            node_id = self.resolve(w, scope)
            if node_id is None:
                return None
            return ir.Op(fn="weights", args=(ir.Ref(node=node_id, loc=loc),), loc=loc)
        if isinstance(e, ast.Ref):
            node_id = self.resolve(e, scope)
            if node_id is None:
                return None
            if self.m.roles.get(node_id) == "affinity":
                self.err(e.pos, f"`{e.name}` is an affinity matrix; use it in an attention "
                         "module's `affinity` field")
                return None
            return ir.Ref(node=node_id, loc=loc)
        if isinstance(e, ast.BinOp):
            if e.op == "/":
                self.err(e.pos, "features cannot be divided",
                         "`a + b`, `a - b` and `a * b` (element-wise, e.g. a gate "
                         "`sigmoid(linear(h, 1)) * c`) combine features; `/` is for constants")
                return None
            if e.op == "-" and self.is_const(e.left, scope):  # c - x, e.g. 1 - g
                c, x = self.const(e.left, scope), self.expr(e.right, scope)
                if c is None or x is None:
                    return None
                if isinstance(c, (bool, str)):
                    self.err(e.left.pos, f"`{e.op}` needs a number or a feature on the left")
                    return None
                return ir.Op(fn="rsub", args=(x,), params=(("c", float(c)),), loc=loc)
            for side in (e.left, e.right):
                if self.is_const(side, scope):
                    self.err(side.pos, f"`{e.op}` combines two features here; this side is a "
                             "number", "scale a feature with `scale(x)` (learned) or a layer; "
                             "`c - x` (e.g. `1 - g`) is the one form with a number")
                    return None
            a, b = self.expr(e.left, scope), self.expr(e.right, scope)
            if a is None or b is None:
                return None
            fn = {"+": "add", "-": "sub", "*": "mul"}[e.op]
            return ir.Op(fn=fn, args=(a, b), loc=loc)
        if isinstance(e, ast.Call):
            return self.call(e, scope)
        if isinstance(e, (ast.Number, ast.Neg)):
            self.err(e.pos, "expected a feature, found a number",
                     "numbers are parameters of feature models, e.g. `linear(x, 64)`")
            return None
        self.err(e.pos, "expected a feature, found a string")
        return None

    def is_feature(self, e: ast.Expr, scope: Scope) -> bool:
        """Whether ``e`` is a call or a name bound to a node (not a constant, nor unknown)."""
        if isinstance(e, ast.Call):
            return True
        found = scope.lookup(e.name) if scope and isinstance(e, ast.Ref) else None
        return found is not None and found[0] != "const"

    def is_const(self, e: ast.Expr, scope: Scope) -> bool:
        """Whether ``e`` is constant arithmetic (a number or a `let`), not a feature."""
        if isinstance(e, (ast.Number, ast.Neg)):
            return True
        if isinstance(e, ast.BinOp):
            return self.is_const(e.left, scope) and self.is_const(e.right, scope)
        if isinstance(e, ast.Ref) and len(e.parts) == 1 and not any(
                i is not None for i in e.indexes):
            found = scope.lookup(e.name) if scope else None
            if found is None and e.name in self.consts:
                return True
            return found is not None and found[0] == "const"
        return False

    def signature(self, e: ast.Call, sig: tuple, scope: Scope) -> tuple | None:
        """The parameters the call's arguments bind to, in order: ``learned(K, d)`` gives its
        count first, ``prepend(x, learned(K, d))`` its vectors in n's place (None after a
        located error)."""
        if e.fn == "learned" and len(e.args) > 1:  # learned(K, d): the count comes first
            if self.is_feature(e.args[0], scope):
                self.err(e.args[0].pos, "the count K of `learned(K, d)` is a size, a number "
                         "or a `let`, not a feature", "write e.g. `learned(16, d)` for 16 "
                         "learned vectors; a query computed from a feature is `project(x)`")
                return None
            return (sig[1], sig[0]) + sig[2:]
        if e.fn == "prepend" and len(e.args) > 1 and not self.is_const(e.args[1], scope):
            if (kw := next((k for k in e.kwargs if k.name == "n"), None)) is not None:
                self.err(kw.pos, "`prepend` is given its vectors here, so `n` (a count of "
                         "vectors of its own) has no place", "drop `n`: `prepend(x, "
                         "learned(K, d))` adds K vectors; `prepend(x, n)` adds n of its own")
                return None
            return (sig[0], sig[2])  # the vectors, not a count n
        return sig

    def call(self, e: ast.Call, scope: Scope, top: bool = False) -> ir.Expr | None:
        sig = OPS.get(e.fn)
        if sig is None:
            self.err(e.pos, f"unknown feature model `{e.fn}`", suggest(e.fn, OPS))
            return None
        if e.fn == "affinity" and not top:  # only `affinity NAME = affinity(…)` makes one
            self.err(e.pos, "`affinity(…)` is not a feature: declare the matrix with "
                     f"`affinity {self.defining.name if self.defining.feature else 'NAME'} = affinity(…)` "
                     "and name it in an attention module's `affinity` field")
            return None
        if (sig := self.signature(e, sig, scope)) is None:
            return None
        args: list[ir.Expr] = []
        params: dict[str, ir.Scalar] = {}
        syms: dict[str, str] = {}
        ok = True
        positional = list(e.args)
        for p in sig:
            if p.name in NAMED:
                continue  # a keyword naming a node (`feed`, `init`, `share`, `tie`): below
            if p.type == "nodes":
                if not positional:
                    self.err(e.pos, f"`{e.fn}` needs at least one feature")
                    return None
                for a in positional:
                    x = self.expr(a, scope)
                    ok &= x is not None
                    if x is not None:
                        args.append(x)
                positional = []
                continue
            kw = None
            if positional:
                a = positional.pop(0)
            else:
                kw = next((k for k in e.kwargs if k.name == p.name), None)
                if kw is None:
                    if p.required:
                        self.err(e.pos, f"`{e.fn}` is missing `{p.name}`",
                                 f"write `{e.fn}({', '.join(q.name for q in sig if q.required)})`")
                        ok = False
                    elif p.default is not None and p.type != "node":
                        params[p.name] = p.default
                    continue
                a = kw.value
            if p.type == "node":
                x = self.expr(a, scope)
                ok &= x is not None
                if x is not None:
                    args.append(x)
            else:
                what = WHAT.get((e.fn, p.name), f"`{p.name}` of `{e.fn}`")
                v = self.as_param(p, a, scope, what)
                ok &= v is not None
                if v is not None:
                    params[p.name] = v
                    if p.type in ("int", "prob") and (t := self.sym(a, scope)):
                        syms[p.name] = t
        if positional:
            named = [p.name for p in sig if p.name in NAMED]
            self.err(positional[0].pos, f"`{e.fn}` takes "
                     f"{sum(p.type != 'nodes' and p.name not in NAMED for p in sig)} argument(s); "
                     "this one is extra", (f"{', '.join(f'`{q}`' for q in named)} "
                                           f"{'is' if len(named) == 1 else 'are'} given by "
                                           f"name, e.g. `{named[0]} = NODE`") if named else "")
            ok = False
        names = [p.name for p in sig]  # in order: the hint lists them so (a set did not)
        seen: set[str] = set()
        for k in e.kwargs:
            if k.name not in names:
                self.err(k.pos, f"`{e.fn}` has no parameter `{k.name}`", suggest(k.name, names))
                ok = False
            elif k.name in seen:
                self.err(k.pos, f"`{k.name}` is given twice")
                ok = False
            seen.add(k.name)
        for k in e.kwargs:
            if k.name not in NAMED or k.name not in names:
                continue
            if not isinstance(k.value, ast.Ref):
                self.err(k.value.pos, NAMED_HINT[k.name][0], NAMED_HINT[k.name][1])
                return None
            fid = self.resolve(k.value, scope)
            if fid is None:
                return None
            params[k.name] = fid
        if e.fn == "prev" and args and not isinstance(args[0], ir.Ref):
            self.err(e.args[0].pos, "`prev` takes a name: the node of the decoder step whose "
                     "value at the previous step it reads", "e.g. `query = prev(s)` (s_(t-1))")
            return None
        if not ok:
            return None
        if params.get("dropout") and params.get("layers", 1) == 1:
            kw = next(k for k in e.kwargs if k.name == "dropout")
            self.err(kw.pos, f"`dropout` of `{e.fn}` zeroes features between stacked layers, "
                     "but this one has one layer", f"set `layers = N` (N > 1), or write "
                     f"`dropout({e.fn}(…), p)` for dropout on its outputs")
            return None
        return ir.Op(fn=e.fn, args=tuple(args), params=tuple(sorted(params.items())),
                     sym=tuple(sorted(syms.items())), loc=self.loc(e.pos))
