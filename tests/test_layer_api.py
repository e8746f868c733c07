"""The drop-in layer's call and Config, as nn.MultiheadAttention and
F.scaled_dot_product_attention users expect them (`taxcompile compile SPEC --layer NAME`):

1. masks (True = attend) of shape (B, Lk), (Lq, Lk) and (B, Lq, Lk), is_causal (the queries
   at the last Lq of the keys' positions unless `positions` says where) and need_weights,
   checked against nn.MultiheadAttention itself with the layer's weights (its masks are the
   inverse: True = masked) and against the equations written here; one return type per
   flag, whatever the Config;
2. what a statement whose alignment picks its own keys refuses, with the reason;
3. every Config check's message, naming the field to change; a projection written without
   a width follows its input, so Config(d_q=64, d_k=64, d_v=64) is a 64-wide layer."""

from __future__ import annotations

import functools
import math
import re

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from test_layers_all import DROPOUT_SPEC  # noqa: E402
from taxcompile import pipeline  # noqa: E402
from taxcompile.codegen import layer  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

DT = torch.float64


@functools.lru_cache(maxsize=None)
def module(path: str, name: str, model: str | None = None):
    cs = pipeline.load(ROOT / path)
    cm = next(m for m in cs.models if model in (None, m.model.name))
    tag = re.sub(r"\W", "_", f"{path}_{model}_{name}")
    return load_module(layer.generate(cs, cm, name, path), f"layer_api_{tag}")


def mha_layer(d: int = 16, heads: int = 4):
    """Vaswani et al.'s encoder self-attention as a layer, float64, seeded."""
    mod = module("specs/vaswani2017.attn", "encoder.self")
    torch.manual_seed(0)
    return mod.Layer(mod.Config(d_q=d, d_k=d, d_v=d, heads=heads)).to(DT).eval()


def peer(lay) -> torch.nn.MultiheadAttention:
    """nn.MultiheadAttention with the layer's weights (W_Q, W_K, W_V; W_O and its bias)."""
    d, H = lay.cfg.d_q, lay.cfg.heads
    mha = torch.nn.MultiheadAttention(d, H, batch_first=True, dtype=DT).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([lay.q_proj.weight, lay.k_proj.weight,
                                            lay.v_proj.weight]))
        mha.in_proj_bias.zero_()
        mha.out_proj.weight.copy_(lay.attn.out.weight)
        mha.out_proj.bias.copy_(lay.attn.out.bias)
    return mha


def reference(lay, q_in, kv_in, keep):
    """Scaled dot-product multi-head attention (eq. 35, 38-40) written out, keep:
    (B, Lq, Lk) True = attend; a query with no key kept gets c = 0."""
    B, Lq, d = q_in.shape
    H = lay.cfg.heads

    def heads(x):
        return x.view(B, x.shape[1], H, -1).transpose(1, 2)

    q, k, v = (heads(x @ w.weight.T) for x, w in ((q_in, lay.q_proj), (kv_in, lay.k_proj),
                                                  (kv_in, lay.v_proj)))
    e = (q @ k.transpose(-1, -2) / math.sqrt(d // H)).masked_fill(~keep[:, None], -math.inf)
    a = e.softmax(-1).nan_to_num(0.0)
    c = (a @ v).transpose(1, 2).reshape(B, Lq, d)
    return c @ lay.attn.out.weight.T + lay.attn.out.bias, a


def data(B=3, Lq=4, Lk=6, d=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, Lk, d, generator=g, dtype=DT)
    pad = torch.ones(B, Lk, dtype=torch.bool)
    pad[1, -2:] = False
    pad[2, -3:] = False
    return x[:, -Lq:], x, pad


def close(got, want):
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


# ---- 1. masks, is_causal, positions, need_weights --------------------------------------------


def test_masks_are_nn_multihead_attentions_inverted():
    """A padding mask, a mask per query for every example and one per example: the layer
    with mask=keep is nn.MultiheadAttention with key_padding_mask / attn_mask = ~keep."""
    lay = mha_layer()
    mha = peer(lay)
    q, kv, pad = data()
    g = torch.Generator().manual_seed(2)
    per_query = torch.rand(4, 6, generator=g) > 0.3
    per_query[:, 0] = True  # every query keeps a key
    each = torch.rand(3, 4, 6, generator=g) > 0.3
    each[..., 0] = True
    with torch.no_grad():
        got, a = lay(q, kv, kv, mask=pad, need_weights=True)
        want, wa = mha(q, kv, kv, key_padding_mask=~pad, average_attn_weights=False)
        close(got, want)
        close(a, wa)
        close(lay(q, kv, kv, mask=per_query), mha(q, kv, kv, attn_mask=~per_query)[0])
        big = (~each).repeat_interleave(lay.cfg.heads, 0)  # (B * H, Lq, Lk), its layout
        close(lay(q, kv, kv, mask=each), mha(q, kv, kv, attn_mask=big)[0])
        # integer 0/1 masks (Hugging Face's attention_mask) read as the bool ones
        close(lay(q, kv, kv, mask=each.long()), lay(q, kv, kv, mask=each))


@pytest.mark.parametrize("need_weights", [False, True])  # the fused kernel, and the weights
def test_is_causal_puts_the_queries_last(need_weights):
    """is_causal=True: query i sits at Lk - Lq + i and sees the keys j <= Lk - Lq + i (the
    last rows of the full causal call), combined with padding; positions=p puts it at p + i.
    On Lq = Lk it is nn.MultiheadAttention's is_causal."""
    lay = mha_layer()
    q, kv, pad = data()
    Lq, Lk = q.shape[1], kv.shape[1]
    tri = torch.ones(Lq, Lk, dtype=torch.bool).tril(Lk - Lq)
    with torch.no_grad():
        out = lay(q, kv, kv, mask=pad, is_causal=True, need_weights=need_weights)
        got = out[0] if need_weights else out
        want, wa = reference(lay, q, kv, tri & pad[:, None])
        close(got, want)
        if need_weights:
            close(out[1], wa)
        full = lay(kv, kv, kv, is_causal=True)
        close(lay(q, kv, kv, is_causal=True), full[:, -Lq:])
        mha, causal = peer(lay), torch.ones(Lk, Lk, dtype=torch.bool).triu(1)
        close(full, mha(kv, kv, kv, attn_mask=causal, is_causal=True)[0])
        at1 = torch.ones(Lq, Lk, dtype=torch.bool).tril(1)  # queries at 1..4
        close(lay(q, kv, kv, is_causal=True, positions=1), reference(lay, q, kv, at1[None])[0])


def test_is_causal_refuses_more_queries_than_keys():
    lay = mha_layer()
    q, kv, _ = data(Lq=6, Lk=6)
    with pytest.raises(ValueError, match=re.escape("`is_causal`: 6 queries and 3 keys: the "
                                                   "causal mask puts the queries at the last "
                                                   "positions of the keys' sequence, which is "
                                                   "shorter; pass `positions`")):
        lay(q, kv[:, :3], kv[:, :3], is_causal=True)
    keep = torch.ones(6, 3, dtype=torch.bool).tril(0)  # positions=0: query i at i
    with torch.no_grad():
        got = lay(q, kv[:, :3], kv[:, :3], is_causal=True, positions=0)
    close(got, reference(lay, q, kv[:, :3], keep[None])[0])
    with pytest.raises(ValueError, match="`positions`: the position of the first query"):
        lay(q, kv, kv, is_causal=True, positions=-1)
    with pytest.raises(ValueError, match="`positions`: this attention has no position term"):
        lay(q, kv, kv, positions=2)  # nothing reads them without is_causal


def test_mask_shapes_and_the_ambiguous_one():
    lay = mha_layer()
    q, kv, _ = data(B=4, Lq=4)  # B = Lq: a 2-D mask could be (B, Lk) or (Lq, Lk)
    square = torch.ones(4, 6, dtype=torch.bool)
    with pytest.raises(ValueError, match=re.escape("`mask` of shape (4, 6) is (B, Lk) or "
                                                   "(Lq, Lk) here, B = Lq = 4: pass mask[:, "
                                                   "None] (B, 1, Lk) for padding")):
        lay(q, kv, kv, mask=square)
    with torch.no_grad():  # the two ways of saying it
        close(lay(q, kv, kv, mask=square[:, None]), lay(q, kv, kv))
        close(lay(q, kv, kv, mask=square[None]), lay(q, kv, kv))
    with pytest.raises(ValueError, match=re.escape("`mask`: expected (B, Lk) = (4, 6), (Lq, Lk) "
                                                   "= (4, 6) or (B, Lq, Lk) = (4, 4, 6), got "
                                                   "(4, 5)")):
        lay(q, kv, kv, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="an integer mask must hold only 0 and 1, got 2"):
        lay(q, kv, kv, mask=torch.full((4, 1, 6), 2))


def test_one_return_type_per_flag():
    """need_weights and need_extras decide what comes back, never the Config: the hard
    alignment's log p (an extra) and the attention dropout change nothing of it."""
    hard = module("specs/xu2015.attn", "att", "hard")
    lay = hard.Layer(hard.Config()).eval()
    q, k = torch.randn(2, 3, lay.cfg.d_q), torch.randn(2, 5, lay.cfg.d_k)
    assert isinstance(lay(q, k), torch.Tensor)
    c, a = lay(q, k, need_weights=True)
    assert c.shape[:2] == (2, 3) and a.shape[-2:] == (3, 5)
    c, ex = lay(q, k, need_extras=True)
    assert isinstance(c, torch.Tensor) and set(ex) == {"log_prob"}
    assert len(lay(q, k, need_weights=True, need_extras=True)) == 3
    mha = mha_layer()
    x = torch.randn(2, 5, 16, dtype=DT)
    for kw in ({}, {"mask": torch.ones(2, 5, dtype=torch.bool)}, {"is_causal": True}):
        assert isinstance(mha(x, x, x, **kw), torch.Tensor)
        assert [type(t) for t in mha(x, x, x, need_weights=True, **kw)] == [torch.Tensor] * 2
        assert mha(x, x, x, need_extras=True, **kw)[1] == {}


def test_rotary_is_causal_is_the_causal_statement():
    """With a position term the fused path (FlexAttention) takes no mask per query: the
    layer takes the explicit one. A rotary statement without a mask, called with
    is_causal=True, is the same statement with `mask = causal` (the same weights)."""
    none = module("examples/rotary.attn", "decoder.self")
    src = (ROOT / "examples" / "rotary.attn").read_text(encoding="utf-8")
    assert "mask     = causal" in src
    cs = pipeline.load_text(src.replace("mask     = causal", "mask     = none"), "r.attn")
    free = load_module(layer.generate(cs, cs.models[0], "decoder.self", "r.attn"), "api_rope")
    torch.manual_seed(0)
    causal = none.Layer(none.Config(d_q=32, d_k=32, d_v=32, heads=4)).to(DT).eval()
    lay = free.Layer(free.Config(d_q=32, d_k=32, d_v=32, heads=4)).to(DT).eval()
    lay.load_state_dict(causal.state_dict())
    x = torch.randn(2, 7, 32, dtype=DT)
    with torch.no_grad():
        want = causal(x, x, x)
        close(lay(x, x, x, is_causal=True), want)
        close(lay(x, x, x, is_causal=True, need_weights=True)[0], want)
        close(lay(x[:, 2:5], x, x, is_causal=True, positions=2), want[:, 2:5])
        close(causal(x[:, 2:5], x, x, positions=2), want[:, 2:5])


# ---- 2. what a statement that picks its own keys refuses ---------------------------------------


def test_a_local_window_takes_padding_masks_only():
    local = module("specs/luong2015.attn", "att", "local_m")
    lay = local.Layer(local.Config()).eval()
    q, k = torch.randn(2, 3, lay.cfg.d_q), torch.randn(2, 7, lay.cfg.d_k)
    why = "its local alignment takes each query's window of keys itself (eq. 27-29)"
    with pytest.raises(ValueError, match=re.escape("`mask` of shape (3, 7): a mask per query "
                                                   f"cannot reach this attention, as {why}")):
        lay(q, k, mask=torch.ones(3, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match=re.escape("`is_causal`: this attention takes no causal "
                                                   f"mask per call, as {why}")):
        lay(q, k, is_causal=True)
    pad = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    a = lay(q, k, mask=pad, need_weights=True)[1]
    assert a[1, ..., 5:].abs().max() == 0


def test_a_structural_mask_that_is_causal_takes_is_causal():
    """Reformer's LSH attention (its own causal mask, Config.mask) accepts is_causal as what
    it already does, and refuses it once Config.mask is none."""
    lsh = module("examples/kitaev2020_reformer.attn", "decoder.self")
    lay = lsh.Layer(lsh.Config()).eval()
    x = torch.randn(2, 16, lay.cfg.d_k)
    torch.manual_seed(3)
    with torch.no_grad():
        torch.testing.assert_close(lay(x, x, x, is_causal=True), lay(x, x, x))
    free = lsh.Layer(lsh.Config(mask="none")).eval()
    with pytest.raises(ValueError, match="Config\\(mask='causal'\\) gives its own"):
        free(x, x, x, is_causal=True)


# ---- 3. the Config ----------------------------------------------------------------------------


def test_projections_follow_their_inputs():
    """Config(d_q=64, d_k=64, d_v=64) gave a 512-wide output (the projections' widths stayed
    the spec's); project(x) keeps x's width, so the layer is 64 wide."""
    mod = module("specs/vaswani2017.attn", "encoder.self")
    lay = mod.Layer(mod.Config(d_q=64, d_k=64, d_v=64))
    x = torch.randn(2, 5, 64)
    assert lay(x, x, x).shape == (2, 5, 64)
    assert lay.cfg.widths()["d_v_proj"] == 64 and lay.cfg.d_v_proj is None
    assert mod.Layer(mod.Config(d_q=64, d_k=64, d_v=64, d_v_proj=32))(x, x, x).shape[-1] == 32


def test_grouped_keys_follow_the_query_heads():
    """Grouped-query attention: the keys hold kv_heads heads of the query heads' width.
    Config(d_q=128, …) failed with "kv_heads = 2 must divide heads = 8" although 2 divides 8
    (the keys' projection stayed 64 wide); they follow now, and a width set by hand that
    does not fit names itself."""
    mod = module("examples/gqa.attn", "decoder.self")
    lay = mod.Layer(mod.Config(d_q=128, d_k=128, d_v=128))
    assert lay.k_proj.weight.shape == (2 * 128 // 8, 128)
    x = torch.randn(2, 5, 128)
    assert lay(x, x, x).shape == (2, 5, 128)
    assert mod.Layer(mod.Config(kv_heads=4)).k_proj.weight.shape == (128, 256)


CONFIG_ERRORS = [
    ("specs/vaswani2017.attn", "encoder.self", None, dict(heads=3),
     "Config: heads = 3 must divide d_q = 512 (each head reads an equal slice, eq. 38): "
     "change heads or d_q"),
    ("specs/vaswani2017.attn", "encoder.self", None, dict(d_q_proj=100),
     "Config: heads = 8 must divide d_q_proj = 100 (each head reads an equal slice, eq. 38): "
     "change heads or d_q_proj"),
    ("specs/vaswani2017.attn", "encoder.self", None, dict(d_v=100),
     "Config: heads = 8 must divide d_v = 100"),
    ("specs/vaswani2017.attn", "encoder.self", None, dict(d_q=64),
     "Config: d_k = 512 must equal d_q = 64: the scaled multiplicative score multiplies "
     "queries and keys of one width; set d_k = 64"),
    ("specs/vaswani2017.attn", "encoder.self", None, dict(d_k_proj=256),
     "Config: d_k_proj = 256 must equal d_q = 512"),
    ("specs/vaswani2017.attn", "encoder.self", None, dict(heads=0),
     "Config.heads = 0: expected an int of at least 1"),
    ("specs/vaswani2017.attn", "encoder.self", None, dict(d_q_proj=0),
     "Config.d_q_proj = 0: expected an int of at least 1 (or None)"),
    ("specs/vaswani2017.attn", "encoder.self", None, dict(d_k=64.0),
     "Config.d_k = 64.0: expected an int of at least 1"),
    ("examples/gqa.attn", "decoder.self", None, dict(kv_heads=3),
     "Config: kv_heads = 3 must divide heads = 8 (each key/value head serves heads / "
     "kv_heads query heads): change kv_heads"),
    ("examples/gqa.attn", "decoder.self", None, dict(d_k_proj=128),
     "Config: d_k_proj = 128 must be kv_heads * d_q / heads = 2 * 256 / 8 = 64 (the keys "
     "hold kv_heads heads of the query heads' width): set d_k_proj = 64, or None"),
    ("examples/gqa.attn", "decoder.self", None, dict(d_v_proj=32),
     "Config: d_v_proj = 32 must be kv_heads * d_q / heads = 2 * 256 / 8 = 64 (the values"),
    ("examples/gqa.attn", "decoder.self", None, dict(mask="causl"),
     "Config.mask = 'causl': one of none, causal, forward, backward"),
    ("examples/rotary.attn", "decoder.self", None, dict(d_q=24, d_k=24, d_v=24),
     "Config: d_q / heads = 3 must be even: rotary positions turn pairs of each head's "
     "features; change d_q or heads"),
    ("examples/li2019_routing.attn", "encoder.self", None, dict(out_capsules=7),
     "Config: out_capsules = 7 must divide the context's 256 features (the output capsules "
     "side by side are the context): change out_capsules"),
    ("examples/kitaev2020_reformer.attn", "decoder.self", None, dict(buckets=5),
     "Config: buckets = 5 must be even (LSH hashes argmax([xR; -xR]) into buckets): change "
     "buckets"),
    ("examples/kitaev2020_reformer.attn", "decoder.self", None, dict(buckets=1),
     "Config.buckets = 1: expected an int of at least 2"),
    ("specs/yang2016.attn", "word", None, dict(heads=3),
     "Config: heads = 3: this attention's class has one head (the spec's heads = 1): set "
     "heads = 1, or export a statement with heads > 1"),
    ("specs/luong2015.attn", "att", "local_m", dict(window=-1),
     "Config.window = -1: expected an int of at least 0"),
]


@pytest.mark.parametrize("path, name, model, kw, message", CONFIG_ERRORS,
                         ids=[f"{p.split('/')[-1][:-5]}-{'-'.join(kw)}"
                              for p, _, _, kw, _ in CONFIG_ERRORS])
def test_config_names_the_field_to_change(path, name, model, kw, message):
    mod = module(path, name, model)
    with pytest.raises(ValueError, match=re.escape(message)):
        mod.Config(**kw)


def test_the_attention_dropout_is_a_probability():
    text = DROPOUT_SPEC
    cs = pipeline.load_text(text, "t.attn")
    mod = load_module(layer.generate(cs, cs.models[0], "att", "t.attn"), "layer_api_dropout")
    with pytest.raises(ValueError, match=re.escape("Config.dropout = 1.0: a probability in "
                                                   "[0, 1)")):
        mod.Config(dropout=1.0)


def test_a_learned_query_set_is_the_layers_own(monkeypatch):
    """learned(K, d), K learned queries (PMA's seeds, Perceiver latents): the layer reads
    the IR's learned node (its `n` parameter, the count), owns a (K, d) `query`, takes
    q=None and gives K rows. The statement is PMA's pooling with its learned(16) node given
    a count of 3, as the lowering of learned(3, 16) gives it."""
    from taxcompile import ir
    from test_layer_oracle import PMA

    cs = pipeline.load_text(PMA, "pma.attn")
    cm = cs.models[0]
    n = layer.find(cm, "pool")
    seeds = n.query.args[0]
    assert seeds.fn == "learned" and seeds.param("n") is None
    many = ir.Op(**{**dict(seeds), "params": seeds.params + (("n", 3),)})
    n3 = ir.Attention(**{**dict(list(n)), "query": ir.Op(**{**dict(n.query), "args": (many,)})})
    monkeypatch.setattr(layer, "find", lambda cm, name: n3)
    mod = load_module(layer.generate(cs, cm, "pool", "pma.attn"), "layer_api_seeds")
    assert mod.Config().n_queries == 3
    torch.manual_seed(0)
    lay = mod.Layer(mod.Config()).to(DT).eval()
    assert lay.query.shape == (3, 16)
    x = torch.randn(2, 5, 16, dtype=DT)
    pad = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    with torch.no_grad():
        c, a = lay(None, x, x, mask=pad, need_weights=True)
        # K queries: W_Q s_k for each seed, the same for every example
        q = (lay.query @ lay.q_proj.weight.T).expand(2, 3, 8)
        H, dh = 2, 4
        qh = q.view(2, 3, H, dh).transpose(1, 2)
        kh, vh = ((x @ w.weight.T).view(2, 5, H, dh).transpose(1, 2)
                  for w in (lay.k_proj, lay.v_proj))
        e = (qh @ kh.transpose(-1, -2) / math.sqrt(dh)).masked_fill(~pad[:, None, None],
                                                                   -math.inf)
        want_a = e.softmax(-1)
        want = (want_a @ vh).transpose(1, 2).reshape(2, 3, 8) @ lay.attn.out.weight.T \
            + lay.attn.out.bias
    close(a, want_a)
    close(c, want)
    per_seed = torch.ones(3, 5, dtype=torch.bool).tril(0)  # a mask per query: (K, Lk)
    assert lay(None, x, x, mask=per_seed, need_weights=True)[1][:, :, 0, 1:].abs().max() == 0
