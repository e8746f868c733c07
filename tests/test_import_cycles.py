"""No import cycle among the modules of ``taxcompile/``, found statically.

Every module is parsed with ``ast`` and its imports resolved (relative ones against its
package) to the ``taxcompile`` modules they name. What counts as an edge:

- every import statement, at the top level or inside a function: an import deferred into
  a function still makes each module need the other (it only hides the cycle until the
  function runs), and the project's cycles were of that kind (a module importing its
  caller at its bottom or in a function). Imports under ``if TYPE_CHECKING:`` are not
  edges: they never run;
- ``from P import name`` is an edge to ``P.name`` when that is a module, else to ``P``;
- importing ``a.b.c`` runs ``a/b/__init__.py`` first, so it is an edge to ``a.b`` too,
  except from a module inside ``a.b``: a package's own modules load while its
  ``__init__`` runs (it importing its submodules is how a package is laid out).

A cycle is a strongly connected component with more than one module; the message lists
each with one closed path through it (``..>`` marks an import inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Edges that other work removes, each a cycle of its own; the graph without them must be
# acyclic (so a new cycle through them fails too, unless it needs one of them). None left:
# the parser's rewrite took ast -> astbuilder away, and the parameter vocabulary's own leaf
# module (params.py) the cycle ir -> mechanisms -> ops -> ir.
ALLOWED: set[tuple[str, str]] = set()
# Not yet removed, inside the study (its own modules, outside this change): ``runs`` is both
# the records every part imports and the facade (``runs.plan``, ``runs.execute``) that
# calls down into ``plan`` and ``runner``; ``protocol`` raises ``runs.StudyError``;
# ``evaluate`` reads the runner's output helpers while the runner calls it.
STUDY = {
    ("taxcompile.study.runs", "taxcompile.study.plan"),
    ("taxcompile.study.runs", "taxcompile.study.runner"),
    ("taxcompile.study.protocol", "taxcompile.study.runs"),
    ("taxcompile.study.evaluate", "taxcompile.study.runner"),
}


def modules(root: Path = ROOT, package: str = "taxcompile") -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST, in_function: bool = False):
    """(import statement, inside a function) for every import that can run."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        elif isinstance(child, ast.If) and _type_checking(child.test):
            for st in child.orelse:
                yield from _imports(ast.Module(body=[st], type_ignores=[]), in_function)
        else:
            yield from _imports(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def imports_of(name: str, path: Path, known: dict[str, Path]) -> dict[str, bool]:
    """The modules of ``known`` that module ``name`` imports -> whether only inside
    functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: dict[str, bool] = {}

    def add(target: str, lazy: bool) -> None:
        out[target] = out.get(target, True) and lazy

    for st, lazy in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(st, ast.Import):
            for alias in st.names:
                if alias.name in known:
                    add(alias.name, lazy)
            continue
        if st.level:
            base = package.split(".")
            base = base[:len(base) - (st.level - 1)]
            target = ".".join(base + ([st.module] if st.module else []))
        else:
            target = st.module or ""
        for alias in st.names:
            if f"{target}.{alias.name}" in known:
                add(f"{target}.{alias.name}", lazy)
            elif target in known:
                add(target, lazy)
    # the packages on the way: `from .check.core import Shape` runs check/__init__.py too
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    for target, lazy in list(out.items()):
        parts = target.split(".")
        for i in range(1, len(parts)):
            pkg = ".".join(parts[:i])
            if pkg in known and pkg not in own:
                add(pkg, lazy)
    out.pop(name, None)
    return out


def import_graph(root: Path = ROOT, package: str = "taxcompile") -> dict[str, dict[str, bool]]:
    known = modules(root, package)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def components(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The strongly connected components of more than one module (networkx's), each
    sorted, in sorted order."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(graph)
    g.add_edges_from((a, b) for a, targets in graph.items() for b in targets if b in graph)
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def a_cycle(comp: list[str], graph: dict[str, dict[str, bool]]) -> str:
    """One shortest closed path through the component's first module, written out."""
    start, members = comp[0], set(comp)
    prev: dict[str, str | None] = {start: None}
    queue = [start]
    for v in queue:
        for w in sorted(set(graph[v]) & members):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                path = path[::-1] + [start]
                text = path[0].removeprefix("taxcompile.")
                for a, b in zip(path, path[1:]):
                    text += (" ..> " if graph[a][b] else " -> ") + b.removeprefix("taxcompile.")
                return text
            if w not in prev:
                prev[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")


def without(graph, edges) -> dict[str, dict[str, bool]]:
    return {v: {w: lazy for w, lazy in ws.items() if (v, w) not in edges}
            for v, ws in graph.items()}


def test_the_graph_resolves_imports_as_python_runs_them(tmp_path):
    """On a small package: relative imports from a subpackage, `from package import
    module`, the package a submodule import runs, imports inside functions (lazy), and
    TYPE_CHECKING imports (none)."""
    pkg = tmp_path / "pk"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub.core import X\nfrom typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    from .sub import core\n")
    (pkg / "sub" / "__init__.py").write_text("from .core import X\nfrom .. import b\n")
    (pkg / "sub" / "core.py").write_text("from .. import a as _a\nX = 1\n")
    graph = import_graph(tmp_path, "pk")
    assert graph["pk.a"] == {"pk.sub.core": False, "pk.sub": False}
    assert graph["pk.b"] == {"pk.a": True, "pk.sub.core": True, "pk.sub": True}
    assert graph["pk.sub"] == {"pk.sub.core": False, "pk.b": False}  # no edge to itself
    assert graph["pk.sub.core"] == {"pk.a": False}  # its own package: no edge
    comps = components(graph)
    assert comps == [["pk.a", "pk.b", "pk.sub", "pk.sub.core"]]
    assert a_cycle(comps[0], graph) == "pk.a -> pk.sub.core -> pk.a"
    lazy = {(v, w) for v, ws in graph.items() for w, late in ws.items() if late}
    assert lazy == {("pk.b", "pk.a"), ("pk.b", "pk.sub"), ("pk.b", "pk.sub.core")}
    assert components(without(graph, lazy | {("pk.sub.core", "pk.a")})) == []


def test_no_import_cycles():
    graph = import_graph()
    for a, b in ALLOWED | STUDY:  # a stale allowance is dropped, not kept
        assert b in graph.get(a, {}), f"{a} no longer imports {b}: remove its allowance"
    found = components(without(graph, ALLOWED | STUDY))
    lines = [f"{a_cycle(c, graph)}   (all of: {', '.join(m.removeprefix('taxcompile.') for m in c)})"
             for c in found]
    assert not found, (f"{len(found)} import cycle(s) among taxcompile/ modules:\n  "
                       + "\n  ".join(lines))
