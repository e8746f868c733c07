"""The operator registry (taxcompile.ops): every operator the language accepts has its
parameters, a shape rule, a plan rule and a diagram label, and every stage reads them
from the registry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from taxcompile import checks, codegen, diagrams, lower, ops, pipeline  # noqa: F401 (rules)
from taxcompile.diagnostics import SpecError

ROOT = Path(__file__).resolve().parent.parent


def grammar_infix_ops() -> set[str]:
    """Feature-level operators the grammar writes infix (``a + b`` -> ``add``)."""
    text = (ROOT / "grammar" / "attn.lark").read_text(encoding="utf-8")
    return set(re.findall(r'"[+]"\s+\w+\s+->\s+(\w+)', text))


def test_every_operator_has_every_rule():
    for name, op in ops.OPS.items():
        assert op.name == name
        assert op.label, name
        assert callable(op.shape), f"`{name}` has no shape rule (checks.py)"
        assert callable(op.plan), f"`{name}` has no plan rule (codegen/features.py)"


def test_lower_reads_the_registry():
    assert lower.OPS is ops.CALLS
    assert set(ops.CALLS) == {n for n, o in ops.OPS.items() if not o.infix}


def test_grammar_infix_operators_are_registered():
    infix = grammar_infix_ops()
    assert infix == {"add"}
    for name in infix:
        assert ops.OPS[name].infix


def test_a_new_operator_is_one_entry(monkeypatch):
    """An operator added to the registry (parameters, shape rule, plan rule) is accepted by
    lower, shaped by checks, drawn by diagram and compiled by codegen."""
    op = ops.OpInfo("double", (ops.node(),), "double")
    op.shape = lambda checker, e, a, nid: a[0]
    op.plan = lambda p, e, a, n: codegen.features.same(a[0], f"2 * {a[0].name}")
    monkeypatch.setitem(ops.OPS, "double", op)
    monkeypatch.setitem(ops.CALLS, "double", op.params)
    text = """paper t { cite = "T" }
model m {
    input x: sequence[L, 4]
    feature f = double(x)
    attention a { features = f  score = additive }
}
"""
    cs = pipeline.load_text(text, "t.attn")
    src = codegen.generate(cs, cs.models[0], "t.attn")
    assert "f = 2 * x" in src
    assert "double(x)" in diagrams.expr_text(cs.models[0].model, cs.models[0].model.node("f").expr)


def test_an_unregistered_call_is_a_spec_error():
    with pytest.raises(SpecError, match="unknown feature model `doubel`"):
        pipeline.load_text("paper t { cite = \"T\" }\nmodel m {\n input x: sequence[L, 4]\n feature f = doubel(x)\n}\n",
                           "t.attn")
