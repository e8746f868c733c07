"""The recurrent decoders of Bahdanau et al., Luong et al. and Xu et al., as the committed
specs build them (generated/, at ``Config.tiny()`` sizes), against step-by-step references
written here from the papers' equations:

* Bahdanau et al. 2015 (appendix A.2): s_0 = tanh(W_s <-h_1); e_ij = v_a^T tanh(W_a s_(i-1) +
  U_a h_j) (eq. 6); c_i = sum_j a_ij h_j; s_i = GRU([E y_(i-1); c_i], s_(i-1)): the attention
  reads the previous state and the GRU the context of its own step.
* Luong et al. 2015: a stacked LSTM whose layer l starts from the encoder's final (h, c) of
  layer l; a_t = align(h_t, h_s) over this step's top state; h~_t = tanh(W_c [c_t; h_t])
  (eq. 5); input feeding: step t reads [E y_t; h~_(t-1)] (section 3.3). Local-m: the softmax
  inside [t - D, t + D] and nothing else (eq. 27); local-p adds the Gaussian around the
  predicted p_t (eq. 28-29).
* Xu et al. 2015: c_0 = tanh(W_c mean_i a_i + b), h_0 = tanh(W_h mean_i a_i + b) (f_init);
  e_ti = f_att(a_i, h_(t-1)); the LSTM reads [E y_(t-1); z_t]; hard attention takes
  z_t = a_argmax in eval().

The references run per example over its real positions only (their own GRU/LSTM recurrences
from the weights of the generated modules, no torch.nn RNN), in float64, and the model runs
in float64 too, so they agree to 1e-9. Also here: the forms no paper spec uses (a stacked
GRU from an encoder GRU, an LSTM from h_0 alone, `prev(s)` in a fed node) on inline specs,
and the decoders' error messages (snapshots in tests/data/errors/).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from taxcompile.run import load_module  # noqa: E402
from torch_support import fast_cpu  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "errors"
ATOL = 1e-9
DT = torch.float64


@pytest.fixture(autouse=True)
def one_thread():
    with fast_cpu():  # step-by-step loops of tiny ops: a second thread only waits
        yield


def model_of(stem: str):
    """The committed generated model, at Config.tiny() sizes, random weights, float64."""
    path = ROOT / "generated" / f"{stem}.py"
    mod = load_module(path.read_text(encoding="utf-8"), f"_taxcompile_decoders_{stem}")
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every parameter random: a zero bias could hide a wrong formula
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m.to(DT).eval()


def P(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(DT)


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    torch.testing.assert_close(got.detach(), want, atol=ATOL, rtol=0)


def lengths_mask(B: int, L: int, lengths: list[int]) -> torch.Tensor:
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]


# ---- recurrences from the equations (PyTorch's gate layout) ------------------------------------


def gru_cell(W_ih, W_hh, b_ih, b_hh, x, h):
    """r = s(W_r x + U_r h), z = s(W_z x + U_z h), n = tanh(W_n x + r (U_n h)),
    h' = (1 - z) n + z h (gates in the order r, z, n)."""
    gi, gh = W_ih @ x + b_ih, W_hh @ h + b_hh
    H = h.shape[0]
    r = torch.sigmoid(gi[:H] + gh[:H])
    z = torch.sigmoid(gi[H:2 * H] + gh[H:2 * H])
    n = torch.tanh(gi[2 * H:] + r * gh[2 * H:])
    return (1 - z) * n + z * h


def lstm_cell(W_ih, W_hh, b_ih, b_hh, x, h, c):
    """i, f, g, o = s, s, tanh, s of W x + U h + b; c' = f c + i g; h' = o tanh(c')."""
    gates = W_ih @ x + b_ih + W_hh @ h + b_hh
    i, f, g, o = gates.chunk(4)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def rnn_weights(rnn, layer: int, suffix: str = ""):
    return [P(getattr(rnn, f"{w}_l{layer}{suffix}"))
            for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


def cell_weights(cell):
    return [P(cell.weight_ih), P(cell.weight_hh), P(cell.bias_ih), P(cell.bias_hh)]


def run_gru(w, xs, reverse=False):
    """A GRU over the rows of xs (only the real positions), from h = 0."""
    h = torch.zeros(w[1].shape[1], dtype=DT)
    out = [None] * len(xs)
    for j in (reversed(range(len(xs))) if reverse else range(len(xs))):
        h = gru_cell(*w, xs[j], h)
        out[j] = h
    return torch.stack(out)


def run_lstm_stack(rnn, layers: int, xs):
    """A stacked LSTM over the rows of xs: the top layer's outputs and each layer's final
    (h, c)."""
    finals = []
    for layer in range(layers):
        w = rnn_weights(rnn, layer)
        h = c = torch.zeros(w[1].shape[1], dtype=DT)
        out = []
        for x in xs:
            h, c = lstm_cell(*w, x, h, c)
            out.append(h)
        xs = torch.stack(out)
        finals.append((h, c))
    return xs, finals


def softmax_over(e: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    a = torch.zeros_like(e)
    a[keep] = torch.softmax(e[keep], 0)
    return a


def additive(att, q, keys):
    """e_j = w^T tanh(W1 q + W2 k_j + b) (eq. 6), one head."""
    W1, W2, b, w = P(att.W1)[0], P(att.W2)[0], P(att.b)[0], P(att.w)[0]
    return torch.stack([w @ torch.tanh(q @ W1 + k @ W2 + b) for k in keys])


# ---- Bahdanau et al. -------------------------------------------------------------------------


def bahdanau_reference(m, src, tgt, src_mask):
    B, T = tgt.shape
    S = src.shape[1]
    d = m.h_bigru.hidden_size
    logits = torch.zeros(B, T, m.logits_head.out_features, dtype=DT)
    weights = torch.zeros(B, T, S, dtype=DT)
    cell = m.s_gru_cells[0]
    for n in range(B):
        L = int(src_mask[n].sum())
        xs = P(m.h_embed.weight)[src[n, :L]]
        fwd = run_gru(rnn_weights(m.h_bigru, 0), xs)
        bwd = run_gru(rnn_weights(m.h_bigru, 0, "_reverse"), xs, reverse=True)
        h = torch.zeros(S, 2 * d, dtype=DT)  # annotations h_j = [->h_j; <-h_j], 0 when padded
        h[:L] = torch.cat([fwd, bwd], -1)
        # s_0 = tanh(W_s <-h_1)
        s = torch.tanh(P(m.s0_linear.weight) @ bwd[0] + P(m.s0_linear.bias))
        for i in range(T):
            a = softmax_over(additive(m.att, s, h), src_mask[n])  # a_ij from s_(i-1)
            c = a @ h  # c_i
            y = P(m.e_embed.weight)[tgt[n, i]]  # E y_(i-1)
            # t~_i = U_o s_(i-1) + V_o E y_(i-1) + C_o c_i (appendix A.2.2)
            z = P(m.logits_linear.weight) @ torch.cat([s, y, c]) + P(m.logits_linear.bias)
            s = gru_cell(*cell_weights(cell), torch.cat([y, c]), s)  # s_i = f(s_(i-1), y, c_i)
            z = z.view(-1, 2).amax(-1)  # maxout, pool 2: t_j = max(t~_(2j-1), t~_(2j))
            logits[n, i] = P(m.logits_head.weight) @ z + P(m.logits_head.bias)
            weights[n, i] = a
    return logits, weights


def test_bahdanau_attends_with_the_previous_state_and_feeds_this_context():
    m = model_of("bahdanau2015_rnnsearch")
    src = torch.tensor([[3, 7, 1, 9, 4, 2], [5, 5, 8, 0, 0, 0], [1, 2, 3, 4, 0, 0]])
    tgt = torch.tensor([[4, 1, 8, 2, 6], [9, 3, 3, 0, 0], [2, 2, 7, 1, 0]])
    src_mask = lengths_mask(3, 6, [6, 3, 4])
    tgt_mask = lengths_mask(3, 5, [5, 3, 4])
    out = m(src=src, tgt=tgt, src_mask=src_mask, tgt_mask=tgt_mask, return_attention=True)
    logits, weights = bahdanau_reference(m, src, tgt, src_mask)
    close(out.output, logits)
    close(out.attention["att"][:, 0], weights)  # (B, H, T, S): one row per step
    assert (out.attention["att"][:, 0][~src_mask[:, None, :].expand(-1, 5, -1)] == 0).all()
    # the first step's weights come from s_0 alone: they do not depend on the first word
    tgt2 = tgt.clone()
    tgt2[:, 0] = (tgt[:, 0] + 1) % 50
    out2 = m(src=src, tgt=tgt2, src_mask=src_mask, return_attention=True)
    close(out2.attention["att"][:, 0, 0], weights[:, 0])
    assert not torch.allclose(out2.attention["att"][:, 0, 1], weights[:, 1])


def counting_projections(m):
    """Count the module's key projections (W2 k + b) and record which steps got them given."""
    calls, given = [], []
    project, forward = m.att.project_keys, m.att.forward

    def project_keys(k):
        calls.append(tuple(k.shape))
        return project(k)

    def step(q, k, v, key_mask=None, wk=None, **kw):
        given.append(wk is not None)
        return forward(q, k, v, key_mask, wk=wk, **kw)

    m.att.project_keys, m.att.forward = project_keys, step
    return calls, given


def test_the_decoder_projects_the_keys_once_per_sequence():
    """Issue 24: W2 h_j + b (eq. 6) does not depend on the step, so forward() computes it
    once before the loop and generate() once for the whole decoding, and every step reads
    it; the values stay the reference's (eq. 6 with W2 h_j recomputed at every step)."""
    m = model_of("bahdanau2015_rnnsearch")
    calls, given = counting_projections(m)
    src = torch.tensor([[3, 7, 1, 9, 4, 2], [5, 5, 8, 0, 0, 0]])
    tgt = torch.tensor([[4, 1, 8, 2, 6], [9, 3, 3, 0, 0]])
    src_mask = lengths_mask(2, 6, [6, 3])
    out = m(src=src, tgt=tgt, src_mask=src_mask, return_attention=True)
    assert calls == [(2, 6, 32)] and given == [True] * 5  # once, for 5 steps
    logits, weights = bahdanau_reference(m, src, tgt, src_mask)
    close(out.output, logits)
    close(out.attention["att"][:, 0], weights)
    for strategy in ("greedy", "beam"):
        calls.clear()
        tokens = m.generate(src, max_len=6, bos=1, eos=2, src_mask=src_mask, strategy=strategy,
                            beams=3)
        assert len(calls) == 1, (strategy, calls)  # the first step's, kept in the cache
        full = m.generate(src, max_len=6, bos=1, eos=2, src_mask=src_mask, strategy=strategy,
                          beams=3, incremental=False)
        assert torch.equal(tokens, full)
    # xu2015: the same module class over the image's annotations (no generate() cache path)
    x = model_of("xu2015_soft")
    calls, given = counting_projections(x)
    x(image=torch.randn(1, 6, 6, 512, dtype=DT), caption=torch.randint(0, 50, (1, 4)))
    assert len(calls) == 1 and given == [True] * 4


# ---- Luong et al. ----------------------------------------------------------------------------


def luong_reference(m, src, tgt, src_mask, align):
    B, T = tgt.shape
    S = src.shape[1]
    layers = m.h_lstm.num_layers
    d = m.h_lstm.hidden_size
    assert m.h_att_linear.bias is None  # h~ = tanh(W_c [c; h]) (eq. 5)
    logits = torch.zeros(B, T, m.logits_head.out_features, dtype=DT)
    weights = torch.zeros(B, T, S, dtype=DT)
    for n in range(B):
        L = int(src_mask[n].sum())
        top, finals = run_lstm_stack(m.h_lstm, layers, P(m.h_embed.weight)[src[n, :L]])
        hs = torch.zeros(S, d, dtype=DT)
        hs[:L] = top
        state = list(finals)  # layer l starts from the encoder's layer l
        h_tilde = torch.zeros(d, dtype=DT)  # no attentional vector before the first step
        for t in range(T):
            x = torch.cat([P(m.ht_embed.weight)[tgt[n, t]], h_tilde])  # input feeding
            for layer, cell in enumerate(m.ht_lstm_cells):
                state[layer] = lstm_cell(*cell_weights(cell), x, *state[layer])
                x = state[layer][0]
            a = align(m.att, x, hs, src_mask[n], L, t)
            c = a @ hs
            h_tilde = torch.tanh(P(m.h_att_linear.weight) @ torch.cat([c, x]))
            logits[n, t] = P(m.logits_head.weight) @ h_tilde + P(m.logits_head.bias)
            weights[n, t] = a
    return logits, weights


def global_dot(att, h, hs, keep, L, t):
    return softmax_over(hs @ h, keep)


def local_m(att, h, hs, keep, L, t):
    """eq. 27: the softmax inside [t - D, t + D]; no Gaussian."""
    D = att.window
    win = torch.tensor([abs(s - t) <= D for s in range(len(hs))])
    return softmax_over(hs @ h, keep & win)


def local_p(att, h, hs, keep, L, t):
    """eq. 28-29: p_t = S sigmoid(v_p^T tanh(W_p h_t)), the softmax inside [p_t - D, p_t + D]
    times exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2."""
    D = att.window
    p = L * torch.sigmoid(P(att.w_p.weight)[0] @ torch.tanh(P(att.W_p.weight) @ h))
    s = torch.arange(len(hs), dtype=DT)
    a = softmax_over(hs @ h, keep & ((s - p).abs() <= D))
    return a * torch.exp(-(s - p) ** 2 / (2 * (D / 2) ** 2))


LUONG = [("luong2015_global_dot", global_dot), ("luong2015_local_m", local_m),
         ("luong2015_local_p", local_p)]


@pytest.mark.parametrize("stem,align", LUONG, ids=[s for s, _ in LUONG])
def test_luong_feeds_the_attentional_vector_and_starts_from_the_encoder(stem, align):
    m = model_of(stem)
    assert len(m.ht_lstm_cells) == m.h_lstm.num_layers == 4
    B, S, T = 2, 26, 24  # longer than the window (D = 10), so local-m's window matters
    g = torch.Generator().manual_seed(7)
    src = torch.randint(0, 50, (B, S), generator=g)
    tgt = torch.randint(0, 50, (B, T), generator=g)
    src_mask = lengths_mask(B, S, [S, 19])  # the encoder's final state: each one's last word
    out = m(src=src, tgt=tgt, src_mask=src_mask, return_attention=True)
    logits, weights = luong_reference(m, src, tgt, src_mask, align)
    close(out.attention["att"][:, 0], weights)
    close(out.output, logits)
    # without the weights the step takes the fast path (fused kernel, banded local window)
    close(m(src=src, tgt=tgt, src_mask=src_mask).output, logits)
    if align is local_m:  # a softmax over the window: every step's weights sum to 1
        a = out.attention["att"][:, 0]
        close(a.sum(-1), torch.ones(B, T, dtype=DT))
        assert (a[0, 0, 11:] == 0).all() and (a[0, 0, :11] > 0).all()


# ---- Xu et al. -------------------------------------------------------------------------------


def xu_reference(m, image, caption, hard=False):
    B, T = caption.shape
    A = image.flatten(1, 2).to(DT)  # (B, L, 512): the annotation vectors a_i
    logits = torch.zeros(B, T, m.logits_head.out_features, dtype=DT)
    weights = torch.zeros(B, T, A.shape[1], dtype=DT)
    cell = m.h_lstm_cells[0]
    for n in range(B):
        mean = A[n].mean(0)
        h = torch.tanh(P(m.h0_linear.weight) @ mean + P(m.h0_linear.bias))  # h_0 = f_init,h
        c = torch.tanh(P(m.c0_linear.weight) @ mean + P(m.c0_linear.bias))  # c_0 = f_init,c
        for t in range(T):
            alpha = torch.softmax(additive(m.att, h, A[n]), 0)  # f_att(a_i, h_(t-1))
            if hard:
                alpha = torch.nn.functional.one_hot(alpha.argmax(), len(alpha)).to(DT)
            # z_t = beta_t sum_i alpha_ti a_i, beta_t = sigmoid(f_beta(h_(t-1))) (4.2.1)
            beta = torch.sigmoid(P(m.z_linear.weight) @ h + P(m.z_linear.bias))
            z = beta * (alpha @ A[n])
            y = P(m.e_embed.weight)[caption[n, t]]
            h, c = lstm_cell(*cell_weights(cell), torch.cat([y, z]), h, c)
            # eq. 7 (with the authors' tanh): L_o tanh(E y_(t-1) + L_h h_t + L_z z_t)
            hid = torch.tanh(P(m.logits_linear.weight) @ torch.cat([h, z]) +
                             P(m.logits_linear.bias) + y)
            logits[n, t] = P(m.logits_head.weight) @ hid + P(m.logits_head.bias)
            weights[n, t] = alpha
    return logits, weights


@pytest.mark.parametrize("stem", ["xu2015_soft", "xu2015_hard"])
def test_xu_starts_from_the_mean_annotation_and_attends_with_the_previous_state(stem):
    m = model_of(stem)
    g = torch.Generator().manual_seed(3)
    image = torch.randn(2, 6, 6, 512, generator=g, dtype=DT)
    caption = torch.randint(0, 50, (2, 5), generator=g)
    out = m(image=image, caption=caption, return_attention=True)
    logits, weights = xu_reference(m, image, caption, hard=stem.endswith("hard"))
    close(out.attention["att"][:, 0], weights)
    close(out.output, logits)
    if stem.endswith("hard"):  # the penalty is the soft model's (4.2.1)
        assert not hasattr(out, "penalty")
        return
    # doubly stochastic attention (eq. 14): lambda sum_i (1 - sum_t alpha_ti)^2, lambda = 1,
    # the mean over the images; with a caption mask only its words' steps count
    close(out.penalty, ((1 - weights.sum(1)) ** 2).sum(-1).mean())
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    masked = m(image=image, caption=caption, caption_mask=keep)
    close(masked.penalty, ((1 - (weights * keep[:, :, None]).sum(1)) ** 2).sum(-1).mean())


# ---- the other forms of `init`, `feed` and `prev` (inline specs) ----------------------------

HEADER = 'paper t { cite = "T" }\n'
GRU_STACK = """
model m {
    input src: tokens[S] (vocab = 20)
    input tgt: tokens[T] (vocab = 20, autoregressive)
    feature e = gru(embed(src, 6), 8, layers = 2)
    query s = gru(embed(tgt, 6), 8, layers = 2, feed = o, init = e)
    attention att { query = s  features = e  score = multiplicative }
    feature o = linear(concat(att, prev(s)), 5, act = tanh)
    output y = classify(o, 20)
}
"""
LSTM_H0 = """
model m {
    input src: tokens[S] (vocab = 20)
    input tgt: tokens[T] (vocab = 20, autoregressive)
    feature e = embed(src, 6)
    feature h0 = linear(first(e), 8)
    query s = lstm(embed(tgt, 6), 8, feed = att, init = h0)
    attention att { query = prev(s)  features = e  score = general }
    output y = classify(concat(s, att), 20)
}
"""


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    from torch_support import inline_builder
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_dec")


def inline_model(gen, body):
    mod = gen(body)
    torch.manual_seed(0)
    m = mod.Model(mod.Config())
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m.to(DT).eval()


def test_gru_stack_from_encoder_final_states_feeds_a_node_reading_prev(gen):
    """Layer l of the decoder GRU starts from the encoder GRU's final state of layer l (at
    each example's last real word); o_t = tanh(W [c_t; s_(t-1)] + b) is fed to step t + 1
    (zeros at t = 0); prev(s) at t = 0 is the top layer's initial state."""
    m = inline_model(gen, GRU_STACK)
    src = torch.tensor([[1, 4, 9, 3, 2], [7, 7, 5, 0, 0]])
    tgt = torch.tensor([[2, 8, 1, 6], [3, 0, 4, 4]])
    src_mask = lengths_mask(2, 5, [5, 3])
    out = m(src=src, tgt=tgt, src_mask=src_mask, return_attention=True)
    cells = list(m.s_gru_cells)
    for n in range(2):
        L = int(src_mask[n].sum())
        xs, finals = P(m.e_embed.weight)[src[n, :L]], []
        for layer in range(2):
            xs = run_gru(rnn_weights(m.e_gru, layer), xs)
            finals.append(xs[-1])
        es = torch.zeros(5, 8, dtype=DT)
        es[:L] = xs
        state, o = finals, torch.zeros(5, dtype=DT)
        for t in range(4):
            s_prev = state[-1]
            x = torch.cat([P(m.s_embed.weight)[tgt[n, t]], o])
            for layer in range(2):
                state[layer] = gru_cell(*cell_weights(cells[layer]), x, state[layer])
                x = state[layer]
            a = softmax_over(es @ x, src_mask[n])
            o = torch.tanh(P(m.o_linear.weight) @ torch.cat([a @ es, s_prev]) +
                           P(m.o_linear.bias))
            close(out.output[n, t], P(m.y_head.weight) @ o + P(m.y_head.bias))
            close(out.attention["att"][n, 0, t], a)


def test_lstm_from_a_vector_starts_with_zero_memory(gen):
    """`init = h0` without `init_c`: h_0 = h0, c_0 = 0; the attention reads h_(t-1)."""
    m = inline_model(gen, LSTM_H0)
    src = torch.tensor([[1, 4, 9], [7, 5, 0]])
    tgt = torch.tensor([[2, 8, 1], [3, 0, 4]])
    src_mask = lengths_mask(2, 3, [3, 2])
    out = m(src=src, tgt=tgt, src_mask=src_mask)
    W = P(m.att.W)[0]  # e_l = k_l^T W q (general)
    for n in range(2):
        es = P(m.e_embed.weight)[src[n]]
        h = P(m.h0_linear.weight) @ es[0] + P(m.h0_linear.bias)
        c = torch.zeros(8, dtype=DT)
        for t in range(3):
            a = softmax_over(torch.stack([k @ W @ h for k in es]), src_mask[n])
            ctx = a @ es
            h, c = lstm_cell(*cell_weights(m.s_lstm_cells[0]),
                             torch.cat([P(m.s_embed.weight)[tgt[n, t]], ctx]), h, c)
            close(out.output[n, t], P(m.y_head.weight) @ torch.cat([h, ctx]) + P(m.y_head.bias))


# ---- the decoders' errors (snapshots) --------------------------------------------------------

SNAPSHOTS = ["decoder_feed_independent", "decoder_init_width", "decoder_prev_outside"]


def test_decoder_error_snapshots():
    """``taxcompile check`` on each file (one run: it reports the files in turn)."""
    paths = [str((DATA / f"{name}.attn").relative_to(ROOT)) for name in SNAPSHOTS]
    r = subprocess.run([sys.executable, "-m", "taxcompile", "check", *paths], cwd=ROOT,
                       capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "".join((DATA / f"{name}.expected").read_text(encoding="utf-8")
                               for name in SNAPSHOTS)
