"""lark's parse tree -> the AST (ast.py): one method per grammar rule. The path of specs
that fastparse.py leaves to lark, and of ``fmt`` (fmt.py extends the builder)."""

from __future__ import annotations

from lark import Token, Transformer, v_args

from .ast import (Attention, BinOp, Call, Feature, Field, Input, Kwarg, Let, Model, Module,
                  Neg, Number, Paper, Pos, Ref, Repeat, String, Word)


def _pos(meta) -> Pos:
    return Pos(getattr(meta, "line", 1), getattr(meta, "column", 1))


def _tpos(tok: Token) -> Pos:
    return Pos(tok.line or 1, tok.column or 1)


@v_args(meta=True)
class AstBuilder(Transformer):
    """lark tree -> AST. One method per grammar rule."""

    def start(self, meta, items):
        return Module(tuple(items))

    def paper(self, meta, c):
        return Paper(_tpos(c[0]), str(c[0]), tuple(c[1:]))

    def let(self, meta, c):
        return Let(_tpos(c[0]), str(c[0]), c[1])

    def model(self, meta, c):
        name, base, *body = c
        return Model(_tpos(name), str(name), str(base) if base else None,
                     _tpos(base) if base else None, tuple(body))

    def input(self, meta, c):
        name, kind, *rest = c
        args: tuple = ()
        if rest and (rest[-1] is None or isinstance(rest[-1], tuple)):
            args = rest[-1] or ()
            rest = rest[:-1]
        return Input(_tpos(name), str(name), str(kind), _tpos(kind), tuple(rest), args)

    def _role(role):  # noqa: N805 - a small factory for the five "NAME = expr" statements
        def build(self, meta, c):
            return Feature(_tpos(c[0]), role, str(c[0]), c[1])
        return build

    feature = _role("feature")
    query = _role("query")
    output = _role("output")
    update = _role("update")
    affinity = _role("affinity")

    def attention(self, meta, c):
        return Attention(_tpos(c[0]), str(c[0]), tuple(c[1:]))

    def repeat(self, meta, c):
        name, count, shared, *body = c
        word = Word.at(str(shared), shared.line, shared.column) if shared is not None else None
        return Repeat(_tpos(name), str(name), count, word, tuple(body))

    def field(self, meta, c):
        return Field(c[0][1], c[0][0], c[1])

    def fname(self, meta, c):
        return (str(c[0]), _tpos(c[0]))

    def _bin(op):  # noqa: N805
        def build(self, meta, c):
            return BinOp(_pos(meta), op, c[0], c[1])
        return build

    add = _bin("+")
    sub = _bin("-")
    mul = _bin("*")
    div = _bin("/")

    def neg(self, meta, c):
        return Neg(_pos(meta), c[0])

    def number(self, meta, c):
        text = str(c[0])
        value = float(text) if any(ch in text for ch in ".eE") else int(text)
        return Number(_tpos(c[0]), value)

    def string(self, meta, c):
        raw = str(c[0])[1:-1]
        return String(_tpos(c[0]), raw.replace('\\"', '"').replace("\\\\", "\\"))

    def ref(self, meta, c):
        return Ref(_tpos(c[0][0]), tuple(str(t) for t, _ in c), tuple(_tpos(t) for t, _ in c),
                   tuple(i for _, i in c))

    def refpart(self, meta, c):
        name, index = c
        if index is not None and not str(index).isdigit():
            index = -1  # not a whole number: reported when the name is resolved
        return (name, int(index) if index is not None else None)

    def call(self, meta, c):
        name, args = c
        pos_args = tuple(a for a in args if not isinstance(a, Kwarg))
        kwargs = tuple(a for a in args if isinstance(a, Kwarg))
        return Call(_tpos(name), str(name), pos_args, kwargs)

    def args(self, meta, c):
        return tuple(a for a in c if a is not None)

    def kwarg(self, meta, c):
        return Kwarg(_tpos(c[0]), str(c[0]), c[1])
