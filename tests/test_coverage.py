"""Coverage attention and the penalties on attention heads (issue 14, item 4).

* ``coverage = true``: See et al. 2017 ("Get To The Point"), eq. 10-11: the coverage
  c^t = sum_{t' < t} a^{t'} enters the additive score, e_i^t = v^T tanh(W_h h_i + W_s s_t +
  w_c c_i^t + b_attn);
* ``penalty = coverage(lambda)``: eq. 12-13, lambda sum_t sum_i min(a_i^t, c_i^t);
* ``penalty = disagreement(lambda, on = …)``: Li et al. 2018 ("Multi-Head Attention with
  Disagreement Regularization"), eq. 5-7: the loss adds -lambda D with
  D_subspace = -(1/H^2) sum_i sum_j cos(V^i, V^j), D_position = -(1/H^2) sum sum |A^i ⊙ A^j|,
  D_output = -(1/H^2) sum sum cos(O^i, O^j).

Every value is checked against the equations written here in float64 plain torch, from the
model's parameters, never against the generated code's own output."""

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


def compiled(text: str, name: str):
    cs = pipeline.load_text(text, "t.attn")
    return load_module(codegen.generate(cs, cs.models[0], "t.attn"), name)


def close(got, want):
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def coverage_reference(att, q, k, keep=None, causal=False, c0=None):
    """See et al. eq. 10-11 for one module, from its parameters: per head h,
    e_i^t = w_h^T tanh(W1_h q_t + W2_h k_i + b_h + w_c,h c_i^t), a^t = softmax over the
    kept keys, c^(t+1) = c^t + a^t. q: (B, T, d_q), k: (B, S, d_k). Returns the weights
    (B, H, T, S) and the last coverage (B, H, S)."""
    H = att.W1.shape[0]
    B, T, _ = q.shape
    S = k.shape[1]
    qh = q.view(B, T, H, -1).transpose(1, 2)  # (B, H, T, d_q / H)
    kh = k.view(B, S, H, -1).transpose(1, 2)
    c = torch.zeros(B, H, S, dtype=DT) if c0 is None else c0
    rows = []
    for t in range(T):
        e = torch.zeros(B, H, S, dtype=DT)
        for h in range(H):
            pre = (qh[:, h, t] @ att.W1[h])[:, None, :] + kh[:, h] @ att.W2[h] + att.b[h] \
                + c[:, h, :, None] * att.w_c[h]  # (B, S, d_w)
            e[:, h] = torch.tanh(pre) @ att.w[h]
        allowed = torch.ones(B, 1, S, dtype=torch.bool)
        if keep is not None:
            allowed = allowed & keep[:, None, :]
        if causal:
            allowed = allowed & (torch.arange(S) <= t)
        a = torch.softmax(e.masked_fill(~allowed, float("-inf")), -1)
        rows.append(a)
        c = c + a
    return torch.stack(rows, 2), c


def coverage_loss_reference(a, q_keep=None, k_keep=None, lam=1.0):
    """See et al. eq. 12-13: lam sum_t sum_i min(a_i^t, c_i^t), over the kept steps and keys;
    the mean over the batch and heads."""
    B, H, T, S = a.shape
    total = torch.zeros(B, H, dtype=DT)
    c = torch.zeros(B, H, S, dtype=DT)
    for t in range(T):
        at = a[:, :, t] if q_keep is None else a[:, :, t] * q_keep[:, t, None, None]
        m = torch.minimum(at, c)
        if k_keep is not None:
            m = m * k_keep[:, None, :]
        total = total + m.sum(-1)
        c = c + at
    return lam * total.mean()


# ---- coverage in a module with several query positions ----------------------------------

SELF = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8]
    attention s {
        query = x  keys = x  score = additive(d_w = 6, act = tanh)  heads = 2
        mask = causal
        coverage = true
        penalty = coverage(0.5)
    }
    output u = s
}
"""


def test_coverage_over_the_query_positions_of_one_module():
    mod = compiled(SELF, "coverage_self")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x = torch.randn(2, 5, 8, dtype=DT)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    out = model(x=x, x_mask=keep, return_attention=True)
    a, _ = coverage_reference(model.s, x, x, keep, causal=True)
    got = out.attention["s"]
    close(got[0], a[0])
    close(got[1, :, :3], a[1, :, :3])  # the kept query positions of the padded example
    # the context: c_t = sum_i a_i^t v_i per head, heads joined by W_O (eq. 40)
    vh = x.view(2, 5, 2, 4).transpose(1, 2)
    ctx = (a @ vh).transpose(1, 2).reshape(2, 5, 8) @ model.s.out.weight.T + model.s.out.bias
    close(out.output[0], ctx[0])
    close(out.output[1, :3], ctx[1, :3])
    # eq. 12-13 over the kept steps and keys, lambda = 0.5
    close(out.penalty, coverage_loss_reference(a, keep, keep, 0.5))


def test_coverage_term_changes_the_weights_and_gets_gradients():
    mod = compiled(SELF, "coverage_self_grad")
    torch.manual_seed(1)
    model = mod.Model(mod.Config()).double()
    x = torch.randn(2, 4, 8, dtype=DT)
    out = model(x=x, return_attention=True)
    (out.output.sum() + out.penalty).backward()
    assert model.s.w_c.grad is not None and model.s.w_c.grad.abs().sum() > 0
    with torch.no_grad():
        model.s.w_c.zero_()  # w_c = 0: plain additive attention, which differs
    plain = model(x=x, return_attention=True).attention["s"]
    assert (plain - out.attention["s"]).abs().max() > 1e-3


# ---- coverage carried across the steps of a decoder loop ----------------------------------

DECODER = """paper t { cite = "T" }
model m {
    input tgt: tokens[T] (vocab = 13, autoregressive)
    input y: sequence[S, 8]
    feature x = embed(tgt, 6)
    query s = lstm(x, 8, feed = att)
    attention att {
        query = s  keys = y  score = additive(d_w = 5, act = tanh)
        coverage = true
        penalty = coverage(0.5)
    }
    output o = concat(s, att)
}
"""


def test_coverage_is_carried_across_decoder_steps():
    mod = compiled(DECODER, "coverage_decoder")
    torch.manual_seed(2)
    model = mod.Model(mod.Config()).double()
    x = torch.randint(0, 13, (2, 5))
    y = torch.randn(2, 7, 8, dtype=DT)
    x_keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    y_keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    out = model(tgt=x, y=y, tgt_mask=x_keep, y_mask=y_keep, return_attention=True)
    s, ctx = out.output[..., :8], out.output[..., 8:]  # s_t of every step, and h*_t
    a, _ = coverage_reference(model.att, s, y, y_keep)  # c^t from the earlier steps' a
    close(out.attention["att"], a)
    close(ctx, a[:, 0] @ y)
    close(out.penalty, coverage_loss_reference(a, x_keep, y_keep, 0.5))


def test_coverage_loss_without_coverage_in_the_score():
    """`penalty = coverage(λ)` alone: c^t is the sum of the earlier weights all the same."""
    text = DECODER.replace("        coverage = true\n", "")
    mod = compiled(text, "coverage_loss_only")
    torch.manual_seed(3)
    model = mod.Model(mod.Config()).double()
    x = torch.randint(0, 13, (2, 4))
    y = torch.randn(2, 6, 8, dtype=DT)
    out = model(tgt=x, y=y, return_attention=True)
    a = out.attention["att"]
    assert not hasattr(model.att, "w_c")
    close(out.penalty, coverage_loss_reference(a, lam=0.5))
    assert out.penalty.requires_grad


# ---- generate(): the coverage in the incremental cache ----------------------------------

CROSS = """paper t { cite = "T" }
model m {
    input src: tokens[S] (vocab = 11)
    input tgt: tokens[T] (vocab = 11, autoregressive)
    feature h = embed(src, 8)
    feature e = embed(tgt, 8)
    attention att {
        query = e  keys = h  score = additive(d_w = 6, act = tanh)
        coverage = true
    }
    output logits = classify(concat(e, att), 11)
}
"""


SELF_TARGET = """paper t { cite = "T" }
model m {
    input tgt: tokens[T] (vocab = 11, autoregressive)
    feature e = embed(tgt, 8)
    attention att {
        query = e  keys = e  score = additive(d_w = 6, act = tanh)  heads = 2
        mask = causal
        coverage = true
    }
    output logits = classify(concat(e, att), 11)
}
"""


@pytest.mark.parametrize("source", ["cross", "self", "see2017"])
def test_cached_decoding_equals_the_full_forward(source):
    """The coverage crosses calls in the cache: over the source (cross), over a KV cache
    that grows by a key per step (causal self-attention: the new key's coverage starts at
    0), and in a decoder loop's state (See et al.'s model)."""
    if source in ("cross", "self"):
        mod = compiled(CROSS if source == "cross" else SELF_TARGET, f"coverage_{source}")
        cfg = mod.Config()
    else:
        cs = pipeline.load(ROOT / "examples" / "see2017_coverage.attn")
        mod = load_module(codegen.generate(cs, cs.models[0], "see2017_coverage.attn"),
                          "coverage_see2017")
        cfg = mod.Config.tiny()
    torch.manual_seed(4)
    model = mod.Model(cfg).double().eval()
    V = 11 if source != "see2017" else cfg.vocab
    src = torch.randint(3, V, (2, 6))
    tgt = torch.randint(3, V, (2, 5))
    kw = {} if source == "self" else {"src": src}
    full = model(**kw, tgt=tgt, return_attention=True)
    cache, steps = {}, []
    for t in range(tgt.shape[1]):
        steps.append(model(**kw, tgt=tgt[:, t:t + 1], cache=cache).output)
    close(torch.cat(steps, 1), full.output)
    # the coverage the cache holds is the sum of every step's weights (eq. 10)
    w = full.attention["att"]
    held = cache["s"][-1] if source == "see2017" else \
        next(v for k, v in cache.items() if "cov" in str(k))
    close(held, w.sum(2))
    # generate() runs on the cache
    got = model.generate(**kw, bos=1, eos=2, max_len=4, **({"batch_size": 2} if not kw else {}))
    assert got.shape[0] == 2


# ---- disagreement (Li et al. 2018, eq. 5-7) ----------------------------------------------

HEADS = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8]
    attention s {
        query = x  keys = x  score = scaled_multiplicative  heads = 4
        penalty = disagreement(0.3, on = ON)
    }
    output u = s
}
"""


def disagreement_reference(x, a, keep, on, lam):
    """-lam D (Li et al. eq. 5-7) for q = k = v = x split into H heads: V^h the values of
    head h, A^h its weights, O^h = A^h V^h its output, padded positions left out."""
    B, L, _ = x.shape
    H = a.shape[1]
    vh = x.view(B, L, H, -1).transpose(1, 2) * keep[:, None, :, None]  # V^h
    a = a * keep[:, None, :, None]
    oh = a @ vh  # O^h, (B, H, L, d / H)
    total = torch.zeros(B, dtype=DT)
    for i in range(H):
        for j in range(H):
            if on == "position":
                sim = (a[:, i] * a[:, j]).sum((-1, -2))  # |A^i ⊙ A^j| (eq. 6)
            else:
                u, w = (vh[:, i], vh[:, j]) if on == "subspace" else (oh[:, i], oh[:, j])
                u, w = u.flatten(1), w.flatten(1)
                sim = (u * w).sum(-1) / (u.norm(dim=-1) * w.norm(dim=-1))  # cos (eq. 5, 7)
            total = total + sim
    D = -total / H ** 2
    return (-lam * D).mean()


@pytest.mark.parametrize("on", ["subspace", "position", "output"])
def test_disagreement_terms_follow_li_et_al(on):
    mod = compiled(HEADS.replace("ON", on), f"disagree_{on}")
    torch.manual_seed(5)
    model = mod.Model(mod.Config()).double()
    x = torch.randn(3, 6, 8, dtype=DT, requires_grad=True)
    keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] * 5 + [False]])
    out = model(x=x, x_mask=keep, return_attention=True)
    want = disagreement_reference(x, out.attention["s"], keep, on, 0.3)
    close(out.penalty, want)
    # without asking for the weights (the fast path): the same penalty
    close(model(x=x, x_mask=keep).penalty, want)
    # the gradient reaches the inputs (subspace: through V^h alone)
    g, = torch.autograd.grad(out.penalty, x)
    assert g.abs().sum() > 0
    assert torch.isfinite(g).all()


def test_disagreement_in_a_decoder_loop_reads_every_step():
    text = DECODER.replace("score = additive(d_w = 5, act = tanh)",
                           "score = additive(d_w = 6, act = tanh)  heads = 2") \
        .replace("        coverage = true\n", "") \
        .replace("penalty = coverage(0.5)", "penalty = disagreement(0.3, on = position)")
    mod = compiled(text, "disagree_loop")
    torch.manual_seed(6)
    model = mod.Model(mod.Config()).double()
    x = torch.randint(0, 13, (2, 5))
    y = torch.randn(2, 7, 8, dtype=DT)
    x_keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    out = model(tgt=x, y=y, tgt_mask=x_keep, return_attention=True)
    a = out.attention["att"] * x_keep[:, None, :, None]  # (B, H, T, S), the kept steps
    sim = torch.einsum("bitk,bjtk->bij", a, a)  # |A^i ⊙ A^j| over the whole target (eq. 6)
    close(out.penalty, 0.3 * sim.mean((-1, -2)).mean())


# ---- located errors ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["coverage_dot_score", "coverage_no_query", "disagreement_one_head",
                                  "disagreement_no_on", "disagreement_subspace_no_query"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


@pytest.mark.parametrize("body, message", [
    ("query = x  keys = x  score = additive  align = local(D = 2)  coverage = true",
     "`local` alignment is not combined with it"),
    ("query = x  keys = x  score = additive  coverage = maybe",
     "`coverage` must be `true` or `false`"),
    ("query = x  keys = x  score = additive  penalty = coverage(1.0, 2.0)",
     "`coverage` takes 1 argument(s): `lambda`"),
    ("keys = x  score = additive  penalty = coverage(1.0)",
     "the coverage loss compares each step's weights"),
    ("query = x  keys = x  score = additive  heads = 2  penalty = disagreement(1.0, on = heads)",
     "`on` of `disagreement` cannot be `heads`"),
])
def test_bad_coverage_and_disagreement_are_located_errors(body, message):
    text = f"""paper t {{ cite = "T" }}
model m {{
    input x: sequence[L, 8]
    attention s {{ {body} }}
    output u = s
}}
"""
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    d = info.value.diagnostics[0]
    assert message in d.message, d.message
    assert d.loc.line == 4


# ---- classification ----------------------------------------------------------------------

def test_coverage_and_penalties_leave_the_row_as_it_is():
    """Coverage adds w_c c_i^t to the additive score's inputs: still Additive; a penalty is
    a term of the loss: no cell changes (classification.py)."""
    plain = DECODER.replace("        coverage = true\n", "").replace(
        "        penalty = coverage(0.5)\n", "")
    row = classify_text(DECODER)
    assert row == classify_text(plain)
    assert row["scoring"] == "Additive"
    heads = HEADS.replace("ON", "output")
    assert classify_text(heads) == classify_text(
        heads.replace("        penalty = disagreement(0.3, on = output)\n", ""))
