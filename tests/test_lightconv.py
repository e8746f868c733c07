"""LightConv (Wu et al. 2019, "Pay Less Attention with Lightweight and Dynamic
Convolutions", eq. 2-3): `align = lightconv(kernel = k, weight_dropout = p)` beside
`score = none`, a depthwise convolution whose kernel W_h of width k is softmax-normalised
over its k positions and shared by the d / H channels of head h, with DropConnect on the
normalised kernel in training. The generated class is checked against the convolution
written here in float64 from the paper's equation (zero padding, P = (k - 1) // 2 on the
left, k - 1 under a causal mask), not against attention weights."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import cell_of, error_snapshot  # noqa: E402
from test_codegen_mechanisms import D, close, gen, gradcheck_module, make, qkv_inputs  # noqa: E402

__all__ = ["gen"]  # the fixture, imported for the tests below

DT = torch.float64


def spec(kernel: int = 3, heads: int = 2, extra: str = "", dropout: str = "") -> str:
    return f"""
    model m {{
        input x: sequence[L, 6]
        attention conv {{
            query     = x
            features  = x
            score     = none
            align     = lightconv(kernel = {kernel}{dropout})
            heads     = {heads}
            heads_out = concat
            {extra}
        }}
        output out = identity(conv)
    }}
    """


def lightconv_ref(x, key_mask, W, heads: int, causal: bool, allowed=lambda off: True,
                  queries: int | None = None):
    """eq. 2-3: O[i, c] = sum_t softmax(W_h)[t] X[i + t - P, c], h the head of channel c
    (channels in H equal consecutive groups), X zero outside the sequence and at padding."""
    x = x.to(DT).clone()
    if key_mask is not None:
        x = x * key_mask[..., None].to(DT)
    N, L, d = x.shape
    k = W.shape[-1]
    w = torch.softmax(W.reshape(heads, k).to(DT), -1)
    P = k - 1 if causal else (k - 1) // 2
    out = torch.zeros(N, L, d, dtype=DT)
    for n in range(N):
        for i in range(L):
            for c in range(d):
                h = c // (d // heads)
                for t in range(k):
                    j = i + t - P
                    if 0 <= j < L and allowed(j - i):
                        out[n, i, c] += w[h, t] * x[n, j, c]
    return out if queries is None else out[:, L - queries:]  # the last positions' rows


@pytest.mark.parametrize("kernel,causal", [(3, False), (4, False), (4, True), (7, True)],
                         ids=["k3", "k4_even", "k4_causal", "k7_causal_wider_than_short_rows"])
def test_lightconv_is_the_papers_convolution(gen, kernel, causal):
    _, model = make(gen, spec(kernel, extra="mask = causal" if causal else ""))
    x, _, _, mask = qkv_inputs(dq=6, dk=6, dv=6, Lq=5, Lk=5)
    c, a, _ = model.conv(x, x, x, mask)
    want = lightconv_ref(x, mask, D(model.conv.lightconv), 2, causal)
    rows = mask.clone()  # the padded positions' outputs are not read (their rows)
    close(c * rows[..., None], want * rows[..., None])
    # no renormalisation at the edges: a row of weights sums to at most 1
    assert D(a).sum(-1).max() <= 1 + 1e-6


MASKS = {"none": lambda off: True, "causal": lambda off: off <= 0,
         "forward": lambda off: off < 0, "backward": lambda off: off > 0}


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("kernel,Lq", [(3, 7), (4, 7), (5, 2), (9, 1)],
                         ids=["k3", "k4_even", "k5_last_two", "k9_one_query_wider_than_L"])
def test_lightconv_fast_path_is_the_convolution_without_the_weights(gen, mask, kernel, Lq):
    """need_weights=False takes the convolution (O(L k), no (Lq, Lk) weights): the paper's
    sums, with padding, each structural mask, and fewer queries than keys (a decoder's
    cached step: the queries are the last positions); equal to the explicit path."""
    extra = "" if mask == "none" else f"mask = {mask}"
    _, model = make(gen, spec(kernel, extra=extra))
    x, _, _, pad = qkv_inputs(dq=6, dk=6, dv=6, Lq=7, Lk=7, pad={1: 3})
    c, a, _ = model.conv(x[:, 7 - Lq:], x, x, pad, need_weights=False)
    assert a is None
    want = lightconv_ref(x, pad, D(model.conv.lightconv), 2, mask == "causal", MASKS[mask], Lq)
    close(c, want)
    c_explicit, _, _ = model.conv(x[:, 7 - Lq:], x, x, pad, need_weights=True)
    close(c, D(c_explicit))


def test_lightconv_fast_path_drops_the_same_taps_in_training(gen):
    _, model = make(gen, spec(3, dropout=", weight_dropout = 0.5"))
    x, _, _, pad = qkv_inputs(dq=6, dk=6, dv=6, Lq=5, Lk=5)
    model.train()
    torch.manual_seed(7)
    fast, _, _ = model.conv(x, x, x, pad, need_weights=False)
    torch.manual_seed(7)
    explicit, _, _ = model.conv(x, x, x, pad, need_weights=True)
    close(fast, D(explicit))


def test_lightconv_weight_dropout(gen):
    """DropConnect (weight dropout) on the normalised kernel in training, none in eval."""
    _, model = make(gen, spec(3, dropout=", weight_dropout = 0.5"))
    x, _, _, _ = qkv_inputs(dq=6, dk=6, dv=6, Lq=5, Lk=5)
    model.eval()
    c, _, _ = model.conv(x, x, x, None)
    close(c, lightconv_ref(x, None, D(model.conv.lightconv), 2, False))
    _, a_eval, _ = model.conv(x, x, x, None)
    model.train()
    torch.manual_seed(3)
    _, a, _ = model.conv(x, x, x, None)
    w = torch.softmax(D(model.conv.lightconv).reshape(2, 3), -1)
    taps = {round(float(v), 6) for v in (2 * w).flatten()} | {0.0}
    assert {round(float(v), 6) for v in D(a).flatten()} <= taps  # dropped, or w / (1 - p)
    assert (a != 0).sum() < (a_eval != 0).sum()  # whole taps dropped, for every query


def test_lightconv_gradients(gen):
    _, model = make(gen, spec(3))
    x, _, _, mask = qkv_inputs(dq=6, dk=6, dv=6, Lq=4, Lk=4)
    gradcheck_module(model.conv, x, x, x, mask)


def test_lightconv_reads_local_and_sets_no_score():
    text = 'paper t { cite = "T" }\nmodel m {\n input x: sequence[L, 8]\n' \
           ' attention a { query = x  features = x  score = none  align = lightconv(kernel = 3) }\n' \
           ' output y = identity(a)\n}\n'
    cell = cell_of(text, "alignment")
    assert list(cell) == ["Local"] and "LightConv (Wu et al. 2019)" in cell["Local"][0]
    assert [v for v in cell_of(text, "scoring") if v] == []


@pytest.mark.parametrize("name", ["lightconv_with_a_score", "lightconv_kernel_out_of_range"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want
