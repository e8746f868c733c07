"""lark's parse -> the AST (ast.py): one method per grammar rule, each given the rule's
children (tokens and the nodes already built).

The same builder runs inside lark's LALR parser (``Lark(transformer=...)``: no parse
tree is built, parser.py) and over a parse tree (``transform``: fmt.py, which extends it,
and the path that reports the limits). Every position comes from a token: a negation
sits at its `-` and a binary operation where its left operand's text starts, which for
a parenthesised operand is its `(` (the grammar names MINUS and LPAR so that they are
kept), as lark's ``propagate_positions`` placed them.

While it builds, the builder measures what parser.py limits: the depth of operators and
calls inside one another and the length of number literals; ``over_limits`` says whether
the parse just read passed either (parser.py then reports it from the parse tree)."""

from __future__ import annotations

from .larkload import Token, Transformer

from .ast import (Attention, BinOp, Call, Feature, Field, Input, Kwarg, Let, Model, Module,
                  Neg, Number, Paper, Pos, Ref, Repeat, String, Word)


def _tpos(tok: Token) -> Pos:
    return Pos(tok.line or 1, tok.column or 1)


class AstBuilder(Transformer):
    """lark's rule children -> AST. One method per grammar rule."""

    def __init__(self, max_depth: int = 1 << 30, max_number: int = 1 << 30) -> None:
        super().__init__()
        self.max_depth, self.max_number = max_depth, max_number
        self.reset()

    def reset(self) -> None:
        """Forget the side tables of the last parse (they are keyed by node identity)."""
        self._start: dict[int, Pos] = {}  # a parenthesised node -> where its `(` is
        self._depth: dict[int, int] = {}  # an operator or call -> its depth (others: 0)
        self.over_limits = False

    # ---- statements
    def start(self, c):
        return Module(tuple(c))

    def paper(self, c):
        return Paper(_tpos(c[0]), str(c[0]), tuple(c[1:]))

    def let(self, c):
        return Let(_tpos(c[0]), str(c[0]), c[1])

    def model(self, c):
        name, base, *body = c
        return Model(_tpos(name), str(name), str(base) if base else None,
                     _tpos(base) if base else None, tuple(body))

    def input(self, c):
        name, kind, *rest = c
        args: tuple = ()
        if rest and (rest[-1] is None or isinstance(rest[-1], tuple)):
            args = rest[-1] or ()
            rest = rest[:-1]
        return Input(_tpos(name), str(name), str(kind), _tpos(kind), tuple(rest), args)

    def _role(role):  # noqa: N805 - a small factory for the five "NAME = expr" statements
        def build(self, c):
            return Feature(_tpos(c[0]), role, str(c[0]), c[1])
        return build

    feature = _role("feature")
    query = _role("query")
    output = _role("output")
    update = _role("update")
    affinity = _role("affinity")

    def attention(self, c):
        return Attention(_tpos(c[0]), str(c[0]), tuple(c[1:]))

    def repeat(self, c):
        name, count, shared, *body = c
        word = Word.at(str(shared), shared.line, shared.column) if shared is not None else None
        return Repeat(_tpos(name), str(name), count, word, tuple(body))

    def field(self, c):
        return Field(c[0][1], c[0][0], c[1])

    def fname(self, c):
        return (str(c[0]), _tpos(c[0]))

    # ---- expressions
    def _deeper(self, node, depth: int):
        """Record ``node``'s depth (one more than its deepest operand's)."""
        depth += 1
        self._depth[id(node)] = depth
        if depth > self.max_depth:
            self.over_limits = True
        return node

    def _bin(op):  # noqa: N805
        def build(self, c):
            left, right = c
            depth = self._depth.get
            node = BinOp(self._start.get(id(left)) or left.pos, op, left, right)
            return self._deeper(node, max(depth(id(left), 0), depth(id(right), 0)))
        return build

    add = _bin("+")
    sub = _bin("-")
    mul = _bin("*")
    div = _bin("/")

    def neg(self, c):
        sign, operand = c
        return self._deeper(Neg(_tpos(sign), operand), self._depth.get(id(operand), 0))

    def paren(self, c):
        node = c[1]
        self._start[id(node)] = _tpos(c[0])  # the innermost `(` is overwritten by an outer one
        return node

    def _number_text(self, tok: Token) -> str:
        text = str(tok)
        if len(text) > self.max_number:
            self.over_limits = True
            return "0"  # (not read: parser.py reports the literal)
        return text

    def number(self, c):
        text = self._number_text(c[0])
        value = float(text) if any(ch in text for ch in ".eE") else int(text)
        return Number(_tpos(c[0]), value)

    def string(self, c):
        raw = str(c[0])[1:-1]
        return String(_tpos(c[0]), raw.replace('\\"', '"').replace("\\\\", "\\"))

    def ref(self, c):
        where = tuple(_tpos(t) for t, _ in c)
        return Ref(where[0], tuple(str(t) for t, _ in c), where, tuple(i for _, i in c))

    def refpart(self, c):
        name, index = c
        if index is not None:
            text = self._number_text(index)
            index = int(text) if text.isdigit() else -1  # -1: reported when resolved
        return (name, index)

    def call(self, c):
        name, args = c
        pos_args = tuple(a for a in args if not isinstance(a, Kwarg))
        kwargs = tuple(a for a in args if isinstance(a, Kwarg))
        depth = self._depth.get
        deepest = max((depth(id(a.value if isinstance(a, Kwarg) else a), 0) for a in args),
                      default=0)
        return self._deeper(Call(_tpos(name), str(name), pos_args, kwargs), deepest)

    def args(self, c):
        return tuple(a for a in c if a is not None)

    def kwarg(self, c):
        return Kwarg(_tpos(c[0]), str(c[0]), c[1])
