"""Stage 1's fast path: a recursive-descent reader of grammar/attn.lark for specs that
parse, building the same AST as lark's parser and ``ast.AstBuilder`` do (positions
included). Importing lark and running its LALR parser with positions was two fifths of a
cold ``taxcompile table``.

It gives up (``None``) at anything it does not read exactly as lark would: every syntax
error, an expression nested deeper than ``parser.MAX_EXPR_DEPTH``, a number literal longer
than ``parser.MAX_NUMBER_CHARS``; ``parser.parse_text`` then runs lark, which reports
them. So lark stays the definition of the language and of its errors, and ``fmt`` reads
with lark. tests/test_fastparse.py holds the two to the same trees over specs/, examples/,
the tests' specs and their mutations; the terminals below are the grammar's own (also
tested)."""

from __future__ import annotations

import re

from . import ast

# The grammar's terminals (grammar/attn.lark, lark's common.ESCAPED_STRING and WS).
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
NUMBER = r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?"
ESCAPED_STRING = r'".*?(?<!\\)(\\\\)*?"'
WS = "(?:[ \t\x0c\r\n])+"  # (the characters themselves, as lark writes the patterns)
COMMENT = "#[^\n]*"
PUNCTUATION = frozenset("{}=:,[]+-*/().")
KEYWORDS = frozenset({"paper", "let", "model", "input", "feature", "query", "output",
                      "update", "affinity", "attention", "repeat"})
ROLES = ("feature", "query", "output", "update", "affinity")  # `role NAME = expr`

_SKIP = re.compile(f"(?:{WS}|{COMMENT})+")
_TOKEN = re.compile(f"(?P<n>{NAME})|(?P<d>{NUMBER})|(?P<s>{ESCAPED_STRING})"
                    f"|(?P<p>[{re.escape(''.join(sorted(PUNCTUATION)))}])")
_END = ("$END", "", 0, 0)


class _GiveUp(Exception):
    """Not read here: lark reads it (and reports the error, if any)."""


def tokens(text: str) -> list[tuple[str, str, int, int]]:
    """(kind, text, line, column) per token; kind: NAME, NUMBER, STRING or the character."""
    out: list[tuple[str, str, int, int]] = []
    pos, line, line_start, end = 0, 1, 0, len(text)
    skip, token = _SKIP.match, _TOKEN.match
    while True:
        m = skip(text, pos)
        if m is not None:
            gap = m.group()
            newlines = gap.count("\n")
            if newlines:
                line += newlines
                line_start = m.start() + gap.rindex("\n") + 1
            pos = m.end()
        if pos >= end:
            out.append(_END)
            return out
        m = token(text, pos)
        if m is None:
            raise _GiveUp
        kind = m.lastgroup
        word = m.group()
        out.append(("NAME" if kind == "n" else "NUMBER" if kind == "d" else
                    "STRING" if kind == "s" else word, word, line, pos - line_start + 1))
        pos = m.end()


class _Reader:
    """One method per grammar rule, as ``AstBuilder``; ``depth`` counts the operators and
    calls inside one another (``parser._screen_depth``'s measure)."""

    def __init__(self, toks: list[tuple[str, str, int, int]], max_depth: int,
                 max_number: int) -> None:
        self.toks, self.i = toks, 0
        self.max_depth, self.max_number = max_depth, max_number

    # ---- tokens
    def peek(self, ahead: int = 0) -> tuple[str, str, int, int]:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def take(self, kind: str) -> tuple[str, str, int, int]:
        tok = self.toks[self.i]
        if tok[0] != kind:
            raise _GiveUp
        self.i += 1
        return tok

    def keyword(self) -> str | None:
        """The keyword at the cursor (a NAME spelled as one), or None."""
        kind, word = self.toks[self.i][:2]
        return word if kind == "NAME" and word in KEYWORDS else None

    def number_text(self, tok) -> str:
        if len(tok[1]) > self.max_number:
            raise _GiveUp
        return tok[1]

    # ---- statements
    def module(self) -> ast.Module:
        items = []
        while self.peek()[0] != "$END":
            word = self.keyword()
            if word == "paper":
                items.append(self.block(ast.Paper))
            elif word == "let":
                items.append(self.let())
            elif word == "model":
                items.append(self.model())
            else:
                raise _GiveUp
        return ast.Module(tuple(items))

    def block(self, cls):
        """``paper NAME { field* }`` and ``attention NAME { field* }``."""
        self.i += 1
        name = self.take("NAME")
        self.take("{")
        fields = []
        while self.peek()[0] == "NAME":  # a field's name may be any word, keywords too
            word = self.take("NAME")
            self.take("=")
            fields.append(ast.Field(_pos(word), word[1], self.expr()))
        self.take("}")
        return cls(_pos(name), name[1], tuple(fields))

    def let(self) -> ast.Let:
        self.i += 1
        name = self.take("NAME")
        self.take("=")
        return ast.Let(_pos(name), name[1], self.expr())

    def model(self) -> ast.Model:
        self.i += 1
        name = self.take("NAME")
        base = None
        if self.peek()[0] == ":":
            self.i += 1
            base = self.take("NAME")
        body = self.body()
        return ast.Model(_pos(name), name[1], base[1] if base else None,
                         _pos(base) if base else None, body)

    def body(self) -> tuple:
        self.take("{")
        stmts = []
        while True:
            word = self.keyword()
            if word is None:
                self.take("}")
                return tuple(stmts)
            stmts.append(self.statement(word))

    def statement(self, word: str):
        if word in ROLES:
            self.i += 1
            name = self.take("NAME")
            self.take("=")
            return ast.Feature(_pos(name), word, name[1], self.expr())
        if word == "attention":
            return self.block(ast.Attention)
        if word == "let":
            return self.let()
        if word == "input":
            return self.input()
        if word == "repeat":
            return self.repeat()
        raise _GiveUp  # `model` or `paper` inside a model

    def input(self) -> ast.Input:
        self.i += 1
        name = self.take("NAME")
        self.take(":")
        kind = self.take("NAME")
        self.take("[")
        dims = [self.expr()]
        while self.peek()[0] == ",":
            self.i += 1
            dims.append(self.expr())
        self.take("]")
        args = self.args()[0] if self.peek()[0] == "(" else ()
        return ast.Input(_pos(name), name[1], kind[1], _pos(kind), tuple(dims), args)

    def repeat(self) -> ast.Repeat:
        self.i += 1
        name = self.take("NAME")
        count = self.expr()
        shared = None
        if self.peek()[0] == "NAME":
            if self.keyword():  # lark reads a keyword here as one (and refuses it) or as a
                raise _GiveUp  # name, by its parser state's lookahead: let lark say
            tok = self.take("NAME")
            shared = ast.Word.at(tok[1], tok[2], tok[3])
        return ast.Repeat(_pos(name), name[1], count, shared, self.body())

    # ---- expressions: each returns (node, where its text starts, depth)
    def expr(self):
        return self.sum()[0]

    def sum(self):
        return self.binary(("+", "-"), self.product)

    def product(self):
        return self.binary(("*", "/"), self.unary)

    def binary(self, ops: tuple[str, str], operand):
        """``operand (op operand)*``, left-associative; each operation sits where its left
        operand's text starts."""
        left, start, depth = operand()
        while self.peek()[0] in ops:
            op = self.toks[self.i][0]
            self.i += 1
            right, _, rdepth = operand()
            depth = self.deeper(max(depth, rdepth))
            left = ast.BinOp(start, op, left, right)
        return left, start, depth

    def unary(self):
        signs = []
        while self.peek()[0] == "-":  # `- - x`: read without recursion
            signs.append(_pos(self.toks[self.i]))
            self.i += 1
        node, start, depth = self.atom()
        for pos in reversed(signs):
            node, start, depth = ast.Neg(pos, node), pos, self.deeper(depth)
        return node, start, depth

    def deeper(self, depth: int) -> int:
        if depth + 1 > self.max_depth:
            raise _GiveUp
        return depth + 1

    def atom(self):
        tok = self.toks[self.i]
        kind = tok[0]
        if kind == "NUMBER":
            self.i += 1
            text = self.number_text(tok)
            value = float(text) if any(ch in text for ch in ".eE") else int(text)
            return ast.Number(_pos(tok), value), _pos(tok), 0
        if kind == "STRING":
            self.i += 1
            raw = tok[1][1:-1]
            return ast.String(_pos(tok), raw.replace('\\"', '"').replace("\\\\", "\\")), \
                _pos(tok), 0
        if kind == "(":
            self.i += 1
            node, _, depth = self.sum()
            self.take(")")
            return node, _pos(tok), depth  # the parenthesis is where its text starts
        if kind != "NAME":
            raise _GiveUp
        if self.peek(1)[0] == "(":
            self.i += 1
            args, depth = self.args()
            pos_args = tuple(a for a in args if not isinstance(a, ast.Kwarg))
            kwargs = tuple(a for a in args if isinstance(a, ast.Kwarg))
            return ast.Call(_pos(tok), tok[1], pos_args, kwargs), _pos(tok), self.deeper(depth)
        return self.ref(), _pos(tok), 0

    def ref(self) -> ast.Ref:
        parts, poses, indexes = [], [], []
        while True:
            tok = self.take("NAME")
            index = None
            if self.peek()[0] == "[":
                self.i += 1
                text = self.number_text(self.take("NUMBER"))
                self.take("]")
                index = int(text) if text.isdigit() else -1  # as AstBuilder.refpart
            parts.append(tok[1])
            poses.append(_pos(tok))
            indexes.append(index)
            if self.peek()[0] != ".":
                break
            self.i += 1
        return ast.Ref(poses[0], tuple(parts), tuple(poses), tuple(indexes))

    def args(self) -> tuple[tuple, int]:
        """``( [arg ("," arg)*] )``: the arguments, and the deepest one's depth."""
        self.take("(")
        out, depth = [], 0
        if self.peek()[0] != ")":
            while True:
                tok = self.peek()
                if tok[0] == "NAME" and self.peek(1)[0] == "=":
                    self.i += 2
                    value, _, d = self.sum()
                    out.append(ast.Kwarg(_pos(tok), tok[1], value))
                else:
                    value, _, d = self.sum()
                    out.append(value)
                depth = max(depth, d)
                if self.peek()[0] != ",":
                    break
                self.i += 1
        self.take(")")
        return tuple(out), depth


def _pos(tok) -> ast.Pos:
    return ast.Pos(tok[2], tok[3])


def parse(text: str, max_depth: int, max_number: int) -> ast.Module | None:
    """The AST of ``text`` (screened by ``parser._screen``), or None: lark must read it."""
    try:
        reader = _Reader(tokens(text), max_depth, max_number)
        return reader.module()
    except (_GiveUp, RecursionError):
        return None
