"""Dropout, shared weights, tied embeddings and the embedding scale (issue 13).

Each check computes the equation in the test (softmax, the additive score of eq. 6-9 and
14-15, the sinusoid, y E^T + b) and compares the generated model with it; dropout masks are
drawn from the same RNG state as the model draws them (one ``F.dropout`` of the same shape)."""

from __future__ import annotations

from pathlib import Path

import pytest

from taxcompile import pipeline
from taxcompile.diagnostics import SpecError

torch = pytest.importorskip("torch")
# cnn(kernel = 2) with padding="same" (Lu et al.'s phrase features): torch warns, harmlessly
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
F = torch.nn.functional

from taxcompile import codegen  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ERRORS = Path(__file__).resolve().parent / "data" / "errors"


def compiled(text: str, name: str):
    cs = pipeline.load_text(text, "t.attn")
    return load_module(codegen.generate(cs, cs.models[0], "t.attn"), name)


# ---- dropout on features and on attention weights -------------------------------------------

DROP = """paper t { cite = "T" }
let p = P
model m {
    input x: sequence[L, 8]
    feature h = dropout(linear(x, 8), p)
    attention a {
        query = project(h)  keys = project(h)  values = project(h)
        score = scaled_multiplicative  heads = 2  dropout = p  mask = MASK
    }
    output y = h + dropout(a, p)
}
"""


def drop_model(p: float, mask: str = "none", name: str = "drop"):
    src = DROP.replace("P", repr(p)).replace("MASK", mask)
    return compiled(src, f"reg_{name}_{str(p).replace('.', '_')}_{mask}")


@pytest.fixture(scope="module")
def plain():
    src = DROP.replace("P", "0.0").replace("MASK", "none")
    return compiled(src.replace("dropout(linear(x, 8), p)", "linear(x, 8)")
                    .replace("dropout = p", "").replace("dropout(a, p)", "a"), "reg_plain")


def test_dropout_zero_is_no_dropout(plain):
    mod = drop_model(0.0)
    torch.manual_seed(0)
    ref = plain.Model(plain.Config())
    model = mod.Model(mod.Config())
    model.load_state_dict(ref.state_dict())
    inputs = mod.example_inputs(batch_size=3)
    for m in (ref, model):
        m.train()
    for weights in (False, True):
        want = ref(**inputs, return_attention=weights).output
        assert torch.equal(model(**inputs, return_attention=weights).output, want)


@pytest.mark.parametrize("mask", ["none", "causal"])
def test_attention_dropout_explicit_and_fused_paths_equal_the_equation(mask):
    """a = softmax(q k^T / sqrt(d_k)) over the kept keys; c = dropout(a) v, with the mask
    drawn by F.dropout from the same RNG state; the weights returned are a, before dropout."""
    mod = drop_model(0.5, mask)
    torch.manual_seed(0)
    att = mod.Model(mod.Config()).a.train()
    N, L, H = 3, 6, 2
    q, k, v = (torch.randn(N, L, 8) for _ in range(3))
    key_mask = torch.arange(L) < torch.tensor([6, 4, 2])[:, None]
    for masked in (key_mask, None):
        keep = torch.ones(N, 1, L, L, dtype=torch.bool)
        if masked is not None:
            keep = keep & masked[:, None, None, :]
        if mask == "causal":
            keep = keep & torch.ones(L, L, dtype=torch.bool).tril()
        qh, kh, vh = (t.view(N, L, H, 4).transpose(1, 2) for t in (q, k, v))
        e = (qh @ kh.transpose(-1, -2) / 2.0).masked_fill(~keep, float("-inf"))
        a = e.softmax(-1)
        torch.manual_seed(11)
        c = F.dropout(a, 0.5, True) @ vh
        want = att.out(c.transpose(1, 2).reshape(N, L, 8))
        torch.manual_seed(11)
        got, weights, _ = att(q, k, v, masked, need_weights=True)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(weights, a, rtol=1e-5, atol=1e-6)  # before dropout
        torch.manual_seed(11)
        fused, none, _ = att(q, k, v, masked, need_weights=False)  # the sdpa kernel
        assert none is None
        torch.testing.assert_close(fused, want, rtol=1e-5, atol=1e-5)
        att.eval()
        torch.testing.assert_close(att(q, k, v, masked, need_weights=False)[0],
                                   att.out((a @ vh).transpose(1, 2).reshape(N, L, 8)),
                                   rtol=1e-5, atol=1e-6)
        att.train()


def test_attention_dropout_keeps_the_mean():
    """E[dropout(a)] = a: averaged over many draws, the context is the undropped one."""
    mod = drop_model(0.3)
    torch.manual_seed(0)
    att = mod.Model(mod.Config()).a
    q, k, v = (torch.randn(1, 5, 8) for _ in range(3))
    att.eval()
    want = att(q, k, v, need_weights=False)[0]
    att.train()
    torch.manual_seed(3)
    qs, ks, vs = (t.expand(4000, -1, -1) for t in (q, k, v))
    got = att(qs, ks, vs, need_weights=False)[0].mean(0, keepdim=True)
    torch.testing.assert_close(got, want, rtol=0, atol=0.03)


def test_local_attention_with_dropout_takes_the_explicit_path_in_training():
    src = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8]
    attention a { query = x  keys = x  score = multiplicative
                  align = local(D = 1, position = monotonic, gaussian = false)  dropout = 0.5 }
}
"""
    mod = compiled(src, "reg_local_drop")
    att = mod.Model(mod.Config()).a.train()
    q = torch.randn(2, 7, 8)
    torch.manual_seed(5)
    explicit = att(q, q, q, need_weights=True)[0]
    torch.manual_seed(5)
    assert torch.equal(att(q, q, q, need_weights=False)[0], explicit)
    att.eval()
    torch.testing.assert_close(att(q, q, q, need_weights=False)[0],
                               att(q, q, q, need_weights=True)[0], rtol=1e-5, atol=1e-6)


# ---- shared weights -------------------------------------------------------------------------


def test_shared_operations_are_one_module_and_gradients_add_up():
    src = """paper t { cite = "T" }
model m {
    input x: sequence[L, 4]
    input y: sequence[M, 4]
    feature a = linear(x, 3)
    feature b = norm(linear(y, 3, share = a))
    attention att { query = learned(3)  features = b  score = additive }
    output o = concat(mean(a), att)
}
"""
    mod = compiled(src, "reg_share_linear")
    torch.manual_seed(0)
    model = mod.Model(mod.Config())
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)
               and m.in_features == 4]
    assert len(linears) == 1  # one W, b for a and b
    outs = []
    linears[0].register_forward_hook(lambda m, a, out: outs.append(out))
    x, y = torch.randn(2, 5, 4), torch.randn(2, 6, 4)
    model(x, y)
    assert len(outs) == 2
    (outs[0].sum() + outs[1].sum()).backward()
    # d/dW sum_l (W x_l + c) + sum_l (W y_l + c) = sum_l x_l^T + sum_l y_l^T, for every row
    want = (x.sum((0, 1)) + y.sum((0, 1))).expand(3, 4)
    torch.testing.assert_close(linears[0].weight.grad, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(linears[0].bias.grad, torch.full((3,), 2.0 * (5 + 6)))


# ---- errors -----------------------------------------------------------------------------------

SNAPSHOTS = ["share_missing_operator", "share_sizes_differ", "share_other_hop",
             "tie_wrong_classes", "attention_share_mechanisms", "dropout_probability"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_error_snapshot(name):
    path = ERRORS / f"{name}.attn"
    with pytest.raises(SpecError) as info:
        pipeline.load(path)
    rel = path.relative_to(ROOT).as_posix()
    rendered = info.value.render()
    assert rendered.replace(str(path), rel) == (ERRORS / f"{name}.expected").read_text(
        encoding="utf-8").rstrip("\n")
