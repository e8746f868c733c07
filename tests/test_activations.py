"""Activations everywhere an `act` is accepted, as feature models, maxout, and the ways a
multi-head module joins its heads (`heads_out`), including Lin et al.'s flattened M = AH.

The references are the functions' own formulas (leaky ReLU: x if x > 0 else slope·x; DiSAN's
c·tanh(x / c); maxout: the max over each run of k consecutive units, Goodfellow et al.),
written here with elementary tensor ops, and each place's equation written from the survey
(eq. 6, 12, 33; Table II) and from Lin et al. (A = softmax(W_s2 tanh(W_s1 Hᵀ)), M = AH). The
weights are copied out of the generated module after being filled with random values.
Bad uses are golden snapshots of the CLI's stderr in tests/data/errors/act_*.expected
(``TAXCOMPILE_UPDATE_SNAPSHOTS=1`` rewrites them).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from taxcompile import pipeline
from taxcompile.diagnostics import SpecError

torch = pytest.importorskip("torch")

from taxcompile.run import load_module  # noqa: E402
from torch_support import inline_builder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "errors"
UPDATE = os.environ.get("TAXCOMPILE_UPDATE_SNAPSHOTS") == "1"
DT = torch.float64
HEADER = 'paper t { cite = "T" }\n'


def _where(x, pos, neg):
    return torch.where(x > 0, pos, neg)


# spec text -> the reference function, from each function's formula
REFERENCE = {
    "tanh": lambda x: (torch.exp(x) - torch.exp(-x)) / (torch.exp(x) + torch.exp(-x)),
    "relu": lambda x: _where(x, x, torch.zeros_like(x)),
    "sigmoid": lambda x: 1 / (1 + torch.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
    "elu": lambda x: _where(x, x, torch.exp(x) - 1),
    "elu(alpha = 0.5)": lambda x: _where(x, x, 0.5 * (torch.exp(x) - 1)),
    "leaky_relu": lambda x: _where(x, x, 0.01 * x),
    "leaky_relu(0.2)": lambda x: _where(x, x, 0.2 * x),
    "softplus": lambda x: torch.log(1 + torch.exp(x)),
    "scaled_tanh(5)": lambda x: 5 * torch.tanh(x / 5),
}
# the same activation as a feature model
AS_OP = {"elu(alpha = 0.5)": "elu(x, alpha = 0.5)", "leaky_relu(0.2)": "leaky_relu(x, 0.2)",
         "scaled_tanh(5)": "scaled_tanh(x, c = 5)"}


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_acts")


def build(gen, body: str, seed: int = 0):
    mod = gen(body)
    torch.manual_seed(seed)
    m = mod.Model(mod.Config())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every weight random: a zero bias must not hide a wrong formula
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.8)
    return mod, m


def P(t):
    return t.detach().to(DT)


def close(got, want, atol=1e-5):
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    torch.testing.assert_close(P(got), want.to(DT), atol=atol, rtol=0)


def softmax(e, dim):
    z = torch.exp(e - e.amax(dim, keepdim=True))
    return z / z.sum(dim, keepdim=True)


def every_place(act: str) -> str:
    op = AS_OP.get(act, f"{act}(x)")
    return f"""
    model m {{
        input x: sequence[L, 6]
        input z: sequence[M, 6]
        feature f_lin = linear(x, 4, act = {act})
        feature f_cnn = cnn(x, 4, act = {act})
        feature f_ffn = ffn(x, 5, act = {act})
        feature f_op  = {op}
        attention add {{ query = x  features = x  score = additive(d_w = 5, act = {act}) }}
        attention ql  {{ features = x  score = additive(d_w = 5, act = {act}) }}
        attention ag  {{ query = x  features = x  score = activated_general(act = {act}) }}
        affinity C = affinity(x, z, act = {act})
        attention co  {{ query = x  keys = z  score = affinity  affinity = C }}
        output y = concat(f_lin, f_cnn, f_ffn, f_op, add, ql, ag, co)
    }}
    """


@pytest.mark.parametrize("act", list(REFERENCE))
def test_activation_in_every_place(gen, act):
    """linear, cnn, ffn, the feature model itself, the additive score with and without a
    query, the activated general score and the affinity matrix, each against its equation
    with the activation's formula."""
    mod, m = build(gen, every_place(act))
    f = REFERENCE[act]
    B, L, M = 2, 5, 4
    g = torch.Generator().manual_seed(1)
    x, z = torch.randn(B, L, 6, generator=g) * 2, torch.randn(B, M, 6, generator=g) * 2
    out = m(x, z, return_attention=True)
    X, Z = P(x), P(z)
    lin = f(X @ P(m.f_lin_linear.weight).T + P(m.f_lin_linear.bias))
    conv = torch.nn.functional.conv1d(X.transpose(1, 2), P(m.f_cnn_conv.weight),
                                      P(m.f_cnn_conv.bias), padding=1).transpose(1, 2)
    l1, l2 = m.f_ffn_ffn[0], m.f_ffn_ffn[2]
    ffn = f(X @ P(l1.weight).T + P(l1.bias)) @ P(l2.weight).T + P(l2.bias)
    # eq. 6: e_ij = w^T act(W1 q_i + W2 k_j + b)
    a = m.add
    h = f((X @ P(a.W1[0])).unsqueeze(2) + (X @ P(a.W2[0])).unsqueeze(1) + P(a.b[0]))
    add_w = softmax(h @ P(a.w[0]), -1)  # (B, L, L)
    # eq. 33: e_j = w^T act(W k_j + b)
    q = m.ql
    ql_w = softmax(f(X @ P(q.W.weight).T + P(q.W.bias)) @ P(q.w[0]), -1)  # (B, L)
    # Table II: e_ij = act(k_j^T W q_i + b)
    ag = m.ag
    ag_w = softmax(f(torch.einsum("bjd,de,bie->bij", X, P(ag.W[0]), X) + P(ag.b[0])), -1)
    # eq. 12: C = act(X W_A Z^T); its rows are the scores
    co_w = softmax(f(X @ P(m.C_W) @ Z.transpose(1, 2)), -1)  # (B, L, M)
    want = torch.cat([lin, f(conv), ffn, f(X), add_w @ X,
                      (ql_w.unsqueeze(-1) * X).sum(1, keepdim=True).expand(B, L, 6),
                      ag_w @ X, co_w @ Z], -1)
    close(out.output, want)
    close(out.attention["add"][:, 0], add_w)
    close(out.attention["ql"][:, 0, 0], ql_w)
    close(out.attention["ag"][:, 0], ag_w)
    close(out.attention["co"][:, 0], co_w)


def maxout_ref(t: torch.Tensor, k: int) -> torch.Tensor:
    """Goodfellow et al.: unit j is the max of units jk, …, jk + k - 1 (Bahdanau et al.:
    t_j = max(t~_{2j-1}, t~_{2j}) for k = 2)."""
    d = t.shape[-1] // k
    return torch.stack([torch.stack([t[..., j * k + i] for i in range(k)], -1).max(-1).values
                        for j in range(d)], -1)


def test_maxout_widths_and_values(gen):
    """`act = maxout(k)` makes a linear/cnn/ffn layer k·d wide and keeps the max of each k;
    `maxout(x, k)` narrows d features to d / k."""
    mod, m = build(gen, """
    model m {
        input x: sequence[L, 6]
        feature a = linear(x, 4, act = maxout(3))
        feature b = cnn(x, 2, act = maxout(2))
        feature c = ffn(x, 5, act = maxout(2))
        feature d = maxout(x, 2)
        attention s { features = d  score = additive(d_w = 4) }
        output y = concat(a, b, c, d, s)
    }
    """)
    assert m.a_linear.weight.shape == (12, 6)
    assert m.b_conv.weight.shape == (4, 6, 3)
    assert [tuple(x.weight.shape) for x in (m.c_ffn[0], m.c_ffn[2])] == [(10, 6), (6, 5)]
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(2))
    out = m(x).output
    X = P(x)
    a = maxout_ref(X @ P(m.a_linear.weight).T + P(m.a_linear.bias), 3)
    conv = torch.nn.functional.conv1d(X.transpose(1, 2), P(m.b_conv.weight), P(m.b_conv.bias),
                                      padding=1).transpose(1, 2)
    l1, l2 = m.c_ffn[0], m.c_ffn[2]
    c = maxout_ref(X @ P(l1.weight).T + P(l1.bias), 2) @ P(l2.weight).T + P(l2.bias)
    d = maxout_ref(X, 2)
    assert out.shape == (2, 5, 4 + 2 + 6 + 3 + 3)
    close(out[..., :15], torch.cat([a, maxout_ref(conv, 2), c, d], -1))
    cs = pipeline.load_text(HEADER + textwrap.dedent("""
    model m {
        input x: sequence[L, 6]
        feature a = linear(x, 4, act = maxout(3))
        feature d = maxout(a, 2)
        attention s { features = d  score = additive(d_w = 4) }
    }"""), "t.attn")
    assert str(cs.models[0].shapes["a"]) == "(L, 4)" and str(cs.models[0].shapes["d"]) == "(L, 2)"


def test_bahdanau_output_is_a_maxout_layer():
    """specs/bahdanau2015.attn: t~ = U_o s + C_o c is 2l wide and t_j = max(t~_{2j-1}, t~_{2j})
    feeds the softmax layer (the committed generated model, at tiny sizes)."""
    mod = load_module((ROOT / "generated" / "bahdanau2015_rnnsearch.py").read_text(), "_acts_bah")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    m = mod.Model(cfg)
    assert m.logits_linear.out_features == 2 * cfg.maxout
    seen = {}
    m.logits_linear.register_forward_hook(lambda mod_, i, o: seen.__setitem__("t~", o))
    m.logits_head.register_forward_hook(lambda mod_, i, o: seen.__setitem__("t", i[0]))
    out = m(**mod.example_inputs(cfg=cfg)).output
    close(seen["t"], maxout_ref(P(seen["t~"]), 2))
    close(out, seen["t"].to(DT) @ P(m.logits_head.weight).T + P(m.logits_head.bias))


def test_disan_token2token_score_is_scaled_tanh():
    """specs/shen2018.attn: f(x_i, x_j) = W_d^T c tanh([W1 x_i + W2 x_j + b] / c), c = 5,
    forward mask (j < i), a softmax per feature over the keys (eq. 30-32): the context on the
    fast path and the weights on the explicit one."""
    mod = load_module((ROOT / "generated" / "shen2018_disan.py").read_text(), "_acts_disan")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    m = mod.Model(cfg)
    with torch.no_grad():
        for p in m.fw.parameters():
            p.mul_(4)  # pre-activations well past 5, where c tanh(x / c) differs from tanh
    seen = {}
    m.fw.register_forward_hook(lambda mod_, args, o: seen.__setitem__("fw", (args, o)))
    inputs = mod.example_inputs(cfg=cfg)
    for weights in (False, True):
        m(**inputs, return_attention=weights)
        (q, k, v, key_mask, *_), (c, a, _) = seen["fw"]
        Q, K, V = P(q), P(k), P(v)
        fw = m.fw
        pre = (Q @ P(fw.W1[0])).unsqueeze(2) + (K @ P(fw.W2[0])).unsqueeze(1) + P(fw.b[0])
        e = (5 * torch.tanh(pre / 5)) @ P(fw.w[0])  # (N, Lq, Lk, d_v)
        Lq, Lk = Q.shape[1], K.shape[1]
        keep = torch.ones(Lq, Lk, dtype=torch.bool).tril(-1) & key_mask[:, None, :]
        e = e.masked_fill(~keep.unsqueeze(-1), -math.inf)
        w = torch.nan_to_num(softmax(e, 2), nan=0.0)  # a row with no key: zeros
        close(c, (w * V.unsqueeze(1)).sum(2))
        if weights:
            close(a[:, 0], w)


def lin_reference(m, sent: torch.Tensor, mask: torch.Tensor | None):
    """Lin et al.: H from the biLSTM (each example run alone over its own words), A =
    softmax(W_s2 tanh(W_s1 H^T)), M = A H (r x 2u) flattened row by row, a ReLU MLP, and
    P = ||A A^T - I||_F^2."""
    outs, As = [], []
    for b in range(sent.shape[0]):
        n = int(mask[b].sum()) if mask is not None else sent.shape[1]
        H = P(m.H_bilstm(m.H_embed(sent[b:b + 1, :n]))[0][0])  # (n, 2u)
        A = softmax(P(m.M.w) @ torch.tanh(P(m.M.W.weight) @ H.T), -1)  # (r, n)
        Mflat = (A @ H).reshape(-1)  # (r * 2u)
        hid = torch.relu(P(m.label_linear.weight) @ Mflat + P(m.label_linear.bias))
        outs.append(P(m.label_head.weight) @ hid + P(m.label_head.bias))
        As.append(torch.nn.functional.pad(A, (0, sent.shape[1] - n)))
    A = torch.stack(As)
    eye = torch.eye(A.shape[1], dtype=DT)
    penalty = ((A @ A.transpose(1, 2) - eye) ** 2).sum((1, 2)).mean()
    return torch.stack(outs), A, penalty


@pytest.mark.parametrize("masked", [False, True])
def test_lin2017_flattens_m_into_the_mlp(masked):
    """specs/lin2017.attn (`heads_out = concat`): the classifier reads the flattened
    r x 2u embedding matrix M = AH, no W_O."""
    mod = load_module((ROOT / "generated" / "lin2017_self_attentive.py").read_text(), "_acts_lin")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    m = mod.Model(cfg)
    assert not hasattr(m.M, "out")
    assert m.label_linear.in_features == cfg.r * 2 * cfg.u
    inputs = mod.example_inputs(batch_size=3, cfg=cfg)
    if not masked:
        inputs.pop("sent_mask")
    out = m(**inputs, return_attention=True)
    want, A, penalty = lin_reference(m, inputs["sent"], inputs.get("sent_mask"))
    close(out.output, want)
    close(out.attention["M"][:, :, 0], A)
    close(out.penalty, penalty)


def test_heads_out_mean_and_concat_with_a_query(gen):
    """With a query the H heads read d_v / H slices (eq. 38): `concat` puts the slices side by
    side (width d_v, no W_O) and `mean` averages them (width d_v / H, GAT's last layer)."""
    body = """
    model m {
        input x: sequence[L, 8]
        attention a { query = x  features = x  score = scaled_multiplicative  heads = 2
                      heads_out = %s }
        output y = a
    }
    """
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(3))
    X = P(x)
    heads = []
    for h in range(2):
        s = X[..., 4 * h:4 * h + 4]
        heads.append(softmax(s @ s.transpose(1, 2) / 2, -1) @ s)
    for how, want in (("concat", torch.cat(heads, -1)), ("mean", (heads[0] + heads[1]) / 2)):
        mod, m = build(gen, body % how)
        assert not hasattr(m.a, "out")
        for weights in (False, True):  # the fused kernel and the explicit path
            close(m(x, return_attention=weights).output, want)


def test_heads_out_mean_without_a_query(gen):
    """Without a query each of the H rows of weights reads all of v: `mean` averages the H
    contexts (width d_v)."""
    mod, m = build(gen, """
    model m {
        input x: sequence[L, 6]
        attention a { features = x  score = additive(d_w = 5)  heads = 3  heads_out = mean }
        output y = a
    }
    """)
    x = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(4))
    X = P(x)
    A = softmax(torch.tanh(X @ P(m.a.W.weight).T + P(m.a.W.bias)) @ P(m.a.w).T, 1)  # (B, L, 3)
    close(m(x).output, (A.transpose(1, 2) @ X).mean(1))


# ---- errors ---------------------------------------------------------------------------

VALID = "    attention a { query = project(x)  keys = x  score = multiplicative }\n"


def err_spec(*lines: str) -> str:
    return (HEADER + "model m {\n    input src: tokens[S] (vocab = 100)\n"
            "    feature x = embed(src, 64)\n" + "".join(f"    {s}\n" for s in lines) + VALID + "}\n")


ERRORS = {
    "act_unknown": err_spec("feature y = linear(x, 8, act = leaky_rleu(0.2))"),
    "act_bad_slope": err_spec("feature y = linear(x, 8, act = leaky_relu(2))"),
    "act_params_not_accepted": err_spec("feature y = linear(x, 8, act = tanh(2))"),
    "act_maxout_in_score": err_spec(
        "attention b { query = x  keys = x  score = additive(d_w = 8, act = maxout(2)) }"),
    "act_maxout_not_dividing": err_spec("feature y = maxout(x, 3)"),
    "act_scaled_tanh_needs_c": err_spec("feature y = ffn(x, 8, act = scaled_tanh)"),
    "act_gated_outside_ffn": err_spec("feature y = linear(x, 8, act = swiglu)"),
    "heads_out_one_head": err_spec(
        "attention b { query = x  keys = x  score = multiplicative  heads_out = concat }"),
}


@pytest.fixture(scope="module")
def error_runs():
    if UPDATE:
        for name, text in ERRORS.items():
            (DATA / f"{name}.attn").write_text(text, encoding="utf-8")
    paths = [str((DATA / f"{name}.attn").relative_to(ROOT)) for name in ERRORS]
    r = subprocess.run([sys.executable, "-m", "taxcompile", "check", *paths], cwd=ROOT,
                       capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    return r.stderr


@pytest.mark.parametrize("name", list(ERRORS))
def test_error_snapshot(name, error_runs):
    path = DATA / f"{name}.attn"
    assert path.read_text(encoding="utf-8") == ERRORS[name]
    part = [block for block in error_runs.split(f"tests/data/errors/{name}.attn:")[1:]]
    assert len(part) == 1, error_runs  # one error per case
    got = f"tests/data/errors/{name}.attn:" + part[0].split("tests/data/errors/")[0]
    expected = DATA / f"{name}.expected"
    if UPDATE:
        expected.write_text(got, encoding="utf-8")
    assert got == expected.read_text(encoding="utf-8")


def test_a_decoder_cannot_read_a_concatenated_context():
    with pytest.raises(SpecError, match="heads_out = concat"):
        pipeline.load_text(HEADER + textwrap.dedent("""
        model m {
            input src: tokens[S] (vocab = 50)
            input tgt: tokens[T] (vocab = 50, autoregressive)
            feature h = embed(src, 8)
            query s = gru(embed(tgt, 8), 8, feed = att)
            attention att { query = s  features = h  score = multiplicative  heads = 2
                            heads_out = concat }
            output y = classify(att, 50)
        }"""), "t.attn")


def test_generated_lines_fit(gen):
    """Activations with parameters inside the attention templates stay within 100 columns."""
    src = (Path(gen("""
    model m {
        input x: sequence[L, 6]
        attention a { query = x  features = x  score = activated_general(act = leaky_relu(0.2)) }
        attention b { query = x  features = x  dimensionality = multi
                      score = additive(d_w = 5, act = elu(alpha = 0.5)) }
        output y = concat(a, b)
    }
    """).__file__)).read_text()
    assert max(len(line) for line in src.splitlines()) <= 100
