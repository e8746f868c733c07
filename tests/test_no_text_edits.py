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
