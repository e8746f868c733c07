"""Typed size expressions of generated code, written out once.

Codegen builds a size (a feature width, an axis length, a divisor) as a tree of these values
and renders it only where a line or a comment is written; nothing edits the text afterwards.
``render(owner)`` chooses who holds the Config's fields: ``cfg.d_model`` in forward()
(``CFG``), ``self.d_model`` in a Config property (``SELF``), ``self.cfg.d_model`` in a method
of Model, ``d_model`` in a shape comment (``BARE``). Operators get the parentheses Python
needs, from the precedence of their operands; ``Paren`` keeps a grouping the code asks for.
A render over ``cfg``, and ``BATCH``, note that the code reads ``cfg`` / ``B`` on the
function being planned (``reading``), which then binds them first."""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Iterator

CFG, SELF, BARE = "cfg", "self", ""

ATOM = 4  # the precedence of names, groupings and non-negative numbers
UNARY = 3
PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2}
ASSOCIATIVE = ("+", "*")  # a op (b op c) reads a op b op c
OPS: dict[str, Callable] = {"+": operator.add, "-": operator.sub, "*": operator.mul,
                            "/": operator.truediv, "//": operator.floordiv,
                            "%": operator.mod}

Env = dict  # Config field -> its value, for ``value``

# The names that code rendered here reads and that forward() defines before its body:
# `cfg` (``cfg = self.cfg``) for a Config field read off CFG, `B` for ``BATCH``. Rendered
# inside ``reading(into)``, they are added to ``into`` (the reads of the function being
# planned, ``Frame.reads``); outside (a module's constructor, read by __init__), to nothing.
BATCH_NAME = "B"
_READS: ContextVar[set[str] | None] = ContextVar("taxcompile_reads", default=None)


@contextmanager
def reading(into: set[str] | None):
    """Record the names code rendered inside reads into ``into`` (None: record nothing)."""
    token = _READS.set(into)
    try:
        yield into
    finally:
        _READS.reset(token)


def unread():
    """Text rendered inside is not a forward()'s code (a constructor, a class of its own, a
    check of sizes): what it reads is recorded nowhere."""
    return reading(None)


def _read(name: str) -> None:
    into = _READS.get()
    if into is not None:
        into.add(name)


class Expr(ABC):
    """A size expression. ``str()`` is its text in forward() (fields read off ``cfg``)."""

    prec = ATOM

    @abstractmethod
    def render(self, owner: str = CFG) -> str:
        """Its text, the Config's fields read off ``owner``."""

    def fields(self) -> Iterator[str]:
        """The Config fields it reads, in order."""
        return iter(())

    @abstractmethod
    def value(self, env: Env) -> int | float:
        """Its value for the fields' values in ``env`` (Config.tiny()'s consistency check)."""

    def __str__(self) -> str:
        return self.render(CFG)


@dataclass(frozen=True)
class Const(Expr):
    """A number (``None``: an axis whose length is not known, written as Python's None)."""

    number: int | float | None

    @property
    def prec(self) -> int:  # type: ignore[override]
        return UNARY if isinstance(self.number, (int, float)) and self.number < 0 else ATOM

    def render(self, owner: str = CFG) -> str:
        return repr(self.number)

    def value(self, env: Env) -> int | float:
        if self.number is None:
            raise ValueError("an unknown length has no value")
        return self.number


@dataclass(frozen=True)
class CfgField(Expr):
    """A field of the generated Config, read off ``owner``."""

    name: str

    def render(self, owner: str = CFG) -> str:
        if owner == CFG:
            _read(CFG)
        return f"{owner}.{self.name}" if owner else self.name

    def fields(self) -> Iterator[str]:
        yield self.name

    def value(self, env: Env) -> int | float:
        return env[self.name]


@dataclass(frozen=True)
class Ref(Expr):
    """A name of the generated code (a local, a loop variable), the same for every owner."""

    name: str

    def render(self, owner: str = CFG) -> str:
        return self.name

    def value(self, env: Env) -> int | float:
        return env[self.name]


@dataclass(frozen=True)
class Batch(Expr):
    """The batch size, ``B``: forward() binds it from its first tensor argument."""

    def render(self, owner: str = CFG) -> str:
        _read(BATCH_NAME)
        return BATCH_NAME

    def value(self, env: Env) -> int | float:
        raise ValueError("the batch size has no value before a call")


BATCH = Batch()


@dataclass(frozen=True)
class BinOp(Expr):
    """``left op right``; an operand that binds less tightly is parenthesised."""

    op: str
    left: Expr
    right: Expr

    @property
    def prec(self) -> int:  # type: ignore[override]
        return PREC[self.op]

    def render(self, owner: str = CFG) -> str:
        # down the left spine without recursion: a long sum `a + b + c + …` stays shallow
        spine: list[BinOp] = []
        node: Expr = self
        while isinstance(node, BinOp) and node.op in PREC:
            spine.append(node)
            node = node.left
        text = node.render(owner)
        below = node.prec
        for b in reversed(spine):
            p = b.prec
            left = text if below >= p else f"({text})"
            r = b.right
            same = r.prec == p and b.op in ASSOCIATIVE and isinstance(r, BinOp) and r.op == b.op
            right = r.render(owner)
            right = right if r.prec > p or same else f"({right})"
            text, below = f"{left} {b.op} {right}", p
        return text

    def fields(self) -> Iterator[str]:
        yield from self.left.fields()
        yield from self.right.fields()

    def value(self, env: Env) -> int | float:
        spine: list[BinOp] = []
        node: Expr = self
        while isinstance(node, BinOp):
            spine.append(node)
            node = node.left
        v = node.value(env)
        for b in reversed(spine):
            v = OPS[b.op](v, b.right.value(env))
        return v


@dataclass(frozen=True)
class Paren(Expr):
    """``(inner)``: a grouping the generated code keeps even where Python needs none."""

    inner: Expr

    def render(self, owner: str = CFG) -> str:
        return f"({self.inner.render(owner)})"

    def fields(self) -> Iterator[str]:
        return self.inner.fields()

    def value(self, env: Env) -> int | float:
        return self.inner.value(env)


@dataclass(frozen=True)
class Neg(Expr):
    """``-operand``."""

    operand: Expr
    prec = UNARY

    def render(self, owner: str = CFG) -> str:
        inner = self.operand.render(owner)
        return f"-{inner}" if self.operand.prec >= UNARY else f"-({inner})"

    def fields(self) -> Iterator[str]:
        return self.operand.fields()

    def value(self, env: Env) -> int | float:
        return -self.operand.value(env)


@dataclass(frozen=True)
class Sym(Expr):
    """A constant expression the spec wrote (``lower.sym``'s text: checked identifiers,
    numbers, + - * / // and parentheses), split once into runs of (is a Config field, text);
    its fields take the owner when it is rendered (the text as the spec wrote it). Its value
    is its ``tree``'s, the same runs read once as operators over fields and numbers.
    ``parse_sym`` makes one."""

    parts: tuple[tuple[bool, str], ...]
    tree: Expr = field(compare=False, repr=False)  # the same expression typed, for ``value``

    @property
    def prec(self) -> int:  # type: ignore[override]
        return ATOM if len(self.parts) == 1 else 0  # 0: parenthesised as any operand

    def render(self, owner: str = CFG) -> str:
        if owner == CFG and any(field for field, _ in self.parts):
            _read(CFG)
        return "".join(f"{owner}.{t}" if field and owner else t for field, t in self.parts)

    def fields(self) -> Iterator[str]:
        return (t for field, t in self.parts if field)

    def value(self, env: Env) -> int | float:
        return self.tree.value(env)


def parse_sym(text: str) -> Expr:
    """``lower.sym``'s text as an expression: a lone name is a ``CfgField``."""
    parts: list[tuple[bool, str]] = []
    i = 0
    while i < len(text):
        j = i + 1
        if text[i].isalpha() or text[i] == "_":
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            parts.append((True, text[i:j]))
        else:  # a number's digits stay with it: `2e3`, `1_000` are not names
            while j < len(text) and not ((text[j].isalpha() or text[j] == "_")
                                         and not text[j - 1].isalnum()
                                         and text[j - 1] not in "._"):
                j += 1
            parts.append((False, text[i:j]))
        i = j
    if len(parts) == 1 and parts[0][0]:
        return CfgField(parts[0][1])
    return Sym(tuple(parts), _typed(parts))


NUMBER_CHARS = set("0123456789._eE")


def _atoms(parts: list[tuple[bool, str]]) -> Iterator["Expr | str"]:
    """The runs of a spec's constant expression as its fields, numbers and operators
    (``//``, ``+ - * /``, parentheses)."""
    for is_field, text in parts:
        if is_field:
            yield CfgField(text)
            continue
        i = 0
        while i < len(text):
            c = text[i]
            if c.isdigit() or c == ".":
                j = i + 1
                while j < len(text) and (text[j] in NUMBER_CHARS or
                                         text[j] in "+-" and text[j - 1] in "eE"):
                    j += 1
                digits = text[i:j]
                whole = all(ch.isdigit() or ch == "_" for ch in digits)
                yield Const(int(digits) if whole else float(digits))
                i = j
            elif text[i:i + 2] == "//":
                yield "//"
                i += 2
            else:
                if not c.isspace():
                    yield c
                i += 1


def _typed(parts: list[tuple[bool, str]]) -> Expr:
    """The expression a ``Sym``'s runs spell, as a tree (by precedence, left to right)."""
    atoms = list(_atoms(parts))
    at = 0

    def operand() -> Expr:
        nonlocal at
        a = atoms[at]
        at += 1
        if a == "-":
            return Neg(operand())
        if a == "+":
            return operand()
        if a == "(":
            inner = chain(1)
            at += 1  # ")"
            return Paren(inner)
        if isinstance(a, Expr):
            return a
        raise ValueError(f"not a constant expression: {parts!r}")

    def chain(lowest: int) -> Expr:
        nonlocal at
        left = operand()
        while at < len(atoms) and isinstance(atoms[at], str) and \
                PREC.get(atoms[at], 0) >= lowest:  # type: ignore[arg-type]
            op = atoms[at]
            at += 1
            left = BinOp(op, left, chain(PREC[op] + 1))  # type: ignore[index]
        return left

    return chain(1)
