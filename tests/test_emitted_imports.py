"""A generated file imports the module-level names its code reads (``math``, ``F``,
``warnings``) from what the code recorded as it was written (``codegen/imports.py``), not
from a read of the rendered text. The oracle here reads the finished files with Python's
``ast``: every import is used and every name read is bound, for every model of specs/ and
examples/ and every drop-in layer of specs/."""

from __future__ import annotations

import ast
import builtins
import dataclasses
from pathlib import Path

import pytest

from taxcompile import codegen, pipeline
from taxcompile.codegen import emit, layer
from taxcompile.codegen.imports import F, MATH, Code, Module, recording

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.attn")) + sorted((ROOT / "examples").glob("*.attn"))


def imported(tree: ast.Module) -> set[str]:
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and \
                getattr(node, "module", "") != "__future__":
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def bound(tree: ast.Module) -> set[str]:
    """Every name the file binds anywhere (imports, defs, assignments, arguments, ...)."""
    out = set(dir(builtins))
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out


def check_imports(text: str, where: str) -> None:
    tree = ast.parse(text)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and
            isinstance(n.ctx, ast.Load)}
    unused = imported(tree) - read
    assert not unused, f"{where}: imports {sorted(unused)} it never reads"
    missing = read - bound(tree)
    assert not missing, f"{where}: reads {sorted(missing)}, bound nowhere"


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_a_generated_file_imports_exactly_the_names_it_reads(path):
    cs = pipeline.load_text(path.read_text(encoding="utf-8"), path.name)
    for cm in cs.models:
        check_imports(codegen.generate(cs, cm, path.name), f"{path.name}:{cm.model.name}")


@pytest.mark.parametrize("path", sorted((ROOT / "specs").glob("*.attn")), ids=lambda p: p.name)
def test_a_drop_in_layer_imports_exactly_the_names_it_reads(path):
    cs = pipeline.load_text(path.read_text(encoding="utf-8"), path.name)
    done = 0
    for cm in cs.models:
        for n in cm.model.attentions:
            try:
                text = layer.generate(cs, cm, n.hop.template if n.hop else n.id, path.name)
            except layer.LayerError:
                continue
            check_imports(text, f"{path.name}:{cm.model.name}:{n.id}")
            done += 1
    if path.name == "vaswani2017.attn":
        assert done  # the oracle read some layer


def test_the_imports_are_what_the_plan_recorded_not_what_the_text_reads():
    """emit imports a name the plan recorded, with no read of the body: a plan that says
    its code wrote ``math`` gets ``import math`` (here its body does not read it)."""
    path = ROOT / "specs" / "lin2017.attn"
    cs = pipeline.load_text(path.read_text(encoding="utf-8"), path.name)
    plan = codegen.plan(cs, cs.models[0], path.name)
    assert "math" not in plan.modules and "import math\n" not in emit.render(plan)
    marked = dataclasses.replace(plan, modules=plan.modules | {"math"})
    assert "import math\n" in emit.render(marked)


def test_a_module_name_is_recorded_where_it_is_written():
    used: set[str] = set()
    scale = Code(" / ", MATH, ".sqrt(d)")  # an alternative a template may leave unused
    with recording(used):
        call = f"{F}.relu(x)"
        assert used == {"F"} and call == "F.relu(x)"
        assert str(scale) == " / math.sqrt(d)" and used == {"F", "math"}
    f"{MATH}.pi"  # outside a record: written, recorded nowhere
    assert used == {"F", "math"}
    with pytest.raises(TypeError):  # no write of it goes unrecorded
        "x = " + Module("warnings")  # type: ignore[operator]


def test_a_template_records_the_module_names_it_writes():
    e = emit.env()
    used: set[str] = set()
    with recording(used):
        e.from_string("{% if on %}y = {{ F }}.relu(x){% endif %}").render(on=False)
    assert used == set()
    with recording(used):
        assert e.from_string("y = {{ F }}.relu(x)").render() == "y = F.relu(x)"
    assert used == {"F"}
