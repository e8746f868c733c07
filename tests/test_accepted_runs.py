"""`check` accepts => the model runs (issue 23, "check accepts, the model does not run"):
each spec the adversarial run found either runs with the values of a float64 reference of
its equations written here, or is refused with a located error (snapshots).

- a size computed in floating point (`d / 0.1`, `let d = 8.0`): refused;
- two embeddings of one input in one statement: one table each (they shared one);
- `embed()` of an alignment or pointers input: refused;
- co-attention `share` across directions with different heads or dimensionality, and
  local alignment over an aggregate affinity score (eq. 14-16): refused;
- `supervised(gold, loss = cross_entropy)`: finite on the module's own example_inputs
  (gold mass on a padded key was inf x 0), padding contributes exactly 0;
- `bias = gaussian` with a fully padded example: finite gradients (sigma was 0);
- GAT over an edge list under CPU bf16 autocast (index_add_ mixed dtypes).
"""

from __future__ import annotations

import math
import warnings

import pytest

from conftest import error_snapshot
from taxcompile import pipeline
from taxcompile.diagnostics import SpecError

torch = pytest.importorskip("torch")

from test_graph_attention import GAT, features, gat_reference, random_graph  # noqa: E402
from test_position_terms import SPEC as POS_SPEC  # noqa: E402
from test_position_terms import gaussian_ref, heads_of, randomize  # noqa: E402
from torch_support import build_model, one_thread  # noqa: E402, F401

DT = torch.float64
HEADER = 'paper t { cite = "T" }\n'


def build(text: str, name: str):
    return build_model(text, name)


def message(text: str) -> str:
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    return info.value.diagnostics[0].message


@pytest.mark.parametrize("name", ["size_in_floating_point", "embed_alignment_input",
                                  "coattention_local_alignment", "coattention_share_heads"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


# ---- sizes ----------------------------------------------------------------------------------

SIZED = HEADER + """let d = D
model m {
    input x: tokens[T] (vocab = 20)
    feature h = embed(x, SIZE)
    attention s { query = project(h)  keys = h  score = scaled_multiplicative }
    output y = classify(mean(s), 3)
}
"""


@pytest.mark.parametrize("let, size", [("8", "d / 0.1"), ("8.0", "d"), ("8", "d * 2.5")])
def test_a_size_computed_in_floating_point_is_refused(let, size):
    text = SIZED.replace("D", let).replace("SIZE", size)
    assert "must be a whole number, but it is computed in floating point" in message(text)


def test_a_whole_size_expression_still_builds():
    mod = build(SIZED.replace("D", "8").replace("SIZE", "d * 2 / 4"), "acc_size")
    assert mod.Model(mod.Config()).h_embed.weight.shape == (20, 4)


# ---- embeddings -----------------------------------------------------------------------------

TWO_TABLES = HEADER + """model m {
    input x: tokens[T] (vocab = 20)
    feature h = concat(embed(x, 6), embed(x, 2))
    attention s { query = h  keys = h  score = multiplicative }
    output u = s
}
"""


def test_two_embeddings_of_one_input_have_a_table_each():
    mod = build(TWO_TABLES, "acc_tables")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT)
    assert model.h_embed.weight.shape == (20, 6) and model.h_embed2.weight.shape == (20, 2)
    x = torch.randint(0, 20, (2, 5), generator=torch.Generator().manual_seed(1))
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    # h = [E1 x ; E2 x]; e = h h^T (multiplicative), softmax over the kept keys, c = a h
    h = torch.cat([model.h_embed.weight[x], model.h_embed2.weight[x]], -1)
    e = (h @ h.transpose(1, 2)).masked_fill(~keep[:, None, :], -math.inf)
    want = torch.softmax(e, -1) @ h
    torch.testing.assert_close(model(x=x, x_mask=keep).output, want, atol=1e-10, rtol=0)


def test_embed_of_pointers_is_refused():
    text = HEADER + """model m {
    input x: sequence[S, 4]
    input C: pointers[T] (into = S)
    feature h = embed(C, 6)
    attention s { query = project(h, 4)  keys = x  score = scaled_multiplicative }
    output y = s
}
"""
    assert message(text) == "`embed` reads token ids, but `C` is a `pointers` input"


# ---- co-attention ---------------------------------------------------------------------------

COATT = HEADER + """let d = 8
model m {
    input question: tokens[T] (vocab = 20)
    input image: sequence[R, 8]
    feature qw = embed(question, d)
    feature v = linear(image, d)
    affinity C = affinity(qw, v, form = bilinear, act = tanh)
    attention img { query = qw  keys = v  affinity = C  SCORE IMG }
    attention q { query = v  keys = qw  affinity = C  SCORE  share = img Q }
    output y = classify(concat(img, q), 3)
}
""".replace("SCORE", "score = additive(d_w = d, act = tanh, bias = false)")


@pytest.mark.parametrize("img, q, need", [
    ("", "dimensionality = multi", "dimensionality = single"),
    ("dimensionality = multi", "", "dimensionality = multi"),
    ("heads = 2", "", "heads = 2"),
])
def test_coattention_share_needs_one_shape_in_both_directions(img, q, need):
    got = message(COATT.replace("IMG", img).replace("Q }", q + " }"))
    assert got.startswith("attention `q`: `share = img`: two co-attention modules share W1 and "
                          f"W2 across directions (eq. 14-15); this needs {need}")


@pytest.mark.parametrize("mods", ["heads = 2", "dimensionality = multi"])
def test_coattention_share_alike_in_both_directions_runs(mods):
    mod = build(COATT.replace("IMG", mods).replace("Q }", mods + " }"), "acc_coatt")
    model = mod.Model(mod.Config.tiny())
    out = model(**mod.example_inputs(cfg=mod.Config.tiny()))
    out.output.sum().backward()
    assert model.q.W_q is model.img.W_k and model.q.W_k is model.img.W_q  # eq. 14-15
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ---- supervised attention -------------------------------------------------------------------

SUPERVISED = HEADER + """model m {
    input x: sequence[L, 8]
    input y: sequence[M, 8]
    input gold: alignment[M, L]
    attention s {
        query = project(y)  keys = x  score = scaled_multiplicative  heads = 2
        penalty = supervised(gold, 0.5, loss = cross_entropy)
    }
    output u = s
}
"""


def supervised_ref(model, x, y, gold, x_keep, y_keep):
    """-lambda sum_(i, j kept) gold_ij log a_ij (Mi et al. 2016), a the heads' mean of
    softmax(q k^T / sqrt(d_k)) over the kept keys; 0 log 0 = 0; the batch mean."""
    q = heads_of(y @ model.s_q_proj.weight.T, 2)
    k = heads_of(x, 2)
    e = (q @ k.transpose(-1, -2) / 2.0).masked_fill(~x_keep[:, None, None, :], -math.inf)
    a = torch.softmax(e, -1).mean(1)
    pairs = y_keep[:, :, None] & x_keep[:, None, :] & (gold > 0)
    term = torch.where(pairs, -gold * torch.log(torch.where(pairs, a, 1.0)), 0.0)
    return 0.5 * term.sum((1, 2)).mean()


def test_supervised_cross_entropy_on_its_own_example_inputs():
    mod = build(SUPERVISED, "acc_supervised")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT)
    inputs = {k: v.to(DT) if v.is_floating_point() else v
              for k, v in mod.example_inputs(cfg=mod.Config()).items()}
    gold, x_keep = inputs["gold"], inputs["x_mask"]
    assert not x_keep.all()  # some padding, which the gold alignment leaves alone
    assert (gold * ~x_keep[:, None, :]).sum() == 0
    torch.testing.assert_close(gold.sum(-1), torch.ones(gold.shape[:2], dtype=DT))
    out = model(**inputs)
    want = supervised_ref(model, inputs["x"], inputs["y"], gold, x_keep, inputs["y_mask"])
    torch.testing.assert_close(out.penalty, want, atol=1e-10, rtol=0)
    # gold mass on a padded key, whose weight is exactly 0: it contributes 0, not inf x 0
    bad = gold.clone()
    bad[1, :, -1] = 0.5
    bad = bad / bad.sum(-1, keepdim=True)
    assert not x_keep[1, -1]
    out = model(**{**inputs, "gold": bad})
    want = supervised_ref(model, inputs["x"], inputs["y"], bad, x_keep, inputs["y_mask"])
    assert torch.isfinite(want)
    torch.testing.assert_close(out.penalty, want, atol=1e-10, rtol=0)
    out.penalty.backward()
    assert torch.isfinite(model.s_q_proj.weight.grad).all()


def test_supervised_cross_entropy_of_a_sparse_alignment_has_finite_gradients():
    """sparsemax gives exact zeros at kept keys; where gold is 0 too, 0 log 0 adds nothing and
    no 0 / 0 reaches the gradient."""
    mod = build(SUPERVISED.replace("heads = 2", "heads = 2  align = sparsemax"), "acc_sup_sp")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT)
    inputs = {k: v.to(DT) if v.is_floating_point() else v
              for k, v in mod.example_inputs(cfg=mod.Config()).items()}
    with pytest.raises(ValueError, match="-log 0"):  # the example's gold on zero weights
        model(**inputs)
    out = model(**inputs, return_attention=True, validate=False)
    assert out.penalty == math.inf
    a = out.attention["s"].mean(1)
    kept = (a > 0).to(DT)  # mass only where the weights are (rows of no key: all 0)
    gold = kept / kept.sum(-1, keepdim=True).clamp_min(1)
    assert (a == 0).any()
    out = model(**{**inputs, "gold": gold})
    assert torch.isfinite(out.penalty)
    out.penalty.backward()
    assert torch.isfinite(model.s_q_proj.weight.grad).all()


# ---- the Gaussian bias over an empty example ------------------------------------------------


def test_gaussian_bias_with_a_fully_padded_example_has_finite_gradients():
    mod = build(HEADER + POS_SPEC.format(score="scaled_multiplicative", heads=2, mask="none",
                                         mods="bias = gaussian").replace("{{", "{")
                .replace("}}", "}"), "acc_gauss")
    cls = next(c for n, c in vars(mod).items() if isinstance(c, type) and n.endswith("Attention"))
    m = randomize(cls(d_q=16, d_k=16, d_v=16, heads=2).to(DT))
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 9, 16, generator=g, dtype=DT) for _ in range(3))
    key_mask = torch.ones(3, 9, dtype=torch.bool)
    key_mask[1] = False  # nothing to attend to
    key_mask[2, 6:] = False
    q.requires_grad_(True)
    c, a, _ = m(q, k, v, key_mask)
    for b in (0, 2):  # the other examples: Yang et al.'s equations
        want_c, want_a = gaussian_ref(m, q.detach()[b:b + 1], k[b:b + 1], v[b:b + 1],
                                      key_mask[b:b + 1], "none")
        torch.testing.assert_close(c[b:b + 1], want_c, atol=1e-10, rtol=1e-9)
        torch.testing.assert_close(a[b:b + 1], want_a, atol=1e-10, rtol=1e-9)
    assert (a[1] == 0).all()  # no key: zero weights
    c.square().sum().backward()
    assert torch.isfinite(q.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


# ---- graph attention under autocast ---------------------------------------------------------


def test_gat_edge_list_under_cpu_bf16_autocast():
    heads, out = 2, 3
    mod = build(HEADER + GAT.format(f_in=4, width=heads * out, heads=heads, slope=0.2,
                                    join="heads_out = concat", loops="true")
                .replace("{{", "{").replace("}}", "}"), "acc_gat_bf16")
    torch.manual_seed(0)
    model = mod.Model(mod.Config())
    x, ei = features(2, 7, 4, seed=11).float(), random_graph(2, 7, 40, seed=12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(x, ei).output
    ref = gat_reference(x.double(), ei, model.wh_proj.weight.double(),
                        model.att.att_src.double(), model.att.att_dst.double(),
                        model.att.bias.double(), heads, "concat", True)
    torch.testing.assert_close(got.double(), ref, atol=0.05, rtol=0.05)  # bf16's 8 bits
    got.float().square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert got.dtype in (torch.bfloat16, torch.float32)
