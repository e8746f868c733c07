"""The syntax tree of a spec: one class per grammar rule, built by ``astbuilder.AstBuilder``
while lark parses; frozen records built by position (frozen.Positional: a frozen
dataclass's API without the cost of defining one). This module imports neither lark
nor the builder.

Each node keeps its ``line``/``col``; names are plain strings here and are only checked
and resolved when lowering to the IR."""

from __future__ import annotations

from functools import cached_property
from typing import Union

from .frozen import Positional


class Word(str):
    """A word of the source with its place: the word after a repeat's hop count, which
    must be ``shared`` (lower.py reports another where it stands)."""

    line: int
    column: int

    @classmethod
    def at(cls, text: str, line: int, column: int) -> Word:
        word = cls(text)
        word.line, word.column = line, column
        return word


class Pos(Positional):
    line: int
    col: int


# ---- expressions -------------------------------------------------------------


class Number(Positional):
    pos: Pos
    value: int | float


class String(Positional):
    pos: Pos
    value: str


class Ref(Positional):
    pos: Pos
    parts: tuple[str, ...]  # encoder.self -> ("encoder", "self")
    part_pos: tuple[Pos, ...]
    indexes: tuple[int | None, ...] = ()  # encoder[2].self -> (2, None)

    @cached_property  # (lowering asks for it some 4,000 times in a table of specs/)
    def name(self) -> str:
        if not any(i is not None for i in self.indexes):
            return ".".join(self.parts)
        return ".".join(p if i is None else f"{p}[{i}]" for p, i in zip(self.parts, self.indexes))


class Kwarg(Positional):
    pos: Pos
    name: str
    value: "Expr"


class Call(Positional):
    pos: Pos
    fn: str
    args: tuple["Expr", ...]
    kwargs: tuple[Kwarg, ...]


class BinOp(Positional):
    pos: Pos
    op: str  # + - * /
    left: "Expr"
    right: "Expr"


class Neg(Positional):
    pos: Pos
    operand: "Expr"


Expr = Union[Number, String, Ref, Call, BinOp, Neg]


# ---- statements --------------------------------------------------------------


class Field(Positional):
    pos: Pos
    name: str
    value: Expr


class Let(Positional):
    pos: Pos
    name: str
    value: Expr


class Input(Positional):
    pos: Pos
    name: str
    kind: str
    kind_pos: Pos
    dims: tuple[Expr, ...]
    args: tuple[Expr | Kwarg, ...]


class Feature(Positional):  # also query/output/update/affinity, told apart by ``role``
    pos: Pos
    role: str
    name: str
    value: Expr


class Attention(Positional):
    pos: Pos
    name: str
    fields: tuple[Field, ...]


class Repeat(Positional):
    pos: Pos
    name: str
    count: Expr
    shared: Word | None  # the word after the count; must be `shared`
    body: tuple["Stmt", ...]


Stmt = Union[Let, Input, Feature, Attention, Repeat]


class Model(Positional):
    pos: Pos
    name: str
    base: str | None
    base_pos: Pos | None
    body: tuple[Stmt, ...]


class Paper(Positional):
    pos: Pos
    name: str
    fields: tuple[Field, ...]


class Module(Positional):
    items: tuple[Paper | Let | Model, ...]

