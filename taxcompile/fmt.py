"""``taxcompile fmt``: print a spec in one canonical style (``starter.py`` writes the spec
``taxcompile new`` starts from, in this style).

The spec is parsed (syntax errors propagate as ``SpecError``) and its syntax tree is
printed back; comments are scanned with the grammar's own lexer and re-attached.

Canonical style
---------------
* 4-space indentation, one statement per line, ``}`` on its own line.
* Top level: exactly one blank line between items (``paper``, ``let``, ``model``),
  except that consecutive ``let`` lines that the source wrote without a blank line
  stay together. Inside a block a single blank line is kept between statements
  where the source had one or more; never a blank line right after ``{`` or right
  before ``}``.
* ``paper NAME {`` and multi-line ``attention NAME {`` blocks: one ``field = value``
  per line, the ``=`` signs aligned within the block. Consecutive ``let`` lines (no
  blank line between them; comments may be) align their ``=`` signs.
* One-line attentions: an ``attention`` whose source starts and ends on one line is
  printed on one line, ``attention a { query = q  keys = k  score = general }``
  (fields separated by two spaces), when that line (indentation included, trailing
  comment excluded) fits in 100 columns; otherwise it gets one field per line.
  Adjacent one-line attentions (no blank line or comment between) with names of one
  length and the same field names in the same order are aligned in columns.
* An empty block without comments inside is printed ``NAME {}``.
* Expressions: minimal parentheses (``+ -`` below ``* /`` below unary ``-``, all
  left-associative), ``a + b``, ``f(a, b, k = v)`` (positional arguments before
  keyword ones, as the syntax tree keeps them), ``-x``, ``-(-x)``, ``a.b``,
  ``r[2].x``; numbers, strings and indexes exactly as written in the source.
* Headers: ``model b : a {``, ``repeat r 3 shared {``,
  ``input src: tokens[S] (vocab = V, autoregressive)``.
* Comments: a comment on its own line stays before the statement (or field) that
  follows it, at that statement's indentation, in source order; a comment that ends
  a line stays after that line's statement (after a block's ``{`` or ``}`` when it
  followed one). Comments after a block's last statement stay before its ``}``;
  comments after the last item stay at the end of the file. A statement that
  spanned several lines is printed on one; if it carried several end-of-line
  comments, all but the last move to their own lines above it. Trailing comments of
  adjacent lines (same block, no blank or comment-only line between) are aligned two
  spaces after the longest of those lines that has one.
* The file ends with exactly one newline; trailing white space is removed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from lark import v_args

from . import ast, parser
from .astbuilder import AstBuilder
from .starter import starter  # noqa: F401  (``fmt.starter``: the CLI's and tests' name)

WIDTH = 100
INDENT = "    "

# ---------------------------------------------------------------------------------------
# The syntax tree, plus what the printer needs that the AST drops: each statement's
# source span and the original text of numbers, strings and indexes. Kept in side
# tables (keyed by node identity) so that ``ast`` stays as the rest of the code knows it.
# ---------------------------------------------------------------------------------------

_STATEMENTS = ("paper", "let", "model", "input", "feature", "query", "output", "update",
               "affinity", "attention", "repeat", "field")


class _Builder(AstBuilder):
    @v_args(meta=True)
    def number(self, meta, c):
        node = AstBuilder.number(self, c)
        self._keep.append(node)
        self.raw[id(node)] = str(c[0])
        return node

    @v_args(meta=True)
    def string(self, meta, c):
        node = AstBuilder.string(self, c)
        self._keep.append(node)
        self.raw[id(node)] = str(c[0])
        return node

    @v_args(meta=True)
    def refpart(self, meta, c):
        part = AstBuilder.refpart(self, c)
        self._keep.append(part)
        self.raw[id(part)] = None if c[1] is None else str(c[1])
        return part

    @v_args(meta=True)
    def ref(self, meta, c):
        node = AstBuilder.ref(self, c)
        self._keep.append(node)
        self.raw[id(node)] = tuple(self.raw[id(p)] for p in c)
        return node

    def reset(self) -> None:
        super().reset()
        self.span: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {}
        self.raw: dict[int, object] = {}
        self._keep: list = []  # keeps the nodes alive so that ids stay unique


def _spanned(name: str):
    orig = getattr(AstBuilder, name)

    def method(self, meta, c):
        node = orig(self, c)
        self._keep.append(node)
        self.span[id(node)] = ((meta.line, meta.column), (meta.end_line, meta.end_column))
        return node

    method.__name__ = name
    return v_args(meta=True)(method)


for _name in _STATEMENTS:
    setattr(_Builder, _name, _spanned(_name))


# ---------------------------------------------------------------------------------------
# Units: what the printer prints on its own line(s), with the comments attached to it.
# ---------------------------------------------------------------------------------------


@dataclass
class _Comment:
    line: int
    text: str


@dataclass
class _Unit:
    node: object
    start: tuple[int, int]
    end: tuple[int, int]  # exclusive
    depth: int
    children: list["_Unit"] = field(default_factory=list)
    block: bool = False  # printed as header / children / `}`
    lead: list[_Comment] = field(default_factory=list)  # own-line comments before it
    trail: list[_Comment] = field(default_factory=list)  # after the line (header line)
    inner: list[_Comment] = field(default_factory=list)  # before the closing `}`
    closer_trail: list[_Comment] = field(default_factory=list)  # after the `}`

    @property
    def is_let(self) -> bool:
        return isinstance(self.node, ast.Let)


_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


class _Printer:
    def __init__(self, text: str, builder: _Builder, module: ast.Module) -> None:
        self.lines = text.split("\n")
        self.b = builder
        self.module = module
        # (depth, code, trailing comment, alignable) per line; None = a blank line
        self.out: list[tuple[int, str, str | None, bool] | None] = []
        self._starts: dict[int, list[tuple[int, int]]] = {}

    # ---- expressions ----------------------------------------------------------------

    @staticmethod
    def _prec(e) -> int:
        if isinstance(e, ast.BinOp):
            return _PREC[e.op]
        return 3 if isinstance(e, ast.Neg) else 4

    def expr(self, e) -> str:
        if isinstance(e, ast.Number):
            raw = self.b.raw.get(id(e))
            return raw if isinstance(raw, str) else repr(e.value)
        if isinstance(e, ast.String):
            raw = self.b.raw.get(id(e))
            if isinstance(raw, str):
                return raw
            return '"' + e.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(e, ast.Ref):
            raws = self.b.raw.get(id(e)) or tuple(None if i is None else str(i)
                                                  for i in (e.indexes or (None,) * len(e.parts)))
            return ".".join(p if i is None else f"{p}[{i}]" for p, i in zip(e.parts, raws))
        if isinstance(e, ast.Kwarg):
            return f"{e.name} = {self.expr(e.value)}"
        if isinstance(e, ast.Call):
            return f"{e.fn}({', '.join(self.expr(a) for a in (*e.args, *e.kwargs))})"
        if isinstance(e, ast.BinOp):
            p = _PREC[e.op]
            left, right = self.expr(e.left), self.expr(e.right)
            if self._prec(e.left) < p:
                left = f"({left})"
            if self._prec(e.right) <= p:
                right = f"({right})"
            return f"{left} {e.op} {right}"
        if isinstance(e, ast.Neg):
            inner = self.expr(e.operand)
            if self._prec(e.operand) <= 3:
                inner = f"({inner})"
            return f"-{inner}"
        raise TypeError(f"cannot print {type(e).__name__}")  # pragma: no cover

    # ---- statements -----------------------------------------------------------------

    def fields_inline(self, fields) -> list[str]:
        return [f"{f.name} = {self.expr(f.value)}" for f in fields]

    def oneline_attention(self, node: ast.Attention, col_w: list[int] | None = None) -> str:
        parts = self.fields_inline(node.fields)
        if not parts:
            return f"attention {node.name} {{}}"
        if col_w:
            parts = [p.ljust(w) for p, w in zip(parts[:-1], col_w)] + parts[-1:]
        return f"attention {node.name} {{ {'  '.join(parts)} }}"

    def simple(self, node, pad: int = 0) -> str:
        if isinstance(node, (ast.Let, ast.Field)):
            kw = "let " if isinstance(node, ast.Let) else ""
            return f"{kw}{node.name.ljust(pad)} = {self.expr(node.value)}"
        if isinstance(node, ast.Feature):
            return f"{node.role} {node.name.ljust(pad)} = {self.expr(node.value)}"
        if isinstance(node, ast.Input):
            dims = ", ".join(self.expr(d) for d in node.dims)
            out = f"input {(node.name + ':').ljust(pad + 1)} {node.kind}[{dims}]"
            if node.args:
                out += f" ({', '.join(self.expr(a) for a in node.args)})"
            return out
        if isinstance(node, ast.Attention):
            return self.oneline_attention(node)
        raise TypeError(f"cannot print {type(node).__name__}")  # pragma: no cover

    def header(self, node) -> str:
        if isinstance(node, ast.Paper):
            return f"paper {node.name} {{"
        if isinstance(node, ast.Model):
            base = f" : {node.base}" if node.base is not None else ""
            return f"model {node.name}{base} {{"
        if isinstance(node, ast.Attention):
            return f"attention {node.name} {{"
        assert isinstance(node, ast.Repeat)
        shared = f" {node.shared}" if node.shared is not None else ""
        return f"repeat {node.name} {self.expr(node.count)}{shared} {{"

    # ---- units ----------------------------------------------------------------------

    def unit(self, node, depth: int) -> _Unit:
        start, end = self.b.span[id(node)]
        u = _Unit(node, start, end, depth)
        if isinstance(node, ast.Paper):
            u.block, kids = True, node.fields
        elif isinstance(node, (ast.Model, ast.Repeat)):
            u.block, kids = True, node.body
        elif isinstance(node, ast.Attention):
            one = start[0] == end[0] and \
                len(INDENT * depth + self.oneline_attention(node)) <= WIDTH
            u.block, kids = not one, (() if one else node.fields)
        else:
            kids = ()
        u.children = [self.unit(k, depth + 1) for k in kids]
        return u

    def locate(self, units: list[_Unit], pos: tuple[int, int]):
        """The innermost unit holding the token at ``pos``, and whether the token is
        the unit's line ("body"), its block's header or its closing `}`."""
        starts = self._starts.get(id(units))
        if starts is None:
            starts = self._starts[id(units)] = [u.start for u in units]
        k = bisect.bisect_right(starts, pos) - 1  # units are in source order
        if k < 0 or not pos < units[k].end:
            return None
        u = units[k]
        if not u.block:
            return u, "body"
        found = self.locate(u.children, pos)
        if found:
            return found
        if pos == (u.end[0], u.end[1] - 1):
            return u, "closer"
        return u, "header"

    def attach(self, units: list[_Unit], tokens) -> list[_Comment]:
        """Attach each comment to a unit; return the comments at the end of the file."""
        code = [t for t in tokens if t.type not in ("WS", "COMMENT")]
        tail: list[_Comment] = []
        ci = 0
        for tok in tokens:
            if tok.type != "COMMENT":
                if tok.type != "WS":
                    ci += 1
                continue
            c = _Comment(tok.line, str(tok).rstrip())
            prev = code[ci - 1] if ci > 0 else None
            nxt = code[ci] if ci < len(code) else None
            if prev is not None and prev.end_line == tok.line:
                u, role = self.locate(units, (prev.line, prev.column))
                (u.closer_trail if role == "closer" else u.trail).append(c)
            elif nxt is not None:
                u, role = self.locate(units, (nxt.line, nxt.column))
                (u.inner if role == "closer" else u.lead).append(c)
            else:
                tail.append(c)
        return tail

    # ---- emitting -------------------------------------------------------------------

    def blank_between(self, a: int, b: int) -> bool:
        """Is a source line strictly between lines a and b empty?"""
        return any(not self.lines[k - 1].strip() for k in range(a + 1, b))

    def line(self, depth: int, code: str, comment: _Comment | None = None,
             align: bool = True) -> None:
        """One output line; ``align``: its trailing comment may align with neighbours'."""
        self.out.append((depth, code, comment.text if comment else None, align))

    def comments(self, depth: int, comments: list[_Comment], prev: int | None) -> int | None:
        """Own-line comments, keeping single blank lines between them; return the last
        source line emitted."""
        for c in comments:
            if prev is not None and self.blank_between(prev, c.line):
                self.out.append(None)
            self.line(depth, "", c)
            prev = c.line
        return prev

    def children(self, units: list[_Unit], depth: int, top: bool = False) -> int | None:
        """Emit a block's statements; return the last source line emitted."""
        prev: int | None = None
        blank: list[bool] = []
        for i, u in enumerate(units):
            first = min([u.start[0]] + [c.line for c in u.lead])
            b = prev is not None and self.blank_between(prev, first)
            if top and i > 0 and not (u.is_let and units[i - 1].is_let):
                b = True
            blank.append(b)
            prev = u.end[0]
        # alignment groups: consecutive lets; adjacent one-line attentions
        pads: dict[int, int] = {}
        i = 0
        while i < len(units):
            j = i + 1
            key = self._align_key(units[i].node)
            if key:
                while (j < len(units) and self._align_key(units[j].node) == key
                       and not blank[j]):
                    j += 1
                w = max(len(units[k].node.name) for k in range(i, j))
                pads.update({k: w for k in range(i, j)})
            i = j
        inline: dict[int, str] = {}
        i = 0
        while i < len(units):
            j = i + 1
            if self._oneline(units[i]):
                names = [f.name for f in units[i].node.fields]
                while (j < len(units) and self._oneline(units[j]) and not blank[j]
                       and not units[j].lead and not units[j].trail[:-1]
                       and [f.name for f in units[j].node.fields] == names
                       and len(units[j].node.name) == len(units[i].node.name)):
                    j += 1
                if j - i > 1 and names:
                    group = [units[k].node for k in range(i, j)]
                    cols = [self.fields_inline(n.fields) for n in group]
                    col_w = [max(len(c[x]) for c in cols) for x in range(len(names) - 1)]
                    for k, n in zip(range(i, j), group):
                        inline[k] = self.oneline_attention(n, col_w)
            i = j

        prev = None
        for i, u in enumerate(units):
            if blank[i]:
                self.out.append(None)
            last = self.comments(depth, u.lead, None)
            if last is not None and self.blank_between(last, u.start[0]):
                self.out.append(None)
            for c in u.trail[:-1]:
                self.line(depth, "", c)
            self.emit(u, depth, pads.get(i, 0), inline.get(i))
            prev = u.end[0]
        return prev

    @staticmethod
    def _align_key(node) -> str | None:
        """Statements that align with their neighbours of the same key."""
        if isinstance(node, ast.Let):
            return "let"
        if isinstance(node, ast.Feature):
            return node.role
        return "input" if isinstance(node, ast.Input) else None

    @staticmethod
    def _oneline(u: _Unit) -> bool:
        return isinstance(u.node, ast.Attention) and not u.block

    def emit(self, u: _Unit, depth: int, pad: int = 0, text: str | None = None) -> None:
        last_trail = u.trail[-1] if u.trail else None
        if not u.block:
            self.line(depth, text or self.simple(u.node, pad), last_trail)
            return
        head = self.header(u.node)
        if not u.children and not u.inner:
            trail = u.trail + u.closer_trail
            for c in trail[:-1]:  # `model m {  # a` + `}  # b`: `# a` moves above
                self.line(depth, "", c)
            self.line(depth, head + "}", trail[-1] if trail else None)
            return
        self.line(depth, head, last_trail, align=False)
        if isinstance(u.node, (ast.Paper, ast.Attention)):
            w = max((len(f.name) for f in u.node.fields), default=0)
            prev = None
            for i, f in enumerate(u.children):
                first = min([f.start[0]] + [c.line for c in f.lead])
                if i > 0 and self.blank_between(prev, first):
                    self.out.append(None)
                last = self.comments(depth + 1, f.lead, None)
                if last is not None and self.blank_between(last, f.start[0]):
                    self.out.append(None)
                for c in f.trail[:-1]:
                    self.line(depth + 1, "", c)
                self.line(depth + 1, self.simple(f.node, w), f.trail[-1] if f.trail else None)
                prev = f.end[0]
        else:
            prev = self.children(u.children, depth + 1)
        self.comments(depth + 1, u.inner + u.closer_trail[:-1], prev)
        self.line(depth, "}", u.closer_trail[-1] if u.closer_trail else None, align=False)

    def render(self, tail: list[_Comment], units: list[_Unit]) -> str:
        prev = self.children(units, 0, top=True)
        self.comments(0, tail, prev)
        # align trailing comments of adjacent code lines at one depth
        out = self.out
        i = 0
        while i < len(out):
            if out[i] is None or not out[i][1] or not out[i][3]:
                i += 1
                continue
            j = i
            while (j < len(out) and out[j] is not None and out[j][1] and out[j][3]
                   and out[j][0] == out[i][0]):
                j += 1
            widths = [len(INDENT * out[k][0] + out[k][1]) for k in range(i, j)
                      if out[k][2] is not None]
            width = max(widths, default=0)
            for k in range(i, j):
                d, code, com, _ = out[k]
                if com is not None:
                    out[k] = (d, code.ljust(width - len(INDENT * d)), com, True)
            i = j
        text = "\n".join("" if e is None else
                         (INDENT * e[0] + (e[1] if e[2] is None else
                                           (e[1] + "  " + e[2] if e[1] else e[2]))).rstrip()
                         for e in out)
        return text + "\n" if text.strip() else ""


def format_text(text: str, file: str = "<string>") -> str:
    """The canonical form of spec ``text``; raises ``SpecError`` if it does not parse."""
    src = parser._screen(text.encode("utf-8", "replace"), file)  # as parse_text() does
    lark = parser._parser()
    builder = _Builder()
    try:
        module = builder.transform(lark.parse(src))
    except Exception:
        parser.parse_text(text, file)  # raises the located, explained SpecError
        raise  # pragma: no cover - parse_text() accepted what lark refused
    printer = _Printer(src, builder, module)
    units = [printer.unit(item, 0) for item in module.items]
    tail = printer.attach(units, list(lark.lex(src, dont_ignore=True)))
    return printer.render(tail, units)
