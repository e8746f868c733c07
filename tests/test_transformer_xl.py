"""Transformer-XL (Dai et al. 2019, survey ref. [99]; issue 25): `position = transformer_xl`,
the relative form of §3.3,

    A_ij = q_i^T k_j + q_i^T W_R R_(i-j) + u^T k_j + v^T W_R R_(i-j),

R the sinusoids of the distance i - j, W_R, u and v learned per head.

1. the generated class against a float64 reference of the four terms written here as loops
   over (head, i, j), from the class's own weights: without a mask, causal, and with keys
   before the first query (a memory: the distance counts them); u and v swapped or the
   distance's sign flipped give other numbers (the reference can tell them apart);
2. the FlexAttention path (score_mod + block mask) gives the explicit path's numbers;
3. the classifier's reading (the score as written, the term in its reason);
4. the example compiles, runs forward and backward, and a misuse is a located error;
5. the segment memory (`mem_len`, §3.2): segment 2 against a float64 reference over
   [SG(m); h] from the model's weights (the gradient reaches W_K, W_V, not the memory), and
   two segments of a two-layer model against one pass over the whole sequence.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import classify_text, error_snapshot
from taxcompile import pipeline

torch = pytest.importorskip("torch")

from taxcompile import codegen  # noqa: E402
from taxcompile.run import load_module  # noqa: E402
from torch_support import (  # noqa: E402, F401
    assert_generate_is_greedy, compiled_recording, inline_fixture, one_thread)

ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64

HEADER = """\
paper xl {
    cite  = "Test"
    title = "Transformer-XL tests"
    year  = 2019
}
"""

SPEC = """
model m {{
    input x: sequence[L, 16]
    attention att {{ query = project(x)  features = x  score = {score}  heads = {heads}
                    mask = {mask}  position = transformer_xl }}
    output o = identity(att)
}}
"""


gen = inline_fixture("xl", HEADER)


def xl_class(gen, heads=2, mask="none", score="scaled_multiplicative"):
    m = gen(SPEC.format(score=score, heads=heads, mask=mask))
    names = [n for n, c in vars(m).items() if isinstance(c, type) and n.endswith("Attention")]
    assert len(names) == 1, names
    return getattr(m, names[0])


def randomize(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return module


def inputs(N=2, Lq=7, Lk=7, d=16, seed=1, dtype=DT):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(N, Lq, d, generator=g, dtype=dtype)
    k, v = (torch.randn(N, Lk, d, generator=g, dtype=dtype) for _ in range(2))
    key_mask = torch.ones(N, Lk, dtype=torch.bool)
    key_mask[-1, Lk - 2:] = False  # the last example's last two keys are padding
    return q, k, v, key_mask


# ---- the reference: Dai et al. §3.3, term by term -------------------------------------------


def sinusoid_R(r: int, d: int) -> torch.Tensor:
    """R_r, Transformer-XL's encoding of distance r: sin(r w_f) in feature f < d/2 and
    cos(r w_f) in feature d/2 + f, w_f = 1 / 10000^(2f/d) (its PositionalEmbedding)."""
    out = torch.zeros(d, dtype=DT)
    for f in range(d // 2):
        w = 1.0 / 10000.0 ** (2 * f / d)
        out[f], out[d // 2 + f] = math.sin(r * w), math.cos(r * w)
    return out


def xl_ref(m, q, k, v, key_mask, mask, scaled=True, swap_uv=False, sign=1):
    """Each A_ij (per example and head) as the sum of the paper's four terms, (a) q_i^T k_j,
    (b) q_i^T W_R R_(i-j), (c) u^T k_j and (d) v^T W_R R_(i-j), where query i sits at
    position past + i (past = Lk - Lq keys come first) and key j at position j; then the
    masked softmax, the weighted values and W_O. `swap_uv` and `sign` = -1 are the wrong
    readings the tests must tell apart."""
    H, (N, Lq, D), Lk = m.heads, q.shape, k.shape[1]
    dh, past = D // H, Lk - Lq
    qh, kh, vh = (x.view(N, x.shape[1], H, dh) for x in (q, k, v))  # (N, L, H, dh)
    u, vb = m.u_bias.detach().view(H, dh), m.v_bias.detach().view(H, dh)
    if swap_uv:
        u, vb = vb, u
    WR = m.r_proj.weight.detach()  # (D, D)
    e = torch.zeros(N, H, Lq, Lk, dtype=DT)
    keep = torch.zeros(N, 1, Lq, Lk, dtype=torch.bool)
    for i in range(Lq):
        for j in range(Lk):
            rel = (WR @ sinusoid_R(sign * (past + i - j), D)).view(H, dh)  # W_R R_(i-j)
            for h in range(H):
                a_ = (qh[:, i, h] * kh[:, j, h]).sum(-1)
                b_ = (qh[:, i, h] * rel[h]).sum(-1)
                c_ = (u[h] * kh[:, j, h]).sum(-1)
                d_ = (vb[h] * rel[h]).sum()
                e[:, h, i, j] = (a_ + b_ + c_ + d_) / (math.sqrt(dh) if scaled else 1.0)
            keep[:, 0, i, j] = key_mask[:, j] & (mask != "causal" or j <= past + i)
    a = torch.nan_to_num(torch.softmax(e.masked_fill(~keep, float("-inf")), -1), nan=0.0)
    c = torch.einsum("nhij,njhd->nihd", a, vh).reshape(N, Lq, D)
    out = getattr(m, "out", None)  # W_O (eq. 40); one head has none
    return (c if out is None else c @ out.weight.T + out.bias), a


CASES = {  # name: (heads, mask, Lq, Lk, score)
    "two_heads": (2, "none", 7, 7, "scaled_multiplicative"),
    "causal": (2, "causal", 7, 7, "scaled_multiplicative"),
    "keys_before_queries": (2, "causal", 4, 9, "scaled_multiplicative"),
    "one_head_unscaled": (1, "causal", 6, 6, "multiplicative"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_against_reference(gen, case):
    heads, mask, Lq, Lk, score = CASES[case]
    cls = xl_class(gen, heads=heads, mask=mask, score=score)
    m = randomize(cls(d_q=16, d_k=16, d_v=16, heads=heads, mask=mask).to(DT))
    q, k, v, key_mask = inputs(Lq=Lq, Lk=Lk)
    q.requires_grad_(True)
    c, a, _ = m(q, k, v, key_mask)
    scaled = score == "scaled_multiplicative"
    want_c, want_a = xl_ref(m, q.detach(), k, v, key_mask, mask, scaled=scaled)
    torch.testing.assert_close(a, want_a, atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(c, want_c, atol=1e-10, rtol=1e-9)
    # the wrong readings differ: u and v swapped, or R of j - i instead of i - j
    for wrong in (dict(swap_uv=True), dict(sign=-1)):
        bad_c, _ = xl_ref(m, q.detach(), k, v, key_mask, mask, scaled=scaled, **wrong)
        assert (bad_c - want_c).abs().max() > 1e-3, wrong
    c.square().sum().backward()
    for p in (q, m.u_bias, m.v_bias, m.r_proj.weight):  # every term is trained
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    if "need_weights" in cls.forward.__code__.co_varnames:  # the weights-free call agrees
        c2, _, _ = m(q.detach(), k, v, key_mask, need_weights=False)
        torch.testing.assert_close(c2, want_c, atol=1e-10, rtol=1e-9)


def test_flex_path_matches_explicit_under_compile(gen, monkeypatch):
    """Under torch.compile the term goes through flex_context's score_mod (forced on for CPU
    inference, as in test_position_terms.py) and gives the explicit path's numbers, with
    keys before the first query."""
    cls = xl_class(gen, heads=2, mask="causal")
    module = __import__(cls.__module__)
    monkeypatch.setattr(module, "flex_ready", lambda q: torch.compiler.is_compiling()
                        and not torch.is_grad_enabled())
    m = randomize(cls(d_q=16, d_k=16, d_v=16, heads=2, mask="causal")).eval()
    # 8 keys before the first query (a segment memory): the block mask and the distances
    # place query i at 8 + i
    q, k, v, key_mask = inputs(Lq=12, Lk=20, dtype=torch.float32)
    compiled, graphs = compiled_recording(m)
    try:
        with torch.no_grad():
            want, _, _ = m(q, k, v, key_mask)
            got, a, _ = compiled(q, k, v, key_mask, need_weights=False)
        assert a is None and graphs and all("flex_attention" in g for g in graphs)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    finally:
        torch._dynamo.reset()


# ---- classification, the example, errors -------------------------------------------------------


def test_reads_as_the_score_it_modifies():
    """The relative terms are added to q_i^T k_j as Shaw et al.'s are: the row is the plain
    module's (Scaled Multiplicative, Global, Self-Attentive, Multi-Head) and the scoring
    cell's reason names Transformer-XL."""
    text = HEADER + SPEC.format(score="scaled_multiplicative", heads=2, mask="causal")
    from taxcompile.classification import classify_model
    cl = classify_model(pipeline.load_text(text, "t.attn").models[0])
    reasons = " ".join(cl.cells["scoring"].values["Scaled Multiplicative"])
    assert "Transformer-XL" in reasons and "still the same q·k score" in reasons
    plain = text.replace("position = transformer_xl", "")
    assert classify_text(text) == classify_text(plain)


def test_example_compiles_runs_and_classifies():
    path = ROOT / "examples" / "dai2019_transformer_xl.attn"
    cs = pipeline.load(path)
    src = codegen.generate(cs, cs.models[0], str(path))
    assert "MultiHeadXLScaledMultiplicativeAttention" in src
    mod = load_module(src, "_taxcompile_xl_example")
    torch.manual_seed(0)
    cfg = mod.Config.tiny()
    model = mod.Model(cfg)
    first = model(**mod.example_inputs(2, seed=1, cfg=cfg))
    assert len(first.mems) == cfg.layers  # one memory per layer, for the next segment
    out = model(**mod.example_inputs(2, seed=2, cfg=cfg), mems=first.mems).output
    assert torch.isfinite(out).all()
    out.square().mean().backward()
    grads = [p.grad for n, p in model.named_parameters() if n.endswith(("u_bias", "v_bias"))]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_error_snapshot():
    got, want = error_snapshot("position_xl_additive")
    assert got == want


# ---- the segment memory (`mem_len`, Dai et al. §3.2) -----------------------------------------

ONE_LAYER = """
model m {
    input x: sequence[T, 16]
    attention att { query = project(x)  keys = project(x)  values = project(x)
                    score = scaled_multiplicative  heads = 2  mask = causal
                    position = transformer_xl  mem_len = 5 }
    output o = identity(att)
}
"""

TWO_LAYERS = """
let mem = 8
model m {
    input tokens: tokens[T] (vocab = 50)
    feature x = embed(tokens, 16)
    repeat decoder 2 {
        attention att { query = project(x)  keys = project(x)  values = project(x)
                        score = scaled_multiplicative  heads = 2  mask = causal
                        position = transformer_xl  mem_len = mem }
        update x = norm(x + att)
        update x = norm(x + ffn(x, 32))
    }
    output logits = classify(x, 50)
}
"""


def seq(N, L, seed):
    return torch.randn(N, L, 16, generator=torch.Generator().manual_seed(seed), dtype=DT)


def test_second_segment_attends_over_memory_and_segment(gen):
    """Segment 2 after segment 1: its keys and values are W_K [SG(m); h], W_V [SG(m); h]
    and its queries W_Q h (Dai et al. §3.2), scored with the four terms over the distance
    M + i - j, the memory wholly visible and the segment causal: the reference computes
    this from the model's weights by hand (xl_ref, float64 loops); the new memory is the
    last M positions of [m; h]; the gradient reaches W_K and W_V through the memory's
    keys, and not the memory."""
    mod = gen(ONE_LAYER)
    torch.manual_seed(0)
    model = randomize(mod.Model(mod.Config()).to(DT), seed=3)
    x1, x2 = seq(2, 4, 11), seq(2, 6, 12)
    out1 = model(x1)
    torch.testing.assert_close(out1.mems["att"], x1)  # 4 positions < M = 5: all kept
    mem = out1.mems["att"].clone().requires_grad_(True)
    out2 = model(x2, mems={"att": mem})
    torch.testing.assert_close(out2.mems["att"], torch.cat([x1, x2], 1)[:, -5:])
    assert not out2.mems["att"].requires_grad  # stored detached
    # the reference, from leaf copies of W_Q, W_K, W_V
    kv = model.att_kv_proj.weight.detach().clone().requires_grad_(True)
    wq = model.att_q_proj.weight.detach()
    h = torch.cat([mem.detach(), x2], 1)  # (B, M + T, d): h~ = [SG(m); h]
    k, v = (h @ kv.T).chunk(2, -1)
    want, want_a = xl_ref(model.att, x2 @ wq.T, k, v, torch.ones(2, 10, dtype=torch.bool),
                          "causal")
    torch.testing.assert_close(out2.output, want, atol=1e-10, rtol=1e-9)
    # every query sees all 4 remembered positions, and segment position j <= i
    _, a, _ = model.att(x2 @ wq.T, *(h @ model.att_kv_proj.weight.T).chunk(2, -1))
    torch.testing.assert_close(a, want_a, atol=1e-10, rtol=1e-9)
    assert (a[..., :4] > 0).all() and (a[..., 4:].triu(1) == 0).all()
    out2.output.square().sum().backward()
    want.square().sum().backward()
    assert mem.grad is None  # stop-gradient: nothing flows into the memory
    torch.testing.assert_close(model.att_kv_proj.weight.grad, kv.grad, atol=1e-9, rtol=1e-8)


def test_segments_with_memory_equal_one_pass(gen):
    """Transformer-XL's recurrence with a memory at least as long as the past is the causal
    model over the whole sequence: two layers (each layer's memory holds the previous
    layer's outputs of segment 1), segments of 5 and 3 tokens, M = 8, against one pass over
    all 8 tokens (the relative distances count the memory's positions)."""
    mod = gen(TWO_LAYERS)
    torch.manual_seed(0)
    cfg = mod.Config()
    model = mod.Model(cfg).to(DT).eval()
    tokens = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(5))
    whole = model(tokens).output
    one = model(tokens[:, :5])
    two = model(tokens[:, 5:], mems=one.mems)
    assert sorted(one.mems) == ["decoder[1].att", "decoder[2].att"]
    assert all(m.shape == (2, 5, 16) for m in one.mems.values())
    torch.testing.assert_close(torch.cat([one.output, two.output], 1), whole,
                               atol=1e-10, rtol=1e-9)
    # a shorter memory forgets: M = 2 gives other numbers for segment 2
    short = mod.Model(mod.Config(mem=2)).to(DT).eval()
    short.load_state_dict(model.state_dict())
    s1 = short(tokens[:, :5])
    assert all(m.shape[1] == 2 for m in s1.mems.values())
    assert (short(tokens[:, 5:], mems=s1.mems).output - two.output).abs().max() > 1e-6
    with pytest.raises(ValueError, match="previous segment's Output.mems"):
        model(tokens[:, 5:], mems={"decoder[1].att": torch.zeros(3, 5, 16, dtype=DT)})


def test_memory_changes_no_cell():
    """The memory adds keys (earlier positions of the same sequence), not a query: the row
    of the module without it."""
    with_mem = HEADER + TWO_LAYERS
    assert classify_text(with_mem) == classify_text(with_mem.replace("mem_len = mem", ""))
    from taxcompile.classification import classify_model
    cl = classify_model(pipeline.load_text(with_mem, "t.attn").models[0])
    (reason,) = cl.cells["query_type"].values["Self-Attentive"]
    assert "previous segment" in reason and "the queries still the segment's own" in reason


@pytest.mark.parametrize("name", ["mem_len_two_features", "mem_len_gaussian"])
def test_memory_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


def test_generate_decodes_from_a_kv_cache_as_the_full_run(tmp_path):
    """Transformer-XL's distances count the keys before the first query, so generate()
    steps on the new token alone (a KV cache, query at position t), and writes the tokens of
    a greedy loop over full runs of the prefix (Shaw's, rotary and ALiBi too:
    tests/test_query_positions.py)."""
    path = ROOT / "examples" / "dai2019_transformer_xl.attn"
    cs = pipeline.load(path)
    mod = load_module(codegen.generate(cs, cs.models[0], str(path)), "_taxcompile_xl_generate")
    assert "cache" in mod.Model.forward.__code__.co_varnames
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny()).double().eval()
    prefix = assert_generate_is_greedy(m)
    cache = {}
    with torch.no_grad():  # the cached step's logits are the full run's last position's
        m(tokens=prefix[:, :-1], cache=cache)
        step = m(tokens=prefix[:, -1:], cache=cache).output[:, -1]
        torch.testing.assert_close(step, m(tokens=prefix).output[:, -1], atol=1e-10, rtol=1e-9)
