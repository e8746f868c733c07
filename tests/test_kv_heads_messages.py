"""Grouped-query attention's module checks its widths one condition at a time and names the
argument to change. Before, any width that did not fit (d_q not split by heads, keys of the
wrong width, values not split by kv_heads) was reported as "kv_heads = 2 must divide heads
= 4", which held."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_support import inline_fixture  # noqa: E402

HEADER = """\
paper p {
    cite  = "Test"
    title = "Grouped-query widths"
    year  = 2024
}
"""

SPEC = """
let d_model  = 64
let heads    = 4
let kv_heads = 2
let d_kv     = 32
let d_vv     = 32

model m {
    input tokens: tokens[T] (vocab = 30, autoregressive)
    feature x = embed(tokens, d_model)
    attention self { query = project(x)  keys = project(x, d_kv)  values = project(x, d_vv)
                     score = scaled_multiplicative  heads = heads  kv_heads = kv_heads
                     mask = causal }
    output logits = classify(self, 30)
}
"""

gen = inline_fixture("kv_messages", HEADER)

CASES = [  # Config fields -> what the message must say, and the old text it must not say
    (dict(d_kv=100),  # the keys' projection: not kv_heads heads of d_model / heads
     "d_k = 100 must be kv_heads * d_q / heads = 2 * 64 / 4 = 32 (k holds kv_heads heads of "
     "the query heads' width): change d_k"),
    (dict(d_model=66, d_kv=32),  # the queries: 66 is not 4 slices
     "heads = 4 must divide d_q = 66 (each head reads an equal slice, eq. 38): change d_q or "
     "heads"),
    (dict(d_vv=33),  # the values: not 2 heads
     "kv_heads = 2 must divide d_v = 33 (v holds kv_heads heads of equal width): change d_v"),
    (dict(kv_heads=3, d_kv=48),  # the one case the old message described
     "kv_heads = 3 must divide heads = 4 (each key/value head serves heads / kv_heads query "
     "heads): change kv_heads"),
]


@pytest.mark.parametrize("kw, message", CASES, ids=["d_k", "d_q", "d_v", "kv_heads"])
def test_the_message_names_the_width_that_does_not_fit(gen, kw, message):
    mod = gen(SPEC)
    with pytest.raises(ValueError) as err:
        mod.Model(mod.Config(**kw))
    assert str(err.value) == f"MultiHeadGroupedQueryScaledMultiplicativeAttention: {message}"


def test_the_spec_sizes_build(gen):
    mod = gen(SPEC)
    m = mod.Model(mod.Config())
    assert m(tokens=torch.zeros(2, 3, dtype=torch.long)).output.shape == (2, 3, 30)
