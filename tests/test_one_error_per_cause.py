"""One error per cause: a name whose definition is refused (a reserved or Python-keyword
name, a `let` whose value is an error, a `repeat` whose body is) is still known, as
refused, so that its uses give no second error ("unknown constant", "unknown name",
"cannot update", "`mask` cannot be", "no hop 2", "unknown base model"); a mistake of
its own at a use is still reported. The full output is held in snapshots."""

from __future__ import annotations

import pytest

from conftest import error_snapshot
from taxcompile import pipeline
from taxcompile.diagnostics import SpecError


@pytest.mark.parametrize("name", ["refused_let_used", "python_keyword_names_used"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


def _errors(text: str) -> list[tuple[int, int, str]]:
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    return [(d.loc.line, d.loc.column, d.message) for d in info.value.diagnostics]


def test_each_refused_definition_is_reported_once_and_other_mistakes_still_are():
    text = """paper p { cite = "X" }
let S = 3 / 0
model __m {
    input src: tokens[S] (vocab = 100)
    feature x = embed(src, 8)
    attention a { query = x  keys = x  score = scaled_multiplicative }
    output y = classify(a, 3)
}
model v : __m {
    feature x = embed(src, 4)
}
model w {
    let bad = 1 / 0
    input src: tokens[S] (vocab = 100)
    feature x = embed(src, 8)
    repeat r 2 {
        attention a { query = x  keys = x  score = scaled_multiplicative  mask = bad  heads = nope }
        update x = x + a
    }
    attention b { query = r.a  keys = r[2].a  score = scaled_multiplicative  penalty = bad }
    output y = classify(b, bad)
}
"""
    assert _errors(text) == [
        (2, 9, "division by zero"),
        (3, 7, "model name `__m` starts with `__` (dunder names are reserved)"),
        (13, 15, "division by zero"),
        (17, 95, "unknown constant `nope`"),  # beside the refused `bad`: its own mistake
    ]


def test_a_name_defined_twice_is_not_poisoned():
    """The second definition is refused, the first still stands: a use of the name reads
    the first, and a mistake there is reported."""
    text = """paper p { cite = "X" }
let d = 8
let d = 1 / 0
model m {
    input src: tokens[S] (vocab = 100)
    feature x = embed(src, d)
    attention a { query = x  keys = x  score = scaled_multiplicative  heads = d - 8 }
    output y = classify(a, 3)
}
"""
    errors = _errors(text)
    assert errors[:2] == [(3, 5, "constant `d` is defined twice"), (3, 9, "division by zero")]
    assert len(errors) == 3 and errors[2][:2] == (7, 79), errors  # heads = 0 is reported
