"""The front end's budget (issue 23): its work grows with the spec's nodes, which a line of
variant can multiply (`model v : transformer { }` is a whole transformer again), so a spec
is refused, located, past ``lower.MAX_SPEC_NODES`` nodes and ``parser.MAX_MODELS`` models.
These count work, not seconds: the timings are benchmarks/ (``spec_budget``)."""

from __future__ import annotations

import pytest

from taxcompile import checks, lower, parser, pipeline
from taxcompile.diagnostics import Collector, SpecError

BASE = ('paper p { cite = "X" }\n'
        "model base {\n"
        "    input src: tokens[S] (vocab = 100)\n"
        "    feature x = embed(src, 8)\n"
        "    repeat r 8 { attention a { query = project(x)  keys = x  score = multiplicative }"
        "\n        update x = x + a }\n"
        "}\n")


def variants(n: int) -> str:
    return BASE + "".join(f"model v{i} : base {{ let k = {i} }}\n" for i in range(n))


def nodes_of(text: str) -> int:
    return sum(len(m.model.nodes) for m in pipeline.load_text(text, "v.attn").models)


def test_limits_agree():
    # every model has an input and an attention module: past MAX_MODELS the node budget
    # is passed anyway, so the early refusal refuses nothing that could pass
    assert parser.MAX_MODELS * 2 >= lower.MAX_SPEC_NODES


def test_a_flood_of_variants_is_refused_at_the_model_past_the_budget(monkeypatch):
    monkeypatch.setattr(lower, "MAX_SPEC_NODES", 400)  # the same rule, at a cheap size
    per_model = nodes_of(variants(0))
    fits = lower.MAX_SPEC_NODES // per_model  # models (the base included) within budget
    lowered, checked = [], []
    model, check = lower.Lowerer.model, checks.Checker.model
    monkeypatch.setattr(lower.Lowerer, "model",
                        lambda self, m: lowered.append(m.name) or model(self, m))
    monkeypatch.setattr(checks.Checker, "model",
                        lambda self, m: checked.append(m.name) or check(self, m))
    assert nodes_of(variants(fits - 1)) == fits * per_model  # just fits: all checked
    assert len(checked) == fits
    lowered.clear(), checked.clear()
    with pytest.raises(SpecError) as e:
        pipeline.load_text(variants(3 * fits), "v.attn")
    (d,) = e.value.diagnostics
    assert f"more than {lower.MAX_SPEC_NODES:,} nodes" in d.message and d.hint
    assert d.loc.line == BASE.count("\n") + fits  # the first variant past the budget
    assert len(lowered) == fits + 1 and checked == []  # the rest is not even lowered


def test_more_models_than_could_pass_are_refused_before_the_parse(monkeypatch):
    monkeypatch.setattr(parser, "MAX_MODELS", 50)
    monkeypatch.setattr(parser, "_parser", lambda: pytest.fail("parsed"))
    monkeypatch.setattr(parser, "_building_parser", lambda: pytest.fail("parsed"))
    with pytest.raises(SpecError) as e:
        pipeline.load_text(variants(60), "v.attn")
    (d,) = e.value.diagnostics
    assert (d.loc.line, d.loc.column) == (BASE.count("\n") + 50, 1)
    assert d.message == "the spec has more than 50 models" and d.hint


def test_collecting_many_errors_is_linear():
    """A set beside the list: 2,000 distinct errors, each compared once, not with all."""
    c = Collector("x.attn")
    compared = 0
    eq = type(c.loc(1, 1)).__eq__

    def counting(self, other):
        nonlocal compared
        compared += 1
        return eq(self, other)

    type(c.loc(1, 1)).__eq__ = counting
    try:
        for i in range(1, 2_001):
            c.error(c.loc(i, 1), "m")
            c.error(c.loc(i, 1), "m")  # a duplicate is dropped
    finally:
        type(c.loc(1, 1)).__eq__ = eq
    assert len(c.diagnostics) == 2_000 and compared < 4_000


def test_the_documented_limits_are_the_ones_enforced():
    from pathlib import Path

    from taxcompile import diagrams

    doc = (Path(__file__).resolve().parent.parent / "docs" / "language.md").read_text()
    for what, value in (("file size", parser.MAX_BYTES), ("models per spec", parser.MAX_MODELS),
                        ("nodes per spec", lower.MAX_SPEC_NODES),
                        ("nodes per model", lower.MAX_NODES),
                        ("boxes in one `diagram`", diagrams.MAX_DIAGRAM_NODES)):
        row = next(line for line in doc.splitlines() if line.startswith(f"| {what}"))
        assert f"| {value:,} " in row, (what, row)


def test_a_diagram_past_its_boxes_is_refused_before_dot_runs(monkeypatch):
    from taxcompile import diagrams

    cs = pipeline.load_text(variants(3), "v.attn")
    boxes = sum(len(m.model.nodes) for m in cs.models)
    drawn = 4 * 4  # input, x, and the repeat's attention and update drawn once, per model
    assert boxes > drawn
    monkeypatch.setattr(diagrams, "MAX_DIAGRAM_NODES", drawn)
    diagrams.build(cs)  # a repeat is one box per statement, not per hop
    monkeypatch.setattr(diagrams, "MAX_DIAGRAM_NODES", drawn - 1)
    monkeypatch.setattr(diagrams.subprocess, "run", lambda *a, **k: pytest.fail("dot ran"))
    with pytest.raises(diagrams.DiagramError, match=f"would have {drawn} boxes"):
        diagrams.render_svg(cs)
