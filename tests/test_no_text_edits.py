"""Generated code is written once from typed values (``codegen/expr.py`` for sizes), never
edited as text afterwards: no ``str.replace`` or regular expression in codegen and the operator
families, no ``replace``/``split``/``rsplit`` in the code templates. What remains is listed
below with why it is not an edit of emitted code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "taxcompile"
SCANNED = ("codegen", "operators")

# (file under taxcompile/, enclosing function) -> why its text edit is not over emitted code
ALLOWED_PY = {
    ("codegen/names.py", "ident"): "a node id (`enc[2].x@3`) made an identifier",
    ("codegen/names.py", "safe_text"): "spec prose cleaned for a docstring",
    ("codegen/names.py", "camel"): "a node id split into words for a class name",
    ("codegen/planner.py", "reuse"): "a node id's version (`x@3`)",
    ("codegen/repeat.py", "segments"): "a hop id's (block, index) pairs",
    ("codegen/attention.py", "record"): "the IR's axis names, to pick the heads' axis letter",
    ("codegen/planner.py", "attr_name"): "a node id relative to its block's hop prefix",
    ("codegen/planner.py", "key_code"): "a node id relative to its block's hop prefix",
    ("codegen/repeat.py", "shared_levels"): "a repeat path without its hop numbers (an id)",
    ("codegen/repeat.py", "plan_block"): "a repeat path made a class name",
    ("codegen/model.py", "file_doc"): "a Table III dimension's name as docstring words",
    ("codegen/contexts.py", "describe"): "a score's name as docstring words",
    ("codegen/layer_config.py", "_rules"): "a score's name as message words",
}
# (template under templates/codegen/, text) -> why
ALLOWED_J2 = {
    ("layer.py.j2", 'view.title | replace("\\n    ", "\\n")'): "re-indents docstring prose",
    # the width comes as text from the attention view (codegen/classes.py); typed there, the
    # layer would render it with its own name for d_v
    ("layer.py.j2", 'view.c_width | replace("d_v", width)'): "the context width's name (view)",
}


def _text_edits(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of each str.replace call and regular expression match."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node, where):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef,
                                                     ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                f = child.func
                owner = f.value.id if isinstance(f.value, ast.Name) else None
                if (f.attr == "replace" and owner != "dataclasses") or \
                        (owner == "re" and f.attr != "compile"):
                    found.append((where, child.lineno))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_codegen_and_operators_do_not_edit_text():
    seen, bad = set(), []
    for pkg in SCANNED:
        for path in sorted((PKG / pkg).rglob("*.py")):
            rel = path.relative_to(PKG).as_posix()
            for func, line in _text_edits(path):
                seen.add((rel, func))
                if (rel, func) not in ALLOWED_PY:
                    bad.append(f"{rel}:{line} in {func}()")
    assert not bad, "text edits of generated code (build typed values instead): " + str(bad)
    assert set(ALLOWED_PY) <= seen, f"stale allowances: {set(ALLOWED_PY) - seen}"


def test_code_templates_do_not_split_or_edit_text():
    tdir = PKG / "templates" / "codegen"
    edit = re.compile(r"([\w.]+(?:\s*\|\s*|\.)(?:replace|split|rsplit)\([^)]*\))")
    bad = []
    for path in sorted(tdir.rglob("*.j2")):
        for m in edit.finditer(path.read_text(encoding="utf-8")):
            if (path.name, m.group(1)) not in ALLOWED_J2:
                bad.append(f"{path.relative_to(tdir)}: {m.group(1)}")
    assert not bad, bad


def test_the_scan_sees_an_edit(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('import dataclasses, re\n\n\ndef f(code, r):\n'
                     '    r = dataclasses.replace(r)\n'
                     '    return code.replace("cfg.", "") + re.sub("a", "b", code)\n',
                     encoding="utf-8")
    assert _text_edits(probe) == [("f", 6), ("f", 6)]


# ---- splits, prefix tests and re-reads of code -------------------------------------------
# Beside the edits above: a split or a prefix test of emitted code decides by its text, and a
# parse or tokenize of it re-reads it; either should be a decision from the plan (what a
# statement was built for, ``plan.Stmt.part``; keys built from data, ``Planner.key_code``).

SPLITS = {"split", "rsplit", "splitlines", "partition", "rpartition", "startswith", "endswith",
          "fullmatch"}
READS = {"parse", "generate_tokens", "names_in", "mentions", "assigned", "assigned_names",
         "is_atom", "_tokens"}

# (module, function, call as written) -> what it is applied to (not emitted code)
ALLOWED_READS = {
    ("config.py", "mark", "NAME.fullmatch"): "a size's symbol from the IR: a plain constant",
    ("config.py", "plan_config", "key.startswith"): "a record key of the IR (size:AXIS)",
    ("config.py", "axis_multiples", "key.startswith"): "a record key of the IR (size:AXIS)",
    ("config.py", "constant_roles", "k.startswith"): "a record key of the IR (size:AXIS)",
    ("frame.py", "param", "node_id.split"): "a node id: its last part names a parameter",
    ("layer_config.py", "_lines", "f.name.startswith"): "a Config field's name (d_*)",
    ("layout.py", "layout", "source.split"): "the finished file's lines, for the layout pass "
                                             "that wraps long ones (whitespace only)",
    ("layout.py", "_fixed_rows", "ast.parse"): "the layout pass: which rows are statements",
    ("layout.py", "layout", "tokenize.generate_tokens"): "the layout pass: logical lines",
    ("layout.py", "_fixed_rows", "tokenize.generate_tokens"): "the layout pass: logical lines",
    ("pretty.py", "_tokenize", "tokenize.generate_tokens"): "the layout pass: wrapping a line",
    ("pretty.py", "_signature", "tokenize.generate_tokens"): "the layout pass: a wrapped line "
                                                             "has the tokens it had",
    ("pretty.py", "wrap", "text.startswith"): "the layout pass: a comment's text",
    ("model.py", "axis_size", "axis.split"): "an axis name (a*b: a product of two axes)",
    ("names.py", "new", "want.endswith"): "a wanted identifier (x_ gets x_2, not x__2)",
    ("names.py", "camel", "re.split"): "a node id split into words for a class name",
    ("planner.py", "share_key", "h.template.split"): "a repeat's template path",
    ("planner.py", "attr_name", "h.template.split"): "a repeat's template path",
    ("planner.py", "want", "n.hop.template.split"): "a repeat's template path",
    ("planner.py", "reuse", "re.fullmatch"): "a node id (x@3: an update of x)",
    ("repeat.py", "plan_block", "r[0].split"): "a node id: its last part names a list",
    ("stages.py", "holds", "when.startswith"): "a template step's condition (!flag)",
    ("ties.py", "axis_dim", "axis.rpartition"): "an axis name (N+1 after prepend)",
}


def _reads(root: Path) -> dict[tuple[str, str, str], int]:
    """(module, enclosing function, the call's function as written) -> how many, for the
    splits, prefix tests and code re-reads in the modules directly under ``root``."""
    found: dict[tuple[str, str, str], int] = {}
    for path in sorted(root.glob("*.py")):
        def visit(node, where: str) -> None:
            for child in ast.iter_child_nodes(node):
                inner = child.name if isinstance(child, (ast.FunctionDef,
                                                         ast.AsyncFunctionDef)) else where
                if isinstance(child, ast.Call):
                    f = child.func
                    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                    if name in SPLITS or name in READS:
                        key = (path.name, where, ast.unparse(f))
                        found[key] = found.get(key, 0) + 1
                visit(child, inner)

        visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_codegen_does_not_split_or_reread_code():
    new = sorted(set(_reads(PKG / "codegen")) - set(ALLOWED_READS))
    assert not new, ("splits or re-reads in codegen not listed (decide from the plan "
                     f"instead, or list the use with its reason): {new}")


def test_every_listed_read_still_exists():
    gone = sorted(set(ALLOWED_READS) - set(_reads(PKG / "codegen")))
    assert not gone, f"listed but no longer in taxcompile/codegen/: {gone}"


def test_the_scan_sees_a_split_of_code(tmp_path):
    (tmp_path / "probe.py").write_text(
        "def f(s, key):\n    return s.code.split('=')[0], key.startswith('f\"')\n",
        encoding="utf-8")
    assert _reads(tmp_path) == {("probe.py", "f", "s.code.split"): 1,
                                ("probe.py", "f", "key.startswith"): 1}
