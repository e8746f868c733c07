"""Attention weights as values (issue 14, item 4): ``att.weights`` as a feature and an
output, ``context(V, A)`` = A V, and the attention-over-attention reader (Cui et al. 2017)
written with them, checked against the paper's equations written here in float64."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import classify_text, error_snapshot
from taxcompile import pipeline
from taxcompile.diagnostics import SpecError

torch = pytest.importorskip("torch")

from taxcompile import codegen  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64


def compiled(text: str, name: str, file: str = "t.attn"):
    cs = pipeline.load_text(text, file)
    return load_module(codegen.generate(cs, cs.models[0], file), name)


def message(text: str) -> str:
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    return info.value.diagnostics[0].message


WEIGHTS = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8] (L = 5)
    input y: sequence[M, 8]
    attention s { query = project(y)  keys = x  score = scaled_multiplicative  heads = 2 }
    output w = s.weights
    output c = context(x, s.weights)
}
"""


def test_weights_are_the_head_mean_and_context_is_their_product():
    mod = compiled(WEIGHTS, "wv_weights")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double().eval()
    x = torch.randn(2, 5, 8, dtype=DT)
    y = torch.randn(2, 4, 8, dtype=DT)
    x_keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    out = model(x=x, y=y, x_mask=x_keep)
    # the equations: W_Q y, W_K x, W_V x split in 2 heads of 4, a = softmax(q k^T / 2)
    q = (y @ model.s_q_proj.weight.T).view(2, 4, 2, 4).transpose(1, 2)
    k = x.view(2, 5, 2, 4).transpose(1, 2) if not hasattr(model, "s_k_proj") else \
        (x @ model.s_k_proj.weight.T).view(2, 5, 2, 4).transpose(1, 2)
    e = q @ k.transpose(-1, -2) / 2.0
    e = e.masked_fill(~x_keep[:, None, None, :], float("-inf"))
    a = torch.softmax(e, -1).mean(1)  # (B, M, L): averaged over the heads
    torch.testing.assert_close(out.output["w"], a, atol=1e-10, rtol=0)
    assert torch.all(out.output["w"][1, :, 3:] == 0)  # padded keys weigh nothing
    torch.testing.assert_close(out.output["c"], a @ x, atol=1e-10, rtol=0)


AOA = (ROOT / "examples" / "attention_over_attention.attn").read_text(encoding="utf-8")


def aoa_reference(model, doc, question, d_len, q_len):
    """Cui et al. 2017 eq. 5-9 for one example, on its real words only."""
    emb = model.h_doc_embed.weight
    h_doc = model.h_doc_bigru(emb[doc[:d_len]].unsqueeze(0))[0][0]  # (|D|, 2d)
    h_query = model.h_query_bigru(emb[question[:q_len]].unsqueeze(0))[0][0]  # (|Q|, 2d)
    M = h_doc @ h_query.T  # eq. 5: M(i, j) = h_doc(i)^T h_query(j)
    alpha = torch.softmax(M, 0)  # eq. 6: column-wise, alpha(t) over the document
    beta = torch.softmax(M, 1)  # eq. 7: row-wise, beta(t) over the query
    beta_bar = beta.mean(0)  # eq. 8: 1/n sum_t beta(t)
    return alpha @ beta_bar  # eq. 9: s = alpha^T beta-bar: (|D|,)


def test_attention_over_attention_follows_cui_et_al():
    mod = compiled(AOA, "wv_aoa", "attention_over_attention.attn")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).double().eval()
    B = 3
    doc = torch.randint(0, cfg.vocab, (B, cfg.D))
    question = torch.randint(0, cfg.vocab, (B, cfg.Q))
    d_lens, q_lens = [cfg.D, cfg.D - 2, 3], [cfg.Q, 2, cfg.Q - 1]
    doc_mask = torch.arange(cfg.D)[None] < torch.tensor(d_lens)[:, None]
    question_mask = torch.arange(cfg.Q)[None] < torch.tensor(q_lens)[:, None]
    s = model(doc=doc, question=question, doc_mask=doc_mask,
              question_mask=question_mask).output
    assert s.shape == (B, cfg.D)
    for b in range(B):
        want = aoa_reference(model, doc[b], question[b], d_lens[b], q_lens[b])
        torch.testing.assert_close(s[b, :d_lens[b]], want, atol=1e-10, rtol=0)
        assert torch.all(s[b, d_lens[b]:] == 0)  # padding gets no probability
        torch.testing.assert_close(s[b].sum(), torch.tensor(1.0, dtype=DT), atol=1e-10, rtol=0)


def test_reading_weights_leaves_the_modules_row():
    """A module whose weights are read as values classifies as it did (classification.py)."""
    plain = WEIGHTS.replace("output w = s.weights\n    output c = context(x, s.weights)\n",
                            "output c = s\n")
    assert classify_text(WEIGHTS) == classify_text(plain)
    from taxcompile.classification import classify_model
    cs = pipeline.load_text(WEIGHTS, "t.attn")
    cells = classify_model(cs.models[0]).cells
    reasons = [r for rs in cells["alignment"].values.values() for r in rs]
    assert any("are read as values" in r for r in reasons), reasons


@pytest.mark.parametrize("edit, want", [
    (("output w = s.weights", "output w = y.weights"),
     "`y.weights`: `y` is an input, not an attention module, so it has no attention weights"),
    (("input x: sequence[L, 8] (L = 5)", "input x: sequence[L, 8]"),
     "`s.weights` has one feature per position of axis `L`, whose length is not fixed"),
    (("score = scaled_multiplicative  heads = 2", "score = additive  dimensionality = multi"),
     "`s.weights`: a multi-dimensional module has a weight per feature (eq. 30-32), not one per "
     "key, so they are not a distribution over the keys' positions"),
    (("context(x, s.weights)", "context(y, s.weights)"),
     "`context(y, s.weights)`: the weights (M, 5) do not weigh the values (M, 8) over axis `M`"),
])
def test_weights_errors(edit, want):
    assert message(WEIGHTS.replace(*edit)) == want


@pytest.mark.parametrize("name", ["weights_of_a_feature", "context_shapes",
                                  "supervised_without_alignment", "supervised_shape",
                                  "pointed_not_pointers"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


# ---- supervised attention (Liu et al. 2016, Mi et al. 2016) ------------------------------

SUPERVISED = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8]
    input y: sequence[M, 8]
    input gold: alignment[M, L]
    attention s {
        query = project(y)  keys = x  score = scaled_multiplicative  heads = 2
        penalty = supervised(gold, 0.5, loss = LOSS)
    }
    output u = s
}
"""


def supervised_data():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 8, dtype=DT)
    y = torch.randn(2, 4, 8, dtype=DT)
    x_keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    y_keep = torch.tensor([[True] * 4, [True] * 3 + [False]])
    gold = torch.softmax(torch.randn(2, 4, 5, dtype=DT) * 3, -1)
    gold = gold * x_keep[:, None, :]
    gold = gold / gold.sum(-1, keepdim=True)
    gold[0, 2] = 0  # an unaligned query position
    return x, y, x_keep, y_keep, gold


@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
def test_supervised_attention_adds_its_loss_term(loss):
    mod = compiled(SUPERVISED.replace("LOSS", loss), f"wv_sup_{loss}")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x, y, x_keep, y_keep, gold = supervised_data()
    out = model(x=x, y=y, gold=gold, x_mask=x_keep, y_mask=y_keep, return_attention=True)
    # the weights, from the equations: softmax(q k^T / sqrt(4)) per head, averaged
    q = (y @ model.s_q_proj.weight.T).view(2, 4, 2, 4).transpose(1, 2)
    k = x.view(2, 5, 2, 4).transpose(1, 2)
    e = (q @ k.transpose(-1, -2) / 2.0).masked_fill(~x_keep[:, None, None, :], float("-inf"))
    a = torch.softmax(e, -1).mean(1)  # (B, M, L)
    aligned = (gold.sum(-1, keepdim=True) > 0).to(DT)
    if loss == "squared":  # lambda sum (a - gold)^2 over aligned rows (Liu et al. 2016)
        term = (a - gold) ** 2 * aligned
    else:  # -lambda sum gold log a (Mi et al. 2016); 0 log 0 = 0
        term = torch.where(gold > 0, -gold * torch.log(a), torch.zeros_like(a))
    term = term * y_keep[:, :, None] * x_keep[:, None, :]  # padding left out
    want = 0.5 * term.sum((1, 2)).mean()
    torch.testing.assert_close(out.penalty, want, atol=1e-10, rtol=0)
    # the fast path computes the weights for it too; without gold (inference) no term
    torch.testing.assert_close(model(x=x, y=y, gold=gold, x_mask=x_keep, y_mask=y_keep).penalty,
                               want, atol=1e-10, rtol=0)
    assert model(x=x, y=y, x_mask=x_keep, y_mask=y_keep).penalty == 0


DECODER = """paper t { cite = "T" }
model m {
    input src: tokens[S] (vocab = 11)
    input tgt: tokens[T] (vocab = 13, autoregressive)
    input gold: alignment[T, S]
    feature h = bigru(embed(src, 6), 5)
    query s = gru(embed(tgt, 6), 7, feed = att)
    attention att {
        query = prev(s)  features = h  score = additive(d_w = 4)
        penalty = supervised(gold, 2.0, loss = cross_entropy)
    }
    output y = classify(concat(s, att), 13)
}
"""


def test_supervised_attention_in_a_decoder_loop_covers_every_step():
    mod = compiled(DECODER, "wv_sup_decoder")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    src = torch.randint(0, 11, (2, 6))
    tgt = torch.randint(0, 13, (2, 4))
    src_keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    tgt_keep = torch.tensor([[True] * 4, [True] * 2 + [False] * 2])
    gold = torch.zeros(2, 4, 6, dtype=DT)
    gold[0, torch.arange(4), torch.tensor([1, 0, 5, 2])] = 1  # one source word per step
    gold[1, torch.arange(4), torch.tensor([3, 2, 0, 1])] = 1
    gold[1, 1] = 0  # unaligned
    out = model(src=src, tgt=tgt, gold=gold, src_mask=src_keep, tgt_mask=tgt_keep,
                return_attention=True)
    a = out.attention["att"].mean(1)  # (B, T, S): every step's weights
    assert a.shape == (2, 4, 6)
    term = torch.where(gold > 0, -gold * torch.log(a), torch.zeros_like(a))
    want = 2.0 * (term * tgt_keep[:, :, None] * src_keep[:, None, :]).sum((1, 2)).mean()
    torch.testing.assert_close(out.penalty, want, atol=1e-10, rtol=0)


def test_supervision_leaves_the_modules_row():
    text = SUPERVISED.replace("LOSS", "squared")
    plain = text.replace("        penalty = supervised(gold, 0.5, loss = squared)\n", "")
    assert "supervised" not in plain
    assert classify_text(text) == classify_text(plain)
    from taxcompile.classification import classify_model
    cells = classify_model(pipeline.load_text(text, "t.attn").models[0]).cells
    reasons = [r for rs in cells["alignment"].values.values() for r in rs]
    assert any("is supervised by the target alignment `gold`" in r for r in reasons), reasons


@pytest.mark.parametrize("edit, want", [
    (("supervised(gold, 0.5, loss = squared)", "supervised(gold, 0.5, loss = l1)"),
     "`loss` of `supervised` cannot be `l1`"),
    (("supervised(gold, 0.5, loss = squared)", "supervised(gold, 0.5, kind = squared)"),
     "`supervised` has no parameter `kind`"),
    (("supervised(gold,", "supervised(y,"),
     "attention `s`: `supervised` compares the weights with a target alignment, but `y` is a "
     "`sequence` input"),
    (("input gold: alignment[M, L]", "input gold: alignment[L, M]"),
     "attention `s`: the target alignment `gold` has axes (L, M), but the module's weights "
     "have (M, L) (query positions, keys)"),
    (("output u = s", "output u = linear(gold, 4)"),
     "`gold` is a target alignment, read only by `penalty = supervised(…)`"),
    (("input gold: alignment[M, L]", "input gold: alignment[M]"),
     "an alignment has two axes, the attention's query and key positions, and no feature "
     "size: `alignment[T, S]`"),
])
def test_supervised_errors(edit, want):
    assert message(SUPERVISED.replace("LOSS", "squared").replace(*edit)) == want


# ---- pointer networks (Vinyals et al. 2015) ---------------------------------------------

POINTER = (ROOT / "examples" / "pointer_network.attn").read_text(encoding="utf-8")


def pointer_reference(model, points, C, s_len, t_len):
    """Vinyals et al. 2015 for one example, on its real positions: e_j from the encoder LSTM,
    d_i from the decoder LSTM started at the encoder's final state and reading P_(C_(i-1))
    (a zero start vector at i = 0), u^i_j = v^T tanh(W1 e_j + W2 d_i), p = softmax(u^i)."""
    P = points[:s_len].unsqueeze(0)  # (1, S, 2)
    e, state = model.e_lstm(P)
    prev = torch.cat([torch.zeros(1, 2, dtype=DT), points[C[: t_len - 1]]], 0)  # (T, 2)
    d = model.d_lstm(prev.unsqueeze(0), state)[0][0]  # (T, hidden)
    W1, W2, v = model.ptr.W1[0], model.ptr.W2[0], model.ptr.w[0]  # query d, keys e
    u = torch.tanh((d @ W1)[:, None, :] + (e[0] @ W2)[None, :, :]) @ v  # (T, S)
    return torch.softmax(u, -1)


def test_pointer_network_outputs_its_attention_over_the_inputs():
    mod = compiled(POINTER, "wv_pointer", "pointer_network.attn")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).double().eval()
    B, T = 3, 4
    points = torch.rand(B, cfg.S, 2, dtype=DT)
    C = torch.randint(0, cfg.S - 2, (B, T))
    s_lens, t_lens = [cfg.S, cfg.S - 2, cfg.S - 1], [T, 2, T]
    points_mask = torch.arange(cfg.S)[None] < torch.tensor(s_lens)[:, None]
    C_mask = torch.arange(T)[None] < torch.tensor(t_lens)[:, None]
    p = model(points=points, C=C, points_mask=points_mask, C_mask=C_mask).output
    assert p.shape == (B, T, cfg.S)
    for b in range(B):
        want = pointer_reference(model, points[b], C[b], s_lens[b], t_lens[b])
        torch.testing.assert_close(p[b, :t_lens[b], :s_lens[b]], want, atol=1e-10, rtol=0)
        assert torch.all(p[b, :, s_lens[b]:] == 0)  # no pointer past the input
    # the training loss a pointer network minimises: -log p(C_i | C_<i, P)
    nll = -p.gather(-1, C[..., None]).squeeze(-1).log()[C_mask].mean()
    nll.backward()
    assert model.ptr.W1.grad is not None and torch.isfinite(model.ptr.W1.grad).all()


def test_pointer_network_classifies_as_a_decoder_query():
    row = classify_text(POINTER)
    assert row["query_type"] == "Basic"
    assert row["scoring"] == "Additive" and row["feature_multiplicity"] == "Singular"


@pytest.mark.parametrize("edit, want", [
    (("pointed(points, C)", "pointed(e, e)"),
     "`pointed` reads positions from a pointers input, but `e` is not one"),
    (("(into = S)", "(into = T)"),
     "`into = T`: pointers index the positions of an axis of another input"),
    (("pointers[T] (into = S)", "pointers[T]"),
     "pointers `C` need the axis they point into"),
    (("feature e = lstm(points, hidden)", "feature e = gru(points, hidden)"),
     "`init = e` starts the decoder from the final states of `e`, layer by layer, so `e` "
     "must be `lstm(…, 256, layers = 1)` too"),
    (("init = e", "init = points"),
     "without `feed`, `init` names an encoder `lstm`/`gru` whose final states start this "
     "RNN; other initial states (`init = s0`, `init_c`) belong to a decoder run step by step "
     "with `feed = …`"),
    (("output p = ptr.weights", "output p = linear(C, 2)"),
     "`C` holds target pointers, read by `pointed(X, C)` (the decoder's input) and compared "
     "with a pointer attention's weights"),
])
def test_pointer_errors(edit, want):
    assert message(POINTER.replace(*edit)) == want


def test_weights_inside_a_repeat_are_refused():
    text = """paper t { cite = "T" }
model m {
    input src: sequence[L, 8] (L = 5)
    feature x = identity(src)
    repeat enc 2 {
        attention self { query = project(x)  keys = x  score = scaled_multiplicative }
        update x = norm(x + self)
    }
    output w = enc.self.weights
}
"""
    assert message(text) == (
        "`self.weights`: `self` runs once per hop of a `repeat` or step of a decoder loop, "
        "and its weights exist only inside it")
