"""Capsule-based attention (eq. 43-45) over keys with more than one axis: an image's pixels
(`features = x`, x: grid[H, W, 3]) or a nested sequence. One attention per group (a row of
the image) with one learned query per class; values checked against a float64 reference
of the equations written here. The generated code read the capsules back through a
comprehension whose variable was `x`, the input's name as well: forward() raised a
RuntimeError when the keys were an input called `x`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_support import build_model, one_thread  # noqa: E402, F401

DT = torch.float64
SPEC = """paper t { cite = "T" }
let d = 8
model m {
    input x: %s
    attention a { query = learned(d)  features = x  score = general  capsules = %d }
    output o = classify(a, 3)
}
"""


def reference(model, x: torch.Tensor):
    """Per group g (all axes but the last two): c_gc = sum_l softmax_l(k_gl^T W q_c) v_gl
    (eq. 43, the general score), p_gc = sigmoid(w_c . c_gc + b_c) (eq. 44), r_gc = p_gc c_gc
    (eq. 45), f_g = the mean of the group's feature vectors; the output W_o c + b_o."""
    P = {k: v.detach().to(DT) for k, v in model.named_parameters()}
    q, W = P["a.queries"], P["a.W"][0]  # (C, d_q), (d_k, d_q)
    e = torch.einsum("...ld,de,ce->...cl", x, W, q)  # (..., C, Lk)
    c = torch.softmax(e, -1) @ x  # (..., C, 3)
    p = torch.sigmoid((c * P["a.prob"]).sum(-1) + P["a.prob_bias"])
    out = c @ P["o_head.weight"].T + P["o_head.bias"]
    return out, p, p.unsqueeze(-1) * c, x.mean(-2)


@pytest.mark.parametrize("kind", ["grid[H, W, 3] (H = 4, W = 5)", "sequence[S, L, 3]"])
@pytest.mark.parametrize("capsules", [2, 3])
def test_capsules_over_an_input_with_groups(kind, capsules):
    mod = build_model(SPEC % (kind, capsules), f"caps_groups_{capsules}_{kind[0]}")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT).eval()
    with torch.no_grad():
        for prm in model.parameters():  # the p_c weights start at 0: draw them all
            prm.copy_(torch.randn(prm.shape, dtype=DT) * 0.5)
    shape = (2, 4, 5, 3)
    x = torch.randn(*shape, dtype=DT)
    got = model(x=x)
    want_o, want_p, want_r, want_f = reference(model, x)
    assert got.output.shape == (2, 4, capsules, 3)
    torch.testing.assert_close(got.output, want_o, atol=1e-10, rtol=0)
    p, r = got.capsules["a"]
    torch.testing.assert_close(p, want_p, atol=1e-10, rtol=0)
    torch.testing.assert_close(r, want_r, atol=1e-10, rtol=0)
    torch.testing.assert_close(got.features["a"], want_f, atol=1e-10, rtol=0)
    # Wang et al.'s joint loss, the target class of each example for every group
    target = torch.tensor([0, capsules - 1])
    y = torch.nn.functional.one_hot(target, capsules).to(DT)[:, None]
    sim = (want_r * want_f.unsqueeze(-2)).sum(-1)
    loss = (y * torch.relu(1 - want_p) + (1 - y) * torch.relu(want_p)).sum(-1).mean() + \
        (y * torch.relu(1 - sim) + (1 - y) * torch.relu(sim)).sum(-1).mean()
    torch.testing.assert_close(model.capsule_loss(got, target), loss, atol=1e-10, rtol=0)
