"""Issue 25's feature-level constructs, each against the paper's equations written here in
float64 (not against the generated code's own output):

- broadcasting in `+ - *` (taxcompile/operators/broadcast.py): BiDAF's G = [h; ũ; h ∘ ũ; h ∘ h̃] with
  h̃ tiled over the context (Seo et al. 2017), input attention r_i = [z_i α¹_i; z_i α²_i]
  (Wang et al. 2016, eq. 14 and 16), word weights of a hierarchy scaling each word;
- `split(x, n, i)`: key-value-predict attention (Daniluk et al. 2017, seed 002 eq. 7);
- `cnn(…, groups = g)` and `cnn(…, separable = true)` (QANet's encoder convolutions, Lite
  Transformer's depthwise branch), with the convolution written out as sums;
- located errors for shapes that do not combine. The examples run forward and backward, and
  keep padding out, in tests/test_codegen_specs.py (every spec and example)."""

from __future__ import annotations

import pytest

from taxcompile import pipeline
from taxcompile.diagnostics import SpecError

torch = pytest.importorskip("torch")

from taxcompile import codegen  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

DT = torch.float64
HEAD = 'paper t { cite = "T" }\nmodel m {\n'


def build(body: str, name: str, seed: int = 0):
    cs = pipeline.load_text(HEAD + body + "}\n", "t.attn")
    mod = load_module(codegen.generate(cs, cs.models[0], "t.attn"), name)
    torch.manual_seed(seed)
    return mod.Model(mod.Config()).double()


def close(got, want):
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def same_grads(out, want, inputs):
    g_out = torch.autograd.grad(out.sum(), inputs, retain_graph=True)
    g_want = torch.autograd.grad(want.sum(), inputs, retain_graph=True)
    for a, b in zip(g_out, g_want):
        close(a, b)


# ---- broadcasting ---------------------------------------------------------------------

BIDAF = """    input h: sequence[T, 6]
    input u: sequence[J, 6]
    affinity S = affinity(h, u, form = trilinear)
    attention c2q { query = h  keys = u  affinity = S  score = affinity }
    attention q2c { query = u  features = h  affinity = S  score = max_pool }
    output g = concat(h, c2q, h * c2q, h * q2c)
"""


def test_bidaf_query_aware_context_tiles_h_tilde():
    model = build(BIDAF, "feat_bidaf")
    h = torch.randn(2, 5, 6, dtype=DT, requires_grad=True)
    u = torch.randn(2, 3, 6, dtype=DT, requires_grad=True)
    out = model(h=h, u=u).output
    w1, w2, w3 = model.S_w  # S_tj = w^T [h_t; u_j; h_t ∘ u_j]
    S = torch.einsum("btd,bjd->btj", h * w3, u) + (h @ w1)[:, :, None] + (u @ w2)[:, None, :]
    u_tilde = torch.softmax(S, -1) @ u  # ũ_t = Σ_j a_tj u_j, a_t = softmax(S_t:)
    b = torch.softmax(S.max(-1).values, -1)  # b = softmax(max_col(S)) over the context
    h_tilde = torch.einsum("bt,btd->bd", b, h)  # h̃ = Σ_t b_t h_t, then tiled T times
    H = h_tilde[:, None, :].expand_as(h)
    want = torch.cat([h, u_tilde, h * u_tilde, h * H], -1)  # G = β(h, ũ, h̃) (attention flow)
    close(out, want)
    same_grads(out, want, (h, u))


INPUT_ATTENTION = """    input x: sequence[N, 6] (N = 5)
    input e1: vector[6]
    input e2: vector[6]
    attention a1 { query = e1  keys = x  score = multiplicative }
    attention a2 { query = e2  keys = x  score = multiplicative }
    feature b = learned(12)
    output r = concat(x * a1.weights, dropout(a2.weights, 0.5) * x) + b
"""


def test_input_attention_scales_each_word_by_its_weight():
    model = build(INPUT_ATTENTION, "feat_input_att").eval()
    x = torch.randn(2, 5, 6, dtype=DT, requires_grad=True)
    e1, e2 = (torch.randn(2, 6, dtype=DT, requires_grad=True) for _ in range(2))
    out = model(x=x, e1=e1, e2=e2).output
    alpha1 = torch.softmax(torch.einsum("bnd,bd->bn", x, e1), -1)  # eq. 14: w_i · e_j
    alpha2 = torch.softmax(torch.einsum("bnd,bd->bn", x, e2), -1)
    b = next(p for n, p in model.named_parameters() if p.shape == (12,))
    want = torch.cat([x * alpha1[..., None], x * alpha2[..., None]], -1) + b  # eq. 16, + b
    close(out, want)
    same_grads(out, want, (x, e1, e2))


HIERARCHY = """    input doc: sequence[S, W, 4] (W = 3)
    attention words { query = learned(4)  keys = doc  score = multiplicative }
    output y = doc * words.weights - mean(doc)
"""


def test_word_weights_of_a_hierarchy_scale_each_word():
    """(S, W, d) * (S, |W|): each word scaled by its weight in its sentence; (S, d) - (S,
    W, d) tiles the sentence's mean over its words."""
    model = build(HIERARCHY, "feat_hier")
    doc = torch.randn(2, 4, 3, 4, dtype=DT, requires_grad=True)
    out = model(doc=doc).output
    q = model.words_q
    a = torch.softmax(doc @ q, -1)  # (B, S, W): one distribution per sentence
    want = doc * a[..., None] - doc.mean(-2, keepdim=True)
    close(out, want)
    same_grads(out, want, (doc,))


# ---- split: key-value-predict attention ------------------------------------------------

KVP = """    input h: sequence[T, 12]
    feature k = split(h, 3, 0)
    feature v = split(h, 3, 1)
    feature p = split(h, 3, 2)
    attention r {
        query = k  keys = k  values = v  score = additive
        align = local(D = 2, position = monotonic, gaussian = false)  mask = forward
    }
    output hs = tanh(linear(r, 4, bias = false) + linear(p, 4, bias = false))
"""


def test_key_value_predict_attention_follows_daniluk():
    model = build(KVP, "feat_kvp")
    L, T = 2, 6
    h = torch.randn(2, T, 12, dtype=DT, requires_grad=True)
    out = model(h=h).output
    k, v, p = h[..., :4], h[..., 4:8], h[..., 8:]  # h_t = [k_t; v_t; p_t]
    att = model.r
    Wy, Wh, bias, w = att.W2[0], att.W1[0], att.b[0], att.w[0]
    rows = []
    for t in range(T):
        if t == 0:  # no earlier word: nothing to attend to
            rows.append(torch.zeros_like(v[:, 0]))
            continue
        ks, vs = k[:, max(0, t - L):t], v[:, max(0, t - L):t]  # the L previous positions
        M = torch.tanh(ks @ Wy + (k[:, t] @ Wh)[:, None] + bias)  # + b: our additive score's
        alpha = torch.softmax(M @ w, -1)
        rows.append(torch.einsum("bj,bjd->bd", alpha, vs))  # r_t = [v_(t-L) … v_(t-1)] α^T
    r = torch.stack(rows, 1)
    want = torch.tanh(r @ model.hs_linear.weight.T + p @ model.hs_linear2.weight.T)
    close(out, want)
    same_grads(out, want, (h,))


# ---- grouped and depthwise separable convolutions -------------------------------------

def conv_reference(x, weight, bias, groups):
    """y[t, o] = Σ_{i in o's group} Σ_j W[o, i, j] x[t + j - (k - 1) / 2, i] + b[o], 'same'
    zero padding, written out."""
    B, L, d_in = x.shape
    d_out, per, k = weight.shape
    pad = (k - 1) // 2
    xp = torch.cat([x.new_zeros(B, pad, d_in), x, x.new_zeros(B, k - 1 - pad, d_in)], 1)
    out = []
    for o in range(d_out):
        g = o // (d_out // groups)
        ins = xp[..., g * per:(g + 1) * per]  # the input features of o's group
        y = sum(ins[:, j:j + L] @ weight[o, :, j] for j in range(k))
        out.append(y + (bias[o] if bias is not None else 0))
    return torch.stack(out, -1)


CONVS = """    input x: sequence[L, 4]
    attention a { query = learned(4)  keys = x  score = multiplicative }
    feature g = cnn(x, 6, kernel = 3, groups = 2, act = none)
    output y = concat(g, cnn(x, 4, kernel = 3, separable = true, act = tanh))
"""


def test_grouped_and_separable_convolutions_follow_their_sums():
    model = build(CONVS, "feat_convs")
    x = torch.randn(2, 5, 4, dtype=DT, requires_grad=True)
    out = model(x=x).output
    grouped = model.g_conv
    assert grouped.groups == 2 and grouped.weight.shape == (6, 2, 3)
    depth, point = model.y_conv
    assert depth.groups == 4 and depth.bias is None and point.kernel_size == (1,)
    g = conv_reference(x, grouped.weight, grouped.bias, 2)
    dw = conv_reference(x, depth.weight, None, 4)  # one kernel per feature
    s = torch.tanh(conv_reference(dw, point.weight, point.bias, 1))  # then pointwise
    want = torch.cat([g, s], -1)
    close(out, want)
    same_grads(out, want, (x,))


# ---- located errors -------------------------------------------------------------------

@pytest.mark.parametrize("line, message, hint", [
    ("output o = split(x, 3, 3)", "`split(x, 3, 3)` takes part 3 of 3, but the parts are "
     "numbered 0 to 2", "split(x, 3, 2)"),
    ("output o = split(x, 3, 0)", "`split` cuts the features of `x` (L, 8) into 3 equal "
     "parts, but 3 does not divide 8", "a multiple of 3"),
    ("output o = cnn(x, 6, groups = 4)", "`cnn` with groups = 4 convolves 4 groups of "
     "features apart, but 4 does not divide both the 8 features of `x` and the 6 it makes",
     "groups = 2"),
    ("output o = cnn(x, 8, separable = true, groups = 2)", "`separable = true` is a depthwise "
     "convolution (one group per input feature) followed by a pointwise one, so it takes no "
     "`groups`", "drop `groups`"),
    ("output o = x * y", "cannot multiply `x` (L, 8) and `y` (M, 8): shapes differ",
     "run over different positions (L, M)"),
    ("output o = y * a.weights", "cannot multiply `y` (M, 8) and `a.weights` (5): shapes "
     "differ", "`a.weights` is attention weights over `L`"),
    ("output o = x + learned(4)", "cannot add `x` (L, 8) and `learned(…)` (4): shapes differ",
     "a vector over fewer leading axes with the same features"),
])
def test_shapes_that_do_not_combine_are_located_errors(line, message, hint):
    body = ("    input x: sequence[L, 8] (L = 5)\n    input y: sequence[M, 8]\n"
            "    attention a { query = learned(8)  keys = x  score = multiplicative }\n"
            f"    {line}\n")
    with pytest.raises(SpecError) as info:
        pipeline.load_text(HEAD + body + "}\n", "t.attn")
    d = info.value.diagnostics[0]
    assert d.message == message
    assert hint in d.hint
    assert d.loc.line == 6 and d.loc.column > 4


def test_an_update_keeps_its_shape():
    """`update q = q + c` with q one vector and c one per position would make the hop's
    query one per position: refused (eq. 37 adds a context of the query's shape)."""
    body = ("    input x: sequence[L, 8]\n    feature q = mean(x)\n"
            "    attention a { query = q  keys = x  score = multiplicative }\n"
            "    update q = q + x\n    output o = classify(q, 2)\n")
    with pytest.raises(SpecError) as info:
        pipeline.load_text(HEAD + body + "}\n", "t.attn")
    d = info.value.diagnostics[0]
    assert d.message == "cannot add `q` (8) and `x` (L, 8): shapes differ"
    assert "an `update` keeps the shape" in d.hint and d.loc.line == 6
    pipeline.load_text(HEAD + body.replace("q + x", "q + mean(x)") + "}\n", "t.attn")
