"""`learned(K, d)`: K learned vectors on an axis of their own, the same for every example,
as a query set, as tokens put before a sequence (`prepend(x, learned(K, d))`: CLS and
register tokens) and as memory slots among the keys and values; checked against float64
references written here. Bad counts and a set where it does not fit are located errors
(snapshots in tests/data/errors/)."""

import math

import pytest

from conftest import cell_of, error_snapshot

ERRORS = ["learned_zero", "learned_count_not_size", "learned_count_fraction",
          "learned_set_capsules", "learned_set_added", "prepend_not_learned",
          "prepend_learned_width", "prepend_learned_and_n"]


@pytest.mark.parametrize("name", ERRORS)
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


HEADER = 'paper t { cite = "T" }\nlet d = 8\nlet regs = 3\n'

SLOTS = HEADER + """model m {
    input src: tokens[S] (vocab = 12)
    feature e = embed(src, d)
    feature x = prepend(e, learned(regs, d))
    attention a { query = learned(2, d)  keys = x  values = x  score = scaled_multiplicative }
    output y = classify(mean(a), 3)
}
"""

ONE = HEADER + """model m {
    input src: tokens[S] (vocab = 12)
    feature e = embed(src, d)
    feature x = prepend(e, learned(d))
    attention a { query = project(x)  keys = x  values = x  score = scaled_multiplicative }
    output y = classify(first(a), 3)
}
"""


def test_the_query_set_and_the_prepended_set_read_as_learned_not_as_inputs():
    reasons = cell_of(SLOTS, "query_type")
    assert list(reasons) == ["Self-Attentive"]
    assert reasons["Self-Attentive"] == ["the query of `a` is a learned query set of 2 vectors "
                                         "(eq. 34)"]
    assert list(cell_of(SLOTS, "feature_multiplicity")) == ["Singular"]


torch = pytest.importorskip("torch")

from torch_support import build_model, one_thread  # noqa: E402, F401


def _softmax_attend(q, k, keep):
    """softmax(q k^T / sqrt(d)) k over the kept keys (keys are the values here)."""
    e = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return e.masked_fill(~keep[:, None, :], -math.inf).softmax(-1) @ k


@pytest.mark.filterwarnings("ignore:input `src_mask` keeps no position")
def test_a_query_set_over_a_sequence_with_memory_slots_in_front():
    """x = [R; E(src)] with R 3 learned slots (never masked), Q 2 learned queries, the same
    for every example: y = W mean_i(softmax(Q x^T / sqrt(d)) x)_i + b."""
    mod = build_model(SLOTS, "_learned_slots")
    torch.manual_seed(0)
    m = mod.Model(mod.Config()).double().eval()
    p = dict(m.named_parameters())
    assert p["x_learned"].shape == (3, 8) and p["a_q_learned"].shape == (2, 8)
    src = torch.randint(0, 12, (3, 6))
    keep = torch.arange(6) < torch.tensor([[6], [2], [0]])  # the last: every token padded
    with torch.no_grad():
        x = torch.cat([p["x_learned"].expand(3, -1, -1), p["e_embed.weight"][src]], 1)
        kept = torch.cat([torch.ones(3, 3, dtype=torch.bool), keep], 1)
        c = _softmax_attend(p["a_q_learned"].expand(3, -1, -1), x, kept)
        want = c.mean(1) @ p["y_head.weight"].T + p["y_head.bias"]
        out = m(src, src_mask=keep, return_attention=True)
        torch.testing.assert_close(out.output, want, atol=1e-12, rtol=0)
        assert out.attention["a"].shape == (3, 1, 2, 9)
        assert float(out.attention["a"][2, 0, :, :3].sum()) == pytest.approx(2.0)


def test_one_learned_vector_prepended_is_a_cls_token():
    mod = build_model(ONE, "_learned_one")
    torch.manual_seed(0)
    m = mod.Model(mod.Config()).double().eval()
    p = dict(m.named_parameters())
    src = torch.randint(0, 12, (2, 5))
    with torch.no_grad():
        x = torch.cat([p["x_q"].expand(2, 1, -1), p["e_embed.weight"][src]], 1)
        q = x @ p["a_q_proj.weight"].T
        c = _softmax_attend(q, x, torch.ones(2, 6, dtype=torch.bool))
        want = c[:, 0] @ p["y_head.weight"].T + p["y_head.bias"]
        torch.testing.assert_close(m(src).output, want, atol=1e-12, rtol=0)


def test_a_layer_of_a_statement_whose_query_is_a_learned_set_owns_the_set():
    """The drop-in layer of a statement whose query is `learned(K, d)` holds the K vectors
    as its own query (tests/test_layer_oracle.py checks its values against the statement
    inside its model: the Set Transformer's inducing points and seeds)."""
    from taxcompile import pipeline
    from taxcompile.codegen import layer

    cs = pipeline.load_text(SLOTS, "t.attn")
    src = layer.generate(cs, cs.models[0], "a", SLOTS)
    ns: dict = {}
    exec(compile(src, "layer.py", "exec"), ns)  # our generated code, not spec text
    lay = ns["Layer"](ns["Config"]())
    assert tuple(lay.query.shape) == (2, lay.cfg.d_q)  # K = 2 vectors, not one
    out = lay(None, torch.randn(3, 5, lay.cfg.d_q), torch.randn(3, 5, lay.cfg.d_q))
    assert out.shape[:2] == (3, 2)  # a row per learned query
