"""Where the queries sit: a position term (rotary, ALiBi, Shaw's relative, Transformer-XL's)
places query i at position offset + i among the keys' 0..Lk-1, offset = Lk - Lq unless
given (the last Lq positions, where the causal mask and a KV cache put them).

1. the drop-in layer (`--layer`): layer(x[:, -n:], x, x) is the last n rows of
   layer(x, x, x), with and without a causal mask, and both equal a float64 reference of the
   equations written here with query i at Lk - Lq + i (before, the position terms numbered
   the queries from 0: rotary was 0.1 off, ALiBi 0.3, Shaw's 0.9); `positions=` places them
   elsewhere; more queries than keys without positions is an error, not a guess;
2. generate() steps on the new token alone (a KV cache) for every term that counts the
   cached keys, and writes the tokens of a greedy loop over full runs of the prefix; the
   cached step's logits are the full run's;
3. a segment memory (`mem_len`) with rotary, ALiBi or Shaw's term: two segments are one
   pass over the whole sequence (query i sits after the memory's positions).
"""

from __future__ import annotations

import inspect
import math

import pytest

torch = pytest.importorskip("torch")

from taxcompile import pipeline  # noqa: E402
from taxcompile.codegen import layer  # noqa: E402
from taxcompile.run import load_module  # noqa: E402
from torch_support import (  # noqa: E402, F401
    LM, compiled_recording, inline_fixture, one_thread, peaked)

DT = torch.float64
HEADER = """\
paper p {
    cite  = "Test"
    title = "Query positions"
    year  = 2024
}
"""

LAYER_SPEC = """
model m {{
    input x: sequence[L, 16]
    attention att {{ query = project(x)  keys = project(x)  values = project(x)
                    score = scaled_multiplicative  heads = 2  mask = {mask}  {mods} }}
    output o = identity(att)
}}
"""

TERMS = {
    "rotary": "position = rotary",
    "alibi": "bias = alibi",
    "relative": "position = relative(k = 2, values = true)",
    "relative_keys": "position = relative(k = 3)",
    "transformer_xl": "position = transformer_xl",
    "gaussian": "bias = gaussian",
    "relative_alibi": "position = relative(k = 3)  bias = alibi",  # the flex path only
}
REFERENCED = [t for t in TERMS if t != "relative_alibi"]
OFFSET_TERMS = [t for t in REFERENCED if t != "gaussian"]  # the Gaussian bias reads no query index

_layers: dict = {}


def make_layer(term: str, mask: str):
    if (term, mask) not in _layers:
        text = HEADER + LAYER_SPEC.format(mask=mask, mods=TERMS[term])
        cs = pipeline.load_text(text, "t.attn")
        src = layer.generate(cs, cs.models[0], "att", "t.attn")
        mod = load_module(src, f"_taxcompile_qpos_{term}_{mask}")
        torch.manual_seed(0)
        lay = mod.Layer(mod.Config()).to(DT).eval()
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in lay.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=DT) * 0.5)
        _layers[term, mask] = lay
    return _layers[term, mask]


# ---- the reference: the equations with query i at pos[i], key j at j ------------------------


def heads_of(x, H):
    N, L, d = x.shape
    return x.view(N, L, H, d // H).transpose(1, 2)  # (N, H, L, d/H)


def rope(x, pos, base=10000.0):
    """RoPE as x-transformers' apply_rotary_pos_emb: x cos(t theta) + rotate_half(x)
    sin(t theta), theta_f = base^(-2f/d), the angles repeated over the two halves."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=DT) / d)
    ang = pos.to(DT)[:, None] * theta
    ang = torch.cat([ang, ang], -1)  # (L, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * ang.cos() + torch.cat([-x2, x1], -1) * ang.sin()


def sinusoids(r, d):
    """Transformer-XL's R_r: sin(r f) in the first d/2 features, cos(r f) in the second,
    f = 10000^(-2m/d)."""
    f = 10000.0 ** (-torch.arange(0, d, 2, dtype=DT) / d)
    return torch.cat([(r[..., None] * f).sin(), (r[..., None] * f).cos()], -1)


def reference(lay, term, mask, q_in, kv_in, pos):
    """c of the layer's statement, float64, query i at position pos[i] and key j at j."""
    m, H = lay.attn, lay.attn.heads
    q = heads_of(q_in @ lay.q_proj.weight.T, H)
    k = heads_of(kv_in @ lay.k_proj.weight.T, H)
    v = heads_of(kv_in @ lay.v_proj.weight.T, H)
    d, Lk = q.shape[-1], k.shape[2]
    i, j = pos.to(DT)[:, None], torch.arange(Lk, dtype=DT)  # (Lq, 1), (Lk,)
    if term == "rotary":
        q, k = rope(q, pos), rope(k, torch.arange(Lk))
    if term == "transformer_xl":  # (q_i + u)^T k_j + (q_i + v)^T W_R R_(i-j) (Dai et al. §3.3)
        WR = sinusoids(i - j, H * d) @ m.r_proj.weight.T  # (Lq, Lk, H d)
        WR = WR.view(*WR.shape[:2], H, d).permute(2, 0, 1, 3)  # (H, Lq, Lk, d)
        e = (q + m.u_bias) @ k.transpose(-1, -2) + torch.einsum("nhid,hijd->nhij",
                                                                q + m.v_bias, WR)
    else:
        e = q @ k.transpose(-1, -2)
    aV = None
    if term.startswith("relative"):  # Shaw et al.: w^K_clip(j - i), w^V_clip(j - i)
        r = ((j - i).clamp(-m.clip, m.clip) + m.clip).long()  # (Lq, Lk)
        e = e + torch.einsum("nhid,ijd->nhij", q, m.rel_k.weight[r])
        aV = m.rel_v.weight[r] if term == "relative" else None
    e = e / math.sqrt(d)
    if term == "alibi":  # -m_h |i - j|, m_h = 2^(-8h/H)
        slopes = torch.tensor([2.0 ** (-8 * h / H) for h in range(1, H + 1)], dtype=DT)
        e = e - slopes[:, None, None] * (i - j).abs()
    if term == "gaussian":  # -(j - P_i)^2 / (2 sigma_i^2), I = Lk (no padding)
        hid = torch.tanh(q @ m.loc_w.weight.T)
        P = Lk * torch.sigmoid(hid @ m.loc_p.weight.T)
        sigma = Lk * torch.sigmoid(hid @ m.loc_d.weight.T) / 2
        e = e - (j - P) ** 2 / (2 * sigma ** 2)
    if mask == "causal":
        e = e.masked_fill(j > i, float("-inf"))
    a = e.softmax(-1)
    c = a @ v
    if aV is not None:
        c = c + torch.einsum("nhij,ijd->nhid", a, aV)
    N, _, Lq, _ = c.shape
    return c.transpose(1, 2).reshape(N, Lq, -1) @ m.out.weight.T + m.out.bias


def features(L=7, seed=2):
    return torch.randn(2, L, 16, generator=torch.Generator().manual_seed(seed), dtype=DT)


# ---- 1. the drop-in layer ---------------------------------------------------------------------


@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("term", sorted(REFERENCED))
def test_query_suffix_gives_the_full_calls_last_rows(term, mask):
    lay, x = make_layer(term, mask), features()
    with torch.no_grad():
        full = lay(x, x, x)
        part = lay(x[:, -3:], x, x)
    torch.testing.assert_close(full, reference(lay, term, mask, x, x, torch.arange(7)),
                               atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(part, reference(lay, term, mask, x[:, -3:], x, torch.arange(4, 7)),
                               atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(part, full[:, -3:], atol=1e-10, rtol=1e-9)
    one = lay(x[:, -1:], x, x)  # a decoding step: the last query alone
    torch.testing.assert_close(one, full[:, -1:], atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("term", OFFSET_TERMS)
def test_offset_places_the_queries(term, mask):
    """positions=2: queries 2..4 of the sequence, the full call's rows 2..4 (the causal mask
    follows: query i sees keys j <= 2 + i); the rotary, relative and ALiBi terms read the
    distance only, so shifting every position alike changes nothing."""
    lay, x = make_layer(term, mask), features()
    with torch.no_grad():
        full = lay(x, x, x)
        mid = lay(x[:, 2:5], x, x, positions=2)
    torch.testing.assert_close(mid, full[:, 2:5], atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(mid, reference(lay, term, mask, x[:, 2:5], x, torch.arange(2, 5)),
                               atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("term", OFFSET_TERMS)
def test_more_queries_than_keys_need_an_offset(term):
    """7 queries over 3 keys cannot be the keys' last positions: an error that says what to
    pass; positions=0 puts query i at i (each sequence from 0), as the reference does."""
    lay, x = make_layer(term, "causal"), features()
    with pytest.raises(ValueError, match=r"7 queries and 3 keys.*pass `positions`"):
        lay(x, x[:, :3], x[:, :3])
    with pytest.raises(ValueError, match="at least 0"):
        lay(x, x, x, positions=-1)
    with torch.no_grad():
        got = lay(x, x[:, :3], x[:, :3], positions=0)
    torch.testing.assert_close(got, reference(lay, term, "causal", x, x[:, :3], torch.arange(7)),
                               atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("term", ["relative_alibi", "transformer_xl"])
def test_flex_path_places_the_queries_too(term, monkeypatch):
    """Under torch.compile the module's fast path is flex_context (the score_mod reads
    i + past, the block mask keeps j <= past + i): a query suffix and an offset give the
    explicit path's rows there too. flex_ready is forced on for CPU inference and the traced
    graph runs as it is (tests/test_position_terms.py says why)."""
    import copy

    lay = copy.deepcopy(make_layer(term, "causal")).float()
    module = inspect.getmodule(type(lay))
    monkeypatch.setattr(module, "flex_ready", lambda q: torch.compiler.is_compiling()
                        and not torch.is_grad_enabled())
    x = features(L=9).float()
    compiled, graphs = compiled_recording(lay)
    try:
        with torch.no_grad():
            full = lay(x, x, x, need_weights=True)[0]  # the explicit path
            suffix = compiled(x[:, -4:], x, x, validate=False)
            mid = compiled(x[:, 3:6], x, x, validate=False, positions=3)
        torch.testing.assert_close(suffix, full[:, -4:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mid, full[:, 3:6], atol=1e-5, rtol=1e-5)
        assert graphs and all("flex_attention" in g for g in graphs)
    finally:
        torch._dynamo.reset()


def test_the_reference_tells_the_positions_apart():
    """Numbering the suffix's queries from 0 gives other numbers (what the layer did)."""
    for term in ("rotary", "alibi", "relative", "transformer_xl"):
        lay, x = make_layer(term, "none"), features()
        last = reference(lay, term, "none", x[:, -3:], x, torch.arange(4, 7))
        first = reference(lay, term, "none", x[:, -3:], x, torch.arange(3))
        assert (last - first).abs().max() > 1e-3, term


def test_local_monotonic_layer_places_its_window():
    """Local-m (p = start + i) over the statement's own sequence (Daniluk et al.: keys = the
    query's sequence, a forward mask): the layer's default start is Lk - Lq, so a query
    suffix gets the full call's rows; over another sequence (Luong et al.'s target over the
    source) it stays 0, each sequence from 0, and a decoder step passes its t."""
    from conftest import ROOT

    cs = pipeline.load(ROOT / "examples" / "daniluk2017_key_value.attn")
    mod = load_module(layer.generate(cs, cs.models[0], "r", "d.attn"), "_taxcompile_qpos_dan")
    torch.manual_seed(0)
    lay = mod.Layer(mod.Config(window=2)).to(DT).eval()
    x = torch.randn(2, 9, lay.cfg.d_q, dtype=DT, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = lay(x, x, x)
        torch.testing.assert_close(lay(x[:, -3:], x, x), full[:, -3:], atol=1e-10, rtol=1e-9)
        torch.testing.assert_close(lay(x[:, -3:], x, x, positions=6), full[:, -3:], atol=1e-10,
                                   rtol=1e-9)
    cs = pipeline.load(ROOT / "specs" / "luong2015.attn")
    cm = next(m for m in cs.models if m.model.name == "local_m")
    text = layer.generate(cs, cm, "att", "l.attn")
    assert "start = 0 if positions is None" in text and "start = Lk - Lq" not in text


def test_lsh_layer_refuses_a_shorter_query_set():
    """LSH attention hashes the queries as keys (shared QK, Kitaev et al.): fewer queries than
    keys have no bucket of their own; a clear error, not a reshape failure inside."""
    from conftest import ROOT

    cs = pipeline.load(ROOT / "examples" / "kitaev2020_reformer.attn")
    mod = load_module(layer.generate(cs, cs.models[0], "self", "r.attn"), "_taxcompile_qpos_lsh")
    lay = mod.Layer(mod.Config()).eval()
    x = torch.randn(2, 16, lay.cfg.d_k)
    with pytest.raises(ValueError, match="shared QK.*Lq = 3, Lk = 16"):
        lay(x[:, -3:], x, x)
    assert lay(x, x, x).shape[:2] == (2, 16)


# ---- 2. generate() ----------------------------------------------------------------------------

gen = inline_fixture("qpos", HEADER)


def lm(gen, term):
    mod = gen(LM.format(mods=TERMS[term]))
    return mod, peaked(mod)


@pytest.mark.parametrize("term", sorted(REFERENCED))
def test_generate_equals_greedy_full_reruns(gen, term):
    mod, m = lm(gen, term)
    prefix = torch.ones(3, 1, dtype=torch.long)
    for _ in range(6):  # greedy argmax, the whole prefix through forward() each time
        with torch.no_grad():
            nxt = m(tokens=prefix).output[:, -1].argmax(-1, keepdim=True)
        prefix = torch.cat([prefix, nxt], 1)
    eos = 29 if 29 not in prefix else int(prefix.max()) + 1
    assert torch.equal(m.generate(batch_size=3, max_len=6, bos=1, eos=eos), prefix[:, 1:])
    beam = dict(batch_size=3, max_len=6, bos=1, eos=eos, strategy="beam", beams=3)
    assert torch.equal(m.generate(**beam), m.generate(**beam, incremental=False))
    incremental = "cache" in inspect.signature(mod.Model.forward).parameters
    assert incremental == (term != "gaussian")  # the Gaussian bias re-runs the prefix
    if incremental:  # every cached step's logits are the full run's at that position
        cache = {}
        with torch.no_grad():
            m(tokens=prefix[:, :2], cache=cache)
            for t in range(2, prefix.shape[1]):
                step = m(tokens=prefix[:, t:t + 1], cache=cache).output[:, -1]
                torch.testing.assert_close(step, m(tokens=prefix[:, :t + 1]).output[:, -1],
                                           atol=1e-10, rtol=1e-9)


# ---- 3. a segment memory ----------------------------------------------------------------------

SEGMENTS = """
model lm {{
    input tokens: tokens[T] (vocab = 30)
    feature x = embed(tokens, 16)
    repeat decoder 2 {{
        attention att {{ query = project(x)  keys = project(x)  values = project(x)
                        score = scaled_multiplicative  heads = 2  mask = causal  {mods}
                        mem_len = 8 }}
        update x = norm(x + att)
    }}
    output logits = classify(x, 30)
}}
"""


@pytest.mark.parametrize("term", ["rotary", "alibi", "relative"])
def test_segments_with_memory_equal_one_pass(gen, term):
    """Segments of 5 and 3 tokens with a memory of 8 are one causal pass over all 8: the
    second segment's query i sits at 5 + i, after the memory's positions."""
    mod = gen(SEGMENTS.format(mods=TERMS[term]))
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT).eval()
    tokens = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        whole = model(tokens).output
        one = model(tokens[:, :5])
        two = model(tokens[:, 5:], mems=one.mems)
    torch.testing.assert_close(torch.cat([one.output, two.output], 1), whole,
                               atol=1e-10, rtol=1e-9)

