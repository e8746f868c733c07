"""The checker's decoder steps (``CheckedModel.steps``: each decoder's strongly connected
component through ``feed``, ``state`` and ``prev`` edges) are what the quadratic reading
gives, in the same order, for every model of specs/: each component tested against the
decoders only, and none looked for in a model without a decoder."""

from __future__ import annotations

import pytest

from conftest import SPECS
from taxcompile import digraph as nx
from taxcompile.check.core import decoder_ops, links, state_ops
from taxcompile.pipeline import load


def _reference(cm) -> dict:
    """The reading before: every node against every component."""
    m = cm.model
    ids = {n.id for n in m.nodes}
    full = nx.DiGraph()
    full.add_nodes_from(ids)
    full.add_edges_from(cm.past)
    for n in m.nodes:
        for d, how in links(n):
            if d in ids and (d, n.id) not in cm.past:
                full.add_edge(d, n.id)
    for d, n in cm.feed_now:
        full.add_edge(d, n)
    steps: dict = {}
    for comp in nx.strongly_connected_components(full):
        for n in m.nodes:
            if n.id in comp and (decoder_ops(n) or state_ops(n)):
                steps[n.id] = set(comp)
    return steps


@pytest.mark.parametrize("spec", sorted(p.name for p in SPECS.glob("*.attn")))
def test_decoder_steps_are_the_quadratic_readings(spec):
    for cm in load(SPECS / spec).models:
        expected = _reference(cm)
        assert list(cm.steps.items()) == list(expected.items())


def test_some_spec_has_decoder_steps():
    cms = [cm for spec in ("bahdanau2015.attn", "luong2015.attn") for cm in load(SPECS / spec).models]
    assert any(len(comp) > 1 for cm in cms for comp in cm.steps.values())
