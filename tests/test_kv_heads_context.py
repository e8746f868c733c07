"""The context of grouped-query attention (`kv_heads = g`) read by a layer that needs its
width: H query heads, each reading a key/value head of d_q / H features, give H heads'
contexts (d_q features side by side, or W_O of them; d_q / H averaged), not the width of
the g-head values. The generated code sized `classify(a, 3)` from the values (4 features
where the context has 8): forward() raised a RuntimeError. Values are checked against a
float64 reference of eq. 38-40 with each key/value head shared by its group."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from torch_support import build_model, one_thread  # noqa: E402, F401

DT = torch.float64
SPEC = """paper t { cite = "T" }
model m {
    input x: sequence[L, 6]
    attention a { query = project(x, 8)  keys = project(x, %d)  values = project(x, %d)
                  score = scaled_multiplicative  heads = %d  kv_heads = %d%s }
    output o = classify(a, 3)
}
"""


def reference(model, x, heads: int, g: int, heads_out: str):
    P = {k: v.detach() for k, v in model.named_parameters()}
    d_kv = g * 8 // heads
    q, k, v = (x @ P["a_qkv_proj.weight"].T).split([8, d_kv, d_kv], -1)
    B, L, _ = x.shape
    q = q.view(B, L, heads, -1).transpose(1, 2)  # (B, H, L, d_q / H)
    k, v = (t.view(B, L, g, -1).transpose(1, 2).repeat_interleave(heads // g, 1)
            for t in (k, v))  # query head j reads key/value head j // (H / g)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1]), -1)
    c = a @ v  # (B, H, L, d_q / H)
    if heads_out == "mean":
        c = c.mean(1)
    else:
        c = c.transpose(1, 2).reshape(B, L, -1)  # (B, L, d_q)
        if heads_out == "project":
            c = c @ P["a.out.weight"].T + P["a.out.bias"]  # W_O (eq. 40)
    return c @ P["o_head.weight"].T + P["o_head.bias"]


@pytest.mark.parametrize("heads,g", [(2, 1), (4, 2)])
@pytest.mark.parametrize("heads_out", ["project", "concat", "mean"])
def test_a_grouped_query_context_has_the_query_heads_width(heads, g, heads_out):
    d_kv = g * 8 // heads
    extra = "" if heads_out == "project" else f"  heads_out = {heads_out}"
    mod = build_model(SPEC % (d_kv, d_kv, heads, g, extra), f"kv_ctx_{heads}_{heads_out}")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT).eval()
    x = torch.randn(2, 5, 6, dtype=DT)
    torch.testing.assert_close(model(x=x).output, reference(model, x, heads, g, heads_out),
                               atol=1e-10, rtol=0)
