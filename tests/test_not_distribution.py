"""`.weights` and `supervised(gold, λ)` read one distribution over the keys per query
position: a module whose weights are none (a sigmoid gate, raw CRF marginals, sigmoid
attention, LightConv's taps, differential attention's a1 − λ a2) is refused with the reason
its mechanism's record gives (`not_distribution`), never supervised or read as if its
weights summed to 1. The normalised variants (`crf(normalize = true)`) stay accepted."""

from __future__ import annotations

import pytest

from conftest import error_snapshot
from taxcompile import mechanisms as mech
from taxcompile.pipeline import load_text

CASES = ["supervised_sigmoid_attention", "weights_of_lightconv", "supervised_differential"]


@pytest.mark.parametrize("name", CASES)
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


def spec(align: str) -> str:
    return f"""paper t {{ cite = "T" }}
model m {{
    input x: tokens[L] (vocab = 10)
    input gold: alignment[L, L]
    feature e = embed(x, 8)
    attention att {{
        query   = e
        features = e
        score   = additive
        align   = {align}
        penalty = supervised(gold, 1.0)
    }}
    output y = classify(att, 10)
}}
"""


@pytest.mark.parametrize("align,refused", [
    ("global", False), ("sparsemax", False), ("entmax", False), ("topk(k = 2)", False),
    ("crf(normalize = true)", False), ("crf", True), ("sigmoid_attn", True)])
def test_supervised_accepts_exactly_the_distributions(align, refused):
    from taxcompile.diagnostics import SpecError

    if not refused:
        load_text(spec(align), "t.attn")
        return
    with pytest.raises(SpecError) as e:
        load_text(spec(align), "t.attn")
    assert "are not normalised over the keys" in e.value.diagnostics[0].message


def test_every_alignment_whose_weights_are_normalised_says_they_are_a_distribution():
    """The records agree with themselves: an alignment marked `normalised` (a distribution
    over all the keys) gives no reason to refuse it."""
    for rec in mech.ALIGNS.values():
        if rec.normalised:
            assert not rec.not_distribution, rec.name
