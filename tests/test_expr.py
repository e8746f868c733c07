"""``taxcompile/codegen/expr.py``: sizes are typed expressions written out once, with the
owner of the Config's fields chosen when they are rendered and the parentheses Python needs
taken from the operators' precedence; values are checked against integer arithmetic
written here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from taxcompile.codegen.expr import (BARE, CFG, SELF, BinOp, CfgField, Const, Paren, Ref, Sym,
                                     parse_sym)
from taxcompile.codegen.names import Dim, dim_of

d, h = CfgField("d"), CfgField("heads")


def test_fields_take_the_owner_asked_for():
    e = BinOp("//", d, h)
    assert e.render(CFG) == str(e) == "cfg.d // cfg.heads"
    assert e.render(SELF) == "self.d // self.heads"
    assert e.render("self.cfg") == "self.cfg.d // self.cfg.heads"
    assert e.render(BARE) == "d // heads"
    assert BinOp("*", Ref("t"), d).render(SELF) == "t * self.d"  # a local is never owned
    assert list(BinOp("+", BinOp("*", d, h), Const(2)).fields()) == ["d", "heads"]


@pytest.mark.parametrize("e, text, want", [
    (BinOp("*", Const(3), BinOp("//", d, Const(2))), "3 * (cfg.d // 2)", 3 * (7 // 2)),
    (BinOp("//", BinOp("*", Const(3), d), Const(2)), "3 * cfg.d // 2", 3 * 7 // 2),
    (BinOp("-", d, BinOp("-", h, Const(1))), "cfg.d - (cfg.heads - 1)", 7 - (4 - 1)),
    (BinOp("-", BinOp("-", d, h), Const(1)), "cfg.d - cfg.heads - 1", 7 - 4 - 1),
    (BinOp("+", d, BinOp("+", h, Const(1))), "cfg.d + cfg.heads + 1", 7 + 4 + 1),
    (BinOp("*", BinOp("+", d, Const(1)), h), "(cfg.d + 1) * cfg.heads", (7 + 1) * 4),
    (BinOp("*", d, Const(-2)), "cfg.d * -2", 7 * -2),
    (Paren(BinOp("*", d, h)), "(cfg.d * cfg.heads)", 7 * 4),
])
def test_parentheses_follow_precedence_and_the_value_is_the_text_s(e, text, want):
    env = {"d": 7, "heads": 4}
    assert e.render() == text
    assert e.value(env) == want
    assert eval(text, {"cfg": type("C", (), env)}) == want  # the text means what it says


def test_a_long_sum_renders_and_evaluates_without_recursion():
    e = d
    for _ in range(5000):
        e = BinOp("+", e, Const(1))
    assert e.render().count("+") == 5000 and e.value({"d": 1}) == 5001


def test_a_size_is_built_of_expressions_not_text():
    with pytest.raises(TypeError):
        Dim(0, ("cfg.d",))


def test_a_spec_s_constant_expression_keeps_its_text_and_owns_its_names():
    assert parse_sym("d_model") == CfgField("d_model")
    s = parse_sym("2e3 * d + x_1")
    assert isinstance(s, Sym) and s.render(SELF) == "2e3 * self.d + self.x_1"
    assert list(s.fields()) == ["d", "x_1"] and s.value({"d": 2, "x_1": 1}) == 4001.0


def test_a_size_times_a_quotient_keeps_the_quotient_whole():
    # Lite Transformer's attention branch: 3 projections of d // 2 features each. Written
    # `3 * cfg.d // 2` the width is (3 d) // 2, which an odd d splits unevenly into 3.
    width = dim_of(None, "d").divided(2).times(3)  # split(x, 2, 0), three projections
    assert str(width) == "3 * (cfg.d // 2)"
    for dv in (6, 7, 9):
        assert eval(str(width), {"cfg": type("C", (), {"d": dv})}) == 3 * (dv // 2)


def test_a_part_of_a_split_is_the_field_it_was_made_of():
    # split(lstm(…, 3 * d), 3, i) has d features: a shape comment reads `d`, code `cfg.d`
    part = dim_of(None, "d").times(3).divided(3)
    assert part == Dim(0, (CfgField("d"),)) and part.shown() == "d"
    assert dim_of(None, "3 * d").divided(3).shown() == "d"  # written so in the spec
    assert str(dim_of(None, "d").times(2).divided(3)) == "2 * cfg.d // 3"


def test_generated_shape_comments_never_read_the_config_object():
    from taxcompile import codegen, pipeline
    src = ('paper t { cite = "T" }\nlet d = 8\nmodel m {\n'
           '    input text: tokens[T] (vocab = 50)\n'
           '    feature h = lstm(embed(text, d), 3 * d)\n'
           '    feature k = split(h, 3, 0)\n    feature v = split(h, 3, 1)\n'
           '    attention r { query = k  keys = k  values = v  score = additive }\n'
           '    output y = classify(r, 5)\n}\n')
    cs = pipeline.load_text(src, "t.attn")
    code = codegen.generate(cs, cs.models[0], "t.attn")
    comments = re.findall(r"#.*", code)
    assert any("(B, T, d)" in c for c in comments)
    assert not [c for c in comments if "cfg." in c]


@pytest.mark.parametrize("text, want", [
    ("2 * (d - 1) // h", lambda d, h: 2 * (d - 1) // h),
    ("-d + 3 * -(h - 1)", lambda d, h: -d + 3 * -(h - 1)),
    ("d / 4 - 0.5 * h", lambda d, h: d / 4 - 0.5 * h),
    ("d - h - 1 + 1e-05", lambda d, h: d - h - 1 + 1e-05),
    ("(d + 1_000) // (h * 2)", lambda d, h: (d + 1_000) // (h * 2)),
])
def test_a_spec_s_constant_expression_is_valued_on_its_tree_not_its_code(
        text, want, monkeypatch):
    """Config.tiny()'s check values a spec's constant expression from the tree read off
    the spec's text once (``parse_sym``), never by rendering it as code and reading that."""
    s = parse_sym(text)

    def no_code(self, owner=CFG):
        raise AssertionError("valued through its rendered code")

    monkeypatch.setattr(Sym, "render", no_code)
    assert s.value({"d": 7, "h": 3}) == want(7, 3)


def test_the_heads_a_divisor_checks_are_a_size_not_code():
    """The attention planner records the heads it splits the features into as a size
    (``Planner.size``), so Config.tiny()'s check values it on the tree."""
    from taxcompile import pipeline
    from taxcompile.codegen import planner

    spec = Path(__file__).resolve().parent.parent / "specs" / "vaswani2017.attn"
    cs = pipeline.load_text(spec.read_text(encoding="utf-8"), "v.attn")
    p = planner.Planner(cs, cs.models[0], "v.attn")
    p.run()
    heads = [k for _, k in p.divides if not isinstance(k, int)]
    assert heads and all(isinstance(k, Dim) for k in heads)
    assert {k.render() for k in heads} == {"cfg.heads"}
