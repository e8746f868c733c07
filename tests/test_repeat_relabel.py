"""A `repeat`'s hops after the second are built from the hop before, node ids re-labelled
(``taxcompile/lowering/relabel.py``), not lowered again: the IR (or the errors) must be
what lowering every hop gives, on every spec, example and error snapshot, and on bodies
chosen to stress the re-labelling (nested blocks, updates of inner and outer names, a
forward reference, a hop past the node limit). The checker still checks every hop: an
error only hop 2's shapes cause is reported (``repeat_shape_changes_in_hop_2``)."""

from __future__ import annotations

import re

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specgen
from conftest import error_snapshot
from taxcompile import ast, ir, lower, parser
from taxcompile.diagnostics import SpecError
from taxcompile.frozen import Frozen
from taxcompile.lowering import repeats

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "specs").glob("*.attn")) + sorted((ROOT / "examples").rglob("*.attn")) \
    + sorted((ROOT / "tests" / "data").rglob("*.attn"))

HEAD = """paper t { cite = "T" }
let d = 8
model m {
    input x: sequence[N, d] (N = 5)
    feature q = learned(d)
"""
TAIL = """
    output out = classify(q, 3)
}
"""
BODIES = {
    "nested, inner and outer names updated": """
    repeat outer 4 {
        feature h = linear(q, d)
        repeat inner 3 {
            attention att { query = h  keys = x  score = multiplicative }
            update h = h + att
        }
        update h = h + inner.att
        update q = q + norm(h)
    }
    feature last = outer[3].h + outer.inner[2].att
    update q = q + last""",
    "a forward reference and a read of an inner hop": """
    repeat r 5 {
        attention att { query = q  keys = x  score = multiplicative  share = first }
        repeat two 2 {
            feature g = linear(q, d)
            update q = q + att + g
        }
        update q = q + two[1].g
        attention first { query = q  keys = x  score = additive }
    }""",
    "a query that is the keys (one operation read twice)": """
    feature s = identity(x)
    repeat r 4 {
        attention att { keys = project(norm(s))  score = scaled_multiplicative  mask = causal }
        update s = s + att
    }
    update q = q + mean(s)""",
    "shared weights": """
    repeat r 4 shared {
        attention att { query = q  keys = x  score = additive }
        update q = q + att
    }""",
}


def lowered(text: str, file: str = "t.attn", relabel: bool = True):
    """The spec's IR, or the text of its errors; every hop lowered without ``relabel``."""
    with pytest.MonkeyPatch.context() as mp:
        if not relabel:
            mp.setattr(repeats.Repeats, "relabelled", lambda *a: False)
        try:
            return lower.lower(parser.parse_text(text, file), file, text)
        except SpecError as e:
            return str(e)


def both(text: str, file: str = "t.attn"):
    fast, slow = lowered(text, file), lowered(text, file, False)
    assert fast == slow, file
    if not isinstance(fast, str):  # the checker and codegen key an operation's facts by
        assert sharing(fast) == sharing(slow), file  # id(): one object per hop still
    return fast


def sharing(spec) -> list[int]:
    """Each operation of the spec's nodes, in order, as the index of its object's first
    occurrence (which operations are one object)."""
    first: dict[int, int] = {}
    out, stack = [], [n for m in spec.models for n in reversed(m.nodes)]
    while stack:
        v = stack.pop()
        if isinstance(v, ir.Op):
            out.append(first.setdefault(id(v), len(out)))
        if isinstance(v, Frozen):
            stack.extend(reversed([x for _, x in v]))
        elif isinstance(v, tuple):
            stack.extend(reversed(v))
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_file_lowers_as_every_hop_lowered(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        parser.parse_text(text, str(path))
    except SpecError:
        return  # a parse error: no lowering to compare
    both(text, str(path))


@pytest.mark.parametrize("name", sorted(BODIES))
def test_stressed_bodies_lower_as_every_hop_lowered(name):
    spec = both(HEAD + BODIES[name] + TAIL)
    assert not isinstance(spec, str), spec  # they are valid specs: IR, not errors


@st.composite
def deeper(draw) -> str:
    """A spec of tests/specgen.py (or a mutant), each of its blocks given 3 to 5 hops (it
    draws 2, 3 or `hops`): where hops are re-labelled."""
    text = draw(specgen.any_spec().filter(lambda t: "repeat " in t))
    return re.sub(r"(\brepeat \w+ )(2|3|hops)\b",
                  lambda m: m[1] + str(draw(st.integers(3, 5))), text)


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.data_too_large])
@given(deeper())
def test_generated_and_mutated_specs_lower_as_every_hop_lowered(text):
    """Nested and shared repeats, decoders, graphs, capsules, …, and mutants (errors)."""
    try:
        parser.parse_text(text, "gen.attn")
    except SpecError:
        return
    both(text, "gen.attn")


def test_later_hops_are_not_lowered_again(monkeypatch):
    """A body of 6 hops is lowered twice (hops 1 and 2); each node of hops 3 to 6 is hop
    2's re-labelled, hop indexes and update versions included."""
    text = HEAD + """
    repeat r 6 {
        attention att { query = q  keys = x  score = additive }
        update q = q + att
    }""" + TAIL
    seen = []
    attention = lower.Lowerer.attention
    monkeypatch.setattr(lower.Lowerer, "attention",
                        lambda self, s, scope: seen.append(scope.hop.index)
                        or attention(self, s, scope))
    spec = lowered(text)
    assert seen == [1, 2]
    nodes = {n.id: n for n in spec.models[0].nodes}
    for k in range(1, 7):
        att, q = nodes[f"r[{k}].att"], nodes[f"q@{k + 1}"]
        assert (att.hop.index, q.hop.index) == (k, k)
        assert att.query.node == (f"q@{k}" if k > 1 else "q")
        assert [a.node for a in q.expr.args] == [att.query.node, f"r[{k}].att"]
    assert spec.models[0].nodes[-1].expr.args[0].node == "q@7"  # the output: the last hop


def test_a_hop_past_the_node_limit_is_refused_where_it_was(monkeypatch):
    monkeypatch.setattr(lower, "MAX_NODES", 9)  # x, q, then 2 a hop: hop 4's update passes it
    text = HEAD + """
    repeat r 6 {
        attention att { query = q  keys = x  score = additive }
        update q = q + att
    }""" + TAIL
    got = both(text)
    assert "model has more than 9 nodes after unrolling" in got and "t.attn:9:16:" in got


def test_a_body_that_names_its_block_is_lowered_hop_by_hop():
    model = parser.parse_text(HEAD + """
    repeat r 3 {
        repeat inner 2 { update q = q + r[1].q }
    }""" + TAIL, "t.attn").items[-1]
    (block,) = [s for s in model.body if isinstance(s, ast.Repeat)]
    assert repeats.names_block(block.body, "r")  # (nested blocks too)
    assert not repeats.names_block(block.body, "x")


def test_an_error_of_hop_2_only_is_reported():
    got, want = error_snapshot("repeat_shape_changes_in_hop_2")
    assert got == want
