"""An operator family has one home (taxcompile/operators/): its records, its shape rule and
its plan rule in one module, which imports neither the checker nor codegen (both read it),
and no same-named module elsewhere."""

from __future__ import annotations

from pathlib import Path

from test_import_cycles import import_graph

from taxcompile import ops

PKG = Path(__file__).resolve().parent.parent / "taxcompile"


def test_every_family_module_is_listed_and_holds_its_rules():
    families = {p.stem for p in (PKG / "operators").glob("*.py")} - {"__init__", "record"}
    assert {f.__name__.rpartition(".")[2] for f in ops.FAMILIES} == families
    for family in ops.FAMILIES:
        assert family.OPS, family.__name__
        for name, op in family.OPS.items():
            assert ops.OPS[name] is op, name  # the registry lists the family's own record
            assert op.shape.__module__ == family.__name__, name  # set in the record, here
            assert op.plan.__module__ == family.__name__, name


def test_no_family_has_a_namesake_elsewhere():
    for family in ops.FAMILIES:
        stem = family.__name__.rpartition(".")[2]
        assert not (PKG / f"{stem}.py").exists(), stem
        assert not (PKG / "codegen" / f"{stem}.py").exists(), stem


def test_families_import_neither_the_checker_nor_codegen():
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("taxcompile.operators"):
            bad = [t for t in targets if t.startswith(("taxcompile.check", "taxcompile.codegen"))]
            assert not bad, (name, bad)
