"""No import cycle among the modules of ``taxcompile/``, found statically.

Every module is parsed with ``ast``; its imports are resolved (relative ones against its
package) to the ``taxcompile`` modules they name. What counts:

- the imports a module runs when it is imported: its top level, including ``if``/``try``/
  ``with`` blocks and class bodies, but not function bodies (an import inside a function
  runs when the function is called, after every module has loaded: it is how the front end
  reaches torch-side code lazily) and not ``if TYPE_CHECKING:`` blocks (never run);
- ``from P import name`` is an edge to ``P.name`` when that is a module, else to ``P``;
- importing ``a.b.c`` runs ``a/b/__init__.py`` first, so it is an edge to ``a.b`` too,
  except from a module inside ``a.b``: a package's own modules load while its
  ``__init__`` runs (it importing its submodules is how a package is laid out, not a
  cycle of design).

A cycle is a strongly connected component of that graph with more than one module (or a
module importing itself); the message lists each with one closed path through it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "taxcompile"

# Cycles that other work in progress removes: each is allowed as long as it stays within
# the modules named here (a smaller one passes, a larger one or any other cycle fails).
ALLOWED = {
    # the AST records and the tree-to-AST builder (the parser's rewrite removes it)
    "ast <-> astbuilder": {"taxcompile.ast", "taxcompile.astbuilder"},
    # the operator registry, the IR and the mechanism records (the generic-mechanism IR
    # rewrite removes it)
    "ops <-> ir <-> mechanisms": {"taxcompile.ops", "taxcompile.ir", "taxcompile.mechanisms",
                                  *(f"taxcompile.mechanisms.{p.stem}"
                                    for p in (PACKAGE / "mechanisms").glob("*.py")
                                    if p.stem != "__init__")},
}


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_at_import(body: list[ast.stmt]):
    """The import statements among ``body`` that run when the module is imported."""
    for st in body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            yield st
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(st, ast.If):
            if not _is_type_checking(st.test):
                yield from _run_at_import(st.body)
            yield from _run_at_import(st.orelse)
        elif isinstance(st, ast.ClassDef):
            yield from _run_at_import(st.body)
        else:  # try, with, for, while, match: their nested statements
            for name in ("body", "orelse", "finalbody"):
                yield from _run_at_import(getattr(st, name, []) or [])
            for h in getattr(st, "handlers", []) or []:
                yield from _run_at_import(h.body)
            for case in getattr(st, "cases", []) or []:
                yield from _run_at_import(case.body)


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The ``taxcompile`` modules that module ``name`` imports when it is imported."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for st in _run_at_import(tree.body):
        if isinstance(st, ast.Import):
            for alias in st.names:
                if alias.name in known:
                    out.add(alias.name)
            continue
        if st.level:
            base = package.split(".")
            base = base[:len(base) - (st.level - 1)]
            target = ".".join(base + ([st.module] if st.module else []))
        else:
            target = st.module or ""
        for alias in st.names:
            sub = f"{target}.{alias.name}"
            if sub in known:
                out.add(sub)
            elif target in known:
                out.add(target)
    # the packages on the way: `from .check.core import Shape` runs check/__init__.py too
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    for target in list(out):
        parts = target.split(".")
        out.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts)))
                   if p in known and p not in own)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with a cycle (Tarjan's algorithm, iterative),
    each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in graph[v]:
                        found.append(sorted(comp))
    return sorted(found)


def a_cycle(comp: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One closed path through the component, from its first module back to it (BFS)."""
    start, members = comp[0], set(comp)
    prev = {start: None}
    queue = [start]
    for v in queue:
        for w in sorted(graph[v] & members):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def _short(name: str) -> str:
    return name.removeprefix("taxcompile.")


def test_the_graph_sees_relative_and_bottom_imports():
    """The resolver itself: a relative import from a subpackage, a `from package import
    module`, an import in a function (not counted) and one under TYPE_CHECKING (not counted)."""
    graph = import_graph()
    assert "taxcompile.diagnostics" in graph["taxcompile.check.core"] or \
        "taxcompile.ir" in graph["taxcompile.check.core"]
    assert "taxcompile.ir" in graph["taxcompile.check"]  # `from .. import ir`
    assert "taxcompile.codegen" not in graph["taxcompile.api"]  # only inside functions
    # `from .check.core import …` outside the package also runs check/__init__.py
    assert {"taxcompile.check", "taxcompile.check.core"} <= graph["taxcompile.graph"]
    # inside the package it does not: the package's modules load while it runs
    assert "taxcompile.check" not in graph["taxcompile.check.attention"]


def test_no_import_cycles():
    graph = import_graph()
    bad = []
    for comp in cycles(graph):
        if any(set(comp) <= allowed for allowed in ALLOWED.values()):
            continue
        bad.append(" -> ".join(map(_short, a_cycle(comp, graph)))
                   + f"   (component: {', '.join(map(_short, comp))})")
    assert not bad, (f"{len(bad)} import cycle(s) among taxcompile/ modules (module-level "
                     "imports):\n  " + "\n  ".join(bad))
