"""A parameter a mechanism's record schedules by depth (its ``by_depth``: the value a
statement in a `repeat` takes from its layer l where the spec leaves it unset) is shown
after its default wherever a parameter is, from the record: the docs' table of mechanisms
and the editor's hovers on the mechanism and on the parameter."""

from __future__ import annotations

import pytest

from taxcompile import docs_table
from taxcompile import mechanisms as mech
from taxcompile.lsp import registry as lsp_registry
from taxcompile.lsp.analysis import analyse
from taxcompile.lsp.features import hover
from taxcompile.params import P

SCHEDULE = "1 + 2 l at layer l"
# A record of the test's own (no paper's): its `width` is scheduled by depth, `other` not.
RECORD = mech.Mechanism("align", "fake_deep", (P("width", "float", False, 3.0),
                                               P("other", "float", False, 1.0)),
                        by_depth=(("width", "1 + 2 * {l}", SCHEDULE),))
SPEC = """\
attention a {
    features = x
    align = fake_deep(width = 2.0)
}
"""


@pytest.fixture
def fake_deep(monkeypatch):
    monkeypatch.setitem(mech.REGISTRY, ("align", "fake_deep"), RECORD)
    yield RECORD


def test_the_docs_table_shows_a_record_s_schedule_by_depth(fake_deep):
    text = docs_table.render()
    assert (f"| `fake_deep` | — | `width = 3.0` (unset in a `repeat`: {SCHEDULE}), "
            "`other = 1.0` | — | — |") in text


def test_the_docs_table_shows_differential_s_lambda_init_by_depth():
    """The committed table (checked equal to render() in test_mechanism_names) says
    differential's lambda_init by depth, as Ye et al. sec. 2.1 give it."""
    assert ("| `differential` | — | `lambda_init = 0.8` (unset in a `repeat`: "
            "0.8 - 0.6 exp(-0.3 (l - 1)) at layer l) |") in docs_table.render()


def test_the_mechanism_hover_shows_the_schedule(fake_deep):
    text = lsp_registry.mechanism_hover(fake_deep)
    assert (f"Parameters: `width = 3.0` (unset in a `repeat`: {SCHEDULE}), `other = 1.0`"
            in text), text
    diff = lsp_registry.mechanism_hover(mech.REGISTRY[("trait", "differential")])
    assert "`lambda_init = 0.8` (unset in a `repeat`: 0.8 - 0.6 exp(-0.3 (l - 1)) at " \
           "layer l)" in diff, diff


def test_the_parameter_hover_shows_the_schedule_of_its_own_record(fake_deep):
    a = analyse(SPEC, "t.attn")
    line = SPEC.split("\n")[2]
    at = hover(a, 2, line.index("width") + 1).contents.value
    assert at == f"parameter of `fake_deep`: `width = 3.0` (unset in a `repeat`: {SCHEDULE})"
    other = hover(a, 2, line.index("fake_deep") + 1)  # on the mechanism: its record
    assert other is not None and SCHEDULE in other.contents.value
