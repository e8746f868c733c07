"""LSH attention (`align = lsh(buckets, rounds, chunk)`, Kitaev et al. 2020, Reformer; seed
002's efficient attention) against a float64 reference written here from the paper's
description: per round, hash with the module's rotations, sort by (bucket, position), cut
into chunks, let each query score the keys of its bucket in its chunk and the one before
(Reformer's look-one-back; none before the first chunk), its own key at -5e4
(reformer-pytorch's TOKEN_SELF_ATTN_VALUE) and each key that n rounds give it at e - log n;
then weight the rounds' outputs by
exp(lse_r - logsumexp lse) (§2.3). Both generated paths (the weights, and the sort-and-chunk
context) must give those numbers, with padding and causal masks; gradients flow; errors are
located; the example builds and runs."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, cell_of, classify_text  # noqa: E402
from torch_support import inline_builder  # noqa: E402

DT = torch.float64
HEADER = 'paper lsh {\n    cite = "Test"\n    title = "LSH tests"\n    year = 2024\n}\n'
L, D, HEADS = 12, 8, 2


def spec(align: str, mask: str = "none") -> str:
    return f"""
    model m {{
        input x: sequence[L, {D}]
        attention att {{ query = x  keys = x  values = x  score = scaled_multiplicative
                         align = {align}  heads = {HEADS}  mask = {mask} }}
        output out = identity(att)
    }}
    """


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_lsh")


def reference(x, v, rot, key_mask, chunk, mask):
    """Reformer's LSH attention of one head, literally: (weights (L, L), context (L, d_v)).
    x: (L, d) the shared query/key vectors; rot: (R, d, b / 2)."""
    n_pos = x.shape[0]
    k = x / x.norm(dim=-1, keepdim=True)  # shared QK: k_j = q_j / |q_j|
    e = x @ k.T / math.sqrt(x.shape[1])
    c = min(chunk, n_pos)
    near = []  # per round, the set of (i, j) with j in i's bucket and chunk window
    for r in range(rot.shape[0]):
        xr = k @ rot[r]
        h = torch.cat([xr, -xr], -1).argmax(-1).tolist()
        order = sorted(range(n_pos), key=lambda j: (h[j], j))
        cid = {j: s // c for s, j in enumerate(order)}
        near.append({(i, j) for i in range(n_pos) for j in range(n_pos)
                     if h[i] == h[j] and cid[j] in (cid[i], cid[i] - 1)})

    def allowed(i, j):
        ok = key_mask is None or bool(key_mask[j])
        return ok and {"none": True, "causal": j <= i, "forward": j < i, "backward": j > i}[mask]

    a = torch.zeros(n_pos, n_pos, dtype=DT)
    for i in range(n_pos):
        lse, probs = [], []
        for r, pairs in enumerate(near):
            js = [j for j in range(n_pos) if (i, j) in pairs and allowed(i, j)]
            if not js:
                continue
            s = torch.stack([torch.tensor(-5e4, dtype=DT) if j == i else
                             e[i, j] - math.log(sum((i, j) in p for p in near)) for j in js])
            lse.append(torch.logsumexp(s, 0))
            probs.append(dict(zip(js, torch.softmax(s, 0))))
        if not lse:
            continue
        weights = torch.softmax(torch.stack(lse), 0)
        for w, p in zip(weights, probs):
            for j, pj in p.items():
                a[i, j] += w * pj
    return a, a @ v


def run(mod, align_rot, key_mask=None, seed=0, need_weights=True):
    torch.manual_seed(seed)
    model = mod.Model(mod.Config()).double().eval()
    with torch.no_grad():
        model.att.rotations.copy_(align_rot)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, L, D, generator=g, dtype=DT)
    v = torch.randn(2, L, D, generator=g, dtype=DT)
    c, a, _ = model.att(x, x, v, key_mask, need_weights=need_weights)
    return model, x, v, c, a


def heads_of(t):  # (N, L, D) -> (N, H, L, D / H)
    return t.view(t.shape[0], t.shape[1], HEADS, -1).transpose(1, 2)


MASKS = {"none": None, "padding": torch.tensor([[True] * L, [True] * 9 + [False] * 3]),
         "holes": torch.tensor([[True, False] * (L // 2), [False] + [True] * (L - 1)])}


@pytest.mark.parametrize("case", [
    # (buckets, rounds, chunk, mask, padding)
    (4, 1, 64, "none", "none"),  # one chunk: every key of the query's bucket
    (4, 3, 3, "none", "holes"),  # four chunks of 3, three rounds: windows and duplicates
    (2, 2, 4, "causal", "padding"),
    (8, 2, 5, "causal", "holes"),  # 12 = 5 + 5 + 2: a short last chunk
    (2, 2, 4, "backward", "padding"),  # DiSAN's masks hide the query's own key too
])
def test_both_paths_match_the_reference(gen, case):
    b, rounds, chunk, mask, pad = case
    mod = gen(spec(f"lsh(buckets = {b}, rounds = {rounds}, chunk = {chunk})", mask))
    rot = torch.randn(rounds, D // HEADS, b // 2, generator=torch.Generator().manual_seed(7),
                      dtype=DT)
    key_mask = MASKS[pad]
    model, x, v, c, a = run(mod, rot, key_mask)
    _, _, _, c_fast, a_fast = run(mod, rot, key_mask, need_weights=False)
    assert a_fast is None
    xs, vs = heads_of(x), heads_of(v)
    ctx = torch.zeros_like(vs)
    for n in range(2):
        for h in range(HEADS):
            want_a, ctx[n, h] = reference(xs[n, h], vs[n, h], rot, None if key_mask is None
                                          else key_mask[n], chunk, mask)
            torch.testing.assert_close(a[n, h], want_a, atol=1e-12, rtol=1e-10)
    want_c = model.att.out(ctx.transpose(1, 2).reshape(2, L, D))
    torch.testing.assert_close(c, want_c)
    torch.testing.assert_close(c_fast, want_c)


def test_the_buckets_and_the_rounds_matter(gen):
    """The checks above must be able to fail: the weights are not the global softmax, a
    second round adds keys, and averaging the rounds instead of weighting them by their
    normalisers gives other numbers."""
    rot = torch.randn(2, D // HEADS, 2, generator=torch.Generator().manual_seed(3), dtype=DT)
    model, x, v, c, a = run(gen(spec("lsh(buckets = 4, rounds = 2, chunk = 64)")), rot)
    _, _, _, c1, a1 = run(gen(spec("lsh(buckets = 4, rounds = 1, chunk = 64)")), rot[:1])
    xs, vs = heads_of(x), heads_of(v)
    other = ~torch.eye(L, dtype=torch.bool)  # a query's own key is dropped once it has others
    assert (a1 > 0).sum() < (a > 0).sum() and ((a1 > 0) & (a == 0) & other).sum() == 0
    assert (a == 0).any()  # some keys sit in other buckets
    # the plain mean of the two rounds' softmaxes differs from Reformer's weighting
    one = [reference(xs[0, 0], vs[0, 0], rot[r:r + 1], None, 64, "none")[0] for r in (0, 1)]
    assert not torch.allclose((one[0] + one[1]) / 2, a[0, 0])


def test_one_bucket_leaves_the_chunk_windows(gen):
    """Every key in one bucket (x·R > 0 for all): the positions stay in order, and a query
    sees exactly its chunk of 3 and the one before, the first chunk only itself, as
    reformer-pytorch with its buckets masked (its look-back from a round's first chunk
    reaches another round's buckets)."""
    mod = gen(spec("lsh(buckets = 2, rounds = 1, chunk = 3)"))
    model, x, v, c, a = run(mod, torch.ones(1, D // HEADS, 1, dtype=DT))
    x = x.abs()
    c, a, _ = model.att(x, x, v)
    pos = torch.arange(L)
    want = ((pos[None] // 3 == pos[:, None] // 3) | (pos[None] // 3 == pos[:, None] // 3 - 1)) \
        & (pos[None] != pos[:, None])
    assert torch.equal(a > 0, want.expand_as(a))
    torch.testing.assert_close(model.att(x, x, v, need_weights=False)[0], c)


def test_gradients_flow_through_both_paths(gen):
    mod = gen(spec("lsh(buckets = 4, rounds = 2, chunk = 3)", "causal"))
    rot = torch.randn(2, D // HEADS, 2, generator=torch.Generator().manual_seed(5), dtype=DT)
    for need in (True, False):
        model, x, v, c, a = run(mod, rot, MASKS["padding"], need_weights=need)
        x = x.clone().requires_grad_()
        v = v.clone().requires_grad_()
        c = model.att(x, x, v, MASKS["padding"], need_weights=need)[0]
        c.square().sum().backward()
        assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
        assert torch.isfinite(v.grad).all() and v.grad.abs().sum() > 0


def test_rotations_are_fixed_in_eval_and_drawn_in_training(gen):
    mod = gen(spec("lsh(buckets = 8, rounds = 1, chunk = 64)"))
    rot = torch.randn(1, D // HEADS, 4, generator=torch.Generator().manual_seed(1), dtype=DT)
    model, x, v, c, a = run(mod, rot)
    assert torch.equal(a, model.att(x, x, v)[1])  # eval: the buffer, deterministic
    model.train()
    torch.manual_seed(11)
    kept = [(model.att(x, x, v)[1] > 0) for _ in range(3)]
    assert not (torch.equal(kept[0], kept[1]) and torch.equal(kept[1], kept[2]))


def test_classified_as_sparse_with_the_reason():
    text = (ROOT / "examples" / "kitaev2020_reformer.attn").read_text(encoding="utf-8")
    assert classify_text(text)["alignment"] == "Sparse"
    reason = " ".join(cell_of(text, "alignment")["Sparse"])
    assert "hash bucket" in reason and "no policy" in reason


def test_example_runs_forward_and_backward(tmp_path):
    build = inline_builder(tmp_path, "", "_taxcompile_kitaev")
    mod = build((ROOT / "examples" / "kitaev2020_reformer.attn").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = mod.Model(mod.Config.tiny())
    inputs = mod.example_inputs(cfg=model.cfg)
    out = model(**inputs, return_attention=True)
    loss = model.loss(out, inputs["tokens"], inputs["tokens_mask"])
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g_).all() for g_ in grads)
    w = next(iter(out.attention.values()))  # each row a distribution over its bucket's keys
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


@pytest.mark.parametrize("field", ["position = rotary", "bias = alibi", "qk_norm = true",
                                   "dimensionality = multi", "mem_kv = 2",
                                   "talking_heads = true"])
def test_mechanisms_the_chunks_do_not_compute_are_refused(field):
    """The LSH record's ``excludes``, worded by the checker's one rule from the records
    (memory key/values and talking heads by what their records say they do: add keys, mix
    heads)."""
    from taxcompile import pipeline
    from taxcompile.diagnostics import SpecError

    text = HEADER + spec("lsh(buckets = 4)").replace("heads = 2", f"heads = 2  {field}")
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    got = info.value.render()
    assert f"`{field.split(' =')[0]}" in got.split(", which LSH attention cannot go with: "
                                                   "its sorted chunks compute plain q^T k")[0]
    assert f"hint: drop `{field.split(' =')[0]}` or `align = lsh`" in got


@pytest.mark.parametrize("name", ["lsh_odd_buckets", "lsh_separate_qk", "lsh_additive"])
def test_misuse_is_a_located_error(name):
    from conftest import error_snapshot

    got, want = error_snapshot(name)
    assert got == want
