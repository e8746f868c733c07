"""A mechanism's parameters as data (ir.Mech): every parameter its record has, checked
against the record's ``P`` when lowered and again when the IR record is built; a float
parameter of any sign where its record allows one; a parameter written as a constant
expression kept as its Config expression, so the generated Config holds it."""

from __future__ import annotations

import pytest

from taxcompile import ir
from taxcompile import mechanisms as mech
from taxcompile.diagnostics import SpecError
from taxcompile.lowering import attention as lowering
from taxcompile.params import P
from taxcompile.pipeline import load_text

HEADER = 'paper t { cite = "T" }\n'


def spec(align: str, lets: str = "") -> str:
    return (HEADER + lets + "model m {\n    input x: sequence[L, 8]\n"
            "    feature q = project(x)\n"
            f"    attention a {{ query = q  keys = q  score = scaled_multiplicative  "
            f"align = {align} }}\n    output y = identity(a)\n}}\n")


@pytest.fixture
def shifted(monkeypatch):
    """An alignment with a float parameter of any sign (as sigmoid attention's bias
    b = -log n): global alignment's record under another name, registered for the test."""
    rec = mech.ALIGNS["global"]._replace(
        name="shifted", aliases=(), params=(P("b", "float", False, 0.0, sign="any"),))
    monkeypatch.setitem(mech.ALIGNS, "shifted", rec)
    monkeypatch.setitem(mech.REGISTRY, ("align", "shifted"), rec)
    monkeypatch.setitem(lowering.ALIGN_SPELLINGS, "shifted", rec)
    return rec


def align_of(text: str) -> ir.Mech:
    return load_text(text, "t.attn").models[0].model.attentions[0].align


def test_a_negative_float_parameter_is_accepted_where_its_record_allows(shifted):
    al = align_of(spec("shifted(b = -2.5)"))
    assert (al.fn, al.params, al.b) == ("shifted", (("b", -2.5),), -2.5)
    assert align_of(spec("shifted")).b == 0.0  # its default, filled in
    # and a record that does not allow one still refuses it, when lowered and when built
    with pytest.raises(SpecError, match="`sigma` of `local` must be a positive number, "
                       "got -1"):
        align_of(spec("local(D = 2, sigma = -1.0)"))
    loc = al.loc
    with pytest.raises(ValueError, match="sigma = -1.0 is not positive"):
        ir.Mech(kind="align", fn="local", params=(
            ("D", 2), ("position", "predictive"), ("gaussian", True), ("sigma", -1.0)), loc=loc)


def test_a_float_parameter_keeps_its_config_expression(shifted):
    al = align_of(spec("shifted(b = -B)", "let B = 1.5\n"))
    assert (al.b, al.sym) == (-1.5, (("b", "-B"),))


def test_an_optional_float_argument_is_a_config_field(tmp_path):
    """`position = rotary(base = theta)`: the constructor's optional `base` is passed as
    cfg.theta (the generated Config's field, 500.0 by default), not as the number."""
    from taxcompile.codegen import generate

    text = HEADER + "let theta = 500.0\n" + spec("global").split("\n", 1)[1].replace(
        "align = global", "heads = 2  position = rotary(base = theta)")
    cs = load_text(text, str(tmp_path / "t.attn"))
    code = generate(cs, cs.models[0], text)
    assert "    theta: float = 500.0" in code
    assert "base=cfg.theta" in code


def test_head_mechanisms_are_generic_records():
    text = (HEADER + "model m {\n    input x: sequence[L, 8]\n    feature q = project(x)\n"
            "    attention a { query = q  keys = q  score = scaled_multiplicative  heads = 2  "
            "mem_kv = 3  talking_heads = pre  head_gates = false }\n"
            "    output y = identity(a)\n}\n")
    n = load_text(text, "t.attn").models[0].model.attentions[0]
    assert [(m.kind, m.fn, m.params) for m in n.head_mechanisms] == [
        ("trait", "talking_heads", (("mix", "pre"),)), ("trait", "mem_kv", (("mem_kv", 3),))]
    assert n.head("mem_kv").mem_kv == 3 and n.head("head_gates") is None
    assert "talking heads (scores)" in n.traits() and "3 memory key/values" in n.traits()


def test_a_parameter_named_as_a_field_reads_with_param():
    """`similarity(kind = l2)`: the record's `kind` is the mechanism's kind ("score"); the
    parameter is `param("kind")`, which the label, class name and docstring read."""
    text = spec("global").replace("score = scaled_multiplicative",
                                  "score = similarity(kind = l2)")
    n = load_text(text, "t.attn").models[0].model.attentions[0]
    assert (n.score.kind, n.score.param("kind")) == ("score", "l2")
    rec = n.score.record
    assert rec.text("class_part", n.score) == "SimilarityL2"
    assert rec.text("doc", n.score).startswith("similarity score (l2")


def test_a_required_capability_of_the_alignment_is_worded_by_the_alignment(monkeypatch):
    """A record that requires `score_terms` (an alignment that takes terms added to its
    scores) refuses another alignment by name and says what to use, as `dot` does for a
    score; the tag's absent wording is formatted with the mechanism of its own field."""
    rec = mech.HEAD_MECHANISMS["head_gates"]._replace(requires=("query", "score_terms"))
    monkeypatch.setitem(mech.HEAD_MECHANISMS, "head_gates", rec)
    monkeypatch.setitem(mech.REGISTRY, ("trait", "head_gates"), rec)
    text = spec("hard").replace("align = hard", "align = hard  heads = 2  head_gates = true")
    with pytest.raises(SpecError) as info:
        load_text(text, "t.attn")
    d = info.value.diagnostics[0]
    assert "has the `hard` alignment, whose weights take no terms added to its scores, " \
           "which head gates cannot go with" in d.message, d.message
    assert d.hint.startswith("use `align = global`"), d.hint


def test_no_score_needs_an_alignment_whose_weights_are_its_own():
    """`score = none` computes nothing: beside an alignment that weighs the keys by their
    scores it is refused, worded from the records' tags."""
    with pytest.raises(SpecError) as info:
        load_text(spec("global").replace("score = scaled_multiplicative", "score = none"),
                  "t.attn")
    d = info.value.diagnostics[0]
    assert "has the `global` alignment, which weighs the keys by their scores, which " \
           "`score = none` cannot go with: it computes no scores" in d.message, d.message
    assert d.hint == "use an alignment whose weights are its own, or drop `score = none`"
