"""Score modifiers (issue 14, item 2): `position = relative(k, values)` (Shaw et al. 2018),
`position = rotary` (Su et al.), `bias = alibi` (Press et al.) and `bias = gaussian` (Yang et
al. 2018).

1. each generated attention class against a reference of the paper's equations written here
   (per head, from the class's own weights), with padding and the causal mask, in float64,
   and its gradients finite;
2. the FlexAttention path (score_mod + block mask) traced under torch.compile gives the
   explicit path's numbers (CPU inference, the path forced on: it is taken on CUDA);
3. the classifier's reading: a modifier leaves the score family and the alignment as they
   are, and says so in the reason;
4. the examples compile, run forward and backward at Config.tiny() and classify;
5. misuse is a located error.
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
from torch_support import compiled_recording, inline_fixture, one_thread  # noqa: E402, F401

ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64

HEADER = """\
paper pos {
    cite  = "Test"
    title = "Score modifier tests"
    year  = 2024
}
"""

SPEC = """
model m {{
    input x: sequence[L, 16]
    attention att {{ query = project(x)  features = x  score = {score}  heads = {heads}
                    mask = {mask}  {mods} }}
    output o = identity(att)
}}
"""


gen = inline_fixture("position", HEADER)


def attention_class(mod, mods: str, heads: int = 2, mask: str = "none",
                    score: str = "scaled_multiplicative"):
    """The generated attention class of SPEC (the only nn.Module besides Model)."""
    m = mod(SPEC.format(score=score, heads=heads, mask=mask, mods=mods))
    names = [n for n, c in vars(m).items() if isinstance(c, type) and n.endswith("Attention")]
    assert len(names) == 1, names
    return getattr(m, names[0])


def randomize(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return module


def inputs(N=2, L=9, d=16, seed=1, dtype=DT):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(N, L, d, generator=g, dtype=dtype) for _ in range(3))
    key_mask = torch.ones(N, L, dtype=torch.bool)
    key_mask[-1, 6:] = False  # the last example is 6 long
    return q, k, v, key_mask


# ---- references: the equations, per head ----------------------------------------------------


def heads_of(x, H):
    N, L, d = x.shape
    return x.view(N, L, H, d // H).transpose(1, 2)  # (N, H, L, d/H)


def keep_of(key_mask, mask, L):
    i, j = torch.arange(L)[:, None], torch.arange(L)
    keep = key_mask[:, None, None, :].expand(-1, 1, L, L)
    if mask == "causal":
        keep = keep & (j <= i)
    return keep


def softmax_ref(e, keep):
    e = e.masked_fill(~keep, float("-inf"))
    a = torch.softmax(e, -1)
    return torch.nan_to_num(a, nan=0.0)  # a query with no key left: zero weights


def join(c, out):
    N, H, L, dh = c.shape
    return c.transpose(1, 2).reshape(N, L, H * dh) @ out.weight.T + out.bias


def shaw_ref(m, q, k, v, key_mask, mask, values, scaled=True):
    """e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_z), z_i = sum_j a_ij (v_j + a^V_ij), a^K_ij =
    w^K_clip(j - i, k) (Shaw et al. eq. 3-5), written as explicit sums over (i, j)."""
    H, L, kk = m.heads, q.shape[1], m.clip
    q, k, v = heads_of(q, H), heads_of(k, H), heads_of(v, H)
    N, _, _, d = q.shape
    e = torch.empty(N, H, L, L, dtype=q.dtype)
    aK = torch.empty(L, L, d, dtype=q.dtype)
    aV = torch.zeros(L, L, v.shape[-1], dtype=q.dtype)
    for i in range(L):
        for j in range(L):
            r = max(-kk, min(kk, j - i)) + kk
            aK[i, j] = m.rel_k.weight[r]
            if values:
                aV[i, j] = m.rel_v.weight[r]
    for i in range(L):
        e[:, :, i, :] = ((q[:, :, i, None, :]) * (k + aK[i])).sum(-1)
    if scaled:
        e = e / math.sqrt(d)
    a = softmax_ref(e, keep_of(key_mask, mask, L))
    c = torch.einsum("nhij,nhjd->nhid", a, v) + torch.einsum("nhij,ijd->nhid", a, aV)
    return join(c, m.out), a


def alibi_ref(m, q, k, v, key_mask, mask):
    """e_ij + m_h * -(i - j) for j <= i (the causal form), -|i - j| without a mask, with
    m_h = 2^(-8h/H) (Press et al.)."""
    H, L = m.heads, q.shape[1]
    q, k, v = heads_of(q, H), heads_of(k, H), heads_of(v, H)
    e = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    slopes = torch.tensor([2 ** (-8 * h / H) for h in range(1, H + 1)], dtype=q.dtype)
    i, j = torch.arange(L)[:, None], torch.arange(L)
    dist = (i - j) if mask == "causal" else (i - j).abs()  # masked entries do not matter
    e = e - slopes[:, None, None] * dist
    a = softmax_ref(e, keep_of(key_mask, mask, L))
    return join(a @ v, m.out), a


def rope_ref(x, base=10000.0):
    """RoPE, half-split: (x_f, x_{f+d/2}) turned by t * base^(-2f/d), written as a 2x2
    rotation per pair and position."""
    N, H, L, d = x.shape
    out = x.clone()
    for t in range(L):
        for f in range(d // 2):
            th = t * base ** (-2 * f / d)
            c, s = math.cos(th), math.sin(th)
            x1, x2 = x[:, :, t, f], x[:, :, t, f + d // 2]
            out[:, :, t, f] = c * x1 - s * x2
            out[:, :, t, f + d // 2] = s * x1 + c * x2
    return out


def rotary_ref(m, q, k, v, key_mask, mask):
    H, L = m.heads, q.shape[1]
    q, k, v = rope_ref(heads_of(q, H)), rope_ref(heads_of(k, H)), heads_of(v, H)
    e = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    a = softmax_ref(e, keep_of(key_mask, mask, L))
    return join(a @ v, m.out), a


def gaussian_ref(m, q, k, v, key_mask, mask):
    """G_ij = -(j - P_i)^2 / (2 sigma_i^2), P_i = I sigmoid(U_p^T tanh(W_p q_i)),
    sigma_i = D_i / 2, D_i = I sigmoid(U_d^T tanh(W_p q_i)), I the unpadded length."""
    H, L = m.heads, q.shape[1]
    q, k, v = heads_of(q, H), heads_of(k, H), heads_of(v, H)
    hid = torch.tanh(q @ m.loc_w.weight.T)
    size = key_mask.sum(-1).to(q.dtype)[:, None, None, None]
    P = size * torch.sigmoid(hid @ m.loc_p.weight.T)
    D = size * torch.sigmoid(hid @ m.loc_d.weight.T)
    j = torch.arange(L, dtype=q.dtype)
    G = -((j - P) ** 2) / (2 * (D / 2) ** 2)
    e = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + G
    a = softmax_ref(e, keep_of(key_mask, mask, L))
    return join(a @ v, m.out), a


CASES = {
    "shaw_keys_values": ("position = relative(k = 2, values = true)",
                         lambda m, *x: shaw_ref(m, *x, values=True)),
    "shaw_keys": ("position = relative(k = 3)", lambda m, *x: shaw_ref(m, *x, values=False)),
    "alibi": ("bias = alibi", alibi_ref),
    "rotary": ("position = rotary", rotary_ref),
    "gaussian": ("bias = gaussian", gaussian_ref),
}


@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_against_reference(gen, case, mask):
    mods, ref = CASES[case]
    cls = attention_class(gen, mods, heads=2, mask=mask)
    kw = dict(clip=int(mods.split("k = ")[1][0])) if "relative" in mods else {}
    m = randomize(cls(d_q=16, d_k=16, d_v=16, heads=2, mask=mask, **kw).to(DT))
    q, k, v, key_mask = inputs()
    q.requires_grad_(True)
    c, a, _ = m(q, k, v, key_mask)
    want_c, want_a = ref(m, q.detach(), k, v, key_mask, mask)
    torch.testing.assert_close(a, want_a, atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(c, want_c, atol=1e-10, rtol=1e-9)
    c.square().sum().backward()
    grads = [q.grad] + [p.grad for p in m.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert q.grad.abs().sum() > 0
    if "relative" in mods:  # the position term is trained
        assert m.rel_k.weight.grad.abs().sum() > 0
    # the weights-free call (need_weights=False, eager: the explicit path) agrees
    if "need_weights" in cls.forward.__code__.co_varnames:
        c2, a2, _ = m(q.detach(), k, v, key_mask, need_weights=False)
        torch.testing.assert_close(c2, want_c, atol=1e-10, rtol=1e-9)


def test_relative_without_a_scale(gen):
    """With the plain multiplicative score the term is q_i a^K_ij^T, unscaled."""
    cls = attention_class(gen, "position = relative(k = 2, values = true)", heads=2,
                          score="multiplicative")
    m = randomize(cls(d_q=16, d_k=16, d_v=16, heads=2, clip=2).to(DT), seed=4)
    q, k, v, key_mask = inputs(seed=5)
    c, a, _ = m(q, k, v, key_mask)
    want_c, want_a = shaw_ref(m, q, k, v, key_mask, "none", values=True, scaled=False)
    torch.testing.assert_close(c, want_c, atol=1e-10, rtol=1e-9)


def test_rotary_depends_on_distance_only(gen):
    """RoPE's point: shifting both sequences leaves q_i·k_j unchanged."""
    cls = attention_class(gen, "position = rotary", heads=1)
    m = randomize(cls(d_q=16, d_k=16, d_v=16, heads=1).to(DT))
    q, k, v, _ = inputs(N=1, L=6)  # (no padding: L = 6)
    pad = torch.randn(1, 3, 16, dtype=DT)
    _, a, _ = m(q, k, v)
    _, a_shift, _ = m(torch.cat([pad, q], 1), torch.cat([pad, k], 1), torch.cat([pad, v], 1),
                      torch.tensor([[False] * 3 + [True] * 6]))
    torch.testing.assert_close(a_shift[..., 3:, 3:], a, atol=1e-10, rtol=1e-9)


# ---- FlexAttention ---------------------------------------------------------------------------

# every score_mod term: Shaw's keys and ALiBi together, the Gaussian bias alone
FLEX_CASES = ["position = relative(k = 2)  bias = alibi", "bias = gaussian"]


@pytest.mark.parametrize("mods", FLEX_CASES)
def test_flex_path_matches_explicit_under_compile(gen, mods, monkeypatch):
    """Under torch.compile the module goes through flex_context (the traced graph holds
    flex_attention with the score_mod and the block mask) and gives the explicit path's
    numbers, with padding and the causal mask. The generated code takes it on CUDA only
    (flex_ready); here it is forced on for CPU inference, and the traced graph runs as it
    is (FlexAttention's eager CPU implementation), since inductor in torch 2.13 finds no CPU
    kernel for a score_mod and a mask that both read tensors (docs/codegen.md)."""
    cls = attention_class(gen, mods, heads=2, mask="causal")
    module = __import__(cls.__module__)
    assert not module.flex_ready(torch.zeros(1))  # eager CPU: the explicit path
    monkeypatch.setattr(module, "flex_ready", lambda q: torch.compiler.is_compiling()
                        and not torch.is_grad_enabled())
    kw = dict(clip=int(mods.split("k = ")[1][0])) if "relative" in mods else {}
    m = randomize(cls(d_q=16, d_k=16, d_v=16, heads=2, mask="causal", **kw)).eval()
    q, k, v, key_mask = inputs(L=20, dtype=torch.float32)
    compiled, graphs = compiled_recording(m)
    try:
        with torch.no_grad():
            want, _, _ = m(q, k, v, key_mask)
            got, a, _ = compiled(q, k, v, key_mask, need_weights=False)
        assert a is None
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert graphs and all("flex_attention" in g for g in graphs)
        graphs.clear()
        compiled(q, k, v, key_mask, need_weights=False)[0].sum().backward()
        assert graphs and not any("flex_attention" in g for g in graphs)
    finally:
        torch._dynamo.reset()


# ---- classification and examples --------------------------------------------------------------


@pytest.mark.parametrize("mods,phrase", [
    ("position = relative(k = 4, values = true)", "still the same q·k score"),
    ("position = rotary", "still the same q·k score"),
    ("bias = alibi", "the score function is unchanged"),
    ("bias = gaussian", "not local alignment"),
])
def test_modifier_keeps_score_family_and_alignment(mods, phrase):
    """A position term or bias added to a score is read as that score (Table II) and the
    alignment it feeds (global): the modifier is named in the reason, not a new category."""
    text = HEADER + SPEC.format(score="scaled_multiplicative", heads=2, mask="none", mods=mods)
    cs = pipeline.load_text(text, "t.attn")
    from taxcompile.classification import classify_model
    cl = classify_model(cs.models[0])
    assert cl.row()["scoring"] == "Scaled Multiplicative"
    assert cl.row()["alignment"] == "Global"
    reasons = " ".join(cl.cells["scoring"].values["Scaled Multiplicative"])
    assert phrase in reasons
    plain = classify_text(HEADER + SPEC.format(score="scaled_multiplicative", heads=2,
                                               mask="none", mods=""))
    assert plain == classify_text(text)


EXAMPLES = {
    "shaw2018_relative": "Rel", "alibi": "ALiBi", "rotary": "RoPE",
    "yang2018_localness": "Gauss",
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_compiles_runs_and_classifies(name):
    path = ROOT / "examples" / f"{name}.attn"
    cs = pipeline.load(path)
    cm = cs.models[0]
    src = codegen.generate(cs, cm, str(path))
    assert f"{EXAMPLES[name]}ScaledMultiplicativeAttention" in src
    row = classify_text(path.read_text(encoding="utf-8"))
    assert row["scoring"] == "Scaled Multiplicative" and row["alignment"] == "Global"
    mod = load_module(src, f"_taxcompile_pos_ex_{name}")
    torch.manual_seed(0)
    model = mod.Model(mod.Config.tiny())
    out = model(**mod.example_inputs(2, seed=1, cfg=mod.Config.tiny())).output
    assert torch.isfinite(out).all()
    out.square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ---- errors ---------------------------------------------------------------------------------

SNAPSHOTS = ["position_relative_additive", "position_rotary_odd_head",
             "position_bias_cross_attention"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want
