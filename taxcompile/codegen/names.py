"""Names and sizes in generated code: identifiers made from node ids, sizes as Config
expressions (``Dim``), and the local/attribute name registries."""

from __future__ import annotations

import ast
import builtins
import operator
import re
from dataclasses import dataclass

from .. import reserved

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


def cfg_expr(text: str) -> str:
    """``d_model // heads`` -> ``cfg.d_model // cfg.heads`` (text built by lower.sym from
    checked identifiers and numbers only)."""
    return re.sub(r"(?<![\w.])([A-Za-z_]\w*)", r"cfg.\1", text)


def sym_names(text: str) -> list[str]:
    """The constants a ``lower.sym`` expression names."""
    return re.findall(r"(?<![\w.])([A-Za-z_]\w*)", text)


@dataclass(frozen=True)
class Dim:
    """A feature size: a literal plus symbolic terms over Config fields."""

    const: int = 0
    terms: tuple[str, ...] = ()

    def __add__(self, o: "Dim") -> "Dim":
        return Dim(self.const + o.const, self.terms + o.terms)

    def __str__(self) -> str:
        parts = list(self.terms) + ([str(self.const)] if self.const or not self.terms else [])
        return " + ".join(parts)

    def times(self, n: int) -> "Dim":
        if not self.terms:
            return Dim(self.const * n)
        return Dim(0, (f"{n} * ({self})" if len(self.terms) + bool(self.const) > 1
                       else f"{n} * {self}",))

    def shown(self) -> str:
        """The size in a shape comment: ``cfg.d_model`` reads ``d_model``."""
        return str(self).replace("cfg.", "")


def dim_of(value: int | None, sym: str | None) -> Dim:
    if sym:
        return Dim(0, (cfg_expr(sym) if NAME.fullmatch(sym) else f"({cfg_expr(sym)})",))
    return Dim(int(value or 0))


def evaluate(text: str, env: dict[str, int | float]) -> int | float:
    """The value of a size expression the generator wrote (numbers, ``cfg.NAME``, + - * / //
    and parentheses), for checking ``Config.tiny()``; anything else is refused."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv}

    def go(node):
        if isinstance(node, ast.Expression):
            return go(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "cfg":
            return env[node.attr]
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](go(node.left), go(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -go(node.operand)
        raise ValueError(f"not a size expression: {text}")

    return go(ast.parse(text, mode="eval"))


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


def mentions(codes, word: str) -> bool:
    """Whether code (outside strings' quotes) uses the name ``word`` (a regex, e.g.
    ``cfg\\.``): a forward() that reads ``B`` or ``cfg.`` defines them first."""
    pat = re.compile(rf"(?<![\w.'\"]){word}\b")
    return any(pat.search(c) for c in codes)


def is_name(code: str) -> bool:
    return bool(NAME.fullmatch(code))


def atom(code: str) -> str:
    """Parenthesise an expression before calling a method on it or using it as an operand:
    anything with a space or a sign at the top level (outside brackets and strings)."""
    depth, quote = 0, None
    for ch in code:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and ch == " ":
            return f"({code})"
    return f"({code})" if code.startswith("-") else code