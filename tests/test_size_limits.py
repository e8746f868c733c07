"""The project's size limits over every module of taxcompile/: no module over 500 lines,
no function over 100 (from its ``def`` to its last line, nested functions and methods
included), no class over 400. A split along the code's own seams keeps each readable."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "taxcompile"
LIMITS = {"module": 500, "function": 100, "class": 400}
# (path under taxcompile/, name or "<module>") -> why it may be larger; keep it empty
ALLOWED: dict[tuple[str, str], str] = {}


def oversized(text: str) -> list[tuple[str, str, int]]:
    """(kind, name, lines) of each part of a module's source over its limit."""
    out = []
    lines = len(text.splitlines())
    if lines > LIMITS["module"]:
        out.append(("module", "<module>", lines))
    for node in ast.walk(ast.parse(text)):
        kind = "class" if isinstance(node, ast.ClassDef) else "function" if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if kind and node.end_lineno - node.lineno + 1 > LIMITS[kind]:
            out.append((kind, node.name, node.end_lineno - node.lineno + 1))
    return out


def test_every_module_function_and_class_is_within_the_limits():
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        for kind, name, n in oversized(path.read_text(encoding="utf-8")):
            found[rel, name] = f"{kind} of {n} lines (limit {LIMITS[kind]})"
    assert not {k: v for k, v in found.items() if k not in ALLOWED}, found
    assert set(ALLOWED) <= set(found), f"stale allowances: {set(ALLOWED) - set(found)}"


def test_the_scan_counts_from_def_to_the_last_line():
    body = "".join(f"    x{i} = {i}\n" for i in range(99))
    assert oversized(f"def f():\n{body}") == []  # 100 lines
    assert oversized(f"def f():\n{body}    return 1\n") == [("function", "f", 101)]
    method = "class C:\n    def m(self):\n" + body.replace("    ", "        ") + "        pass\n"
    assert oversized(method) == [("function", "m", 101)]
    assert oversized("x = 1\n" * 501)[0] == ("module", "<module>", 501)
