"""More real implementations read by taxcompile/torchread, built offline with random weights
and tiny sizes: nn.Transformer (encoder-decoder), x-transformers' Decoder and qk-norms,
Hugging Face's Mistral and Qwen3, the `entmax` package's normalisations and lucidrains'
`local-attention`. docs/classify-code.md shows these rows; a test holds it to them. What
the reader gets wrong is a strict xfail with the reason (a fix shows as a pass). Captures
past ~10 s that add no row run nightly (TAXCOMPILE_TORCHREAD_ALL=1)."""
import os
from pathlib import Path

import pytest
import torch
from torch import nn

import taxcompile

ALL = os.environ.get("TAXCOMPILE_TORCHREAD_ALL") == "1"
nightly = pytest.mark.skipif(not ALL, reason="capture takes >10 s (TAXCOMPILE_TORCHREAD_ALL=1)")
G = torch.Generator().manual_seed(0)


def _randn(*s):
    return torch.randn(*s, generator=G)


class CausalTransformer(nn.Module):
    """nn.Transformer as its docs use it: the decoder masked by
    generate_square_subsequent_mask (built in forward: a mask passed as an input makes
    torch.export guard on its values, in nn.Transformer's _detect_is_causal_mask)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.t = nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.t(src, tgt, tgt_mask=mask, tgt_is_causal=True)


def transformer():
    return CausalTransformer(), (_randn(2, 5, 16), _randn(2, 3, 16))


def transformer_unmasked():
    torch.manual_seed(0)
    return nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True), \
        (_randn(2, 5, 16), _randn(2, 3, 16))


def _xt(kind="Encoder", **kw):
    x = pytest.importorskip("x_transformers")
    torch.manual_seed(0)
    m = x.TransformerWrapper(num_tokens=20, max_seq_len=16,
                             attn_layers=getattr(x, kind)(dim=16, depth=1, heads=4, **kw))
    return m, (torch.randint(0, 20, (2, 6), generator=G),)


def xt_decoder():
    return _xt("Decoder")


def xt_qk_norm():
    return _xt(attn_qk_norm=True)


def xt_qk_norm_dim_scale():
    return _xt(attn_qk_norm=True, attn_qk_norm_dim_scale=True)


def xt_qk_rmsnorm():
    return _xt(attn_qk_rmsnorm=True)


def mistral(window=3):
    t = pytest.importorskip("transformers")
    torch.manual_seed(0)
    c = t.MistralConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
                        max_position_embeddings=16, sliding_window=window)
    return t.MistralModel(c), {"input_ids": torch.randint(0, 50, (2, 6), generator=G)}


def qwen3():
    """Qwen3: nn.RMSNorm-style qk-norm (x rsqrt(mean x^2 + eps) times a weight per feature)
    on each head's q and k before the rotary embedding."""
    t = pytest.importorskip("transformers")
    torch.manual_seed(0)
    c = t.Qwen3Config(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
                      max_position_embeddings=16, head_dim=4)
    return t.Qwen3Model(c), {"input_ids": torch.randint(0, 50, (2, 6), generator=G)}


class EntmaxAttention(nn.Module):
    """One head of scaled dot-product self-attention normalised by ``fn`` of `entmax`."""

    def __init__(self, fn, d=16):
        super().__init__()
        torch.manual_seed(0)
        self.fn, self.q, self.k, self.v = fn, nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        s = self.q(x) @ self.k(x).transpose(-1, -2) / 4.0
        return self.fn(s, dim=-1) @ self.v(x)


def _entmax(name):
    e = pytest.importorskip("entmax")
    return EntmaxAttention(getattr(e, name)), (_randn(2, 5, 16),)


def local_mha(heads=4):
    la = pytest.importorskip("local_attention")
    torch.manual_seed(0)
    return la.LocalMHA(dim=16, window_size=4, dim_head=4, heads=heads), (_randn(2, 8, 16),)


def local_attention(**kw):
    """LocalAttention over projected heads given as (batch, heads, length, d); q = k = v."""
    la = pytest.importorskip("local_attention")
    x = _randn(2, 4, 8, 8)
    return la.LocalAttention(window_size=4, **kw), (x, x, x)


# name -> (factory, captured with, scoring, alignment, query type, query multiplicity,
# words of its reasons)
ROWS = {
    "nn.Transformer(16, 4, 1, 1), causal decoder mask": (
        transformer, "torch.export", "Scaled Multiplicative", "Global",
        "Self-Attentive + Basic", "Multi-Head", "reads args_1, which the keys"),
    "x-transformers Decoder(heads=4)": (
        xt_decoder, "torch.export", "Scaled Multiplicative", "Global", "Self-Attentive",
        "Multi-Head", "leaves out padding or future keys"),
    "x-transformers Encoder(attn_qk_norm=True)": (
        xt_qk_norm, "torch.export", "Similarity", "Global", "Self-Attentive", "Multi-Head",
        "each divided by its norm"),
    "x-transformers Encoder(attn_qk_norm=True, attn_qk_norm_dim_scale=True)": (
        xt_qk_norm_dim_scale, "torch.export", "Scaled Multiplicative", "Global",
        "Self-Attentive", "Multi-Head", "l2-normalised"),
    "x-transformers Encoder(attn_qk_rmsnorm=True)": (
        xt_qk_rmsnorm, "torch.export", "Scaled Multiplicative", "Global", "Self-Attentive",
        "Multi-Head", "RMS-normalised"),
    "Mistral (sliding_window=3, 6 tokens)": (
        mistral, "torch.export", "Scaled Multiplicative", "Local", "Self-Attentive",
        "Multi-Head", "banded mask"),
    "Qwen3 (qk-norm: RMSNorm with weights on q and k)": (
        qwen3, "torch.export", "Scaled Multiplicative", "Global", "Self-Attentive",
        "Multi-Head", "RMS-normalised"),
    "entmax.entmax15 over q k^T / 4": (
        lambda: _entmax("entmax15"), "torch.export", "Scaled Multiplicative", "Sparse",
        "Self-Attentive", "Singular", "1.5-entmax"),
    "entmax.sparsemax over q k^T / 4": (
        lambda: _entmax("sparsemax"), "torch.export", "Scaled Multiplicative", "Sparse",
        "Self-Attentive", "Singular", "is sparsemax"),
    "local-attention LocalMHA(window_size=4, heads=4)": (
        local_mha, "torch.export", "Scaled Multiplicative", "Local", "Self-Attentive",
        "Multi-Head", "banded mask"),
    "local-attention LocalAttention(window_size=4), q = k = v": (
        local_attention, "torch.export", "Scaled Multiplicative", "Local", "Self-Attentive",
        "Multi-Head", "neighbouring blocks"),
}


def _check(name):
    make, *want = ROWS[name]
    model, inputs = make()
    res = taxcompile.classify(model.eval(), inputs)
    row = res.row()
    assert (res.method, row["scoring"], row["alignment"], row["query_type"],
            row["query_multiplicity"]) == tuple(want[:5]), res.text()
    assert want[5] in res.text()
    return res


@pytest.mark.parametrize("name", list(ROWS))
def test_real_implementation_rows(name):
    _check(name)


def test_docs_show_these_rows():
    doc = (Path(__file__).parents[1] / "docs" / "classify-code.md").read_text()
    for name, want in ROWS.items():
        assert "| " + " | ".join([name, *want[1:6]]) + " |" in doc, name


def _only(res):
    (a,) = res.recognised
    return a


def test_transformer_reads_its_mask_and_its_cross_attention():
    res = taxcompile.classify(*transformer())
    self_enc, self_dec, cross = res.recognised
    assert "leaves out padding or future keys" in self_dec.values["alignment"][1]
    assert self_dec.values["query_type"][0] == "Self-Attentive"
    assert cross.values["query_type"][0] == "Basic"


def test_unmasked_transformer_cross_attention_is_basic():
    res = taxcompile.classify(*transformer_unmasked())
    assert res.row()["query_type"] == "Self-Attentive + Basic", res.text()


def test_qk_norm_reads_the_cosine_the_code_computes():
    """x-transformers normalises q and k and scales by a constant (qk_norm_scale = 10): the
    score is 10 cos(q, k), the taxonomy's Similarity, not a plain q^T k."""
    a = _only(taxcompile.classify(*xt_qk_norm()))
    assert "cosine similarity" in a.values["scoring"][1]


def test_mistral_reads_its_default_window_too():
    """4096 keeps every key of 6 tokens, but the window is in the graph: Local by the code."""
    pytest.importorskip("transformers")
    t = __import__("transformers")
    assert t.MistralConfig().sliding_window == 4096
    res = taxcompile.classify(*mistral(4096))
    assert res.row()["alignment"] == "Local"


@nightly
def test_entmax_bisect_is_a_refusal_not_a_row():
    """entmax_bisect finds its threshold by 50 unrolled bisection steps, then divides the
    clamped power by its sum: no recogniser reads that, and no row is invented."""
    res = taxcompile.classify(*_entmax("entmax_bisect"))
    assert res.row() == {} and "no attention found" in res.text()


def test_local_attention_scale_before_rotary_is_read():
    res = taxcompile.classify(*local_mha())
    assert res.row()["scoring"] == "Scaled Multiplicative", res.text()


def test_local_attention_without_rotary_is_scaled():
    res = taxcompile.classify(*local_attention())
    assert res.row()["scoring"] == "Scaled Multiplicative"


def test_local_attention_one_head_is_singular():
    res = taxcompile.classify(*local_mha(heads=1))
    assert res.row()["query_multiplicity"] == "Singular", res.text()


def test_local_attention_blocks_are_local():
    """LocalAttention's default (exact_windowsize=False) has no window mask: each block's
    keys are its own and its neighbours' (look_around: pad, unfold), and the softmax runs
    over those alone (taxcompile/torchread/blocks.py)."""
    res = taxcompile.classify(*local_attention())
    a = _only(res)
    assert a.values["alignment"][0] == "Local" and a.names["align"] == "local", res.text()
    assert "window of 3 neighbouring blocks" in a.values["alignment"][1]


def test_a_padded_unfold_of_the_keys_alone_is_not_local():
    """Both keys and values must be gathered by the unfold: keys smoothed over a window
    and attended globally stay Global."""
    class Smoothed(nn.Module):
        def forward(self, x):
            k = nn.functional.pad(x, (0, 0, 1, 1)).unfold(1, 3, 1).mean(-1)
            return torch.softmax(x @ k.transpose(-1, -2), -1) @ x

    res = taxcompile.classify(Smoothed(), (_randn(2, 6, 8),))
    assert res.row()["alignment"] == "Global", res.text()
