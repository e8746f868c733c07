"""Constants and parameter values: ``let`` arithmetic (numbers, strings, + - * /), the
Python text of a constant expression for the generated ``Config`` (``sym``), and the
checking of a written value against its parameter's type (``ops.P``: int, float,
probability, bool, enum, activation). Errors of this kind: an unknown constant, division by
zero, a number out of range, a value of the wrong type or outside its range."""

from __future__ import annotations

import math

from .. import ast, ir
from ..ops import ACTIVATIONS, GATED_ACTS, P
from ..suggest import alias, not_one_of, suggest
from .base import FLOAT32_MAX, MAX_INT, LowerBase, NotConstant, show
from .names import POISONED, Scope


# a `let`'s expression over the root constants, in the generated Config: Python reads at
# most 200 nested parentheses, and a chain that doubles at each step must stop somewhere
MAX_SYM_CHARS = 4_000
MAX_SYM_NESTING = 50
MAX_LET_DEPTH = 100  # Config properties that read each other (Python's stack: about 1,000)


class Constants(LowerBase):
    """Constant expressions and parameter values (a part of ``lower.Lowerer``)."""

    fold_lets = False  # ``sym`` of a `let` (``let_sym``): fold numbers, substitute lets
    record_sym: tuple | None = None  # set by ``let_sym``: the last ``sym``'s (text, prec, names)

    def const(self, e: ast.Expr, scope: Scope | None) -> ir.Scalar | None:
        """Evaluate a constant expression (numbers, strings, `let` names, + - * /)."""
        if isinstance(e, ast.Number):
            return e.value
        if isinstance(e, ast.String):
            return e.value
        if isinstance(e, ast.Neg):
            v = self.const(e.operand, scope)
            if v is None:
                return None
            if isinstance(v, (bool, str)):
                self.err(e.pos, "cannot negate a non-number")
                return None
            return -v
        if isinstance(e, ast.Ref):
            if e.name in ("true", "false"):
                return e.name == "true"
            found = scope.lookup(e.name) if scope else None
            if found is None and e.name in self.consts:
                found = ("const", self.consts[e.name])
            if found is None and e.name in self.poisoned or found is POISONED:
                return None  # a `let` refused where it is defined, and reported there
            if found is None or found[0] != "const":
                known = list(self.consts) + (list(scope.consts) if scope else [])
                self.err(e.pos, f"unknown constant `{e.name}`",
                         suggest(e.name, known) if known else "define it first with `let`")
                return None
            return found[1]
        if isinstance(e, ast.BinOp):
            a, b = self.const(e.left, scope), self.const(e.right, scope)
            if a is None or b is None:
                return None
            if isinstance(a, (bool, str)) or isinstance(b, (bool, str)):
                self.err(e.pos, f"`{e.op}` needs numbers on both sides")
                return None
            try:
                if e.op == "+":
                    v = a + b
                elif e.op == "-":
                    v = a - b
                elif e.op == "*":
                    v = a * b
                else:
                    if b == 0:
                        self.err(e.pos, "division by zero")
                        return None
                    v = a // b if isinstance(a, int) and isinstance(b, int) and a % b == 0 else a / b
            except OverflowError:
                v = math.inf
            if isinstance(v, float) and not math.isfinite(v) or abs(v) > 1e15:
                self.err(e.pos, "number out of range")
                return None
            return v
        self.err(e.pos, "expected a constant (a number, a string or a `let` name)")
        return None

    def sym(self, e: ast.Expr, scope: Scope | None) -> str | None:
        """A valid constant expression as Python text over Config field names, for the
        generated code's ``Config`` (None when it names no constant: use the value).
        Only names that passed ``bad_identifier`` and numbers appear in the text."""
        if isinstance(e, ast.Ref) and e.name in ("true", "false"):
            return None
        names: list[str] = []
        model_scope = self.m.scope if self.m is not None else None
        folding = self.fold_lets  # a `let`'s value: numbers folded, lets over their roots
        # Parentheses only where Python needs them, so that a long chain `a + b + …`
        # stays flat (Python refuses more than 200 nested parentheses).
        prec = {"+": 1, "-": 1, "*": 2, "/": 2}

        def go(x: ast.Expr) -> tuple[str, int]:  # (text, precedence: atoms 4, `-x` 3)
            if isinstance(x, ast.Number):
                return repr(x.value), 4 if x.value >= 0 else 3
            if isinstance(x, ast.Neg):
                inner, p = go(x.operand)
                return f"-{inner if p >= 3 else f'({inner})'}", 3
            if isinstance(x, ast.Ref):
                owner = scope
                while owner is not None and x.name not in owner.consts:
                    owner = owner.parent
                if owner is None or owner is model_scope or owner.parent is None:
                    table = self.m.syms if owner is model_scope and self.m else self.let_syms
                    derived = table.get(x.name) if folding else None
                    if derived is not None and derived[0] is not None:  # over its roots
                        names.extend(derived[2])
                        return derived[0], derived[1]
                    names.append(x.name)
                    return x.name, 4
                v = owner.consts[x.name]  # a constant local to a `repeat`
                return repr(v), 4 if not isinstance(v, (int, float)) or v >= 0 else 3
            if isinstance(x, ast.BinOp):
                op, p = x.op, prec[x.op]
                if op == "/":
                    op = "//" if isinstance(self.const(x, scope), int) else "/"
                before = len(names)
                (left, lp), mid, (right, rp) = go(x.left), len(names), go(x.right)
                if folding and len(names) == mid:  # a number on the right: fold it in
                    return self.fold(x, scope, left, lp, mid > before)
                left = left if lp >= p else f"({left})"
                right = right if rp > p else f"({right})"
                return f"{left} {op} {right}", p
            raise NotConstant  # a call or a string: `const` has reported it

        try:
            text, p = go(e)
        except NotConstant:
            return None
        finally:
            del go  # a recursive closure is a cycle: it would keep the AST for the collector
        if not names:
            return None
        if self.record_sym is not None:
            self.record_sym = (text, p, tuple(dict.fromkeys(names)))
        return text

    def fold(self, x: ast.BinOp, scope: Scope | None, left: str, lp: int,
              named: bool) -> tuple[str, int] | None:
        """``left OP number`` with numbers folded: no names at all is the value; ``a + 1 + 1``
        is ``a + 2`` (a trailing offset, kept in ``sum_tails`` by text)."""
        if not named:
            v = self.const(x, scope)
            return repr(v), 4 if v >= 0 else 3
        r = self.const(x.right, scope)
        if x.op not in "+-":
            op = "//" if x.op == "/" and isinstance(self.const(x, scope), int) else x.op
            right = repr(r) if r >= 0 else f"({r!r})"
            return f"{left if lp >= 2 else f'({left})'} {op} {right}", 2
        core, cp, off = self.sum_tails.get(left, (left, lp, 0))
        off = off + r if x.op == "+" else off - r
        if isinstance(off, float) and off.is_integer() and not isinstance(r, float):
            off = int(off)
        if off == 0:
            return core, cp
        text = f"{core if cp >= 1 else f'({core})'} {'+' if off > 0 else '-'} {abs(off)!r}"
        self.sum_tails[text] = (core, cp, off)
        return text, 1

    def let_sym(self, e: ast.Expr, scope: Scope | None, name: str) -> str | None:
        """``sym`` of a `let`'s value for the generated Config, written over the root
        constants (the Config's fields) with its numbers folded, so that a chain of aliases
        or of arithmetic is one property deep and never a chain of properties calling each
        other. Where that text would be too large for Python to read back (a chain that
        doubles at each step), the let reads the lets it names (one property deeper); more
        than ``MAX_LET_DEPTH`` such steps is a located error."""
        table = self.m.syms if scope is not None else self.let_syms
        for folding in (True, False):
            self.record_sym, self.fold_lets = (), folding
            try:
                text = self.sym(e, scope)
                derived = self.record_sym
            finally:
                self.record_sym, self.fold_lets = None, False
            if text is None:
                return None
            nesting = most = 0
            for ch in text:
                nesting += (ch == "(") - (ch == ")")
                most = max(most, nesting)
            if len(text) <= MAX_SYM_CHARS and most <= MAX_SYM_NESTING:
                break
        else:
            self.err(e.pos, f"constant `{name}` is too large an expression for the generated "
                     f"Config ({len(text):,} characters, parentheses nested {most} deep; at "
                     f"most {MAX_SYM_CHARS:,} and {MAX_SYM_NESTING})",
                     "write its value as a number, or derive it in fewer steps")
            table[name] = (None, 4, (), MAX_LET_DEPTH + 1)
            return None
        depth = 1 + max((self.let_depth(n) for n in derived[2]), default=0)
        if depth > MAX_LET_DEPTH + 1:  # it reads one that is refused already
            table[name] = (None, 4, (), depth)
            return None
        if depth > MAX_LET_DEPTH:
            table[name] = (None, 4, (), depth + 1)
            self.err(e.pos, f"constant `{name}` is derived through more than {MAX_LET_DEPTH} "
                     "constants that each double the expression of the one before: the "
                     "generated Config's properties would call each other that deep",
                     "write its value as a number, or derive it in fewer steps")
            return None
        table[name] = (text if folding else None, derived[1], derived[2], depth)
        return text

    def let_depth(self, name: str) -> int:
        """How many Config properties deep a constant is (0: a field)."""
        found = (self.m.syms.get(name) if self.m is not None else None) or \
            self.let_syms.get(name)
        return found[3] if found else 0

    def as_int(self, e: ast.Expr, scope: Scope | None, what: str, lo: int = 1,
               hi: int = MAX_INT) -> int | None:
        v = self.const(e, scope)
        if v is None:
            return None
        shown = str(int(v)) if isinstance(v, float) and v.is_integer() and abs(v) < 1e16 \
            else show(v)
        floating = isinstance(v, float) and v.is_integer()
        if floating:
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            self.err(e.pos, f"{what} must be a whole number, got {shown}")
            return None
        if lo == 1 and hi == MAX_INT and not lo <= v <= hi:  # no range of its own
            self.err(e.pos, f"{what} must be a positive integer, got {shown}" if v < 1 else
                     f"{what} must be a positive integer of at most {hi:,}, got {shown}")
            return None
        if not lo <= v <= hi:
            self.err(e.pos, f"{what} must be between {lo} and {hi}, got {shown}")
            return None
        if floating and self.sym(e, scope) is not None:  # Config would compute a float
            self.err(e.pos, f"{what} must be a whole number, but it is computed in floating "
                     f"point ({shown}.0): the generated Config would hold a float",
                     "use whole numbers: integer `let`s, `*` and `/` by integers, "
                     "e.g. `d * 10` for `d / 0.1`")
            return None
        return v

    def as_param(self, p: P, e: ast.Expr, scope: Scope | None, what: str) -> ir.Scalar | None:
        if p.type == "int":
            return self.as_int(e, scope, what, p.lo, MAX_INT if p.hi is None else p.hi)
        if p.type == "act":
            return self.as_act(p, e, scope, what)
        if p.type == "float":
            v = self.const(e, scope)
            if v is None:
                return None
            number = not isinstance(v, bool) and isinstance(v, (int, float))
            if not number or v <= 0 and p.sign == "positive":
                kind = "a positive number" if p.sign == "positive" else "a number"
                self.err(e.pos, f"{what} must be {kind}, got {show(v)}")
                return None
            if p.below is not None and v >= p.below:
                self.err(e.pos, f"{what} must be between 0 and {p.below:g}, got {v:g}")
                return None
            if abs(v) > FLOAT32_MAX:  # e.g. a penalty's lambda: the loss would be infinite
                self.err(e.pos, f"{what} must be at most {FLOAT32_MAX:.4g} (the largest "
                         f"float32), got {v:g}", "a larger number is infinite in the model's "
                         "float32 arithmetic")
                return None
            return float(v)
        if p.type == "prob":  # a dropout probability: 0 <= p < 1
            v = self.const(e, scope)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                self.err(e.pos, f"{what} must be a probability, at least 0 and below 1, "
                         f"got {show(v)}", "e.g. 0.1 (Vaswani et al.'s P_drop)")
                return None
            return float(v)
        if p.type == "bool":
            if isinstance(e, ast.Ref) and e.name in ("true", "false"):
                return e.name == "true"
            self.err(e.pos, f"{what} must be `true` or `false`")
            return None
        if p.type == "enum":
            if isinstance(e, ast.Ref) and len(e.parts) == 1 and alias(p.name, e.name) in p.choices:
                return alias(p.name, e.name)
            self.err(e.pos, *not_one_of(what, e, p.choices))
            return None
        raise AssertionError(p.type)

    def as_act(self, p: P, e: ast.Expr, scope: Scope | None, what: str) -> ir.Act | None:
        """``act = tanh`` or ``act = leaky_relu(0.2)`` -> ``ir.Act`` (defaults filled in)."""
        if isinstance(e, ast.Ref) and len(e.parts) == 1:
            name, pos_args, kwargs = e.name, (), ()
        elif isinstance(e, ast.Call):
            name, pos_args, kwargs = e.fn, e.args, e.kwargs
        else:
            self.err(e.pos, f"{what} must be an activation function", suggest("", p.choices))
            return None
        if name not in ACTIVATIONS:
            self.err(e.pos, f"unknown activation `{name}`", suggest(name, ACTIVATIONS))
            return None
        if name not in p.choices and name in GATED_ACTS:
            self.err(e.pos, f"{what} cannot be `{name}`: a gated unit multiplies act(x W) by a "
                     "second projection x V of the layer's input (Shazeer 2020)",
                     f"use `ffn(x, d_ff, act = {name})`")
            return None
        if name not in p.choices:
            self.err(e.pos, f"{what} cannot be `{name}`: maxout narrows d·k features to d, "
                     "and here nothing makes the features k times wider first",
                     "use `act = maxout(k)` in `linear`, `cnn` or `ffn` (the layer becomes "
                     "k·d wide), or `maxout(x, k)` as a feature model")
            return None
        sig = ACTIVATIONS[name]
        if len(pos_args) > len(sig):
            self.err(pos_args[len(sig)].pos, f"`{name}` takes {len(sig) or 'no'} parameter"
                     f"{'s' if len(sig) != 1 else ''}" + (f" ({', '.join(q.name for q in sig)})"
                                                          if sig else ""),
                     f"write `act = {name}`" if not sig else "")
            return None
        values: dict[str, ir.Scalar] = {}
        for q, a in zip(sig, pos_args):
            values[q.name] = a
        names = {q.name: q for q in sig}
        for k in kwargs:
            if k.name not in names:
                self.err(k.pos, f"`{name}` has no parameter `{k.name}`",
                         suggest(k.name, names) if names else f"`{name}` takes no parameters")
                return None
            if k.name in values:
                self.err(k.pos, f"`{k.name}` is given twice")
                return None
            values[k.name] = k.value
        params: list[tuple[str, int | float]] = []
        for q in sig:
            if q.name in values:
                v = self.as_param(q, values[q.name], scope, f"`{q.name}` of `{name}`")
                if v is None:
                    return None
            elif q.required:
                self.err(e.pos, f"`{name}` needs `{q.name}`",
                         f"e.g. `{name}({2 if q.type == 'int' else 5})`")
                return None
            else:
                v = q.default
            params.append((q.name, v))
        return ir.Act(fn=name, params=tuple(params))
