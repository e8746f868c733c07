"""Codegen parenthesises an operand from the precedence its builder declared (``Var.prec``,
``names.atom``), not from a parse of the text. The oracle here is Python's own parser: every
tensor expression built while generating each model of specs/ and examples/ and each of
their attentions as a drop-in layer declares the precedence its text has, so no operand
lacks the parentheses it needs; the activations say how their results bind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from taxcompile import codegen, ir, pipeline
from taxcompile.codegen import frame, layer
from taxcompile.codegen.acts import applied
from taxcompile.codegen.expr import ATOM
from taxcompile.codegen.names import CONDITIONAL, PRODUCT, SUM, atom, paren

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.attn")) + sorted((ROOT / "examples").glob("*.attn"))

_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.List, ast.Dict, ast.Set,
          ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.JoinedStr)
_BINOPS = {ast.Add: SUM, ast.Sub: SUM, ast.Mult: PRODUCT, ast.Div: PRODUCT,
           ast.FloorDiv: PRODUCT, ast.Mod: PRODUCT, ast.MatMult: PRODUCT}


def parsed_prec(code: str) -> int:
    """How tightly ``code`` binds, by Python's grammar (the oracle)."""
    body = ast.parse(code, mode="eval").body
    if isinstance(body, _ATOMS):
        return ATOM
    if isinstance(body, ast.Constant):
        return ATOM if not (isinstance(body.value, (int, float)) and body.value < 0) else 3
    if isinstance(body, ast.BinOp) and type(body.op) in _BINOPS:
        return _BINOPS[type(body.op)]
    if isinstance(body, ast.IfExp):
        return CONDITIONAL
    return -1  # anything else (a tuple, a comparison, a unary sign): no builder writes one


@pytest.fixture
def built(monkeypatch):
    """Every Var built while the test runs."""
    made: list[frame.Var] = []
    init = frame.Var.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(frame.Var, "__init__", record)
    return made


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_expression_declares_the_precedence_it_has(path, built):
    cs = pipeline.load_text(path.read_text(encoding="utf-8"), path.name)
    for cm in cs.models:
        codegen.generate(cs, cm, path.name)
        for n in cm.model.attentions:  # and each attention as a drop-in layer
            try:
                layer.generate(cs, cm, n.hop.template if n.hop else n.id, path.name)
            except layer.LayerError:
                continue
    assert built, "the hook saw the plan build its tensors"
    wrong = sorted({(v.name, v.prec, parsed_prec(v.name)) for v in built
                    if v.prec != parsed_prec(v.name)})
    assert not wrong, f"(code, declared, parsed): {wrong[:5]}"


def test_the_oracle_tells_the_builders_apart(built):
    """The check above can fail: a sum declared an atom is caught, and atom() then leaves
    it bare where a method call on it would read only its last term."""
    v = frame.Var("x + y", None, prec=ATOM)
    assert parsed_prec(v.name) == SUM != v.prec
    assert f"{atom(v)}.sum(-1)" == "x + y.sum(-1)"
    assert f"{atom(frame.Var('x + y', None, prec=SUM))}.sum(-1)" == "(x + y).sum(-1)"
    assert paren("-1.0", 3) == "(-1.0)" and paren("h", ATOM) == "h"


@pytest.mark.parametrize("fn, params, x, prec, want", [
    ("scaled_tanh", {"c": 5}, "e", ATOM, "5.0 * torch.tanh(e / 5.0)"),
    ("scaled_tanh", {"c": 5}, "q @ k + b", SUM, "5.0 * torch.tanh((q @ k + b) / 5.0)"),
    ("maxout", {"k": 2}, "a * b", PRODUCT, "(a * b).unflatten(-1, (-1, 2)).amax(-1)"),
    ("tanh", {}, "a + b", SUM, "torch.tanh(a + b)"),
    ("none", {}, "a + b", SUM, "a + b"),
])
def test_an_activation_says_how_its_result_binds(fn, params, x, prec, want):
    code, out = applied(ir.Act(fn=fn, params=tuple(params.items())), x, prec)
    assert code == want and out == parsed_prec(code)
