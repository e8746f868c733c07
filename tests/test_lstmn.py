"""Attention inside a recurrence (issue 25): `lstm(x, d, state = ATT)`, LSTMN's
intra-attention (Cheng, Dong & Lapata 2016, eq. 4-9), against a float64 LSTMN written here
step by step from the paper's equations and fed the generated module's weights: the
states at every step, padding, causality (the attention at step t sees h_1 … h_(t-1)
only), c~_t as the weighted cells, the GRU variant, gradients, the located errors and the
example's classification."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, cell_of, classify_text, error_snapshot  # noqa: E402
from torch_support import inline_builder  # noqa: E402

DT = torch.float64
HEADER = 'paper lstmn {\n    cite = "Test"\n    title = "LSTMN tests"\n    year = 2016\n}\n'
D_X, HID, D_W = 5, 6, 4


def spec(cell: str = "lstm") -> str:
    return f"""
    model m {{
        input x: sequence[N, {D_X}]
        query h = {cell}(x, {HID}, state = intra)
        attention intra {{
            query = concat(x, prev(intra))
            features = h
            score = additive(d_w = {D_W}, bias = false)
        }}
        output y = identity(h)
    }}
    """


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_lstmn")


def model_of(gen, cell: str = "lstm", seed: int = 0):
    mod = gen(spec(cell))
    torch.manual_seed(seed)
    return mod.Model(mod.Config()).double()


def reference(model, x: torch.Tensor, cell: str = "lstm", cells: str = "weighted",
              att=None, rnn=None) -> torch.Tensor:
    """The LSTMN over one sequence x (L, d_x), h_t at every step (L, hidden), written from
    the paper: a_i^t = v^T tanh(W_h h_i + W_x x_t + W_h~ h~_(t-1)) over i < t (eq. 4),
    s^t = softmax(a^t) (eq. 5), [h~_t; c~_t] = sum_i s_i^t [h_i; c_i] (eq. 6), then the
    cell with (h~_t, c~_t) as its previous state (eq. 7-9); h~_1 = c~_1 = 0. ``cells``
    gives the wrong variants the model must not match; ``att`` and ``rnn``: the attention
    and the cell (default: the model's only ones)."""
    att = att or model.intra
    W1, W2, v = att.W1[0], att.W2[0], att.w[0]  # W1 = [W_x; W_h~], W2 = W_h, v
    Wx, Wht = W1[:x.shape[1]], W1[x.shape[1]:]
    cellmod = rnn or next(m for m in model.modules() if isinstance(m, (torch.nn.LSTMCell,
                                                                       torch.nn.GRUCell)))
    Wi, Wh, bi, bh = cellmod.weight_ih, cellmod.weight_hh, cellmod.bias_ih, cellmod.bias_hh
    hs, cs, out = [], [], []
    ht_prev = torch.zeros(HID, dtype=DT)  # h~_(t-1), the query's part; h~_0 = 0
    for t in range(x.shape[0]):
        if t > 0:  # the states h_i, i < t
            a = torch.stack([v @ torch.tanh(W2.T @ hs[i] + Wx.T @ x[t] + Wht.T @ ht_prev)
                             for i in range(t)])
            s = torch.softmax(a, 0)
            ht = sum(s[i] * hs[i] for i in range(t))
            ct = {"weighted": sum(s[i] * cs[i] for i in range(t)), "previous": cs[-1],
                  "zero": torch.zeros(HID, dtype=DT)}[cells]
        else:
            ht = torch.zeros(HID, dtype=DT)
            ct = torch.zeros(HID, dtype=DT)
        gi, gh = Wi @ x[t] + bi, Wh @ ht + bh
        if cell == "lstm":  # PyTorch's gate order: i, f, g, o
            i, f, g, o = (gi + gh).chunk(4)
            c = torch.sigmoid(f) * ct + torch.sigmoid(i) * torch.tanh(g)  # eq. 8
            h = torch.sigmoid(o) * torch.tanh(c)  # eq. 9
        else:  # a GRU step from h~_t
            ri, zi, ni = gi.chunk(3)
            rh, zh, nh = gh.chunk(3)
            r, z = torch.sigmoid(ri + rh), torch.sigmoid(zi + zh)
            n = torch.tanh(ni + r * nh)
            h, c = (1 - z) * n + z * ht, torch.zeros(HID, dtype=DT)
        hs.append(h)
        cs.append(c)
        out.append(h)
        ht_prev = ht
    return torch.stack(out)


def inputs(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 7, D_X, generator=g, dtype=DT)
    lengths = [7, 4, 1]
    mask = torch.arange(7)[None, :] < torch.tensor(lengths)[:, None]
    return x, mask, lengths


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_states_match_the_reference_at_every_step(gen, cell):
    """Padded positions (garbage in x there) change no real state: each example's
    reference runs over its real positions only."""
    model = model_of(gen, cell)
    x, mask, lengths = inputs()
    x = x.masked_fill(~mask[..., None], 1e3)  # padding the model must not read
    h = model(x, mask).output
    for b, L in enumerate(lengths):
        torch.testing.assert_close(h[b, :L], reference(model, x[b, :L], cell),
                                   rtol=1e-10, atol=1e-12)


def test_wrong_variants_do_not_match(gen):
    """The reference comparison can fail: a c~_t that is not the weighted cells (the last
    cell c_(t-1) as a plain LSTM has, or zeros) gives other states."""
    model = model_of(gen)
    x, mask, _ = inputs(2)
    h = model(x[:1], mask[:1]).output[0]
    for cells in ("previous", "zero"):
        assert (h - reference(model, x[0], cells=cells)).abs().max() > 1e-4, cells


def test_causal_weights_and_states(gen):
    """The weights at step t cover the positions before t only and sum to one (none at
    t = 1); changing x at position t leaves every state before t unchanged."""
    model = model_of(gen)
    x, mask, lengths = inputs(3)
    out = model(x, mask, return_attention=True)
    a = out.attention["intra"][:, 0]  # (B, N, N): step t's weights over the positions
    T = x.shape[1]
    assert (a * torch.ones(T, T, dtype=torch.bool).tril(-1).logical_not() == 0).all()
    for b, L in enumerate(lengths):
        torch.testing.assert_close(a[b, 1:L, :L].sum(-1), torch.ones(L - 1, dtype=DT))
        assert (a[b, 0] == 0).all()
    y = x.clone()
    y[:, 4] += 1.0
    h2 = model(y, mask).output
    torch.testing.assert_close(h2[:, :4], out.output[:, :4], rtol=0, atol=0)
    assert (h2[0, 4:] - out.output[0, 4:]).abs().max() > 1e-6


def test_gradients_reach_every_weight(gen):
    model = model_of(gen)
    x, mask, _ = inputs(4)
    x = x[:1, :4].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda z: model(z, None).output, (x,))
    model(x, None).output.square().sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_stacked_in_a_repeat(gen):
    """Two LSTMN layers as the hops of a `repeat`, the second over the first's states."""
    mod = gen(f"""
    model m {{
        input s: sequence[N, {HID}]
        feature x = identity(s)
        repeat layer 2 {{
            query h = lstm(x, {HID}, state = intra)
            attention intra {{ query = concat(x, prev(intra))  features = h
                              score = additive(d_w = {D_W}, bias = false) }}
            update x = h
        }}
        output y = identity(x)
    }}
    """)
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x = torch.randn(2, 5, HID, generator=torch.Generator().manual_seed(5), dtype=DT)
    h = model(x).output
    for b in range(2):
        h1 = reference(model, x[b], att=model.layer1_intra, rnn=model.layer1_h_lstm_cells[0])
        h2 = reference(model, h1, att=model.layer2_intra, rnn=model.layer2_h_lstm_cells[0])
        torch.testing.assert_close(h[b], h2, rtol=1e-10, atol=1e-12)


ERRORS = ["lstmn_state_not_attention", "lstmn_keys_not_the_rnn", "lstmn_state_with_heads",
          "lstmn_state_with_init"]


@pytest.mark.parametrize("name", ERRORS)
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


def test_example_reads_as_self_attention_with_the_reason():
    text = (ROOT / "examples" / "cheng2016_lstmn.attn").read_text(encoding="utf-8")
    row = classify_text(text)
    assert (row["query_type"], row["scoring"], row["alignment"]) == \
        ("Self-Attentive", "Additive", "Global")
    reasons = cell_of(text, "query_type")["Self-Attentive"]
    assert any("its own previous context" in r for r in reasons), reasons


LM = """
    model lm {
        input tgt: tokens[T] (vocab = 12, autoregressive)
        feature x = embed(tgt, 5)
        query h = lstm(x, 6, state = intra)
        attention intra { query = concat(x, prev(intra))  features = h  score = additive }
        output logits = classify(h, 12)
    }
    """


def test_a_language_model_generates_as_the_full_reruns(gen):
    """Over an autoregressive input (the paper's language model) generate() re-runs the
    whole model for each token (a state attention needs every earlier state): greedy
    decoding equals the argmax of full runs over the prefixes."""
    mod = gen(LM)
    torch.manual_seed(0)
    m = mod.Model(mod.Config()).double().eval()
    got = m.generate(max_len=5, bos=1, eos=11, batch_size=3)
    tokens = torch.full((3, 1), 1)
    with torch.no_grad():
        for _ in range(got.shape[1]):
            nxt = m(tokens).output[:, -1].argmax(-1)
            tokens = torch.cat([tokens, nxt[:, None]], 1)
    done = (tokens[:, 1:] == 11).cumsum(1) - (tokens[:, 1:] == 11).long() > 0  # after eos
    torch.testing.assert_close(got.masked_fill(done, 11), tokens[:, 1:].masked_fill(done, 11))
