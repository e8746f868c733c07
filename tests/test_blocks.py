"""The everyday blocks of issue 24 against references written here from their papers:
gated feed-forward layers (Shazeer 2020: FFN_SwiGLU(x) = (Swish(x W) * x V) W2, GEGLU with
GELU, no biases), RMSNorm (Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * g), a prepended
CLS / register token (learned vectors before the first position, never masked), generate()
from a prompt and the loss helper (x-transformers' AutoregressiveWrapper: logits at t against
the token at t + 1, ignore_index). None of them changes a model's Table III row."""

from __future__ import annotations

import math
import textwrap

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from taxcompile import checks, pipeline  # noqa: E402
from taxcompile.classification import classify_model  # noqa: E402
from taxcompile.diagnostics import SpecError  # noqa: E402
from torch_support import inline_builder  # noqa: E402

HEADER = 'paper blocks { cite = "Blocks" }\n'
DT = torch.float64


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("blocks"), HEADER, "_taxcompile_blocks")


def build(gen, body: str):
    """Model(Config()) of ``body``, every parameter random, in float64."""
    mod = gen(body)
    torch.manual_seed(0)
    model = mod.Model(mod.Config())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return mod, model.to(DT).eval()


def P(t):
    return t.detach().to(DT)


def close(got, want, atol=1e-9):
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    torch.testing.assert_close(got.detach(), want, atol=atol, rtol=0)


def row(text: str) -> dict:
    cs = pipeline.load_text(HEADER + textwrap.dedent(text), "t.attn")
    return classify_model(cs.models[0]).row()


# ---- ffn(x, d_ff, act = swiglu | geglu) ---------------------------------------------------

FFN = """
model m {{
    input x: sequence[L, 6]
    feature h = ffn(x, 10, act = {act})
    attention a {{ query = learned(6)  features = h  score = multiplicative }}
    output y = concat(h, x)
}}
"""


@pytest.mark.parametrize("act", ["swiglu", "geglu"])
def test_gated_ffn_is_shazeers_glu_variant(gen, act):
    mod, m = build(gen, FFN.format(act=act))
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(2), dtype=DT)
    wv, W2 = P(m.h_ffn.wv.weight), P(m.h_ffn.w2.weight)
    W, V = wv[:10], wv[10:]  # (d_ff, d): the first d_ff rows gate, the next are the values
    xw = x @ W.T
    gate = xw * torch.sigmoid(xw) if act == "swiglu" else \
        0.5 * xw * (1 + torch.erf(xw / math.sqrt(2)))  # Swish_1 (SiLU) / exact GELU
    want = (gate * (x @ V.T)) @ W2.T  # (act(x W) * x V) W2, no biases (Shazeer 2020)
    close(m(x).output[..., :6], want)
    assert m.h_ffn.wv.bias is None and m.h_ffn.w2.bias is None
    assert f"act='{act}'" in repr(m.h_ffn)


def test_gated_units_only_in_ffn_and_rows_unchanged():
    with pytest.raises(SpecError, match=r"t.attn:4:36: error: .*cannot be `swiglu`: a gated unit") as e:
        pipeline.load_text(HEADER + "model m {\n    input x: sequence[L, 6]\n"
                           "    feature h = linear(x, 4, act = swiglu)\n"
                           "    attention a { query = learned(4)  features = h  "
                           "score = additive(d_w = 3) }\n    output y = a\n}\n", "t.attn")
    assert "ffn(x, d_ff, act = swiglu)" in str(e.value)
    assert row(FFN.format(act="swiglu")) == row(FFN.format(act="relu"))


# ---- norm(x, kind = rms) --------------------------------------------------------------------

NORM = """
model m {{
    input x: sequence[L, 6]
    feature h = norm(x{kind})
    attention a {{ query = learned(6)  features = h  score = multiplicative }}
    output y = concat(h, x)
}}
"""


def test_rms_norm_divides_by_the_root_mean_square(gen):
    mod, m = build(gen, NORM.format(kind=", kind = rms"))
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(3), dtype=DT) * 3 + 1
    g = P(m.h_norm.weight)
    eps = torch.finfo(DT).eps  # nn.RMSNorm's default: the dtype's machine epsilon
    want = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) * g  # no centring, no bias
    close(m(x).output[..., :6], want)
    layer = build(gen, NORM.format(kind=""))[1]  # the default stays layer norm (centred)
    assert isinstance(layer.h_norm, torch.nn.LayerNorm)
    assert row(NORM.format(kind=", kind = rms")) == row(NORM.format(kind=""))
    with pytest.raises(SpecError, match="`kind` of `norm` cannot be `batch`"):
        pipeline.load_text(HEADER + NORM.format(kind=", kind = batch"), "t.attn")


# ---- prepend(x, n): a CLS token, registers --------------------------------------------------

CLS = """
model m {{
    input src: tokens[S] (vocab = 20)
    feature x = {x}
    attention att {{ query = x  keys = x  score = multiplicative }}
    output y = first(att)
}}
"""


def test_a_prepended_token_is_learned_and_never_masked(gen):
    mod, m = build(gen, CLS.format(x="prepend(embed(src, 6), 2)"))
    src = torch.tensor([[3, 7, 1, 9], [5, 5, 0, 0], [1, 2, 3, 4]])
    keep = torch.tensor([[True] * 4, [True, True, False, False], [False] * 4])
    with pytest.warns(UserWarning, match="keeps no position of example 2"):
        out = m(src=src, src_mask=keep, return_attention=True)
    cls, E = P(m.x_prepend), P(m.x_embed.weight)
    for n in range(3):
        X = torch.cat([cls, E[src[n]]])  # (2 + S, d): [v_1; v_2; x_1; ...; x_S]
        k = torch.cat([torch.ones(2, dtype=torch.bool), keep[n]])  # the new positions kept
        e = X[0] @ X.T  # the first position's query, q^T k_l
        a = torch.zeros(6, dtype=DT)
        a[k] = torch.softmax(e[k], 0)
        close(out.output[n], a @ X)
        close(out.attention["att"][n, 0, 0], a)
    # an example with every token padded still has its two learned positions
    assert out.attention["att"][2, 0, 0, :2].sum().item() == pytest.approx(1.0)
    assert out.attention["att"].shape[-1] == 6  # S + 2 keys
    assert row(CLS.format(x="prepend(embed(src, 6), 2)")) == row(CLS.format(x="embed(src, 6)"))


def test_prepend_errors_are_located():
    with pytest.raises(SpecError, match=r"t.attn:5:\d+: error: `prepend` inside a `repeat`"):
        pipeline.load_text(HEADER + "model m {\n    input src: tokens[S] (vocab = 20)\n"
                           "    feature x = embed(src, 6)\n    repeat r 2 { update x = "
                           "prepend(x, 1)\n        attention att { query = x  keys = x  "
                           "score = multiplicative } }\n    output y = first(r.att)\n}\n", "t.attn")
    with pytest.raises(SpecError, match=r"t.attn:5:\d+: error: .*holds token ids"):
        pipeline.load_text(HEADER + CLS.format(x="prepend(src, 1)"), "t.attn")


# ---- generate(prompt=...) ---------------------------------------------------------------------

LM = """
model lm {
    input tgt: tokens[T] (vocab = 30, autoregressive)
    feature y = positional(embed(tgt, 16), kind = sinusoid)
    attention a {
        query = project(y)  keys = project(y)  values = project(y)
        score = scaled_multiplicative  mask = causal
    }
    output logits = classify(concat(y, a), 30)
}
"""


def greedy_after(m, prefix, n: int, eos: int):
    """A greedy loop written here: run the whole model on the prefix, append the argmax (pad
    = eos after eos), n times; the new tokens."""
    tokens = prefix.clone()
    done = torch.zeros(len(prefix), dtype=torch.bool)
    for _ in range(n):
        nxt = m(tgt=tokens).output[:, -1].argmax(-1).masked_fill(done, eos)
        tokens = torch.cat([tokens, nxt[:, None]], 1)
        done |= nxt == eos
    return tokens[:, prefix.shape[1]:]


def test_generate_continues_a_prompt(gen):
    mod, m = build(gen, LM)
    m.float()
    prompt = torch.tensor([[1, 7, 7, 3], [1, 12, 4, 9]])
    with torch.no_grad():
        want = greedy_after(m, prompt, 5, eos=29)
    for incremental in (True, False):  # the KV cache takes the whole prompt at its first step
        got = m.generate(max_len=5, bos=1, eos=29, prompt=prompt, incremental=incremental)
        assert torch.equal(got, want), (incremental, got, want)
    # one beam is greedy; a prompt of [bos] is the plain start
    assert torch.equal(m.generate(max_len=5, bos=1, eos=29, prompt=prompt, strategy="beam",
                                  beams=1), want)
    assert torch.equal(m.generate(max_len=5, bos=1, eos=29, prompt=prompt[:, :1]),
                       m.generate(max_len=5, bos=1, eos=29, batch_size=2))
    with pytest.raises(ValueError, match=r"prompt must be \(2, P\) token ids"):
        m.generate(max_len=5, bos=1, eos=29, prompt=prompt.float())
    with pytest.raises(ValueError, match=r"prompt token ids must be in \[0, 30\)"):
        m.generate(max_len=5, bos=1, eos=29, prompt=prompt + 30)


# ---- model.loss(out, target) and Output.outputs -----------------------------------------------


def cross_entropy(logits, target):
    """-log softmax(logits)[target], per position, written out: log sum exp - the target's."""
    return torch.logsumexp(logits, -1) - logits.gather(-1, target[..., None]).squeeze(-1)


def test_loss_shifts_an_autoregressive_output_and_ignores(gen):
    mod, m = build(gen, LM)
    tokens = torch.tensor([[1, 7, 7, 3, 2], [1, 12, 4, 9, 9]])
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    out = m(tgt=tokens, tgt_mask=keep)
    assert torch.equal(out.outputs["logits"], out.output)  # one output: a dict all the same
    ce = cross_entropy(out.output[:, :-1], tokens[:, 1:])  # logits at t, the token at t + 1
    close(m.loss(out, tokens), ce.mean())
    counted = keep[:, 1:]  # the predicted token is real
    close(m.loss(out, tokens, mask=keep), ce[counted].mean())
    ignored = tokens.clone()
    ignored[0, 2] = -100  # the target of position 1
    counted = torch.ones(2, 4, dtype=torch.bool)
    counted[0, 1] = False
    close(m.loss(out, ignored), ce[counted].mean())
    close(m.loss(out, tokens, ignore_index=9), ce[tokens[:, 1:] != 9].mean())


def test_loss_of_a_classifier_and_with_a_penalty(gen):
    mod, m = build(gen, CLS.format(x="embed(src, 6)").replace("first(att)",
                                                               "classify(first(att), 3)"))
    src = torch.tensor([[3, 7, 1, 9], [5, 5, 0, 0]])
    out = m(src=src)
    label = torch.tensor([2, 0])
    close(m.loss(out, label), cross_entropy(out.output, label).mean())  # (B, 3): no shift
    from taxcompile.run import load_module
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "generated" / "lin2017_self_attentive.py"
    lin = load_module(path.read_text(encoding="utf-8"), "_taxcompile_blocks_lin")
    torch.manual_seed(0)
    model = lin.Model(lin.Config.tiny())
    out = model(**lin.example_inputs(cfg=lin.Config.tiny()))
    label = torch.zeros(2, dtype=torch.long)
    want = cross_entropy(out.output, label).mean() + out.penalty  # Lin et al.'s penalty added
    torch.testing.assert_close(model.loss(out, label), want)
    assert out.penalty.item() > 0


# ---- the generated modules: repr, reset_parameters(), type hints, Output.outputs --------------


def test_attention_modules_show_sizes_and_reset_their_parameters():
    import typing
    from pathlib import Path

    from taxcompile.run import load_module

    path = Path(__file__).resolve().parent.parent / "generated" / "bahdanau2015_rnnsearch.py"
    mod = load_module(path.read_text(encoding="utf-8"), "_taxcompile_blocks_bahdanau")
    m = mod.Model(mod.Config(vocab=50, d_emb=8, hidden=64, d_w=400)).double()
    assert "AdditiveAttention(d_q=64, d_k=128, d_v=128, heads=1, d_w=400, mask='none')" in repr(m)
    att = m.att
    params = dict(att.named_parameters())
    with torch.no_grad():
        for p in params.values():
            p.fill_(3.0)
    torch.manual_seed(5)
    att.reset_parameters()
    assert dict(att.named_parameters()) == params  # in place: the same Parameter objects
    assert all(p.dtype == torch.float64 for p in params.values())
    # eq. 6's initialisation: W1, W2 ~ N(0, 1/d_in), w ~ N(0, 1/d_w), b = 0
    for name, d_in in (("W1", 64), ("W2", 128), ("w", 400)):
        std = params[name].std().item()
        assert abs(std * math.sqrt(d_in) - 1) < 0.05, (name, std)
    assert params["b"].abs().max() == 0
    hints = typing.get_type_hints(mod.Model.forward)
    assert hints["src"] is torch.Tensor and hints["src_mask"] == torch.Tensor | None
    assert typing.get_type_hints(mod.AdditiveAttention.forward)["k"] is torch.Tensor


def test_outputs_is_a_dict_with_several_outputs(gen):
    mod, m = build(gen, """
    model m {
        input x: sequence[L, 6]
        attention a { query = learned(6)  features = x  score = multiplicative }
        output y = classify(a, 3)
        output z = linear(a, 2)
    }
    """)
    out = m(torch.randn(2, 4, 6, dtype=DT))
    assert set(out.outputs) == {"y", "z"} and out.outputs["z"] is out.output["z"]
    close(m.loss(out, torch.tensor([0, 2])), cross_entropy(out.output["y"], torch.tensor([0, 2]))
          .mean())
