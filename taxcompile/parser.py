"""Stage 1: spec text -> AST. lark's LALR parser (contextual lexer) builds the AST while it
parses (``transformer=``, astbuilder.py): no parse tree, positions from the tokens. Where
it refuses the text, or the text passes a limit, the parse is read again into a tree with
``propagate_positions`` (the parser that ``fmt`` uses too) to report it, located.
lark's analysis of the grammar is cached (cache.grammar_file), so it is built once per
grammar and lark version, not per run.

Untrusted input is screened first (size, encoding, NUL bytes, nesting depth) so that
garbage, huge files and deeply nested brackets give located errors, never a
traceback. Syntax errors are explained from examples of each mistake (lark's
``match_examples`` idea, matched on the parser state)."""

from __future__ import annotations

import difflib
import functools
import itertools
import operator
import os
import re
import stat
import threading
from pathlib import Path

from typing import TYPE_CHECKING

from . import ast, cache
from .diagnostics import Diagnostic, Location, SpecError

if TYPE_CHECKING:
    from .larkload import Lark, Tree, UnexpectedInput

    from .astbuilder import AstBuilder

MAX_BYTES = 1_000_000
# Models per spec: each has two nodes at least, so more than lower.MAX_SPEC_NODES / 2
# could never pass; refused before the parse (its cost grows with the file's bytes)
MAX_MODELS = 5_000
MAX_DEPTH = 64  # brackets nested deeper than this are refused before parsing
MAX_EXPR_DEPTH = 256  # operators and calls inside one another: `a + b + c` counts 2
MAX_NUMBER_CHARS = 100  # a longer number literal is refused (Python's int() stops at 4,300)

_GRAMMAR_CANDIDATES = (
    Path(__file__).resolve().parent.parent / "grammar" / "attn.lark",
    Path(__file__).resolve().parent / "grammar" / "attn.lark",
)

# Syntax-error classes, each with examples lark replays to recognise the state.
_EXAMPLES: dict[str, tuple[str, list[str]]] = {
    "expected `=` after the field name": (
        "write fields as `name = value`, e.g. `heads = 8`",
        ["model m { attention a { heads 8 } }", "paper p { ref 3 }",
         "model m { attention a { score } }"],
    ),
    "expected `=` after the name": (
        "statements read `feature x = embed(src, 256)` and `let d = 512`",
        ["let d 512", "model m { feature x embed(s, 3) }", "model m { query q }"],
    ),
    "missing value after `=`": (
        "give a value: a number, a name, a string or a call like `linear(x, 64)`",
        ["let d =", "model m { feature x = }",
         "model m { attention a { heads = } }"],
    ),
    "missing `}` to close the block": (
        "every `{` needs a matching `}`",
        ["model m {", "model m { feature x = f(a)", "paper p { ref = 3",
         "model m { attention a { heads = 8 }", "model m { repeat r 2 { "],
    ),
    "unclosed `(`": (
        "every `(` needs a matching `)`",
        ["let d = (3", "model m { feature x = f(a, b }", "model m { feature x = f(a }",
         "let d = f(3", "model m { feature x = f(a, 3 }", "model m { feature x = f(3 }",
         "model m { feature x = f(a, k = 3 }", "model m { feature x = f(a, g(b) }",
         "model m { feature x = f(a, b.c }", "model m { feature x = f(a, 2.5 }"],
    ),
    "expected a statement (`input`, `feature`, `query`, `output`, `update`, `attention`, `affinity`, `repeat` or `let`)": (
        "a model body holds statements such as `feature x = embed(src, 256)`",
        ["model m { x = 3 }", "model m { 3 }", "model m { foo x = 3 }", "model m { heads = 8 }",
         "model m { model n { } }", "model m { paper p { } }",
         # after a complete statement, whatever its last token
         "model m { feature x = f(a) heads = 8 }", "model m { feature x = a heads = 8 }",
         "model m { feature x = a.b heads = 8 }", "model m { let d = 3 heads = 8 }",
         "model m { let d = 2.5 heads = 8 }", "model m { attention a { } heads = 8 }",
         "model m { input x: s[a] heads = 8 }", "model m { input x: s[a] (b = 1) heads = 8 }",
         "model m { feature x = a[1].b heads = 8 }", "model m { feature x = (a) heads = 8 }"],
    ),
    "expected `paper`, `let` or `model` at the top level": (
        "a spec holds one `paper { … }` block, `let` constants and `model` blocks",
        ["x = 3", "feature x = f(a)", "attention a { }", "3", "models m { }", "}"],
    ),
    "expected a block name": (
        "name the block, e.g. `model transformer { … }` or `attention enc_self { … }`",
        ["model { }", "model m { attention { } }", "paper { }", "model m { repeat { } }"],
    ),
    "expected an input kind and dimensions, e.g. `input src: tokens[S] (vocab = 30000)`": (
        "inputs read `input NAME: KIND[axes…, dim]`",
        ["model m { input x }", "model m { input x: }", "model m { input x: seq }",
         "model m { input x: seq[] }", "model m { input x tokens[S] }"],
    ),
    "expected a hop count after the repeat name, e.g. `repeat encoder 6 { … }`": (
        "`repeat NAME COUNT [shared] { … }`",
        ["model m { repeat r { } }"],
    ),
    "operator without a right-hand operand": (
        "complete the arithmetic, e.g. `d / heads`",
        ["let d = 3 +", "let d = 3 * ", "let d = 3 + * 4", "let d = 3 / )"],
    ),
    "missing `,` between arguments": (
        "separate arguments with commas: `linear(x, 64)`",
        ["let d = f(a b)", "model m { feature x = f(a 3) }"],
    ),
}


class _WholeWords:
    """lark's contextual lexer tries only the terminals that fit the parser's state; where
    only keywords fit, it took a keyword's prefix of a longer word (`outputs` read as
    `output s`). With NAME always among the tried terminals, the longest word is read,
    and it is a keyword only when it is one whole (lark retypes a NAME spelled as a
    keyword that fits the state); tokens pass through unchanged."""

    always_accept = ("NAME",)

    def process(self, stream):
        return stream


@functools.lru_cache(maxsize=1)
def _grammar() -> str:
    for path in _GRAMMAR_CANDIDATES:
        if path.exists():
            return path.read_text(encoding="utf-8")
    raise FileNotFoundError("grammar/attn.lark not found next to the taxcompile package")


def _lark(variant: str, **options) -> Lark:
    """The grammar's LALR parser, lark's analysis of the grammar kept in a file of the
    user's cache (lark checks the file's key and rebuilds a damaged or half-written one;
    a cache it cannot write costs the build each run, nothing else)."""
    from . import larkload

    grammar = _grammar()
    path = cache.grammar_file(grammar, f"{variant} {larkload.VERSION}")
    return larkload.Lark(grammar, parser="lalr", cache=path or False,
                         maybe_placeholders=True, postlex=_WholeWords(), **options)


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    """The parser into a tree with positions (``fmt``, and the reports of errors)."""
    return _lark("tree", propagate_positions=True)


@functools.lru_cache(maxsize=1)
def _building_parser() -> tuple[Lark, AstBuilder]:
    """The parser that builds the AST as it goes, and its builder."""
    from .astbuilder import AstBuilder

    builder = AstBuilder(MAX_EXPR_DEPTH, MAX_NUMBER_CHARS)
    return _lark("ast", transformer=builder), builder


def prepare() -> None:
    """Import lark and load the parser's tables now (the command line does, with the
    garbage collector paused, before it reads a spec); a first parse does otherwise."""
    _building_parser()


_BUILDING = threading.Lock()  # one parse at a time uses the builder's side tables


def _describe(tok) -> str:
    if getattr(tok, "type", None) == "$END":
        return "end of file"
    text = str(tok)
    return f"`{text[:30]}`"


def _key(e: UnexpectedInput) -> tuple[int | None, str]:
    state = getattr(e, "state", None)
    position = getattr(state, "position", state if isinstance(state, int) else None)
    tok = getattr(e, "token", None)
    return position, getattr(tok, "type", "CHAR") if tok is not None else "CHAR"


@functools.lru_cache(maxsize=1)
def _example_index() -> dict:
    """Parser state (and unexpected token type) -> label, learned from ``_EXAMPLES``.

    lark's ``match_examples`` also compares the depth of the parser's stack, which
    grows with every statement before the error; the state alone is what tells
    which mistake this is, so the examples are matched on it."""
    from .larkload import UnexpectedInput

    exact: dict[tuple, str] = {}
    by_state: dict[int | None, str] = {}
    for label, (_, examples) in _EXAMPLES.items():
        for example in examples:
            try:
                _parser().parse(example)
            except UnexpectedInput as u:
                position, ttype = _key(u)
                exact.setdefault((position, ttype), label)
                if ttype != "$END":  # the end of the file is told apart by the bracket
                    by_state.setdefault(position, label)
            else:  # pragma: no cover - an example that parses is a bug in _EXAMPLES
                raise AssertionError(f"syntax example parses: {example!r}")
    return {"exact": exact, "state": by_state}


_STATEMENT = next(label for label in _EXAMPLES if label.startswith("expected a statement"))
_TOP_LEVEL = next(label for label in _EXAMPLES if label.endswith("at the top level"))


def _match(e: UnexpectedInput) -> str | None:
    # Where a statement or a top-level item may start, lark's accepted terminals (worked
    # out from the whole stack) say which: one parser state (after `let d = 3`) serves
    # both, and every place a block can close is more than the examples can list.
    index = _example_index()
    position, ttype = _key(e)
    accepts = set(getattr(e, "accepts", None) or ())
    if ttype != "$END" and {"INPUT", "FEATURE", "ATTENTION", "REPEAT"} <= accepts:
        return _STATEMENT
    if ttype != "$END" and {"PAPER", "MODEL", "LET"} <= accepts:
        return _TOP_LEVEL
    return index["exact"].get((position, ttype)) or index["state"].get(position)


def _end_of(text: str, file: str) -> Location:
    """Just after the last character that is not white space."""
    body = text.rstrip()
    line = body.count("\n") + 1
    return Location(file=file, line=line, column=len(body) - (body.rfind("\n") + 1) + 1)


def _syntax_error(e: UnexpectedInput, text: str, file: str) -> Diagnostic:
    from .larkload import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    loc = Location(file=file, line=e.line if e.line > 0 else 1,
                   column=e.column if e.column > 0 else 1)
    tok = getattr(e, "token", None)
    at_end = isinstance(e, UnexpectedEOF) or getattr(tok, "type", None) == "$END"
    if at_end:
        loc = _end_of(text, file)
    label = _match(e)
    if isinstance(e, UnexpectedCharacters):
        ch = text[e.pos_in_stream] if 0 <= e.pos_in_stream < len(text) else "?"
        return Diagnostic(loc, f"unexpected character {ch!r}",
                          "names are letters, digits and `_`; comments start with `#`")
    accepts = set(getattr(e, "accepts", None) or getattr(e, "expected", None) or ())
    if at_end:
        # The same parser state can be "missing }" or "missing )": the end of the file
        # tells which bracket is still open.
        if "RPAR" in accepts:
            return Diagnostic(loc, "unexpected end of file: unclosed `(`",
                              "every `(` needs a matching `)`")
        if "RSQB" in accepts:
            return Diagnostic(loc, "unexpected end of file: unclosed `[`",
                              "every `[` needs a matching `]`")
        if "RBRACE" in accepts and (label is None or "value" not in label):
            return Diagnostic(loc, "unexpected end of file: missing `}` to close the block",
                              "every `{` needs a matching `}`")
        if label is None:
            return Diagnostic(loc, "unexpected end of file", "the last statement is incomplete")
    ttype = getattr(tok, "type", None)
    closers = {"RPAR": ")", "RBRACE": "}", "RSQB": "]"}
    if ttype in closers and ttype not in accepts:
        ch = closers[ttype]
        return Diagnostic(loc, f"unmatched `{ch}`",
                          f"remove it, or add the `{'({['[')}]}'.index(ch)]}` it closes")
    if label == "unclosed `(`" and getattr(tok, "type", None) in ("NAME", "NUMBER",
                                                                   "ESCAPED_STRING"):
        label = "missing `,` between arguments"
    typo = _keyword_typo(tok, accepts)
    if label is not None:
        hint = typo or _EXAMPLES[label][0]
        msg = label if tok is None or at_end else f"{label}; found {_describe(tok)}"
        return Diagnostic(loc, msg, hint)
    if isinstance(e, UnexpectedToken):
        expected = sorted(accepts)
        pretty = ", ".join(_terminal(t) for t in expected[:14])
        return Diagnostic(loc, f"unexpected {_describe(e.token)}",
                          typo or (f"expected one of: {pretty}" if pretty else ""))
    return Diagnostic(loc, "syntax error")


_TERMINALS = {"NAME": "a name", "NUMBER": "a number", "ESCAPED_STRING": "a string",
              "LBRACE": "`{`", "RBRACE": "`}`", "LPAR": "`(`", "RPAR": "`)`",
              "EQUAL": "`=`", "COMMA": "`,`", "COLON": "`:`", "LSQB": "`[`",
              "RSQB": "`]`", "PLUS": "`+`", "MINUS": "`-`", "STAR": "`*`",
              "SLASH": "`/`", "DOT": "`.`", "$END": "end of file"}


@functools.lru_cache(maxsize=1)
def _keywords() -> dict[str, str]:
    """Terminal name -> keyword, for the grammar's keywords (`model`, `attention`, …)."""
    return {t.name: t.pattern.value for t in _parser().terminals
            if t.pattern.type == "str" and t.pattern.value.isidentifier()}


def _keyword_typo(tok, accepts) -> str | None:
    """"did you mean `attention`?" when a name stands where only keywords may, and it is
    close to one of those keywords."""
    if getattr(tok, "type", None) != "NAME":
        return None
    words = sorted(_keywords()[t] for t in accepts if t in _keywords())
    close = difflib.get_close_matches(str(tok), words, n=1, cutoff=0.75)
    return f"did you mean `{close[0]}`?" if close else None


def _terminal(name: str) -> str:
    if name in _TERMINALS:
        return _TERMINALS[name]
    term = next((t for t in _parser().terminals if t.name == name), None)
    if term is not None and term.pattern.type == "str":
        return f"`{term.pattern.value}`"
    return name.lower()


def _screen(data: bytes, file: str, size: int | None = None) -> str:
    """Refuse what the parser should never see: huge, binary or undecodable input.
    ``size`` is the file's size when ``data`` is only its first ``MAX_BYTES + 1`` bytes
    (None: unknown, a stream such as /dev/zero)."""

    def err(line: int, col: int, msg: str, hint: str, source: str | None = None) -> SpecError:
        return SpecError([Diagnostic(Location(file=file, line=line, column=col), msg, hint)],
                         source)

    if len(data) > MAX_BYTES:
        size = len(data) if size is None and not isinstance(data, _Prefix) else size
        what = f"{size:,} bytes" if size is not None and size > MAX_BYTES else \
            f"more than {MAX_BYTES:,} bytes"
        raise err(1, 1, f"file is too large ({what}; the limit is {MAX_BYTES:,})",
                  "a spec describes one paper's models; split it or remove generated text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise err(line, col, f"file is not valid UTF-8 (byte 0x{data[e.start]:02x})",
                  "specs are UTF-8 text; is this a binary file?") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        col = nul - (text.rfind("\n", 0, nul) + 1) + 1
        raise err(line, col, "file contains a NUL byte", "specs are text; is this a binary file?")
    ctl = _CONTROL.search(text)
    if ctl is not None:  # it would act on a terminal (ESC, BEL) or break an SVG's XML
        i = ctl.start()
        line = text.count("\n", 0, i) + 1
        col = i - (text.rfind("\n", 0, i) + 1) + 1
        raise err(line, col, f"file contains the control character U+{ord(ctl.group()[0]):04X}",
                  "specs are plain text: remove it (a terminal colour code or a stray "
                  "carriage return?)", text)
    for n, m in enumerate(_MODEL.finditer(text)):
        if n == MAX_MODELS:  # refused before the parse: a cheap bound on a variant flood
            i = m.start(1)
            line = text.count("\n", 0, i) + 1
            col = i - (text.rfind("\n", 0, i) + 1) + 1
            raise err(line, col, f"the spec has more than {MAX_MODELS:,} models",
                      "split the spec, or compile fewer variants at once", text)
    n = _too_deep(_BRACKETS.findall(text))  # the brackets' strings: no match objects
    if n >= 0:
        i = next(itertools.islice(_BRACKETS.finditer(text), n, None)).start()
        line = text.count("\n", 0, i) + 1
        col = i - (text.rfind("\n", 0, i) + 1) + 1
        raise err(line, col, f"brackets nested more than {MAX_DEPTH} deep",
                  "flatten the expression with `feature` or `let` statements", text)
    return text


def _too_deep(brackets: list[str]) -> int:
    """The index of the first bracket nested deeper than ``MAX_DEPTH``, or -1."""
    depth, rest = 0, iter(brackets)
    for b in rest:  # no enumerate(): a tenth of the loop's time
        if b in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                return len(brackets) - operator.length_hint(rest) - 1
        elif depth:
            depth -= 1
    return -1


_BRACKETS = re.compile(r"[()\[\]{}]")
_MODEL = re.compile(r"^[ \t]*(model)\b", re.M)  # a model's first line (strings are one line)
# C0 controls but tab, newline and a carriage return before a newline (CRLF line ends);
# DEL and the C1 controls
_CONTROL = re.compile("[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")
_EXPRESSIONS = frozenset({"add", "sub", "mul", "div", "neg", "call"})


def _screen_depth(tree: Tree, text: str, file: str) -> None:
    """Refuse an expression nested deeper than ``MAX_EXPR_DEPTH`` (a flat sum of many
    terms is a deep tree too) at the expression's own position, before any recursive
    pass over the tree, and a number literal longer than ``MAX_NUMBER_CHARS``. Walks the
    tree without recursion."""
    from .larkload import Token, Tree

    stack: list[tuple[Tree, int, Tree | None]] = [(tree, 0, None)]
    while stack:
        node, depth, root = stack.pop()
        if node.data in _EXPRESSIONS:
            root = root or node
            depth += 1
            if depth > MAX_EXPR_DEPTH:
                loc = Location(file=file, line=getattr(root.meta, "line", 1),
                               column=getattr(root.meta, "column", 1))
                raise SpecError([Diagnostic(
                    loc, f"expression nested more than {MAX_EXPR_DEPTH} deep (each operator "
                    "and call counts: `a + b + c` is 2 deep)",
                    "split it into `let` constants or `feature` statements")], text)
        stack.extend((c, depth, root) for c in node.children if isinstance(c, Tree))
        for tok in node.children:
            if isinstance(tok, Token) and tok.type == "NUMBER" and len(tok) > MAX_NUMBER_CHARS:
                raise SpecError([Diagnostic(
                    Location(file=file, line=tok.line, column=tok.column),
                    f"number literal of {len(tok):,} characters (the limit is "
                    f"{MAX_NUMBER_CHARS})", "constants are at most 1e15: "
                    "check the number for stray digits")], text)


def parse_text(text: str, file: str = "<string>") -> ast.Module:
    """Parse spec text into an AST; raise ``SpecError`` on any problem."""
    text = _screen(text.encode("utf-8", "replace"), file)
    module = _build(text)
    return module if module is not None else lark_parse(text, file)


def _build(text: str) -> ast.Module | None:
    """The AST built while lark parses screened text, or None where lark refuses it or it
    passes a limit (``lark_parse`` reports those)."""
    from .larkload import UnexpectedInput

    parser, builder = _building_parser()
    with _BUILDING:
        builder.reset()
        try:
            module = parser.parse(text)
            over = builder.over_limits
        except UnexpectedInput:
            return None
        finally:
            builder.reset()
    return None if over else module


def lark_parse(text: str, file: str) -> ast.Module:
    """lark's reading of screened text into a tree, then the AST: the AST, or the located
    ``SpecError`` (a syntax error, a limit passed)."""
    from .larkload import UnexpectedInput

    from .astbuilder import AstBuilder

    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        raise SpecError([_syntax_error(e, text, file)], text) from None
    _screen_depth(tree, text, file)
    try:
        return AstBuilder().transform(tree)
    except RecursionError:  # pragma: no cover - depth is screened above
        raise SpecError([Diagnostic(Location(file=file, line=1, column=1),
                                    "expression nested too deeply")], text) from None


class _Prefix(bytes):
    """The first ``MAX_BYTES + 1`` bytes of a longer file or stream."""


def read_bytes(path: str | Path, display: str | None = None) -> tuple[bytes, int | None]:
    """At most ``MAX_BYTES + 1`` bytes of a spec file (a longer file, or an endless stream
    such as /dev/zero, is never read whole), and the file's size when it is a regular
    file. Errors are located ``SpecError``s."""
    name = display or str(path)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            size = st.st_size if stat.S_ISREG(st.st_mode) else None
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        why = "is a directory" if isinstance(e, IsADirectoryError) else e.strerror or str(e)
        raise SpecError([Diagnostic(Location(file=name, line=1, column=1),
                                    f"cannot read file: {why}")]) from None
    if len(data) > MAX_BYTES:
        data = _Prefix(data)
    return data, size


def read_source(path: str | Path, display: str | None = None) -> str:
    """Read and screen a spec file; errors are located ``SpecError``s."""
    data, size = read_bytes(path, display)
    return _screen(data, display or str(path), size)
