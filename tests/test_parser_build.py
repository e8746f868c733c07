"""lark builds the AST while it parses (``parser._build``, astbuilder.py), positions taken
from tokens; where it refuses the text or the text passes a limit, ``parser.lark_parse``
reads it again into a tree to report it.

The building parser must read what the tree path reads, positions included, over every
spec of the repository and many mutations of them; the positions of operators must be
those lark's ``propagate_positions`` gives (the reference the language had); the AST
classes import neither lark nor the builder; lark's analysis of the grammar is cached in
the user's cache, safely."""

from __future__ import annotations

import ast as pyast
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from taxcompile import ast, parser
from taxcompile.diagnostics import SpecError

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted([*ROOT.glob("specs/*.attn"), *ROOT.glob("examples/*.attn"),
                *ROOT.glob("tests/data/**/*.attn"), *ROOT.glob("benchmarks/specs/*.attn")])


def _agree(text: str) -> bool:
    """The building parser reads ``text`` as the tree path does (True), or both refuse it
    (False)."""
    try:
        tree = parser.lark_parse(text, "t.attn")
    except SpecError:
        assert parser._build(text) is None, text
        return False
    built = parser._build(text)
    assert built is not None and built == tree, text
    assert len(text) > 900 or repr(built) == repr(tree), text
    return True


def _screened(path: Path) -> str | None:
    try:
        return parser.read_source(path)
    except SpecError:
        return None


def test_every_spec_builds_as_the_tree_path_reads_it():
    read = sum(_agree(text) for text in map(_screened, FILES) if text is not None)
    assert read > 40


_TOKEN = re.compile(r'"[^"\n]*"|[A-Za-z_]\w*|[0-9.eE]+|\S')
REPLACEMENTS = ["model", "feature", "repeat", "shared", "paper", "input", "query", "let", "x",
                "3", "2.5", "1e3", "007", '"s"', "(", ")", "[", "]", "{", "}", "=", ",", ":",
                ".", "+", "-", "*", "/", "#", "'", "attention", "a[1]", "f(x)", "k = 2"]


def _mutations(text: str, rng: random.Random, n: int):
    spans = [m.span() for m in _TOKEN.finditer(text)]
    for _ in range(n):
        i = rng.randrange(len(spans))
        a, b = spans[i]
        kind = rng.randrange(4)
        if kind == 0:  # drop a token
            yield text[:a] + text[b:]
        elif kind == 1:  # double it
            yield text[:b] + " " + text[a:b] + text[b:]
        elif kind == 2 and i + 1 < len(spans):  # swap it with the next one
            c, d = spans[i + 1]
            yield text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        else:  # replace it
            yield text[:a] + rng.choice(REPLACEMENTS) + text[b:]


def test_mutated_specs_build_as_the_tree_path_reads_them():
    rng = random.Random(27)
    outcomes = [_agree(text) for path in sorted(ROOT.glob("specs/*.attn"))
                for text in _mutations(path.read_text(encoding="utf-8"), rng, 8)]
    assert outcomes.count(True) > 25 and outcomes.count(False) > 25  # both exercised


EXPRESSIONS = [
    "a + b * c", "(a + b) * c", "((a)) * b", "-a + b", "- - a", "-(a + b) / 2",
    "f(x, k = (1 + 2)) - e[2].g", "a.b[1].c * (d - -e)", "1e3 + 2.5 - 007", '"s\\"t" + x',
    "f()", "f((a) * b, g(h(1)))", "(((1)))", "a - (b - (c - d))", "2 * -x * 3",
    "(\n  a  # c\n) + b", "((a + b)) - ((c)) * (-(d))"]


def _propagated(tree) -> list[tuple[int, int]]:
    """(line, column) of every operator, negation and call in lark's tree with
    ``propagate_positions``, in the order of the AST walk below."""

    out = []
    for node in tree.iter_subtrees_topdown():
        if node.data in ("add", "sub", "mul", "div", "neg", "call"):
            out.append((node.meta.line, node.meta.column))
    return out


def _operators(node) -> list[tuple[int, int]]:
    """(line, col) of every BinOp, Neg and Call of the AST, top down, left to right."""
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.BinOp, ast.Neg, ast.Call)):
            out.append((n.pos.line, n.pos.col))
        if isinstance(n, ast.Positional):
            children = [v for _, v in n]
            flat = []
            for v in children:
                flat.extend(v if isinstance(v, tuple) else [v])
            stack.extend(reversed([v for v in flat if isinstance(v, ast.Positional)]))
    return out


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_operator_positions_are_lark_propagated_ones(expr):
    """A binary operation sits where its left operand's text starts (an opening
    parenthesis included), a negation at its `-`: as lark's propagate_positions has it."""
    for text in (f"let v = {expr}\n", f"model m {{\n  feature  x =\n    {expr}  # c\n}}",
                 f"model m {{ input s: seq[T, {expr}] (dim = {expr}) repeat r {expr} shared "
                 f"{{ attention a {{ query = {expr} }} }} }}"):
        built = parser._build(text)
        assert built is not None and built == parser.lark_parse(text, "t.attn"), text
        expected = _propagated(parser._parser().parse(text))
        assert _operators(built) == expected, text


def test_a_parenthesised_left_operand_places_the_operation_at_its_parenthesis():
    (let,) = parser.parse_text("let v = (a + b) * -(c)\n").items
    mul = let.value
    assert (mul.pos.line, mul.pos.col) == (1, 9)  # the `(`
    assert (mul.left.pos.line, mul.left.pos.col) == (1, 10)  # `a + b` starts at `a`
    assert (mul.right.pos.line, mul.right.pos.col) == (1, 19)  # the `-`


@pytest.mark.parametrize("text", [
    "model m { repeat r 2 let { } }", "model m { repeat r n model { } }",
    "model m { repeat r f(x) repeat { } }", "model m { repeat r (2) input { } }",
    "model m { repeat r 2 sharedx { } }", "model m { feature model = model }",
    "model m { input let: model[T] (feature = 1) }", "paper p { model = 1 query = (2) }",
    "model m: let { attention a { let = x.model } }", "let a = 1ex = 2", "let a = f(a = b = 1)"])
def test_keywords_where_names_stand(text):
    """A word spelled as a keyword where a name may stand: lark's contextual lexer reads it
    as the keyword where its parser state accepts one; both paths read it alike."""
    _agree(text)


def test_limits_are_found_while_building_and_reported_from_the_tree():
    deep = "let d = " + " + ".join(["1"] * (parser.MAX_EXPR_DEPTH + 2))
    assert parser._build(deep) is None
    ok = "let d = " + " + ".join(["1"] * parser.MAX_EXPR_DEPTH)  # the deepest allowed
    assert parser._build(ok) is not None
    long = "let d = a[" + "1" * (parser.MAX_NUMBER_CHARS + 1) + "]"
    assert parser._build(long) is None
    with pytest.raises(SpecError, match="number literal"):
        parser.parse_text(long)
    negs = "let d = " + "-" * 5000 + "1"  # the builder does not recurse
    assert parser._build(negs) is None
    with pytest.raises(SpecError, match="nested more than"):
        parser.parse_text(negs)
    assert parser._build("let d = 1") is not None  # the limits of the last parse forgotten


def test_the_ast_imports_neither_lark_nor_the_builder():
    tree = pyast.parse((ROOT / "taxcompile" / "ast.py").read_text(encoding="utf-8"))
    imported = {n.module or "" for n in pyast.walk(tree) if isinstance(n, pyast.ImportFrom)}
    imported |= {a.name for n in pyast.walk(tree) if isinstance(n, pyast.Import)
                 for a in n.names}
    assert not {m for m in imported if "lark" in m or "astbuilder" in m}, imported
    code = "import sys, taxcompile.ast; print(sorted(m for m in sys.modules if 'lark' in m \
or 'astbuilder' in m))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- lark's analysis of the grammar, cached ------------------------------------------------

PROBE = ("import sys; from taxcompile import parser; "
         "print(parser.parse_text('let d = 3').items[0].value.value)")


def _run(cache_dir: Path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAXCOMPILE_")}
    environ.update(TAXCOMPILE_CACHE_DIR=str(cache_dir), **env)
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                          text=True, env=environ, timeout=120)


def test_the_grammar_tables_are_cached_in_the_users_cache_and_reused(tmp_path):
    first = _run(tmp_path, TAXCOMPILE_NO_CACHE="1")  # rows off: the grammar's tables kept
    assert first.returncode == 0 and first.stdout == "3\n" and first.stderr == ""
    (entry,) = (tmp_path / "grammar").iterdir()
    assert entry.name.startswith("attn-") and entry.suffix == ".lark"
    stamp = entry.stat().st_mtime_ns
    again = _run(tmp_path)
    assert again.stdout == "3\n" and entry.stat().st_mtime_ns == stamp  # read, not rewritten
    assert not (tmp_path / "table").exists()


def test_a_damaged_cache_entry_is_rebuilt(tmp_path):
    _run(tmp_path)
    (entry,) = (tmp_path / "grammar").iterdir()
    entry.write_bytes(b"not lark's\n\x80garbage")
    p = _run(tmp_path)
    assert p.returncode == 0 and p.stdout == "3\n" and p.stderr == ""


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into a read-only folder")
def test_an_unwritable_cache_is_ignored(tmp_path):
    tmp_path.chmod(0o500)
    try:
        p = _run(tmp_path / "cache")
    finally:
        tmp_path.chmod(0o700)
    assert p.returncode == 0 and p.stdout == "3\n" and p.stderr == ""


def test_a_cache_folder_that_is_a_file_is_ignored(tmp_path):
    (tmp_path / "grammar").write_text("a file where the folder would be")
    p = _run(tmp_path)
    assert p.returncode == 0 and p.stdout == "3\n" and p.stderr == ""


def test_the_cache_file_is_keyed_by_the_grammar_and_lark(monkeypatch, tmp_path):
    from taxcompile import cache

    monkeypatch.setenv("TAXCOMPILE_CACHE_DIR", str(tmp_path))
    names = {cache.grammar_file(g, v) for g in ("start: NAME", "start: NUMBER")
             for v in ("ast 1.3.1", "ast 1.3.2", "tree 1.3.1")}
    assert len(names) == 6 and all(Path(n).parent == tmp_path / "grammar" for n in names)


@pytest.mark.parametrize("text, column", [
    (")]}" * 5 + "(" * (parser.MAX_DEPTH + 1), 15 + parser.MAX_DEPTH + 1),  # no depth below 0
    ("([])" * 100 + "[" * parser.MAX_DEPTH + "{", 400 + parser.MAX_DEPTH + 1),
    ("(" * parser.MAX_DEPTH + ")" + "(" * 2, parser.MAX_DEPTH + 3),
])
def test_screen_finds_the_first_bracket_too_deep(text, column):
    with pytest.raises(SpecError, match="brackets nested more than") as e:
        parser._screen(text.encode(), "f")
    assert (e.value.diagnostics[0].loc.line, e.value.diagnostics[0].loc.column) == (1, column)


def test_screen_passes_brackets_as_deep_as_the_limit():
    text = "(" * parser.MAX_DEPTH + ")" * parser.MAX_DEPTH + "[" * parser.MAX_DEPTH
    assert parser._screen(text.encode(), "f") == text
