"""Dropout, shared weights, tied embeddings and the embedding scale (issue 13).

Each check computes the equation in the test (softmax, the additive score of eq. 6-9 and
14-15, the sinusoid, y E^T + b) and compares the generated model with it; dropout masks are
drawn from the same RNG state as the model draws them (one ``F.dropout`` of the same shape)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import error_snapshot
from taxcompile import pipeline

torch = pytest.importorskip("torch")
# cnn(kernel = 2) with padding="same" (Lu et al.'s phrase features): torch warns, harmlessly
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
F = torch.nn.functional

from taxcompile import codegen  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def generated(stem: str):
    return load_module((ROOT / "generated" / f"{stem}.py").read_text(encoding="utf-8"),
                       f"reg_{stem}")


def compiled(text: str, name: str):
    cs = pipeline.load_text(text, "t.attn")
    return load_module(codegen.generate(cs, cs.models[0], "t.attn"), name)


def sinusoid(L: int, d: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…) (Vaswani et al. 3.5)."""
    pos = torch.arange(L, dtype=torch.float64)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float64)
    pe = torch.zeros(L, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos / 10000 ** (i / d))
    pe[:, 1::2] = torch.cos(pos / 10000 ** (i / d))
    return pe.float()


# ---- the Transformer base (Vaswani et al.) ------------------------------------------------


@pytest.fixture(scope="module")
def vaswani():
    return generated("vaswani2017_transformer")


def test_transformer_base_has_65m_parameters(vaswani):
    torch.manual_seed(0)
    model = vaswani.Model(vaswani.Config())
    unique = {id(p): p.numel() for m in model.modules() for p in m.parameters(recurse=False)}
    n = sum(unique.values())
    assert abs(n - 65e6) <= 0.05 * 65e6, n  # Table 3: 65M
    # one (vocab, d_model) matrix: both embeddings and the pre-softmax layer
    cfg = vaswani.Config()
    assert [p.shape for p in model.parameters()].count((cfg.vocab, cfg.d_model)) == 1


def test_transformer_embeddings_and_output_layer_are_one_matrix(vaswani):
    """x = E[src] sqrt(d) + PE, y = E[tgt] sqrt(d) + PE, logits = y_N E^T + b, one E."""
    cfg = vaswani.Config.tiny()
    torch.manual_seed(0)
    model = vaswani.Model(cfg).eval()
    inputs = vaswani.example_inputs(cfg=cfg)
    seen = {}
    model.encoder[0].register_forward_pre_hook(lambda m, a: seen.update(x=a[0]))
    model.decoder[0].register_forward_pre_hook(lambda m, a: seen.update(y=a[0]))
    model.decoder[-1].register_forward_hook(lambda m, a, out: seen.update(top=out))
    logits = model(**inputs).output
    E = next(p for p in model.parameters() if p.shape == (cfg.vocab, cfg.d_model))
    bias = next(p for p in model.parameters() if p.shape == (cfg.vocab,))
    for name, tokens in (("x", inputs["src"]), ("y", inputs["tgt"])):
        want = E[tokens] * math.sqrt(cfg.d_model) + sinusoid(tokens.shape[1], cfg.d_model)
        torch.testing.assert_close(seen[name], want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits, seen["top"] @ E.T + bias, rtol=1e-5, atol=1e-5)
    # tied to the output layer, the embedding starts N(0, 1/d_model^2) (tests/test_tied_init.py)
    wide = vaswani.Model(vaswani.Config(d_model=64, heads=4, layers=1, d_ff=16, vocab=4000))
    assert abs(wide.x_embed.weight.std().item() * 64 - 1) < 0.01


def test_transformer_trains_with_dropout(vaswani):
    cfg = vaswani.Config.tiny()
    torch.manual_seed(0)
    model = vaswani.Model(cfg)
    inputs = vaswani.example_inputs(cfg=cfg)
    model.train()
    a, b = model(**inputs).output, model(**inputs).output
    assert not torch.allclose(a, b)  # two train-mode passes differ
    torch.manual_seed(7)
    c = model(**inputs).output
    torch.manual_seed(7)
    assert torch.equal(c, model(**inputs).output)  # the same seed, the same pass
    model.eval()
    assert torch.equal(model(**inputs).output, model(**inputs).output)
    # P_drop = 0.1 on the embeddings + positions and on every sub-layer's output (5.4)
    drops = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert drops == [0.1] * (2 + 2 * cfg.layers + 3 * cfg.layers)


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


def test_qanet_shares_its_embedding_encoder():
    mod = generated("yu2018_qanet")
    cfg = mod.Config(d=8, heads=2, d_emb=8, vocab=50)
    torch.manual_seed(0)
    model = mod.Model(cfg)
    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    assert len(embeddings) == 1  # one word embedding for the context and the question
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv1d)]
    # one embedding encoder; the 7 model encoder blocks; each a depthwise separable
    # convolution (a depthwise and a pointwise Conv1d)
    assert len(convs) == 2 * (4 + 7 * 2)
    attn = []
    model.c_self.register_forward_hook(lambda m, a, out: attn.append(a))
    out = model(**mod.example_inputs(cfg=cfg), return_attention=True)
    assert len(attn) == 2  # c_self's module runs for the context and for the question
    assert set(out.attention) >= {"c_self", "q_self"}
    # gradients of both inputs' paths accumulate in the one block
    conv = model.emb_conv[0].c_1_conv[0].weight  # the depthwise kernels
    out.output["start"].sum().backward()
    assert conv.grad is not None and conv.grad.abs().sum() > 0


def test_eq9_module_uses_the_weights_of_eq7():
    """Alternating co-attention: c1's e_l = w^T tanh(W1 c2 + W k_l + b) with c0's W, b, w."""
    text = (ROOT / "examples" / "alternating_coattention.attn").read_text(encoding="utf-8")
    mod = compiled(text, "reg_alternating")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg)
    assert model.c1.W is model.c0.W and model.c1.w is model.c0.w
    got = {}
    model.c1.register_forward_hook(lambda m, a, out: got.update(args=a, out=out))
    model(**mod.example_inputs(cfg=cfg), return_attention=True)
    q, k = got["args"][0], got["args"][1]  # (B, 1, d), (B, HW, d)
    W, b, w = model.c0.W.weight, model.c0.W.bias, model.c0.w[0]
    e = torch.tanh(q @ model.c1.W1[0] + k @ W.T + b) @ w  # (B, HW)
    torch.testing.assert_close(got["out"][1][:, 0, 0], e.softmax(-1), rtol=1e-5, atol=1e-6)
    c0 = {id(p) for p in model.c0.parameters()}
    own = [p for p in model.c1.parameters() if id(p) not in c0]
    assert own == [model.c1.W1]  # the query's W1 is c1's only weight of its own


def test_eq14_15_directions_share_w1_and_w2():
    """HieCoAtt: H^v = tanh(W_v V + (W_q Q) C), H^q = tanh(W_q Q + (W_v V) C^T): one W_v and
    one W_q for both directions, a w per direction."""
    mod = generated("lu2016_parallel")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg)
    got = {}
    model.q_w.register_forward_hook(lambda m, a, kw, out: got.update(a=a, kw=kw, out=out),
                                    with_kwargs=True)
    model(**mod.example_inputs(cfg=cfg), return_attention=True)
    v, qw, A = got["a"][0], got["a"][1], got["kw"]["affinity"]  # query = v, keys = qw
    W_v, W_q = model.img_w.W_k.weight, model.img_w.W_q.weight  # img_w: keys v, query qw
    e = model.q_w.w(torch.tanh((A.transpose(1, 2) @ v) @ W_v.T + qw @ W_q.T)).squeeze(-1)
    keep = got["a"][3]
    want = e.masked_fill(~keep, float("-inf")).softmax(-1) if keep is not None else e.softmax(-1)
    torch.testing.assert_close(got["out"][1][:, 0, 0], want, rtol=1e-5, atol=1e-6)
    assert model.q_w.w is not model.img_w.w


def test_dropout_and_sharing_leave_the_classification_alone():
    """A context under dropout is still a context added to a stream (eq. 37): Table III
    reads the same row with and without dropout, shared and tied weights."""
    from conftest import classify_text

    text = (ROOT / "specs" / "vaswani2017.attn").read_text(encoding="utf-8")
    plain = text.replace(", scale = true, share = x)", ")").replace(", scale = true)", ")")
    plain = plain.replace(", tie = x)", ")")
    for inner in ("self", "cross", "ffn(x, d_ff)", "ffn(y, d_ff)"):
        plain = plain.replace(f"dropout({inner}, p_drop)", inner)
    plain = plain.replace("dropout(positional(", "(positional(").replace("), p_drop)", "))")
    body = plain.split("model transformer")[1]
    assert "dropout(" not in body and "share =" not in body and "tie =" not in body, body
    assert classify_text(text) == classify_text(plain)


# ---- dropout between a stacked RNN's layers (Luong et al.: Zaremba et al.'s p = 0.2) ----------

RNN_DROP = """paper t { cite = "T" }
model m {
    input src: tokens[S] (vocab = 50)
    input tgt: tokens[T] (vocab = 50, autoregressive)
    feature h = lstm(embed(src, 16), 16, layers = 3, dropout = 0.5)
    query s = lstm(embed(tgt, 16), 16, layers = 3, dropout = 0.5, feed = a, init = h)
    attention a { query = s  keys = h  score = multiplicative }
    output y = classify(concat(s, a), 50)
}
"""


def test_luong_spec_drops_between_its_stacked_layers():
    mod = generated("luong2015_global_dot")
    model = mod.Model(mod.Config())
    rnns = [m for m in model.modules() if isinstance(m, torch.nn.LSTM)]
    assert [(r.num_layers, r.dropout) for r in rnns] == [(4, 0.2)]  # the encoder (4.1)
    assert [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)] == [0.2]


def test_decoder_cells_drop_what_each_layer_passes_up():
    mod = compiled(RNN_DROP, "reg_rnn_drop")
    torch.manual_seed(0)
    model = mod.Model(mod.Config())
    cells = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList)
                 and isinstance(m[0], torch.nn.LSTMCell))
    seen: dict[int, list] = {0: [], 1: [], 2: []}
    for i, cell in enumerate(cells):
        cell.register_forward_hook(lambda m, a, out, i=i: seen[i].append((a[0], out[0])))
    inputs = mod.example_inputs(batch_size=2)
    model.train()
    a, b = model(**inputs).output, model(**inputs).output
    assert not torch.allclose(a, b)
    # the input of layer i > 0 is the output h of layer i - 1, each feature zeroed or scaled
    # by 1 / (1 - p): dropout between the layers, none on the first layer's input
    steps = len(seen[0])
    assert steps > 0 and len(seen[1]) == len(seen[2]) == steps
    for i in (1, 2):
        for (x_in, _), (_, h_below) in zip(seen[i], seen[i - 1]):
            kept = x_in != 0
            assert (~kept).any() and kept.any()
            assert torch.allclose(x_in[kept], h_below[kept] / 0.5)
    # layer 0 reads [x_t; a_(t-1)] as it is: its embedding half has no zeroed feature
    assert all(x.shape[-1] == 16 + 16 and (x[:, :16] != 0).all() for x, _ in seen[0])
    model.eval()
    torch.manual_seed(1)
    c = model(**inputs).output
    torch.manual_seed(2)
    assert torch.equal(c, model(**inputs).output)


# ---- errors -----------------------------------------------------------------------------------

SNAPSHOTS = ["share_missing_operator", "share_sizes_differ", "share_other_hop",
             "tie_wrong_classes", "attention_share_mechanisms", "dropout_probability",
             "rnn_dropout_one_layer"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want
