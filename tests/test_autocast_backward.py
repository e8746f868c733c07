"""Backward under bf16 autocast through the generated code's custom autograd Functions.

QueryBlocks (the blocked additive score and context) recomputes its blocks in backward: it
must do so under the forward's autocast state, or float32 weights meet the bf16
activations autocast made ("expected scalar type ..."). EdgeSum (graph attention) keeps
autocast off in forward, as bf16 has no sparse CSR kernels: its backward must too, wherever
backward is called from. Checked against float64 references: the float64 run of the same
model, and the survey's equations written here (eq. 6, 30-32; GAT eq. 4)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from taxcompile import codegen, pipeline, run  # noqa: E402

BF16 = torch.bfloat16
# relative L2 error allowed under bf16 autocast (8 bits of mantissa; measured: outputs up to
# 3e-3, gradients up to 5e-2 for these models); a wrong gradient is off by about 1
TOL_OUT, TOL_GRAD = 2e-2, 0.15


def module(spec: str, model: str):
    cs = pipeline.load(ROOT / spec)
    cm = next(m for m in cs.models if m.model.name == model)
    return run.load_module(codegen.generate(cs, cm, spec), f"autocast_{model}")


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    x = x.double()
    return ((x - ref).norm() / ref.norm()).item()


def autocast_cpu():
    return torch.autocast("cpu", dtype=BF16)


def run_model(model, inputs: dict, dtype, autocast: bool, inside: bool) -> dict:
    """Outputs and every parameter's and floating input's gradient, in float64, for a
    fixed output gradient; backward inside the autocast region or after it."""
    model = model.to(dtype)
    xs = {k: x.to(dtype).requires_grad_() if x.is_floating_point() else x
          for k, x in inputs.items()}
    with torch.autocast("cpu", dtype=BF16, enabled=autocast):
        y = model(**xs).output
        g = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
        loss = (y * g.to(y.dtype)).sum()
        if inside:
            loss.backward()
    if not inside:
        loss.backward()
    out = {"output": y.detach().double()}
    out.update({n: p.grad.double() for n, p in model.named_parameters() if p.grad is not None})
    out.update({k: x.grad.double() for k, x in xs.items() if x.is_floating_point()})
    return out


@pytest.mark.parametrize("inside", [False, True], ids=["backward-after", "backward-inside"])
@pytest.mark.parametrize("spec,model", [("examples/alternating_coattention.attn", "alternating"),
                                        ("examples/cheng2016_lstmn.attn", "lstmn")])
def test_model_gradients_under_bf16_autocast(spec, model, inside):
    mod = module(spec, model)
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    net = mod.Model(cfg).eval()
    ex = mod.example_inputs(cfg=cfg)
    ref = run_model(copy.deepcopy(net), ex, torch.float64, False, False)
    got = run_model(net, ex, torch.float32, True, inside)
    assert set(got) == set(ref) and len(ref) > 3
    assert "QueryBlocks" in vars(mod)  # the blocked path is the one under test
    assert rel(got["output"], ref["output"]) <= TOL_OUT
    errors = {n: rel(got[n], ref[n]) for n in ref if n != "output" and ref[n].norm() > 0}
    assert max(errors.values()) <= TOL_GRAD, errors


def additive_reference(wq, wk, w, v=None, keep=None):
    """float64: e_ij = w^T tanh(wq_i + wk_j) (eq. 6); with v, the multi-dimensional form
    (eq. 30-32): e_ij (d_e,) = W^T tanh(wq_i + wk_j), a softmax over the keys j per
    feature (masked keys excluded), c_i = sum_j a_ij * v_j."""
    h = torch.tanh(wq[:, :, :, None, :] + wk[:, :, None, :, :])  # (N, H, Lq, Lk, d_w)
    if v is None:
        return (h * w[None, :, None, None, :]).sum(-1)
    e = (h[..., None] * w[None, :, None, None]).sum(-2)  # (N, H, Lq, Lk, d_e)
    a = e.masked_fill(~keep, -torch.inf).softmax(3)
    return (a * v[:, :, None]).sum(3)


@pytest.mark.parametrize("inside", [False, True], ids=["backward-after", "backward-inside"])
@pytest.mark.parametrize("form", ["score", "context"])
def test_query_blocks_recompute_under_the_forwards_autocast(monkeypatch, form, inside):
    mod = module("specs/shen2018.attn", "disan")
    monkeypatch.setattr(mod.QueryBlocks, "BLOCK", 2 * 3 * 7 * 8)  # 2 queries a block: 5 blocks
    gen = torch.Generator().manual_seed(1)
    N, H, Lq, Lk, d_w, d_e = 2, 3, 9, 7, 8, 5
    wq, wk = (torch.randn(N, H, L, d_w, generator=gen, dtype=torch.float64) for L in (Lq, Lk))
    w = torch.randn(H, d_w, *([d_e] if form == "context" else []), generator=gen,
                    dtype=torch.float64)
    v = torch.randn(N, H, Lk, d_e, generator=gen, dtype=torch.float64)
    keep = torch.rand(N, 1, Lq, Lk, 1, generator=gen) < 0.7
    keep[..., 0, :] = True  # every query has a key
    g = torch.randn(N, H, Lq, *([d_e] if form == "context" else [Lk]), generator=gen,
                    dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (wq, wk, w, v)]
    ref = additive_reference(*leaves[:3], *((leaves[3], keep) if form == "context" else ()))
    ref_grads = torch.autograd.grad(ref, leaves[:4 if form == "context" else 3], g)
    # as a layer gives them under autocast: bf16 projections, float32 weights and values
    x = [wq.to(BF16).requires_grad_(), wk.to(BF16).requires_grad_(),
         w.float().requires_grad_(), v.float().requires_grad_()]
    with autocast_cpu():
        if form == "score":
            out = mod.additive_score(x[0], x[1], x[2], torch.tanh)
        else:
            out = mod.additive_context(x[0], x[1], x[2], torch.tanh, x[3], keep)
        loss = (out * g.to(out.dtype)).sum()
        if inside:
            loss.backward()
    if not inside:
        loss.backward()
    assert rel(out, ref) <= TOL_OUT
    for xi, r in zip(x, ref_grads):
        assert xi.grad.dtype == xi.dtype and rel(xi.grad, r) <= 5e-2


def test_edge_sum_backward_inside_autocast():
    mod = module("examples/gat.attn", "gat")
    gen = torch.Generator().manual_seed(2)
    n, H, d, E = 6, 2, 4, 15
    src, dst = torch.randint(0, n, (E,), generator=gen), torch.randint(0, n, (E,), generator=gen)
    a = torch.rand(E, H, generator=gen, dtype=torch.float64)
    v = torch.randn(n, H, d, generator=gen, dtype=torch.float64)
    g = torch.randn(n, H, d, generator=gen, dtype=torch.float64)
    a64, v64 = a.clone().requires_grad_(), v.clone().requires_grad_()
    A = torch.zeros(H, n, n, dtype=torch.float64).index_put((torch.arange(H)[:, None],
                                                             dst[None], src[None]),
                                                            a64.t(), accumulate=True)
    ref = torch.einsum("hij,jhd->ihd", A, v64)  # c_i = sum_(j -> i) a_ji v_j (GAT eq. 4)
    ga, gv = torch.autograd.grad(ref, (a64, v64), g)
    for dtype in (torch.float32, BF16):  # the CSR kernels, and the chunked sums
        x = [a.float().requires_grad_(), v.to(dtype).requires_grad_()]
        with autocast_cpu():
            out = mod.EdgeSum.apply(x[0], x[1], src, dst)
            (out * g.to(out.dtype)).sum().backward()
        assert rel(out, ref) <= TOL_OUT, dtype
        assert rel(x[0].grad, ga) <= 2e-2 and rel(x[1].grad, gv) <= 2e-2, dtype
