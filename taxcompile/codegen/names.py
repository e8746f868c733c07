"""Names and sizes in generated code: identifiers made from node ids, sizes as Config
expressions (``Dim``), and the local/attribute name registries."""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass

from .. import reserved
from .expr import ATOM, BARE, CFG, PREC, BinOp, CfgField, Const, Expr, Paren, Sym, parse_sym

# Local names the generated forward() uses for itself (inputs may not take them either): the
# file's helpers, classes and imports, the builtins it calls, forward()'s and generate()'s
# own names (taxcompile/reserved.py derives them from the templates); a local gets `_2`.
RESERVED = set(reserved.forward_names()) | reserved.TEMPORARIES | set(dir(builtins))
# Attribute names nn.Module and the generated classes already have: a submodule gets `_2`.
MODULE_ATTRS = set(reserved.module_attrs())

NAME = re.compile(r"[A-Za-z_]\w*")


def ident(node_id: str) -> str:
    """``encoder[2].self`` -> ``encoder2_self``; ``x@3`` -> ``x_3``."""
    s = re.sub(r"\[(\d+)\]\.", r"\1_", node_id)
    return s.replace("@", "_").replace(".", "_")


def camel(text: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[._@\[\]]+", text) if p)


def safe_text(text: str) -> str:
    """Spec strings go into docstrings: keep printable characters, no quotes or backslashes."""
    out = "".join(ch for ch in text if ch.isprintable() and ch not in '\\"`')
    return out.replace("'''", "")[:200]


def cfg_expr(text: str, owner: str = "cfg") -> str:
    """``d_model // heads`` -> ``cfg.d_model // cfg.heads`` (``self.d_model // self.heads`` in
    a Config property: the owner is chosen where the size is rendered)."""
    return parse_sym(text).render(owner)


def sym_names(text: str) -> list[str]:
    """The constants a ``lower.sym`` expression names."""
    return list(parse_sym(text).fields())


@dataclass(frozen=True)
class Dim:
    """A feature size: a literal plus symbolic terms over Config fields (``expr.Expr``)."""

    const: int = 0
    terms: tuple[Expr, ...] = ()

    def __post_init__(self) -> None:
        if not all(isinstance(t, Expr) for t in self.terms):  # text is rendered once, at the end
            raise TypeError(f"a size's terms are expr.Expr values: {self.terms!r}")

    def __add__(self, o: "Dim") -> "Dim":
        return Dim(self.const + o.const, self.terms + o.terms)

    def expr(self) -> Expr:
        """The sum as one expression."""
        out: Expr | None = None
        for t in self.terms + ((Const(self.const),) if self.const or not self.terms else ()):
            out = t if out is None else BinOp("+", out, t)
        assert out is not None
        return out

    def render(self, owner: str = CFG) -> str:
        return self.expr().render(owner)

    def __str__(self) -> str:
        return self.render()

    def compound(self) -> bool:
        return len(self.terms) + bool(self.const) > 1

    def times(self, n: "int | Dim") -> "Dim":
        """n * self (n a literal or a Config expression, such as the heads)."""
        if isinstance(n, Dim) and not n.terms:
            n = n.const
        if not self.terms and isinstance(n, int):
            return Dim(self.const * n)
        me = Paren(self.expr()) if self.compound() else self.expr()
        return Dim(0, (BinOp("*", Const(n) if isinstance(n, int) else n.expr(), me),))

    def floordiv(self, k: "int | Dim") -> "Dim":
        """self // k (k a literal or a Config expression)."""
        if isinstance(k, Dim) and not k.terms:
            k = k.const
        if not self.terms and isinstance(k, int):
            return Dim(self.const // k)
        return Dim(0, (BinOp("//", Paren(self.expr()),
                             Const(k) if isinstance(k, int) else k.expr()),))

    def divided(self, n: int) -> "Dim":
        """self / n where n divides it: ``3 * cfg.d`` / 3 is ``cfg.d``, else ``self // n``."""
        if not self.terms:
            return Dim(self.const // n)
        e = self.expr()
        f = _times_field(e.inner if isinstance(e, Paren) else e, n)
        if f is not None:
            return Dim(0, (f,))
        return Dim(0, (BinOp("//", e if len(self.terms) == 1 and not self.const else Paren(e),
                             Const(n)),))

    def shown(self) -> str:
        """The size in a shape comment: ``cfg.d_model`` reads ``d_model``."""
        return self.render(BARE)


def _times_field(e: Expr, n: int) -> CfgField | None:
    """F when ``e`` is ``n * F`` for a Config field F (built by ``times`` or written so in
    the spec), else None."""
    if isinstance(e, BinOp) and e.op == "*" and e.left == Const(n) and \
            isinstance(e.right, CfgField):
        return e.right
    if isinstance(e, Sym) and len(e.parts) == 2 and e.parts[0] == (False, f"{n} * ") and \
            e.parts[1][0]:
        return CfgField(e.parts[1][1])
    return None


def dim_of(value: int | None, sym: str | None) -> Dim:
    if sym:
        e = parse_sym(sym)
        return Dim(0, (e if isinstance(e, CfgField) else Paren(e),))
    return Dim(int(value or 0))


class Names:
    """Fresh names: ``want``, else ``want_2``, ``want_3`` …"""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def new(self, want: str) -> str:
        name, i = want, 2
        while name in self.taken:
            name = f"{want}_{i}" if not want.endswith("_") else f"{want}{i}"
            i += 1
        self.taken.add(name)
        return name


def is_name(code: str) -> bool:
    """Whether an expression is a plain local name (so it is computed once already)."""
    return code.isidentifier() and not keyword.iskeyword(code)


# How tightly an expression of generated code binds, in expr's scale: its builder says so
# (``Var.prec``), so an operand gets the parentheses it needs without its text being read.
SUM, PRODUCT = PREC["+"], PREC["*"]  # `a + b`, `a - b`; `a * b`, `a / b`, `a @ b`
CONDITIONAL = 0  # `a if c else b`


def paren(code: str, prec: int) -> str:
    """``code`` (binding as tightly as ``prec``) as an operand or before a method call:
    parenthesised unless it is an atom (a name, call, subscript, display, constant >= 0)."""
    return code if prec >= ATOM else f"({code})"


def atom(x) -> str:
    """A tensor's expression (a ``Var``) as an operand or before a method call, by the
    precedence it was built with (``Var.prec``)."""
    return paren(x.name, x.prec)
