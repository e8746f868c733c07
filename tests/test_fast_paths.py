"""The fast paths of the generated attention modules give the explicit path's numbers.

A generated module called with ``need_weights=False`` (what ``Model`` does unless
``return_attention=True``) skips the (Lq, Lk) weight matrix:

- "sdpa": dot-product scores (multiplicative, scaled multiplicative, general, biased general,
  cosine similarity) with global or reinforced alignment call
  ``F.scaled_dot_product_attention``; structural masks and padding go in as its mask, and a
  query with no key left must still get c = 0, as ``masked_softmax`` gives;
- "band": local alignment at p = start + i (eq. 27) through ``local_band``, block by block;
- "gather": local alignment at predicted positions (eq. 28) through ``local_gather``;
- additive scores with a query go through ``additive_score`` (``QueryBlocks``: blocks of queries, recomputed in
  backward) whether or not the weights are asked for;
- self-attention over ``project(x)`` uses one stacked ``nn.Linear`` for W_Q, W_K, W_V.

1. module level (inline specs): need_weights=True vs False on the same inputs, every dot
   score x alignment x mask x heads, capsules, Lq = Lk, Lq < Lk, Lq > Lk, padding with an
   example that has no key;
2. local band and gather: block edges, D wider than the sequences, decoder steps (Lq = 1,
   start = t), positions on and between the grid and outside the keys;
3. additive_score against the broadcast formula with small blocks, and its peak allocation;
4. every committed generated/*.py model at Config.tiny(): return_attention=False vs True;
5. the stacked projections against separate matmuls with the weight's row slices (an
   independent multi-head Transformer for generated/vaswani2017_transformer.py).

Contexts are compared in float32 within 1e-5; gradients of the inputs and of every parameter
in float64 (also within 1e-5). The module-level tests also check that the fast path was
taken (no weights returned, the fused function called).
"""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
from torch import nn  # noqa: E402

from taxcompile.run import load_module  # noqa: E402
from torch_support import inline_fixture, one_thread  # noqa: E402, F401

ROOT = Path(__file__).resolve().parent.parent
ATOL = 1e-5
DT = torch.float64

HEADER = """\
paper fast {
    cite  = "Test"
    title = "Fast path tests"
    year  = 2024
}
"""

# cnn(kernel = 2) with padding="same" in some committed models: torch warns, harmlessly
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")


# ---- compiling, loading, random numbers ----------------------------------------------------


gen = inline_fixture("fast_paths", HEADER)


def randomize(module: nn.Module, seed: int = 0, scale: float = 0.5) -> nn.Module:
    """Every parameter random (a zero bias would hide a missing term)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return module


def randn(*shape, seed: int, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(tuple(shape), generator=g) * scale).to(dtype)


def key_masks(N: int, Lk: int):
    """None, and a padding mask (True = keep) in which example 0 keeps every key, example 1
    loses its last two, and example 2 (when N > 2) has no key at all."""
    m = torch.ones(N, Lk, dtype=torch.bool)
    m[1, max(1, Lk - 2):] = False
    if N > 2:
        m[2] = False
    return [None, m]


def close(got, want, atol: float = ATOL, what: str = "") -> None:
    assert got is not None and want is not None, what
    assert got.shape == want.shape, (what, tuple(got.shape), tuple(want.shape))
    torch.testing.assert_close(got, want, atol=atol, rtol=0, msg=lambda m: f"{what}: {m}")


def floats(x) -> list[torch.Tensor]:
    """The floating tensors in an extras value (a tensor, a tuple of them, or a dict)."""
    if torch.is_tensor(x):
        return [x] if x.is_floating_point() else []
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in floats(x[k])]
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in floats(y)]
    return []


def compare_extras(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k in want:
        a, b = floats(got[k]), floats(want[k])
        assert len(a) == len(b), k
        for x, y in zip(a, b):
            close(x, y, what=f"extras[{k!r}]")


def check_paths(att: nn.Module, q, k, v, key_mask, seed: int = 0, **kw):
    """Call `att` with need_weights=True (explicit) and False (fast) on the same inputs:
    the contexts and extras agree in float32, and in float64 the gradients of q, k, v and of
    every parameter (of a random linear function of all outputs) agree too. Returns the
    float64 context and gradients of the explicit path."""
    with torch.no_grad():
        c1, a1, ex1 = att(q, k, v, key_mask, need_weights=True, **kw)
        c2, a2, ex2 = att(q, k, v, key_mask, need_weights=False, **kw)
    assert a1 is not None and a2 is None, "need_weights=False must skip the weights"
    assert c1.dtype == c2.dtype == torch.float32
    close(c2, c1, what="context (float32)")
    compare_extras(ex2, ex1)

    att64 = copy.deepcopy(att).double()
    names = [n for n, _ in att64.named_parameters()]
    runs = []
    for need in (True, False):
        xs = {n: (None if x is None else x.detach().to(DT).requires_grad_())
              for n, x in (("q", q), ("k", k), ("v", v))}
        c, _, ex = att64(xs["q"], xs["k"], xs["v"], key_mask, need_weights=need, **kw)
        outs = [c, *floats(ex)]
        loss = sum((o * randn(*o.shape, seed=seed + 100 + i, dtype=DT)).sum() for i, o in enumerate(outs))
        ts = [p for _, p in att64.named_parameters()] + [x for x in xs.values() if x is not None]
        tn = names + [n for n, x in xs.items() if x is not None]
        gs = torch.autograd.grad(loss, ts, allow_unused=True)
        runs.append((c.detach(), dict(zip(tn, gs))))
    (c_e, g_e), (c_f, g_f) = runs
    close(c_f, c_e, what="context (float64)")
    for n in g_e:
        if g_e[n] is None:
            assert g_f[n] is None, f"{n}: the fast path gives a gradient the explicit one does not"
        else:
            close(g_f[n], g_e[n], what=f"gradient of {n}")
    return c_e, g_e


class Counter:
    """Wraps a function and counts its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def masked_softmax_ref(e: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis over the kept entries, exactly 0 elsewhere and in a row
    with nothing kept."""
    a = torch.softmax(e.masked_fill(~keep, float("-inf")), -1)
    return a.nan_to_num(0.0).masked_fill(~keep, 0.0)


# ---- 1. the SDPA path: dot-product scores with global or reinforced alignment --------------

DOT_SCORES = {
    "multiplicative": "multiplicative",
    "scaled_multiplicative": "scaled_multiplicative",
    "general": "general",
    "biased_general": "biased_general",
    "cosine": "similarity(kind = cosine)",
}
MASKS = ["none", "causal", "forward", "backward"]
SOFT = ["global", "reinforced"]
SHAPES = [(5, 5), (3, 7), (7, 4)]  # (Lq, Lk): self-attention sizes, and Lq < Lk, Lq > Lk


def dot_spec(score: str) -> str:
    """One module per alignment x mask x heads (self-attention: masks need it), and a capsule
    module per alignment, all with the same score."""
    mods = []
    for align, mask, heads in itertools.product(SOFT, MASKS, (1, 2)):
        m = f"mask = {mask}" if mask != "none" else ""
        mods.append(f"attention {align}_{mask}_h{heads} {{ query = project(x)  features = x  "
                    f"score = {score}  align = {align}  heads = {heads}  {m} }}")
    for align in SOFT:
        mods.append(f"attention cap_{align} {{ query = learned(8)  features = x  score = {score}  "
                    f"align = {align}  capsules = 3 }}")
    names = [m.split()[1] for m in mods]
    outs = [f"output o_{n} = identity({n})" for n in names]
    return "model m {\n    input x: sequence[L, 8]\n    " + "\n    ".join(mods + outs) + "\n}\n"


@pytest.fixture
def sdpa_calls(monkeypatch):
    counter = Counter(F.scaled_dot_product_attention)
    monkeypatch.setattr(F, "scaled_dot_product_attention", counter)
    return counter


@pytest.mark.parametrize("heads", [1, 2], ids=["1head", "2heads"])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("align", SOFT)
@pytest.mark.parametrize("score", list(DOT_SCORES))
def test_sdpa_path_matches_the_explicit_path(gen, sdpa_calls, score, align, mask, heads):
    """Every dot-family score x {global, reinforced (in eval(), where it is deterministic)} x
    every mask x 1 or 2 heads, with Lq = Lk, Lq < Lk and Lq > Lk (a module accepts a
    cross-attention call even when its spec's mask needs self-attention), without and with a
    padding mask in which one example has no key at all."""
    mod = gen(dot_spec(DOT_SCORES[score]))
    model = mod.Model(mod.Config())
    att = randomize(getattr(model, f"{align}_{mask}_h{heads}"), seed=3).eval()
    biggest = {"c": 0.0, "k": 0.0, "v": 0.0}  # not all zeros (every key masked) throughout
    for i, (Lq, Lk) in enumerate(SHAPES):
        q, k, v = randn(3, Lq, 8, seed=10 * i), randn(3, Lk, 8, seed=10 * i + 1), randn(3, Lk, 8, seed=10 * i + 2)
        for key_mask in key_masks(3, Lk):
            before = sdpa_calls.calls
            c, g = check_paths(att, q, k, v, key_mask, seed=i)
            assert sdpa_calls.calls > before, "need_weights=False did not use scaled_dot_product_attention"
            for n, x in (("c", c), ("k", g["k"]), ("v", g["v"])):
                biggest[n] = max(biggest[n], float(x.abs().max()))
            if key_mask is not None and heads == 1:
                assert (c[2] == 0).all(), "an example with no key gets c = 0"
    assert min(biggest.values()) > 0.01, biggest


@pytest.mark.parametrize("align", SOFT)
@pytest.mark.parametrize("score", list(DOT_SCORES))
def test_sdpa_path_of_capsule_modules(gen, sdpa_calls, score, align):
    """Capsules (one learned query per class, eq. 43-45) with a dot score: the context, p_c and
    r_c, and the gradients of the learned queries, agree."""
    mod = gen(dot_spec(DOT_SCORES[score]))
    model = mod.Model(mod.Config())
    att = randomize(getattr(model, f"cap_{align}"), seed=4).eval()
    biggest = 0.0
    for Lk in (1, 6):  # one key: every capsule takes it whatever its query
        k, v = randn(3, Lk, 8, seed=20 + Lk), randn(3, Lk, 8, seed=30 + Lk)
        for key_mask in key_masks(3, Lk):
            before = sdpa_calls.calls
            c, g = check_paths(att, None, k, v, key_mask, seed=Lk)
            assert sdpa_calls.calls > before
            assert c.shape == (3, 3, 8)
            biggest = max(biggest, float(g["queries"].abs().max()))
            if key_mask is not None:
                assert (c[2] == 0).all()
    assert biggest > 0


def test_reinforced_eval_really_drops_keys(gen):
    """The reinforced modules above are not plain global attention in disguise: in eval()
    the policy drops some keys, which changes the context."""
    mod = gen(dot_spec("general"))
    model = mod.Model(mod.Config())
    rl = randomize(model.reinforced_none_h1, seed=3).eval()
    gl = model.global_none_h1
    gl.W.data.copy_(rl.W.data)
    q, k, v = randn(3, 5, 8, seed=0), randn(3, 5, 8, seed=1), randn(3, 5, 8, seed=2)
    pick = torch.sigmoid(rl.policy(k)).squeeze(-1) > 0.5
    assert pick.any() and not pick.all()
    with torch.no_grad():
        c_rl = rl(q, k, v, None, need_weights=False)[0]
        c_gl = gl(q, k, v, pick, need_weights=True)[0]
        c_all = gl(q, k, v, None, need_weights=True)[0]
    close(c_rl, c_gl)
    assert (c_rl - c_all).abs().max() > 1e-2


# ---- 2. local attention: the band (monotonic) and gather (predictive) paths ------------------

GAUSS = {"window": "gaussian = false", "gauss": "gaussian = true", "gauss-sigma": "gaussian = true, sigma = 1.5"}


def local_spec(score: str, position: str) -> str:
    mods = []
    for (gid, g), heads in itertools.product(GAUSS.items(), (1, 2)):
        name = f"{gid.replace('-', '_')}_h{heads}"
        mods.append(f"attention {name} {{ query = project(x)  features = x  score = {score}  "
                    f"align = local(D = 2, position = {position}, {g})  heads = {heads} }}")
    if position == "predictive":
        mods.append(f"attention cap {{ query = learned(8)  features = x  score = {score}  "
                    f"align = local(D = 2, position = predictive, gaussian = true)  capsules = 3 }}")
    names = [m.split()[1] for m in mods]
    outs = [f"output o_{n} = identity({n})" for n in names]
    return "model m {\n    input x: sequence[L, 8]\n    " + "\n    ".join(mods + outs) + "\n}\n"


def local_module(gen, score: str, position: str, gauss: str, heads: int, window: int, seed: int):
    """A fresh module of the spec's class with window D = `window` (the class takes D as a
    constructor argument; sigma is D / 2 unless the spec fixed it)."""
    mod = gen(local_spec(DOT_SCORES[score], position))
    proto = getattr(mod.Model(mod.Config()), f"{gauss.replace('-', '_')}_h{heads}")
    att = type(proto)(d_q=8, d_k=8, d_v=8, heads=heads, window=window)
    return mod, randomize(att, seed=seed).eval()


# (Lq, Lk, D, start). local_band takes Bq = min(Lq, max(D, 32)) queries per block: Lq = 70
# gives blocks of 32, 32, 6 (Lq not a multiple of the block); Lk < Lq and Lk > Lq; D = 33
# gives blocks of 33; D = 40 is larger than both lengths; the last rows are decoder steps
# (Lq = 1, start = t > 0), one with a window that still reaches the last key (start = 10,
# Lk = 9, D = 2) and one past every key (start = 13).
BAND_CASES = [
    (70, 50, 3, 0),
    (70, 90, 3, 0),
    (64, 64, 3, 0),
    (40, 40, 33, 0),
    (10, 12, 40, 0),
    (6, 9, 2, 3),
    (1, 9, 2, 4),
    (1, 9, 2, 10),
    (1, 9, 2, 13),
]


@pytest.fixture
def band_calls(monkeypatch):
    def install(mod):
        counter = Counter(mod.local_band)
        monkeypatch.setattr(mod, "local_band", counter)
        return counter
    return install


@pytest.mark.parametrize("heads", [1, 2], ids=["1head", "2heads"])
@pytest.mark.parametrize("gauss", list(GAUSS))
@pytest.mark.parametrize("score", list(DOT_SCORES))
def test_local_band_matches_the_explicit_path(gen, band_calls, score, gauss, heads):
    biggest = 0.0
    for i, (Lq, Lk, D, start) in enumerate(BAND_CASES):
        mod, att = local_module(gen, score, "monotonic", gauss, heads, D, seed=i)
        calls = band_calls(mod)
        q, k, v = randn(3, Lq, 8, seed=i), randn(3, Lk, 8, seed=i + 50), randn(3, Lk, 8, seed=i + 90)
        for key_mask in key_masks(3, Lk):
            c, g = check_paths(att, q, k, v, key_mask, seed=i, start=start)
            assert calls.calls > 0, "need_weights=False did not use local_band"
            if heads == 1:
                if start - D > Lk - 1:  # the window holds no key
                    assert (c == 0).all()
                else:
                    assert c[0].abs().max() > 0.01
                if key_mask is not None:
                    assert (c[2] == 0).all()
            biggest = max(biggest, float(g["k"].abs().max()))
    assert biggest > 0


def dense_local(q, k, v, key_mask, start: int, D: int, scale: float, sigma=None):
    """Eq. 27 (and 29) written out over the whole (Lq, Lk) matrix: query i at p = start + i
    weighs key l by softmax over |l - p| <= D (and the key mask), times the Gaussian."""
    Lq, Lk = q.shape[2], k.shape[2]
    dist = torch.arange(Lk, dtype=q.dtype) - (start + torch.arange(Lq, dtype=q.dtype))[:, None]
    keep = (dist.abs() <= D).expand(q.shape[0], 1, Lq, Lk)
    if key_mask is not None:
        keep = keep & key_mask[:, None, None, :]
    e = (q @ k.transpose(-1, -2) * scale).masked_fill(~keep, -math.inf)
    a = torch.nan_to_num(e.softmax(-1), nan=0.0)  # a query with no key: all 0
    if sigma is not None:
        a = a * torch.exp(-dist ** 2 / (2 * sigma ** 2))
    return a @ v


@pytest.mark.parametrize("sigma", [None, 1.5])
def test_local_band_against_a_dense_reference(gen, sigma):
    """local_band on its own: blocks that do not divide Lq (70 = 33 + 33 + 4), a window of 33
    (slabs of 3 blocks), keys beyond both ends, a decoder offset, slabs as wide as the keys
    (one block over all of them), padding masks (one example with no key), forward and
    gradients of q, k, v in float64."""
    mod = gen(local_spec("scaled_multiplicative", "monotonic"))
    for Lq, Lk, D, start in [(70, 200, 33, 0), (70, 120, 33, 60), (70, 90, 33, 0),
                             (70, 50, 33, 5), (5, 40, 3, 36), (9, 9, 40, 0)]:
        q, k, v = (randn(3, 2, L, 8, seed=i + L, dtype=torch.float64)
                   for i, L in enumerate((Lq, Lk, Lk)))
        for key_mask in key_masks(3, Lk):
            dy = randn(3, 2, Lq, 8, seed=1, dtype=torch.float64)
            got, want = [], []
            for f, out in ((mod.local_band, got), (dense_local, want)):
                xs = [t.clone().requires_grad_() for t in (q, k, v)]
                c = f(*xs, key_mask, start, D, 0.3, sigma)
                out.append(c.detach())
                out.extend(torch.autograd.grad(c, xs, dy))
            for g_, w_, what in zip(got, want, ("c", "dq", "dk", "dv")):
                close(g_, w_, atol=1e-10, what=f"{what} Lq={Lq} Lk={Lk} D={D} start={start}")


@pytest.mark.parametrize("score", list(DOT_SCORES))
def test_local_band_decoder_steps_match_the_whole_sequence(gen, score):
    """A decoder calls the module once per step with Lq = 1 and start = t: step by step the
    fast path gives row t of the explicit whole-sequence call."""
    for gauss in GAUSS:
        mod, att = local_module(gen, score, "monotonic", gauss, 1, 2, seed=7)
        q, k, v = randn(2, 12, 8, seed=1), randn(2, 9, 8, seed=2), randn(2, 9, 8, seed=3)
        mask = key_masks(2, 9)[1]
        with torch.no_grad():
            whole = att(q, k, v, mask, need_weights=True)[0]
            steps = torch.cat([att(q[:, t:t + 1], k, v, mask, start=t, need_weights=False)[0]
                               for t in range(12)], 1)
        close(steps, whole)
        assert (whole[:, 11] == 0).all() and whole[:, 10].abs().max() > 0  # t = 11 sees no key


GATHER_CASES = [(6, 9, 1), (6, 9, 2), (4, 5, 7), (8, 30, 3), (1, 1, 2)]  # (Lq, Lk, D)


@pytest.mark.parametrize("heads", [1, 2], ids=["1head", "2heads"])
@pytest.mark.parametrize("gauss", list(GAUSS))
@pytest.mark.parametrize("score", list(DOT_SCORES))
def test_local_gather_matches_the_explicit_path(gen, monkeypatch, score, gauss, heads):
    """Predictive positions p = S sigmoid(w_p^T tanh(W_p q)) (eq. 28): the context and every
    gradient agree, W_p and w_p included (they reach the context through p, in the Gaussian)."""
    for i, (Lq, Lk, D) in enumerate(GATHER_CASES):
        mod, att = local_module(gen, score, "predictive", gauss, heads, D, seed=i)
        calls = Counter(mod.local_gather)
        monkeypatch.setattr(mod, "local_gather", calls)
        q, k, v = randn(3, Lq, 8, seed=i), randn(3, Lk, 8, seed=i + 50), randn(3, Lk, 8, seed=i + 90)
        for key_mask in key_masks(3, Lk):
            c, g = check_paths(att, q, k, v, key_mask, seed=i)
            assert calls.calls > 0, "need_weights=False did not use local_gather"
            if gauss != "window":
                assert g["W_p.weight"].abs().max() > 0 and g["w_p.weight"].abs().max() > 0
            else:  # the window's edges are steps: p gets no gradient on either path
                assert g["W_p.weight"] is None or g["W_p.weight"].abs().max() == 0


@pytest.mark.parametrize("score", ["multiplicative", "general"])
def test_local_gather_of_capsule_modules(gen, monkeypatch, score):
    mod = gen(local_spec(DOT_SCORES[score], "predictive"))
    att = randomize(mod.Model(mod.Config()).cap, seed=5).eval()
    calls = Counter(mod.local_gather)
    monkeypatch.setattr(mod, "local_gather", calls)
    k, v = randn(3, 7, 8, seed=1), randn(3, 7, 8, seed=2)
    for key_mask in key_masks(3, 7):
        c, g = check_paths(att, None, k, v, key_mask)
        assert calls.calls > 0
        assert g["queries"].abs().max() > 0 and g["w_p.weight"].abs().max() > 0


@pytest.mark.parametrize("position", ["monotonic", "predictive"])
def test_local_fast_path_cost_does_not_grow_with_a_window_wider_than_the_keys(gen, position):
    """Once the window covers every key (D >= Lk here), a wider one changes nothing: the
    fast path should not allocate more for D = 4096 than for D = Lk."""
    mod = gen(local_spec("multiplicative", position))
    proto = mod.Model(mod.Config()).window_h1
    N, Lq, Lk = 2, 8, 8
    q, k, v = randn(N, Lq, 8, seed=1), randn(N, Lk, 8, seed=2), randn(N, Lk, 8, seed=3)
    peak = {}
    for D in (Lk, 4096):
        att = randomize(type(proto)(d_q=8, d_k=8, d_v=8, heads=1, window=D), seed=1).eval()
        with torch.no_grad():
            close(att(q, k, v, None, need_weights=False)[0], att(q, k, v, None, need_weights=True)[0])
            peak[D] = max(allocations(lambda: att(q, k, v, None, need_weights=False)))
    assert peak[4096] <= 2 * peak[Lk], peak


def local_ref(q, k, v, key_mask, pos, D, scale, sigma):
    """The explicit formula (eq. 27-29): softmax over the keys with |l - p| <= D (and not
    padded), times the Gaussian of l - p when sigma is given."""
    Lk = k.shape[2]
    dist = torch.arange(Lk, dtype=pos.dtype) - pos.unsqueeze(-1)  # (N, Lq, Lk)
    keep = dist.abs() <= D
    if key_mask is not None:
        keep = keep & key_mask[:, None, :]
    a = masked_softmax_ref(q @ k.transpose(-1, -2) * scale, keep.unsqueeze(1))
    if sigma is not None:
        a = a * torch.exp(-dist ** 2 / (2 * sigma ** 2)).unsqueeze(1)
    return a @ v


@pytest.mark.parametrize("sigma", [None, 1.3], ids=["window", "gauss"])
@pytest.mark.parametrize("D", [1, 2, 6])
def test_local_gather_at_chosen_positions(gen, D, sigma):
    """local_gather itself at positions on the grid, half-way between it, on a window's edge
    (p +- D an integer), before the first key and past the last: the context and the
    gradients of q, k, v and p equal the explicit formula's."""
    mod = gen(local_spec("multiplicative", "predictive"))
    Lk = 7
    pos = torch.tensor([[0.0, 3.0, 2.5, 6.0, 7.0, -0.5, 1.25, 8.6, 9.0, -2.4, 4.999],
                        [3.0, 3.5, 0.7, 5.0, 6.5, 10.0, -1.0, 2.0, 4.0, 1.0, 0.0]], dtype=DT)
    N, Lq = pos.shape
    q = randn(N, 2, Lq, 4, seed=1, dtype=DT).requires_grad_()
    k = randn(N, 2, Lk, 4, seed=2, dtype=DT).requires_grad_()
    v = randn(N, 2, Lk, 3, seed=3, dtype=DT).requires_grad_()
    p = pos.clone().requires_grad_()
    key_mask = torch.ones(N, Lk, dtype=torch.bool)
    key_mask[1, 4:] = False
    r = randn(N, 2, Lq, 3, seed=4, dtype=DT)
    for km in (None, key_mask):
        got = mod.local_gather(q, k, v, km, p, D, 0.7, sigma)
        want = local_ref(q, k, v, km, p, D, 0.7, sigma)
        close(got, want, what="context")
        g_got = torch.autograd.grad((got * r).sum(), (q, k, v, p), allow_unused=True)
        g_want = torch.autograd.grad((want * r).sum(), (q, k, v, p), allow_unused=True)
        for n, a, b in zip("qkvp", g_got, g_want):
            if n == "p" and sigma is None:  # without the Gaussian p only places the window
                assert a is None or (a == 0).all()
                assert b is None or (b == 0).all()
            else:
                close(a, b, what=f"gradient of {n}")
        if sigma is not None:
            assert g_want[3].abs().max() > 0
    # float32 as well
    got = mod.local_gather(q.float(), k.float(), v.float(), key_mask, p.float(), D, 0.7, sigma)
    close(got.double(), local_ref(q, k, v, key_mask, p, D, 0.7, sigma).detach())


# ---- 3. additive_score: blocks of queries, recomputed in backward -----------------------------

ACTS = {"tanh": torch.tanh, "relu": F.relu, "sigmoid": torch.sigmoid, "gelu": F.gelu,
        "elu": F.elu, "none": None}

ADDITIVE_SPEC = """
model m {{
    input x: sequence[L, 8]
    input y: sequence[T, 6]
    attention single {{ query = y  features = x  score = additive(d_w = 3, act = {act})  heads = 2 }}
    attention multi {{ query = y  features = x  score = additive(d_w = 3, act = {act})  heads = 2
                       dimensionality = multi }}
    attention nobias {{ query = y  features = x  score = additive(d_w = 3, act = {act}, bias = false) }}
    output o1 = identity(single)
    output o2 = identity(multi)
    output o3 = identity(nobias)
}}
"""


def additive_ref(wq, wk, w, act):
    """e_ij = w^T act(wq_i + wk_j), all at once: (N, H, Lq, Lk, d_w) in memory."""
    h = wq.unsqueeze(3) + wk.unsqueeze(2)
    h = h if act is None else act(h)
    return torch.einsum("nhqkw,hw->nhqk", h, w) if w.dim() == 2 else torch.einsum("nhqkw,hwe->nhqke", h, w)


@pytest.fixture
def additive_mod(gen):
    return gen(ADDITIVE_SPEC.format(act="tanh"))


# N = 2, H = 2, Lk = 5, d_w = 3: one query row is 60 elements, so BLOCK = 1 gives blocks of
# 1 query, 180 blocks of 3 (3 + 3 + 1 for Lq = 7: not a divisor), 240 blocks of 4 (4 + 3),
# and 2^20 one block (of up to 17476 rows).
BLOCKS = [(1, 1), (180, 3), (240, 4), (1 << 20, (1 << 20) // 60)]


@pytest.mark.parametrize("multi", [False, True], ids=["single", "multi"])
@pytest.mark.parametrize("block,rows", BLOCKS, ids=[f"block{b}" for b, _ in BLOCKS])
@pytest.mark.parametrize("act", list(ACTS))
def test_additive_score_matches_the_broadcast_formula(additive_mod, monkeypatch, act, block, rows, multi):
    AS = additive_mod.QueryBlocks
    monkeypatch.setattr(AS, "BLOCK", block)
    blocks = Counter(additive_mod.additive_block)
    monkeypatch.setattr(additive_mod, "additive_block", blocks)
    N, H, Lq, Lk, d_w = 2, 2, 7, 5, 3
    fn = ACTS[act]
    for dtype in (torch.float32, DT):
        wq = randn(N, H, Lq, d_w, seed=1, dtype=dtype).requires_grad_()
        wk = randn(N, H, Lk, d_w, seed=2, dtype=dtype).requires_grad_()
        w = randn(*((H, d_w, 4) if multi else (H, d_w)), seed=3, dtype=dtype).requires_grad_()
        assert AS.rows(wq, wk) == rows
        blocks.calls = 0
        e = additive_mod.additive_score(wq, wk, w, fn)
        assert blocks.calls == -(-Lq // rows), "one block per `rows` queries"
        ref = additive_ref(wq, wk, w, fn)
        close(e, ref, what=f"e ({dtype})")
        g = randn(*e.shape, seed=4, dtype=dtype)
        got = torch.autograd.grad(e, (wq, wk, w), g)
        want = torch.autograd.grad(ref, (wq, wk, w), g)
        if dtype == DT:
            for n, a, b in zip(("wq", "wk", "w"), got, want):
                close(a, b, what=f"gradient of {n}")
                assert b.abs().max() > 0


@pytest.mark.parametrize("act", ["tanh", "gelu", "elu"])
def test_additive_score_gradcheck(additive_mod, monkeypatch, act):
    """The hand-written backward (recompute each block) against finite differences."""
    AS = additive_mod.QueryBlocks
    monkeypatch.setattr(AS, "BLOCK", 24)  # N H Lk d_w = 1 * 2 * 3 * 2 = 12: blocks of 2 queries
    for w_shape in ((2, 2), (2, 2, 3)):
        wq = randn(1, 2, 5, 2, seed=1, dtype=DT).requires_grad_()
        wk = randn(1, 2, 3, 2, seed=2, dtype=DT).requires_grad_()
        w = randn(*w_shape, seed=3, dtype=DT).requires_grad_()
        assert torch.autograd.gradcheck(lambda a, b, c: additive_mod.additive_score(a, b, c, ACTS[act]),
                                         (wq, wk, w))


@pytest.mark.parametrize("act", list(ACTS))
def test_additive_modules_match_the_formula(gen, monkeypatch, act):
    """The generated modules (2 heads; 2 heads and multi-dimensional, eq. 30-32; one head
    without bias) with small blocks: their weights and contexts equal eq. 6 / 31 written out
    here with their parameters, and so do the gradients (float64)."""
    mod = gen(ADDITIVE_SPEC.format(act=act))
    monkeypatch.setattr(mod.QueryBlocks, "BLOCK", 100)
    model = randomize(mod.Model(mod.Config()), seed=2)
    fn = ACTS[act]
    q, k = randn(3, 7, 6, seed=1), randn(3, 5, 8, seed=2)
    key_mask = key_masks(3, 5)[1]
    for name in ("single", "multi", "nobias"):
        att = getattr(model, name)
        H = att.heads
        for dtype in (torch.float32, DT):
            a64 = copy.deepcopy(att).to(dtype)
            P = dict(a64.named_parameters())
            qs = q.to(dtype).requires_grad_()
            ks = k.to(dtype).requires_grad_()
            c, a, _ = a64(qs, ks, ks, key_mask)
            qh = qs.view(3, 7, H, -1).transpose(1, 2)
            kh = ks.view(3, 5, H, -1).transpose(1, 2)
            vh = kh
            wq = torch.einsum("nhqd,hdw->nhqw", qh, P["W1"])
            wk = torch.einsum("nhkd,hdw->nhkw", kh, P["W2"]) + (P["b"][:, None, :] if "b" in P else 0)
            e = additive_ref(wq, wk, P["w"], fn)
            keep = key_mask.view(3, 1, 1, 5)
            if name == "multi":
                ra = masked_softmax_ref(e.movedim(3, -1), keep.unsqueeze(-2)).movedim(-1, 3)
                rc = (ra * vh.unsqueeze(2)).sum(3)
            else:
                ra = masked_softmax_ref(e, keep)
                rc = ra @ vh
            rc = rc.transpose(1, 2).reshape(3, 7, -1)
            if H > 1:
                rc = rc @ P["out.weight"].T + P["out.bias"]
            close(a, ra, what=f"{name} weights")
            close(c, rc, what=f"{name} context")
            if name == "multi":  # the weights-free path: additive_context
                fast, none, _ = a64(qs, ks, ks, key_mask, need_weights=False)
                assert none is None
                close(fast, rc, what=f"{name} context, fast path")
                if dtype == DT:
                    r = randn(*c.shape, seed=5, dtype=DT)
                    ts = [qs, ks, *P.values()]
                    got = torch.autograd.grad((fast * r).sum(), ts)
                    want = torch.autograd.grad((rc * r).sum(), ts, retain_graph=True)
                    for n, x, y in zip(["q", "k", *P], got, want):
                        close(x, y, what=f"{name} fast path: gradient of {n}")
            if dtype == DT:
                r = randn(*c.shape, seed=5, dtype=DT)
                ts = [qs, ks, *P.values()]
                got = torch.autograd.grad((c * r).sum(), ts)
                want = torch.autograd.grad((rc * r).sum(), ts)
                for n, x, y in zip(["q", "k", *P], got, want):
                    close(x, y, what=f"{name}: gradient of {n}")


def allocations(fn) -> list[int]:
    """Sizes in bytes of the CPU allocations made while fn() runs (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    sizes = []
    try:  # one node per allocation
        from torch._C._profiler import _EventType

        def walk(nodes):
            for n in nodes:
                if n.tag == _EventType.Allocation and n.extra_fields.alloc_size > 0:
                    sizes.append(n.extra_fields.alloc_size)
                walk(n.children)
        walk(prof.profiler.kineto_results.experimental_event_tree())
    except (ImportError, AttributeError):  # the public summary: what each op allocated itself
        sizes = [e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0]
    return sizes


@pytest.mark.parametrize("multi", [False, True], ids=["single", "multi"])
def test_additive_score_never_allocates_the_whole_broadcast(additive_mod, monkeypatch, multi):
    """Forward and backward with blocks of 4 queries of 64: no allocation comes near the
    (N, H, Lq, Lk, d_w) tensor (1 MiB), while the broadcast formula does allocate it (so the
    measurement can see it)."""
    AS = additive_mod.QueryBlocks
    N, H, Lq, Lk, d_w = 2, 2, 64, 64, 16
    full = N * H * Lq * Lk * d_w * 4
    monkeypatch.setattr(AS, "BLOCK", 1 << 14)
    wq = randn(N, H, Lq, d_w, seed=1).requires_grad_()
    wk = randn(N, H, Lk, d_w, seed=2).requires_grad_()
    w = randn(*((H, d_w, 2) if multi else (H, d_w)), seed=3).requires_grad_()
    assert AS.rows(wq, wk) == 4

    def fast():
        e = additive_mod.additive_score(wq, wk, w, torch.tanh)
        e.sum().backward()

    def broadcast():
        additive_ref(wq, wk, w, torch.tanh).sum().backward()

    big = max(allocations(fast))
    assert big < full // 4, f"an allocation of {big} bytes; the whole broadcast is {full}"
    assert max(allocations(broadcast)) >= full


FUSED_SPEC = """
model m {
    input x: sequence[L, 8]
    input y: sequence[T, 6]
    attention s { query = project(x, 4)  keys = project(x, 4)  values = project(x, 6)
                  score = scaled_multiplicative  heads = 2  mask = causal }
    attention c { query = project(y, 4)  keys = project(x, 4)  values = project(x, 6)  score = general }
    attention u { query = project(x)  keys = project(x)  values = x  score = multiplicative }
    output o1 = identity(s)
    output o2 = identity(c)
    output o3 = identity(u)
}
"""


def test_stacked_projections_of_unequal_sizes(gen):
    """Self-attention with W_Q, W_K, W_V of 4, 4 and 6 rows (one nn.Linear split [4, 4, 6]),
    cross-attention whose keys and values are projections of the other input (W_K, W_V
    stacked), and W_Q, W_K stacked with plain values: the model (fast path, stacked matmul)
    gives what the module gives on three separate matmuls with the weight's row slices
    (explicit path)."""
    mod = gen(FUSED_SPEC)
    torch.manual_seed(0)
    model = randomize(mod.Model(mod.Config()), seed=6)
    assert model.s_qkv_proj.weight.shape == (14, 8)
    assert model.c_kv_proj.weight.shape == (10, 8)
    assert model.u_qk_proj.weight.shape == (16, 8)
    x, y = randn(3, 5, 8, seed=1), randn(3, 4, 6, seed=2)
    xm, ym = key_masks(3, 5)[1], key_masks(3, 4)[1]
    W, Wkv, Wqk = model.s_qkv_proj.weight, model.c_kv_proj.weight, model.u_qk_proj.weight
    with torch.no_grad():
        for masks in ((None, None), (xm, ym)):
            out = model(x=x, y=y, x_mask=masks[0], y_mask=masks[1]).output
            s = model.s(x @ W[0:4].T, x @ W[4:8].T, x @ W[8:14].T, masks[0], need_weights=True)[0]
            c = model.c(model.c_q_proj(y), x @ Wkv[0:4].T, x @ Wkv[4:10].T, masks[0], need_weights=True)[0]
            u = model.u(x @ Wqk[0:8].T, x @ Wqk[8:16].T, x, masks[0], need_weights=True)[0]
            close(out["o1"], s, what="qkv split [4, 4, 6]")
            close(out["o2"], c, what="kv split [4, 6]")
            close(out["o3"], u, what="qk chunk")
            wrong = model.c(model.c_q_proj(y), x @ Wkv[0:4].T, x @ Wkv[4:10].T.flip(-1), masks[0])[0]
            assert (wrong - c).abs().max() > 1e-2  # the slices matter


# ---- 4. every committed generated model: return_attention=False vs True ------------------------

GENERATED = sorted((ROOT / "generated").glob("*.py"))
SAMPLING = ("torch.multinomial", "torch.bernoulli")


def load_generated(path: Path):
    return load_module(path.read_text(encoding="utf-8"), "_taxcompile_fast_" + path.stem)


def bump_zero_gates(model: nn.Module) -> None:
    """SAGAN's gamma starts at exactly 0, which would hide its attention from the output."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 0 and p.item() == 0:
                p.fill_(0.5)


def input_sets(mod, cfg) -> list[dict]:
    """example_inputs(), the same without masks, and with example 1 fully padded."""
    ex = mod.example_inputs(3, seed=1, cfg=cfg)
    plain = {k: x for k, x in ex.items() if not k.endswith("_mask")}
    empty = dict(ex)
    for name in [k for k in ex if k.endswith("_mask")]:
        m = ex[name].clone()
        m[1] = False
        empty[name] = m
    sets = [mod.example_inputs(cfg=cfg), plain]
    return sets + ([empty] if len(plain) < len(ex) else [])


def output_list(out) -> list[torch.Tensor]:
    o = out.output
    ys = [o[k] for k in sorted(o)] if isinstance(o, dict) else [o]
    log_probs, capsules = getattr(out, "log_probs", {}), getattr(out, "capsules", {})
    ys += [log_probs[k] for k in sorted(log_probs)]
    ys += [x for k in sorted(capsules) for x in capsules[k]]
    if torch.is_tensor(getattr(out, "penalty", None)):
        ys.append(out.penalty)
    return ys


def test_every_generated_model_is_checked():
    assert len(GENERATED) >= 22
    fast = [p.stem for p in GENERATED if "need_weights=return_attention" in p.read_text(encoding="utf-8")]
    assert {"vaswani2017_transformer", "luong2015_local_m", "luong2015_local_p",
            "wang2018_rnn_capsule"} <= set(fast), fast


@pytest.mark.parametrize("path", GENERATED, ids=[p.stem for p in GENERATED])
def test_generated_model_eval_outputs_do_not_depend_on_return_attention(path):
    mod = load_generated(path)
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).eval()
    bump_zero_gates(model)
    for inputs in input_sets(mod, cfg):
        with torch.no_grad():
            fast = model(**inputs, return_attention=False)
            slow = model(**inputs, return_attention=True)
        assert fast.attention == {} and slow.attention
        a, b = output_list(fast), output_list(slow)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert x.dtype == torch.float32
            close(x, y, what=path.stem)


TRAINABLE = [p for p in GENERATED if not any(s in p.read_text(encoding="utf-8") for s in SAMPLING)]


@pytest.mark.parametrize("path", TRAINABLE, ids=[p.stem for p in TRAINABLE])
def test_generated_model_train_gradients_do_not_depend_on_return_attention(path):
    """train() mode, float64: outputs and the gradients of every parameter and float input
    agree (models that sample in training, hard and reinforced alignment, are left out)."""
    mod = load_generated(path)
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).double().train()
    bump_zero_gates(model)
    inputs = {k: (x.to(DT) if x.is_floating_point() else x) for k, x in mod.example_inputs(cfg=cfg).items()}
    runs = []
    for ret in (True, False):
        xs = {k: (x.clone().requires_grad_() if x.is_floating_point() else x) for k, x in inputs.items()}
        torch.manual_seed(1)  # dropout draws the same masks on both paths
        out = model(**xs, return_attention=ret)
        ys = output_list(out)
        loss = sum((y * randn(*y.shape, seed=i, dtype=DT)).sum() for i, y in enumerate(ys))
        names = [n for n, _ in model.named_parameters()] + [k for k, x in xs.items() if x.is_floating_point()]
        ts = [p for _, p in model.named_parameters()] + [x for x in xs.values() if x.is_floating_point()]
        gs = torch.autograd.grad(loss, ts, allow_unused=True)
        runs.append(([y.detach() for y in ys], dict(zip(names, gs))))
    (y_e, g_e), (y_f, g_f) = runs
    for a, b in zip(y_f, y_e):
        close(a, b, what="output")
    nonzero = 0
    for n in g_e:
        if g_e[n] is None:
            assert g_f[n] is None, n
        else:
            close(g_f[n], g_e[n], what=f"gradient of {n}")
            nonzero += bool(g_e[n].abs().max() > 0)
    assert nonzero > 0


# ---- 5. the stacked projections of the Transformer ---------------------------------------------


def mha_ref(q, k, v, keep, H, out: nn.Linear):
    """Multi-head attention written out (eq. 38-40): head j attends with q^(j), K^(j), V^(j),
    the j-th slices of the projected query, keys and values, and a scaled dot product
    softmax(q^(j) K^(j)T / sqrt(d_k / H)); c = W_O concat(c^(1), ..., c^(H)) + b_O.
    keep: (B, Lq, Lk) bool."""
    d = q.shape[-1]
    dh = d // H
    heads = []
    for j in range(H):
        sl = slice(j * dh, (j + 1) * dh)
        e = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(dh)
        heads.append(masked_softmax_ref(e, keep) @ v[..., sl])
    return torch.cat(heads, -1) @ out.weight.T + out.bias


def transformer_ref(mod, model, src, tgt, src_mask, tgt_mask, swap_kv: bool = False):
    """Vaswani et al.'s Transformer with its attention written out: the stacked W_Q, W_K, W_V
    (rows 0:d, d:2d, 2d:3d of `*_qkv_proj`; W_K, W_V rows 0:d, d:2d of `*_kv_proj`) used as
    three separate matmuls."""
    cfg = model.cfg
    d, H = cfg.d_model, cfg.heads
    B, S = src.shape
    T = tgt.shape[1]
    sm = torch.ones(B, S, dtype=torch.bool) if src_mask is None else src_mask
    tm = torch.ones(B, T, dtype=torch.bool) if tgt_mask is None else tgt_mask
    kv = (slice(2 * d, 3 * d), slice(d, 2 * d)) if swap_kv else (slice(d, 2 * d), slice(2 * d, 3 * d))
    # one embedding E for both languages, times sqrt(d_model) (3.4); dropout is off (eval)
    x = mod.sinusoid(model.x_embed(src) * math.sqrt(d))
    y = mod.sinusoid(model.x_embed(tgt) * math.sqrt(d))
    for layer in model.encoder:
        W = layer.self_qkv_proj.weight
        assert W.shape == (3 * d, d)
        q, k, v = x @ W[0:d].T, x @ W[kv[0]].T, x @ W[kv[1]].T
        c = mha_ref(q, k, v, sm[:, None, :].expand(B, S, S), H, layer.self_attn.out)
        x = layer.x_1_norm(x + c)
        x = layer.x_2_norm(x + layer.x_2_ffn(x))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for layer in model.decoder:
        W = layer.self_qkv_proj.weight
        q, k, v = y @ W[0:d].T, y @ W[kv[0]].T, y @ W[kv[1]].T
        c = mha_ref(q, k, v, causal & tm[:, None, :], H, layer.self_attn.out)
        y = layer.y_1_norm(y + c)
        Wkv = layer.cross_kv_proj.weight
        assert Wkv.shape == (2 * d, d)
        ks, vs = (slice(d, 2 * d), slice(0, d)) if swap_kv else (slice(0, d), slice(d, 2 * d))
        q = y @ layer.cross_q_proj.weight.T
        c = mha_ref(q, x @ Wkv[ks].T, x @ Wkv[vs].T, sm[:, None, :].expand(B, T, S), H,
                    layer.cross.out)
        y = layer.y_2_norm(y + c)
        y = layer.y_3_norm(y + layer.y_3_ffn(y))
    return y @ model.x_embed.weight.T + model.logits_bias  # the output layer tied to E


def test_transformer_stacked_projections_match_separate_matmuls():
    mod = load_generated(ROOT / "generated" / "vaswani2017_transformer.py")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).eval()
    ex = mod.example_inputs(3, seed=2, cfg=cfg)
    assert (~ex["src_mask"]).any() and (~ex["tgt_mask"]).any()
    for masks in ((ex["src_mask"], ex["tgt_mask"]), (None, None)):
        inputs = {"src": ex["src"], "tgt": ex["tgt"], "src_mask": masks[0], "tgt_mask": masks[1]}
        with torch.no_grad():
            want = transformer_ref(mod, model, **inputs)
            for ret in (False, True):
                close(model(**inputs, return_attention=ret).output, want, what=f"return_attention={ret}")
            # the reference is sensitive to which slice is which
            wrong = transformer_ref(mod, model, **inputs, swap_kv=True)
            assert (wrong - want).abs().max() > 1e-2


# ---- FlexAttention under torch.compile --------------------------------------------------------

FLEX_SPEC = """
model m {{
    input x: sequence[L, 32]
    attention att {{ query = project(x)  features = x  score = scaled_multiplicative
                    align = local(D = 5, position = {position}, gaussian = false)  heads = 2 }}
    output o = identity(att)
}}
"""


@pytest.mark.parametrize("position", ["monotonic", "predictive"])
def test_compiled_local_attention_uses_flex_attention_for_inference(gen, position):
    """Under torch.compile, CPU inference without a Gaussian goes through FlexAttention's
    block mask (the traced graph holds flex_attention), with the explicit path's numbers,
    padding masks included; with gradients on, the banded path is traced instead."""
    mod = gen(FLEX_SPEC.format(position=position))
    model = randomize(mod.Model(mod.Config()), seed=3).eval()
    x = randn(2, 40, 32, seed=1)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 29:] = False
    graphs = []

    def record(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=record, fullgraph=True)
        for m in (mask, None):
            with torch.no_grad():
                want = model(x=x, x_mask=m, return_attention=True).output
                got = compiled(x=x, x_mask=m).output
            close(got, want, what=f"flex, mask={m is not None}")
        assert graphs and all("flex_attention" in g for g in graphs)
        graphs.clear()
        compiled(x=x, x_mask=mask).output.sum().backward()  # training: the band, not flex
        assert graphs and not any("flex_attention" in g for g in graphs)
    finally:
        torch._dynamo.reset()


def test_compiled_local_attention_inductor_kernel():
    """One real inductor compile of the FlexAttention path (CPU inference)."""
    torch._dynamo.reset()
    mod = load_module((ROOT / "generated" / "luong2015_local_m.py").read_text(encoding="utf-8"),
                      "_taxcompile_fast_flex_helper")
    q, k, v = (randn(2, 2, 50, 16, seed=s) for s in (1, 2, 3))
    key_mask = torch.ones(2, 50, dtype=torch.bool)
    key_mask[0, 41:] = False
    flex = torch.compile(mod.local_band, fullgraph=True)
    try:
        with torch.no_grad():
            got = flex(q, k, v, key_mask, 0, 4, 0.25, None)
    finally:
        torch._dynamo.reset()
    dist = torch.arange(50) - torch.arange(50).unsqueeze(1)
    keep = (dist.abs() <= 4) & key_mask[:, None, None, :]
    want = masked_softmax_ref(q @ k.transpose(-1, -2) * 0.25, keep) @ v
    close(got, want, what="inductor flex")
