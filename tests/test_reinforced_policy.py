"""Reinforced alignment whose policy reads another input (`align = reinforced(policy = s)`):
RBAN's aspect-aware word selection (Wang et al. 2019, survey ref [62], Table III row 14).

The agent's state for key l is [k_l; s]: pi_l = sigmoid(w_pi^T k_l + w_s^T s + b_pi), each
key kept with probability pi_l (in eval: pi_l > 1/2), and the soft alignment (eq. 25) runs
over the kept keys only; log pi(subset) = sum_l [z_l log pi_l + (1 - z_l) log(1 - pi_l)] over
the unpadded keys is returned for REINFORCE. The references below are written from those
equations in float64, fed the module's weights; sampling is made deterministic by comparing
probabilities on the subset the module actually sampled, or by eval()'s threshold. Also
here: the aspect must matter, the policy's aspect weights get gradient from log_prob *
reward, RBAN's spec keeps Table III row 14, and misuse gets located errors (snapshots in
tests/data/errors/policy_*.expected)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import SPECS, classify_text, error_snapshot  # noqa: E402
from torch_support import inline_builder  # noqa: E402

DT = torch.float64
HEADER = 'paper pol {\n    cite = "Test"\n}\n'

# keys x (L, 8), queries y (T, 6), values z (L, 5); the policy reads s = mean(w), w (U, 4)
SPEC = """
model m {
    input x: sequence[L, 8]
    input y: sequence[T, 6]
    input z: sequence[L, 5]
    input w: sequence[U, 4]
    feature s = mean(w)
    attention att {
        query  = y
        keys   = x
        values = z
        score  = additive(d_w = 7, act = tanh)
        align  = reinforced(policy = s)
    }
    output ctx = identity(att)
}
"""


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_policy")


def model_of(gen, seed: int = 1):
    mod = gen(SPEC)
    torch.manual_seed(seed)
    m = mod.Model(mod.Config())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every parameter random: a zero bias cannot hide a wrong formula
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m


def inputs(N=2, Lq=3, Lk=6, U=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(N, n, d, generator=g) for n, d in ((Lq, 6), (Lk, 8), (Lk, 5)))
    w = torch.randn(N, U, 4, generator=g)
    kmask = torch.ones(N, Lk, dtype=torch.bool)
    kmask[-1, -2:] = False  # the last example's last two keys are padding
    wmask = torch.ones(N, U, dtype=torch.bool)
    wmask[0, -1:] = False  # the first example's aspect is one word shorter
    return q, k, v, w, kmask, wmask


def P(att) -> dict:
    return {n: p.detach().to(DT) for n, p in att.named_parameters()}


def policy_ref(att, k, s):
    """pi_l = sigmoid(w_pi^T k_l + w_s^T s + b_pi), (N, Lk), float64."""
    p = P(att)
    out = torch.zeros(k.shape[:2], dtype=DT)
    for n in range(k.shape[0]):
        for l in range(k.shape[1]):
            z = p["policy.weight"][0] @ k[n, l].to(DT) + p["policy.bias"][0] \
                + p["policy_in.weight"][0] @ s[n].to(DT)
            out[n, l] = 1 / (1 + torch.exp(-z))
    return out


def log_prob_ref(pi, pick, valid):
    """log pi(subset) over the unpadded keys (the REINFORCE term)."""
    lp = torch.where(pick, pi.log(), (1 - pi).log())
    return (lp * valid).sum(-1)


def alignment_ref(att, q, k, v, pick):
    """Eq. 6 scores, softmax (eq. 25) over the picked keys only, c = sum_l a_l v_l (eq. 4)."""
    p = P(att)
    N, Lq, Lk = q.shape[0], q.shape[1], k.shape[1]
    a = torch.zeros(N, Lq, Lk, dtype=DT)
    for n in range(N):
        for i in range(Lq):
            e = torch.stack([p["w"][0] @ torch.tanh(q[n, i].to(DT) @ p["W1"][0]
                                                    + k[n, l].to(DT) @ p["W2"][0] + p["b"][0])
                             for l in range(Lk)])
            if pick[n].any():
                ex = torch.exp(e - e[pick[n]].max()) * pick[n]
                a[n, i] = ex / ex.sum()
    return a, a @ v.to(DT)


def mean_ref(w, wmask):
    return (w.to(DT) * wmask[..., None]).sum(1) / wmask.sum(1, keepdim=True)


def test_eval_selection_and_alignment_match_the_reference(gen):
    """eval(): the model passes s = mean(w) to the policy, picks pi_l > 1/2, and attends
    softly over the picked keys; log_prob is log pi(subset) of that pick."""
    m = model_of(gen).eval()
    q, k, v, w, kmask, wmask = inputs()
    s = mean_ref(w, wmask)
    pi = policy_ref(m.att, k, s)
    pick = (pi > 0.5) & kmask
    assert pick.any(1).all() and not (pick | ~kmask).all(), "the test needs a proper subset"
    out = m(x=k, y=q, z=v, w=w, x_mask=kmask, w_mask=wmask, return_attention=True)
    a_ref, c_ref = alignment_ref(m.att, q, k, v, pick)
    torch.testing.assert_close(out.attention["att"][:, 0].to(DT), a_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.output.to(DT), c_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.log_probs["att"].to(DT), log_prob_ref(pi, pick, kmask),
                               atol=1e-5, rtol=0)


def test_training_samples_with_the_reference_probabilities(gen):
    """train(): each key is kept with probability pi_l; on the subset the module sampled,
    its log_prob and weights are the reference's (sampling fixed by reading the pick back)."""
    m = model_of(gen).train()
    q, k, v, w, kmask, wmask = inputs(N=1)
    n = 2000
    Q, K, V = (t.expand(n, -1, -1) for t in (q, k, v))
    S = mean_ref(w, wmask).float().expand(n, -1)
    torch.manual_seed(11)
    c, a, ex = m.att(Q, K, V, kmask.expand(n, -1), policy_in=S)
    picked = a[:, 0, 0] > 0  # (n, Lk): the softmax is > 0 on every picked key
    pi = policy_ref(m.att, k, mean_ref(w, wmask))[0]  # (Lk,)
    freq = picked.to(DT).mean(0)
    assert (freq - pi)[kmask[0]].abs().max() < 0.05, (freq, pi)
    assert not picked[:, ~kmask[0]].any(), "a padded key is never picked"
    torch.testing.assert_close(ex["log_prob"].to(DT),
                               log_prob_ref(pi.expand(n, -1), picked, kmask.expand(n, -1)),
                               atol=1e-5, rtol=0)
    rows = slice(0, 8)  # the alignment over each sampled subset
    a_ref, c_ref = alignment_ref(m.att, Q[rows], K[rows], V[rows], picked[rows])
    torch.testing.assert_close(a[rows, 0].to(DT), a_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(c[rows].to(DT), c_ref, atol=1e-5, rtol=0)


def test_the_policy_reads_the_aspect(gen):
    """Two aspects, same words: a policy that ignored s would pick the same keys for both."""
    m = model_of(gen).eval()
    q, k, v, w, kmask, wmask = inputs()
    with torch.no_grad():
        m.att.policy.weight.zero_()
        m.att.policy.bias.zero_()
        m.att.policy_in.weight.copy_(torch.tensor([[4.0, 0.0, 0.0, 0.0]]))
    w1, w2 = w.clone(), w.clone()
    w1[..., 0], w2[..., 0] = 1.0, -0.5  # s_0 = +1: keep every word; s_0 = -1/2: none
    o1 = m(x=k, y=q, z=v, w=w1, x_mask=kmask, w_mask=wmask, return_attention=True)
    o2 = m(x=k, y=q, z=v, w=w2, x_mask=kmask, w_mask=wmask, return_attention=True)
    assert ((o1.attention["att"][:, 0] > 0) == kmask[:, None, :]).all()
    assert (o2.attention["att"] == 0).all() and (o2.output == 0).all()
    assert not torch.allclose(o1.log_probs["att"], o2.log_probs["att"])


GROUPED = """
model g {
    input x: sequence[S, W, 8]
    input w: sequence[U, 4]
    feature s = mean(w)
    attention att {
        query = learned(8)  keys = x  score = multiplicative  align = reinforced(policy = s)
    }
    output o = classify(mean(att), 3)
}
"""


def test_grouped_keys_repeat_the_policy_input_for_each_group(gen):
    """One attention per sentence (keys (B, S, W, d)): every sentence's policy reads its
    example's s; log pi(subset) per group (N = B x S) as the reference's."""
    mod = gen(GROUPED)
    torch.manual_seed(0)
    m = mod.Model(mod.Config()).eval()
    ex = mod.example_inputs(cfg=mod.Config(), seed=2)
    out = m(**ex)
    s = mean_ref(ex["w"], ex["w_mask"])
    x, keep = ex["x"], ex["x_mask"].bool()
    B, S = x.shape[:2]
    pi = torch.stack([policy_ref(m.att, x[:, j], s) for j in range(S)], 1)  # (B, S, W)
    pick = (pi > 0.5) & keep
    assert pick.any() and not pick[keep].all(), "the test needs a proper subset"
    want = log_prob_ref(pi, pick, keep).reshape(B * S)
    torch.testing.assert_close(out.log_probs["att"].to(DT), want, atol=1e-5, rtol=0)


def test_reinforce_reaches_the_aspect_weights(tmp_path):
    """As a user trains RBAN: loss = -(log_prob * reward); the policy's aspect weights w_s
    and the aspect's embedding get gradient, w_s's equal to the reference
    -R sum_l valid_l (z_l - pi_l) v_a (d log pi(subset) / d w_s)."""
    import importlib.util
    import sys

    from taxcompile import codegen, pipeline

    cs = pipeline.load(SPECS / "wang2019.attn")
    path = tmp_path / "_taxcompile_rban_policy.py"
    path.write_text(codegen.generate(cs, cs.models[0], "wang2019.attn"), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # the file defines dataclasses
    spec.loader.exec_module(mod)
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).train()
    ex = mod.example_inputs(cfg=cfg, batch_size=3)
    picks = {}
    hook = model.a2q.register_forward_hook(
        lambda mdl, args, kw, out: picks.update(k=args[1], s=kw["policy_in"], a=out[1]),
        with_kwargs=True)
    torch.manual_seed(5)
    out = model(**ex, return_attention=True)
    hook.remove()
    reward = torch.tensor([1.0, -0.5, 2.0])
    loss = -(out.log_probs["a2q"] * reward).sum() - (out.log_probs["q2a"] * reward).sum()
    loss.backward()
    g = model.a2q.policy_in.weight.grad
    assert g is not None and g.abs().sum() > 0
    emb = model.asp_embed.weight.grad
    assert emb is not None and emb[ex["aspect"].unique()].abs().sum() > 0
    # w_s's gradient from a2q's term alone (q2a has its own w_s)
    valid = ex["question_mask"].bool()
    pi = torch.sigmoid(model.a2q.policy(picks["k"]).squeeze(-1)
                       + model.a2q.policy_in(picks["s"])).detach().to(DT)
    z = (picks["a"][:, 0] > 0).any(1).to(DT)  # (N, Lk): the keys the sample kept
    want = -(reward.to(DT)[:, None, None] * (valid[..., None] * (z - pi)[..., None]
                                             * picks["s"].detach().to(DT)[:, None, :])).sum((0, 1))
    torch.testing.assert_close(g[0].to(DT), want, atol=1e-5, rtol=1e-4)


def test_rban_keeps_table_iii_row_14_with_a_stated_reason():
    """The aspect reaches the modules by a policy edge: no query, so Specialized only."""
    from taxcompile.graph import edges
    from taxcompile.pipeline import classify_spec, load

    cs = load(SPECS / "wang2019.attn")
    m = cs.models[0].model
    roles = {(src, role) for a in m.attentions for src, role, _ in edges(a)}
    assert ("asp", "policy") in roles and not any(r == "query" and s == "asp" for s, r in roles)
    c = classify_spec(cs)
    assert c.row()["query_type"] == "Specialized"
    reasons = " ".join(r for rs in c.variants[0].cells["query_type"].values.values() for r in rs)
    assert "the policy of `a2q` reads `asp`" in reasons and "policy edge" in reasons


def test_without_the_policy_edge_the_aspect_would_be_a_basic_query():
    """The same aspect written as the query's input makes the query Basic: the reading above
    comes from the edge's role, not from the input's name."""
    text = HEADER + """
model m {
    input question: tokens[Q] (vocab = 50)
    input answer:   tokens[A] (vocab = 50)
    input aspect:   tokens[T] (vocab = 50)
    feature fq  = embed(question, 8)
    feature fa  = embed(answer, 8)
    feature asp = mean(embed(aspect, 8))
    attention a2q {
        query = concat(fa, asp)  keys = fq  score = additive(d_w = 8)  align = reinforced
    }
    attention q2a {
        query = fq  keys = fa  score = additive(d_w = 8)  align = reinforced(policy = asp)
    }
    output o = classify(concat(mean(a2q), mean(q2a)), 3)
}
"""
    assert classify_text(text)["query_type"] == "Specialized + Basic"


@pytest.mark.parametrize("name", ["policy_token_ids", "policy_per_position", "policy_expression",
                                  "policy_unknown_name", "policy_on_global"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


def test_the_drop_in_layer_refuses_a_policy_input():
    """The policy's input belongs to its model: a drop-in layer would have no `policy_in`."""
    from taxcompile.codegen import layer
    from taxcompile.pipeline import load

    cs = load(SPECS / "wang2019.attn")
    with pytest.raises(layer.LayerError, match="reads `asp` in its alignment"):
        layer.generate(cs, cs.models[0], "a2q", "specs/wang2019.attn")
