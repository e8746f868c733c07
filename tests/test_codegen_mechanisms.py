"""Every attention mechanism of the generated PyTorch code, checked against an
independent implementation of its equation.

The references below are written from the survey's equations (Brauwers & Frasincar,
numbers as in ../shared/reference/taxonomy.md; seed 000 for sparsemax and entmax), with
plain loops over queries and keys, not from the code templates. Each test compiles a
small inline spec, copies the weights out of the generated module (after filling every
parameter with random values, so that a zero-initialised bias cannot hide a bug), and
compares in float32 within 1e-5. Differentiable mechanisms are also put through
`torch.autograd.gradcheck` in float64, and the alignment invariants are checked exactly
(weights sum to 1, exact zeros outside windows, under masks and for sparsemax).
"""

from __future__ import annotations

import copy
import math

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from torch_support import inline_builder  # noqa: E402

ATOL = 1e-5
DT = torch.float64

HEADER = """\
paper mech {
    cite  = "Test"
    title = "Mechanism tests"
    year  = 2024
}
"""

# ---- compiling and loading ----------------------------------------------------------------


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    """gen(body, model=None) -> the imported generated module of one model of the spec."""
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_mech")


def randomize(module: nn.Module, seed: int = 0, scale: float = 0.5) -> None:
    """Every parameter random (a zero bias or a zero w_c would hide a wrong formula)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def make(gen, body: str, model: str | None = None, seed: int = 0, **cfg):
    mod = gen(body, model)
    torch.manual_seed(seed)
    m = mod.Model(mod.Config(**cfg))
    randomize(m, seed)
    return mod, m


# ---- comparison and gradcheck helpers ---------------------------------------------------------


def D(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(DT)


def params(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: D(p) for n, p in module.named_parameters()}


def close(got: torch.Tensor, want: torch.Tensor, atol: float = ATOL) -> None:
    assert got.dtype == torch.float32, got.dtype
    got = D(got)
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    torch.testing.assert_close(got, want.to(DT), atol=atol, rtol=0)


def gradcheck_module(att: nn.Module, *args, pick=lambda r: (r[0], r[1]), **kwargs) -> None:
    """gradcheck in float64 w.r.t. the module's float inputs and all its parameters."""
    att = copy.deepcopy(att).double()
    named = [(n, p.detach().clone().requires_grad_()) for n, p in att.named_parameters()]
    names = [n for n, _ in named]
    xs = [a.detach().to(DT).requires_grad_() if torch.is_tensor(a) and a.is_floating_point() else a
          for a in args]
    diff = [i for i, a in enumerate(xs) if torch.is_tensor(a) and a.requires_grad]

    def f(*flat):
        ps = dict(zip(names, flat[: len(names)]))
        a = list(xs)
        for j, i in enumerate(diff):
            a[i] = flat[len(names) + j]
        return pick(torch.func.functional_call(att, ps, tuple(a), kwargs))

    inputs = tuple(p for _, p in named) + tuple(xs[i] for i in diff)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=True)


def gradcheck_model(model: nn.Module, inputs: dict, pick) -> None:
    """gradcheck in float64 of a whole generated model w.r.t. its float inputs."""
    model = copy.deepcopy(model).double()
    floats = {k: D(v).requires_grad_() for k, v in inputs.items() if v.is_floating_point()}
    rest = {k: v for k, v in inputs.items() if not v.is_floating_point()}
    names = list(floats)

    def f(*xs):
        return pick(model(**rest, **dict(zip(names, xs)), return_attention=True))

    # fast mode (a random projection of the Jacobian): whole models have many inputs
    assert torch.autograd.gradcheck(f, tuple(floats.values()), eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=True)


def randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


def tail_mask(N: int, L: int, pad: dict[int, int]) -> torch.Tensor:
    """(N, L) bool, True = keep; example n loses its last pad[n] positions."""
    m = torch.ones(N, L, dtype=torch.bool)
    for n, k in pad.items():
        if k:
            m[n, L - k:] = False
    return m


# ---- reference attention (eq. 2-4, 25) -----------------------------------------------------------

ACT = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid, "none": lambda x: x,
       "elu": torch.nn.functional.elu}


def softmax_ref(e: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """eq. 25 over the kept entries of a 1-D score vector; exactly zero elsewhere."""
    a = torch.zeros_like(e)
    if keep.any():
        z = torch.exp(e[keep] - e[keep].max())
        a[keep] = z / z.sum()
    return a


def bisect(f, lo: float, hi: float, iters: int = 100) -> float:
    """The tau in [lo, hi] with f(tau) = 1, for f decreasing."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        if f(mid) > 1:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sparsemax_ref(e: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """argmin_p ||p - e||^2 on the simplex: p_l = [e_l - tau]_+, tau by bisection."""
    a = torch.zeros_like(e)
    if keep.any():
        z = e[keep]
        zmax = float(z.max())
        tau = bisect(lambda t: float(torch.clamp(z - t, min=0).sum()), zmax - 1, zmax)
        a[keep] = torch.clamp(z - tau, min=0)
    return a


def entmax15_ref(e: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """1.5-entmax (Peters et al.): p_l = [(alpha - 1) e_l - tau]_+^(1 / (alpha - 1)) with
    alpha = 1.5, i.e. [e_l / 2 - tau]_+^2, tau by bisection."""
    a = torch.zeros_like(e)
    if keep.any():
        z = e[keep] / 2
        zmax = float(z.max())
        tau = bisect(lambda t: float((torch.clamp(z - t, min=0) ** 2).sum()), zmax - 1, zmax)
        a[keep] = torch.clamp(z - tau, min=0) ** 2
    return a


def attend_ref(rows, v: torch.Tensor, keep: torch.Tensor, align=softmax_ref):
    """a_i = align(e_i), c_i = sum_l a_il v_l (eq. 3-4); rows(n, i) gives e_i over the keys.
    keep: (N, Lq, Lk) bool. Returns a (N, Lq, Lk) and c (N, Lq, d_v) in float64."""
    N, Lq, Lk = keep.shape
    a = torch.zeros(N, Lq, Lk, dtype=DT)
    c = torch.zeros(N, Lq, v.shape[-1], dtype=DT)
    for n in range(N):
        for i in range(Lq):
            a[n, i] = align(rows(n, i), keep[n, i])
            for l in range(Lk):
                c[n, i] += a[n, i, l] * v[n, l]
    return a, c


def pairwise(score, q: torch.Tensor, k: torch.Tensor):
    """rows(n, i) = [score(q_ni, k_nl) for every key l] (eq. 2)."""
    return lambda n, i: torch.stack([score(q[n, i], k[n, l]) for l in range(k.shape[1])])


def score_ref(kind: str, P: dict, h: int = 0, act: str = "tanh"):
    """Table II, for head h (its own parameters, eq. 38-39); q and k are 1-D."""
    if kind == "additive":  # eq. 6: w^T act(W1 q + W2 k + b)
        b = P["b"][h] if "b" in P else 0.0
        return lambda q, k: P["w"][h] @ ACT[act](q @ P["W1"][h] + k @ P["W2"][h] + b)
    if kind == "multiplicative":
        return lambda q, k: q @ k
    if kind == "scaled_multiplicative":
        return lambda q, k: q @ k / math.sqrt(k.numel())
    if kind == "general":  # k^T W q
        return lambda q, k: k @ P["W"][h] @ q
    if kind == "biased_general":  # k^T (W q + b)
        return lambda q, k: k @ (P["W"][h] @ q + P["b"][h])
    if kind == "activated_general":  # act(k^T W q + b)
        return lambda q, k: ACT[act](k @ P["W"][h] @ q + P["b"][h])
    if kind == "cosine":
        return lambda q, k: (q @ k) / (q.norm() * k.norm())
    if kind == "l2":
        return lambda q, k: -torch.sqrt(((q - k) ** 2).sum())
    raise AssertionError(kind)


def keep_of(key_mask: torch.Tensor | None, N: int, Lq: int, Lk: int, struct=None) -> torch.Tensor:
    keep = torch.ones(N, Lq, Lk, dtype=torch.bool)
    if key_mask is not None:
        keep &= key_mask[:, None, :]
    if struct is not None:
        for i in range(Lq):
            for j in range(Lk):
                if not struct(i, j):
                    keep[:, i, j] = False
    return keep


def check_soft_invariants(a: torch.Tensor, keep: torch.Tensor) -> None:
    """a (N, Lq, Lk[, d]): zero where masked, sums to 1 over the keys where any key is kept."""
    if a.dim() == 4:
        keep = keep.unsqueeze(-1).expand_as(a)
    assert (a[~keep] == 0).all(), "masked positions must get exactly zero weight"
    assert (a >= 0).all()
    sums = a.sum(2)
    any_kept = keep.any(2)
    torch.testing.assert_close(sums[any_kept], torch.ones_like(sums[any_kept]), atol=1e-6, rtol=0)
    assert (sums[~any_kept] == 0).all()


# ---- one module: query y (T, d_q), keys x (L, 8), values z (L, 5) ------------------------------


def qkv_spec(score: str, dq: int = 6, align: str = "global", extra: str = "", dv: int = 5,
             fixed_L: int | None = None) -> str:
    fix = f" (L = {fixed_L})" if fixed_L else ""
    return f"""
    model m {{
        input x: sequence[L, 8]{fix}
        input y: sequence[T, {dq}]
        input z: sequence[L, {dv}]
        attention att {{
            query  = y
            keys   = x
            values = z
            score  = {score}
            align  = {align}
            {extra}
        }}
        output out = identity(att)
    }}
    """


def qkv_inputs(dq=6, dk=8, dv=5, N=2, Lq=3, Lk=6, seed=1, pad=None, qscale=1.0):
    q = randn(N, Lq, dq, seed=seed, scale=qscale)
    k = randn(N, Lk, dk, seed=seed + 1)
    v = randn(N, Lk, dv, seed=seed + 2)
    mask = tail_mask(N, Lk, pad if pad is not None else {1: 2})
    return q, k, v, mask


# ---- scores (Table II) with global alignment (eq. 25) ----------------------------------------------

SCORES = [
    # (spec score, reference kind, activation, d_q)
    pytest.param("additive(d_w = 7, act = tanh)", "additive", "tanh", 6, id="additive-tanh"),
    pytest.param("additive(d_w = 7, act = relu, bias = false)", "additive", "relu", 6, id="additive-relu-nobias"),
    pytest.param("multiplicative", "multiplicative", "none", 8, id="multiplicative"),
    pytest.param("scaled_multiplicative", "scaled_multiplicative", "none", 8, id="scaled_multiplicative"),
    pytest.param("general", "general", "none", 6, id="general"),
    pytest.param("biased_general", "biased_general", "none", 6, id="biased_general"),
    pytest.param("activated_general(act = tanh)", "activated_general", "tanh", 6, id="activated_general-tanh"),
    pytest.param("activated_general(act = sigmoid)", "activated_general", "sigmoid", 6,
                 id="activated_general-sigmoid"),
    pytest.param("similarity(kind = cosine)", "cosine", "none", 8, id="similarity-cosine"),
    pytest.param("similarity(kind = l2)", "l2", "none", 8, id="similarity-l2"),
]


@pytest.mark.parametrize("score,kind,act,dq", SCORES)
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "padded"])
def test_score_matches_reference(gen, score, kind, act, dq, masked):
    _, model = make(gen, qkv_spec(score, dq))
    q, k, v, mask = qkv_inputs(dq=dq)
    key_mask = mask if masked else None
    c, a, _ = model.att(q, k, v, key_mask)
    assert a.shape == (2, 1, 3, 6)
    keep = keep_of(key_mask, 2, 3, 6)
    ref_a, ref_c = attend_ref(pairwise(score_ref(kind, params(model.att), 0, act), D(q), D(k)), D(v), keep)
    close(a[:, 0], ref_a)
    close(c, ref_c)
    check_soft_invariants(a[:, 0], keep)


@pytest.mark.parametrize("score,kind,act,dq", SCORES)
def test_score_gradcheck(gen, score, kind, act, dq):
    _, model = make(gen, qkv_spec(score, dq))
    q, k, v, mask = qkv_inputs(dq=dq, Lq=2, Lk=4, pad={1: 1})
    gradcheck_module(model.att, q, k, v, mask)


def test_score_through_the_model(gen):
    """The model passes its inputs (query y, keys x, values z, x's padding mask) to the module
    and exposes the module's weights as Output.attention (B, H, Lq, Lk)."""
    _, model = make(gen, qkv_spec("general"))
    q, k, v, mask = qkv_inputs()
    out = model(x=k, y=q, z=v, x_mask=mask, return_attention=True)
    keep = keep_of(mask, 2, 3, 6)
    ref_a, ref_c = attend_ref(pairwise(score_ref("general", params(model.att)), D(q), D(k)), D(v), keep)
    close(out.attention["att"][:, 0], ref_a)
    close(out.output, ref_c)


def test_location_score(gen):
    """Luong et al.'s location score: e = W_a q, one score per key position, keys unused."""
    _, model = make(gen, qkv_spec("location", dq=6, fixed_L=6), L=6)
    q, k, v, mask = qkv_inputs(dq=6, Lk=6)
    P = params(model.att)  # W = nn.Linear(d_q, n_keys)
    rows = lambda n, i: P["W.weight"] @ D(q)[n, i] + P["W.bias"]  # noqa: E731
    for key_mask in (None, mask):
        c, a, _ = model.att(q, k, v, key_mask)
        keep = keep_of(key_mask, 2, 3, 6)
        ref_a, ref_c = attend_ref(rows, D(v), keep)
        close(a[:, 0], ref_a)
        close(c, ref_c)
        check_soft_invariants(a[:, 0], keep)
    # the keys do not enter the score
    c2, a2, _ = model.att(q, k * 3 + 1, v, mask)
    close(a2[:, 0], attend_ref(rows, D(v), keep_of(mask, 2, 3, 6))[0])
    gradcheck_module(model.att, q[:, :2], k, v, mask)
    # the keys' axis has the fixed length the score was built for
    with pytest.raises(ValueError):
        model.att(q, k[:, :5], v[:, :5], None)


def test_example_inputs_agree_on_a_fixed_axis(gen):
    """The location score needs the keys' axis fixed; values over the same axis must get
    the same length in example_inputs()."""
    mod, model = make(gen, qkv_spec("location", dq=6, fixed_L=6), L=6)
    inputs = mod.example_inputs(cfg=model.cfg)
    assert inputs["x"].shape[1] == inputs["z"].shape[1] == 6
    model(**inputs)


def test_location_score_multi_head(gen):
    """With H heads each head predicts its own scores from its slice of the query,
    e^(j) = W_a^(j) q^(j) + b^(j) (eq. 38-39), then c = W_O concat(c^(j)) (eq. 40)."""
    H = 2
    _, model = make(gen, qkv_spec("location", dq=6, dv=4, fixed_L=6, extra=f"heads = {H}"), L=6)
    q, k, v, mask = qkv_inputs(dq=6, dv=4, Lk=6)
    c, a, _ = model.att(q, k, v, mask)
    assert a.shape == (2, H, 3, 6)
    P = params(model.att)  # W: (H, d_q / H, n_keys), b: (H, n_keys)
    keep = keep_of(mask, 2, 3, 6)
    ctx = []
    for h in range(H):
        qs, vs = D(q)[..., 3 * h:3 * (h + 1)], D(v)[..., 2 * h:2 * (h + 1)]
        ref_a, ref_c = attend_ref(lambda n, i: qs[n, i] @ P["W"][h] + P["b"][h], vs, keep)
        close(a[:, h], ref_a)
        ctx.append(ref_c)
    close(c, torch.cat(ctx, -1) @ P["out.weight"].T + P["out.bias"])
    gradcheck_module(model.att, q[:, :2], k, v, mask)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("score,act", [("concat(d_w = 7)", "none"), ("additive(d_w = 7, act = tanh)", "tanh"),
                                       ("additive(d_w = 7, act = relu, bias = false)", "relu")],
                         ids=["concat", "additive-tanh", "additive-relu"])
def test_scores_without_a_query(gen, score, act, heads):
    """No query (eq. 33): e_l = w^T act(W k_l + b); concat is the same without the
    non-linearity (w^T W k_l, seed 003). With H heads: H rows of weights over the full keys,
    each with its own w and a shared W (Lin et al.), c = W_O concat(A V)."""
    _, model = make(gen, f"""
    model m {{
        input x: sequence[L, 8]
        input z: sequence[L, 4]
        attention att {{ keys = x  values = z  score = {score}  heads = {heads} }}
        output out = identity(att)
    }}
    """)
    _, k, v, mask = qkv_inputs(dv=4)
    c, a, _ = model.att(None, k, v, mask)
    assert a.shape == (2, heads, 1, 6)
    P = params(model.att)
    keep = keep_of(mask, 2, 1, 6)
    ctx = []
    for h in range(heads):
        def rows(n, _i, h=h):
            Wk = D(k)[n] @ P["W.weight"].T + (P["W.bias"] if "W.bias" in P else 0.0)  # (Lk, d_w)
            return ACT[act](Wk) @ P["w"][h]
        ref_a, ref_c = attend_ref(rows, D(v), keep)
        close(a[:, h], ref_a)
        check_soft_invariants(a[:, h], keep)
        ctx.append(ref_c)
    ref = torch.cat(ctx, -1)
    if heads > 1:
        ref = ref @ P["out.weight"].T + P["out.bias"]
    close(c, ref)
    gradcheck_module(model.att, None, k, v, mask)


# ---- alignment ---------------------------------------------------------------------------------------


def test_global_alignment_weights_sum_to_one(gen):
    _, model = make(gen, qkv_spec("multiplicative", dq=8))
    q, k, v, mask = qkv_inputs(dq=8, qscale=3.0, pad={0: 1, 1: 4})
    c, a, _ = model.att(q, k, v, mask)
    check_soft_invariants(a[:, 0], keep_of(mask, 2, 3, 6))
    assert (a[:, 0][keep_of(mask, 2, 3, 6)] > 0).all(), "softmax never gives an exact zero to a kept key"


# hard (eq. 26)


def hard_ref_distribution(model, q, k, mask):
    P = params(model.att)
    keep = keep_of(mask, *q.shape[:2], k.shape[1])
    no_values = torch.zeros(q.shape[0], k.shape[1], 1, dtype=DT)
    p, _ = attend_ref(pairwise(score_ref("general", P), D(q), D(k)), no_values, keep)
    return p, keep  # the softmax the key is drawn from


def test_hard_alignment_eval_is_the_argmax(gen):
    _, model = make(gen, qkv_spec("general", align="hard"))
    model.eval()
    q, k, v, mask = qkv_inputs()
    c, a, ex = model.att(q, k, v, mask)
    p, keep = hard_ref_distribution(model, q, k, mask)
    m = p.argmax(-1)  # (N, Lq)
    one_hot = torch.nn.functional.one_hot(m, 6).to(DT)
    assert a.shape == (2, 1, 3, 6)
    assert torch.equal(D(a[:, 0]), one_hot), "hard weights are one-hot at the most likely key"
    close(c, D(v)[torch.arange(2)[:, None], m])  # c = v_m
    close(ex["log_prob"][:, 0], p.gather(-1, m.unsqueeze(-1)).squeeze(-1).log())
    # deterministic in eval(): the same query always takes the same key
    n = 300
    _, a_rep, _ = model.att(q[:1].expand(n, -1, -1), k[:1].expand(n, -1, -1), v[:1].expand(n, -1, -1),
                            mask[:1].expand(n, -1))
    assert (a_rep == a[:1]).all()
    # through the model: Output.log_probs
    out = model(x=k, y=q, z=v, x_mask=mask, return_attention=True)
    close(out.log_probs["att"][:, 0], p.gather(-1, m.unsqueeze(-1)).squeeze(-1).log())
    assert torch.equal(D(out.attention["att"][:, 0]), one_hot)


def test_hard_alignment_samples_in_training(gen):
    """In training m ~ Multinoulli(softmax(e)) (eq. 26): one-hot, never a masked key, with
    the empirical frequencies of the softmax, and log_prob = log p(m) of the sample."""
    _, model = make(gen, qkv_spec("general", align="hard"))
    model.train()
    q, k, v, mask = qkv_inputs(N=1, Lq=1, Lk=6, pad={0: 2})
    n = 4000
    Q, K, V, M = q.expand(n, -1, -1), k.expand(n, -1, -1), v.expand(n, -1, -1), mask.expand(n, -1)
    torch.manual_seed(123)
    c, a, ex = model.att(Q, K, V, M)
    p, _ = hard_ref_distribution(model, q, k, mask)
    p = p[0, 0]
    a = D(a[:, 0, 0])  # (n, Lk)
    assert ((a == 0) | (a == 1)).all() and (a.sum(-1) == 1).all(), "one-hot"
    assert (a[:, ~mask[0]] == 0).all(), "a masked key is never sampled"
    freq = a.mean(0)
    assert (freq - p).abs().max() < 0.035, (freq, p)
    assert len(torch.unique(a.argmax(-1))) > 1, "training samples, it does not take the argmax"
    m = a.argmax(-1)
    close(ex["log_prob"][:, 0, 0], p[m].log())
    close(c[:, 0], D(V)[torch.arange(n), m])


def test_hard_alignment_log_prob_gradcheck(gen):
    _, model = make(gen, qkv_spec("general", align="hard"))
    model.eval()
    q, k, v, mask = qkv_inputs(Lq=2, Lk=4, pad={1: 1})
    gradcheck_module(model.att.eval(), q, k, v, mask, pick=lambda r: r[2]["log_prob"])


# local (eq. 27-29)


def local_attend(e_rows, v, key_mask, positions, Lq, D_, gaussian, sigma):
    N, Lk = v.shape[0], v.shape[1]
    a = torch.zeros(N, Lq, Lk, dtype=DT)
    c = torch.zeros(N, Lq, v.shape[-1], dtype=DT)
    for n in range(N):
        for i in range(Lq):
            p = float(positions(n, i))
            keep = torch.tensor([abs(l - p) <= D_ for l in range(Lk)])
            if key_mask is not None:
                keep &= key_mask[n]
            a[n, i] = softmax_ref(e_rows(n, i), keep)
            if gaussian:
                for l in range(Lk):
                    a[n, i, l] *= math.exp(-((l - p) ** 2) / (2 * sigma ** 2))
            for l in range(Lk):
                c[n, i] += a[n, i, l] * v[n, l]
    return a, c


LOCAL_MONO = [
    # (align spec, D, gaussian, sigma)
    ("local(D = 2, position = monotonic, gaussian = false)", 2, False, None),
    ("local(D = 2, position = monotonic, gaussian = true)", 2, True, 1.0),  # sigma = D / 2
    ("local(D = 1, position = monotonic, gaussian = true, sigma = 1.5)", 1, True, 1.5),
]


@pytest.mark.parametrize("align,D_,gaussian,sigma", LOCAL_MONO, ids=["window", "gauss", "gauss-sigma"])
def test_local_monotonic(gen, align, D_, gaussian, sigma):
    """Local-m: p is the query's own position t (eq. 27)."""
    _, model = make(gen, qkv_spec("general", align=align))
    q, k, v, mask = qkv_inputs(Lq=6, Lk=8, pad={1: 3})
    c, a, _ = model.att(q, k, v, mask)
    rows = pairwise(score_ref("general", params(model.att)), D(q), D(k))
    ref_a, ref_c = local_attend(rows, D(v), mask, lambda n, i: i, 6, D_, gaussian, sigma)
    close(a[:, 0], ref_a)
    close(c, ref_c)
    # exact zeros outside the window [t - D, t + D] and at padded keys
    for i in range(6):
        for l in range(8):
            if abs(l - i) > D_:
                assert (a[:, 0, i, l] == 0).all()
    assert (a[1, 0][:, ~mask[1]] == 0).all()
    if not gaussian:  # a plain softmax inside the window
        keep = keep_of(mask, 2, 6, 8, lambda i, l: abs(l - i) <= D_)
        check_soft_invariants(a[:, 0], keep)
    else:  # not renormalised after the Gaussian factor
        assert (a[:, 0].sum(-1) < 1 - 1e-3).any()


@pytest.mark.parametrize("gaussian", [True, False], ids=["gauss", "window"])
def test_local_predictive(gen, gaussian):
    """Local-p: p = S sigmoid(w_p^T tanh(W_p q)) with S the number of unpadded keys (eq. 28)."""
    align = f"local(D = 2, position = predictive, gaussian = {str(gaussian).lower()})"
    _, model = make(gen, qkv_spec("general", align=align), seed=3)
    q, k, v, mask = qkv_inputs(Lq=4, Lk=9, pad={1: 4}, qscale=2.0)
    P = params(model.att)

    def positions_for(mask_):
        def pos(n, i):
            S = 9 if mask_ is None else int(mask_[n].sum())
            return S * torch.sigmoid(P["w_p.weight"][0] @ torch.tanh(P["W_p.weight"] @ D(q)[n, i]))
        return pos

    rows = pairwise(score_ref("general", P), D(q), D(k))
    for key_mask in (None, mask):
        c, a, _ = model.att(q, k, v, key_mask)
        pos = positions_for(key_mask)
        ref_a, ref_c = local_attend(rows, D(v), key_mask, pos, 4, 2, gaussian, 1.0)
        close(a[:, 0], ref_a)
        close(c, ref_c)
        for n in range(2):
            for i in range(4):
                p = float(pos(n, i))
                for l in range(9):
                    if abs(l - p) > 2:
                        assert a[n, 0, i, l] == 0
    positions = {round(float(positions_for(mask)(n, i)), 3) for n in range(2) for i in range(4)}
    assert len(positions) > 1, "the predicted positions depend on the query"
    gradcheck_module(model.att, q[:, :2], k, v, mask)


def test_local_monotonic_gradcheck(gen):
    _, model = make(gen, qkv_spec("general", align="local(D = 1, position = monotonic, gaussian = true)"))
    q, k, v, mask = qkv_inputs(Lq=3, Lk=5, pad={1: 1})
    gradcheck_module(model.att, q, k, v, mask)


# reinforced


def reinforced_ref(model, q, k, v, mask, pick):
    """Soft alignment (eq. 25) over the picked subset; log pi(subset) over the unpadded keys."""
    P = params(model.att)
    pi = torch.sigmoid(D(k) @ P["policy.weight"][0] + P["policy.bias"][0])  # (N, Lk)
    keep = keep_of(pick & mask, q.shape[0], q.shape[1], k.shape[1])
    a, c = attend_ref(pairwise(score_ref("general", P), D(q), D(k)), D(v), keep)
    logp = torch.where(pick, pi.log(), (1 - pi).log())
    logp = (logp * mask).sum(-1)
    return a, c, logp, pi, keep


def test_reinforced_eval_picks_pi_over_half(gen):
    _, model = make(gen, qkv_spec("general", align="reinforced"), seed=5)
    model.eval()
    q, k, v, mask = qkv_inputs(Lk=8, pad={1: 2})
    # pi_l = sigmoid(k_l[0]) with chosen k_l[0]: some keys just below and just above 1/2
    with torch.no_grad():
        model.att.policy.weight.zero_()
        model.att.policy.weight[0, 0] = 1.0
        model.att.policy.bias.zero_()
    k[:, :, 0] = torch.tensor([[-2.0, -0.2, 0.1, 2.0, -0.05, 0.3, -1.0, 1.0],
                               [0.2, -0.1, 1.5, -2.0, 0.05, -0.3, 3.0, 3.0]])
    P = params(model.att)
    pi = torch.sigmoid(D(k) @ P["policy.weight"][0] + P["policy.bias"][0])
    pick = pi > 0.5
    assert (pick & mask).any(1).all() and not (pick | ~mask).all(), "the test needs a proper subset"
    c, a, ex = model.att(q, k, v, mask)
    ref_a, ref_c, logp, _, keep = reinforced_ref(model, q, k, v, mask, pick)
    close(a[:, 0], ref_a)
    close(c, ref_c)
    close(ex["log_prob"], logp)
    check_soft_invariants(a[:, 0], keep)
    out = model(x=k, y=q, z=v, x_mask=mask, return_attention=True)
    close(out.log_probs["att"], logp)
    gradcheck_module(model.att, q[:, :2], k, v, mask, pick=lambda r: (r[0], r[1], r[2]["log_prob"]))


def test_reinforced_training_samples_a_subset(gen):
    _, model = make(gen, qkv_spec("general", align="reinforced"), seed=5)
    model.train()
    q, k, v, mask = qkv_inputs(N=1, Lk=6, pad={0: 1})
    n = 3000
    Q, K, V, M = q.expand(n, -1, -1), k.expand(n, -1, -1), v.expand(n, -1, -1), mask.expand(n, -1)
    torch.manual_seed(7)
    c, a, ex = model.att(Q, K, V, M)
    picked = a[:, 0, 0] > 0  # (n, Lk): the softmax is > 0 on every picked key
    assert not picked[:, ~mask[0]].any(), "a padded key is never picked"
    P = params(model.att)
    pi = torch.sigmoid(D(k[0]) @ P["policy.weight"][0] + P["policy.bias"][0])  # (Lk,)
    freq = picked.to(DT).mean(0)
    assert (freq[mask[0]] - pi[mask[0]]).abs().max() < 0.04, (freq, pi)
    logp = torch.where(picked, pi.log(), (1 - pi).log())[:, mask[0]].sum(-1)
    # log pi(subset) of the subset actually sampled (also when it is empty)
    close(ex["log_prob"], logp)
    some = picked.any(-1)
    sums = a[:, 0].sum(-1)  # (n, Lq)
    torch.testing.assert_close(D(sums[some]), torch.ones_like(D(sums[some])), atol=1e-6, rtol=0)
    assert (sums[~some] == 0).all()


# sparse alignments (seed 000)


@pytest.mark.parametrize("align,ref", [("sparsemax", sparsemax_ref), ("entmax", entmax15_ref)],
                         ids=["sparsemax", "entmax15"])
def test_sparse_alignment(gen, align, ref):
    _, model = make(gen, qkv_spec("multiplicative", dq=8, align=align))
    q, k, v, mask = qkv_inputs(dq=8, Lq=4, Lk=7, pad={1: 2}, qscale=2.0)
    for key_mask in (None, mask):
        c, a, _ = model.att(q, k, v, key_mask)
        keep = keep_of(key_mask, 2, 4, 7)
        ref_a, ref_c = attend_ref(pairwise(score_ref("multiplicative", {}), D(q), D(k)), D(v), keep, ref)
        close(a[:, 0], ref_a)
        close(c, ref_c)
        check_soft_invariants(a[:, 0], keep)
        # exact zeros: the same support as the reference, and some kept keys left out
        assert torch.equal(a[:, 0] == 0, ref_a == 0)
        assert (a[:, 0][keep] == 0).any(), "a sparse alignment gives some kept keys exactly zero"
    gradcheck_module(model.att, q[:, :2], k, v, mask)


def test_sparsemax_known_values(gen):
    """sparsemax([1, 0.5, -1]) = [0.75, 0.25, 0] (tau = 0.25)."""
    _, model = make(gen, """
    model m {
        input x: sequence[L, 1]
        input y: sequence[T, 1]
        attention att { query = y  features = x  score = multiplicative  align = sparsemax }
        output out = identity(att)
    }
    """)
    k = torch.tensor([[[1.0], [0.5], [-1.0]]])
    c, a, _ = model.att(torch.ones(1, 1, 1), k, k, None)
    close(a[0, 0, 0], torch.tensor([0.75, 0.25, 0.0], dtype=DT))
    assert a[0, 0, 0, 2] == 0


# ---- multi-dimensional attention (eq. 30-32) ---------------------------------------------------------


def multi_ref(e_rows, v, keep):
    """e_l in R^{d_v} per key; softmax over l for each feature f (eq. 32); c = sum_l a_l o v_l."""
    N, Lq, Lk = keep.shape
    dv = v.shape[-1]
    a = torch.zeros(N, Lq, Lk, dv, dtype=DT)
    c = torch.zeros(N, Lq, dv, dtype=DT)
    for n in range(N):
        for i in range(Lq):
            E = e_rows(n, i)  # (Lk, d_v)
            for f in range(dv):
                a[n, i, :, f] = softmax_ref(E[:, f], keep[n, i])
            for l in range(Lk):
                c[n, i] += a[n, i, l] * v[n, l]
    return a, c


def test_multi_dimensional_additive(gen):
    _, model = make(gen, qkv_spec("additive(d_w = 7, act = tanh)", extra="dimensionality = multi"))
    q, k, v, mask = qkv_inputs(pad={1: 3})
    P = params(model.att)  # W_d = w: (H, d_w, d_v)

    def rows(n, i):  # eq. 31: e_l = W_d^T act(W1 q + W2 k_l + b)
        return torch.stack([P["w"][0].T @ torch.tanh(D(q)[n, i] @ P["W1"][0] + D(k)[n, l] @ P["W2"][0] + P["b"][0])
                            for l in range(6)])

    for key_mask in (None, mask):
        c, a, _ = model.att(q, k, v, key_mask)
        assert a.shape == (2, 1, 3, 6, 5)
        keep = keep_of(key_mask, 2, 3, 6)
        ref_a, ref_c = multi_ref(rows, D(v), keep)
        close(a[:, 0], ref_a)
        close(c, ref_c)
        check_soft_invariants(a[:, 0], keep)  # sums to 1 over the keys for every feature
    assert not torch.allclose(a[:, 0, :, :, 0], a[:, 0, :, :, 1]), "one weight per feature"
    gradcheck_module(model.att, q[:, :2], k[:, :4], v[:, :4], mask[:, :4])


def test_multi_dimensional_without_query_and_directional_masks(gen):
    """DiSAN: forward (j < i) multi-dimensional token2token attention, then a query-less
    multi-dimensional source2token attention e_l = W_d^T act(W k_l + b) (eq. 31, 33)."""
    _, model = make(gen, """
    model m {
        input x: sequence[L, 6]
        attention fw {
            query          = x
            features       = x
            score          = additive(d_w = 5, act = tanh)
            dimensionality = multi
            mask           = forward
        }
        attention s2t {
            features       = x
            score          = additive(d_w = 5, act = elu)
            dimensionality = multi
        }
        output a = identity(fw)
        output b = identity(s2t)
    }
    """)
    x = randn(2, 5, 6, seed=11)
    mask = tail_mask(2, 5, {1: 2})
    out = model(x=x, x_mask=mask, return_attention=True)
    Pf, Ps = params(model.fw), params(model.s2t)
    X = D(x)
    keep = keep_of(mask, 2, 5, 5, lambda i, j: j < i)
    ref_a, ref_c = multi_ref(lambda n, i: torch.stack([
        Pf["w"][0].T @ torch.tanh(X[n, i] @ Pf["W1"][0] + X[n, l] @ Pf["W2"][0] + Pf["b"][0]) for l in range(5)]),
        X, keep)
    close(out.attention["fw"][:, 0], ref_a)
    close(out.output["a"], ref_c)
    check_soft_invariants(out.attention["fw"][:, 0], keep)
    assert (out.attention["fw"][:, 0, 0] == 0).all(), "the first token has nothing before it"
    keep2 = keep_of(mask, 2, 1, 5)
    ref_a2, ref_c2 = multi_ref(lambda n, i: torch.stack([
        torch.nn.functional.elu(X[n, l] @ Ps["W.weight"].T + Ps["W.bias"]) @ Ps["w"][0] for l in range(5)]),
        X, keep2)
    close(out.attention["s2t"][:, 0], ref_a2)
    close(out.output["b"], ref_c2[:, 0])
    check_soft_invariants(out.attention["s2t"][:, 0], keep2)
    gradcheck_model(model, {"x": x, "x_mask": mask}, lambda o: (o.output["a"], o.output["b"]))


# ---- multi-head attention (eq. 38-40) -------------------------------------------------------------

HEAD_SCORES = [
    ("scaled_multiplicative", "scaled_multiplicative", "none", 8),
    ("multiplicative", "multiplicative", "none", 8),
    ("additive(d_w = 6, act = tanh)", "additive", "tanh", 6),
    ("general", "general", "none", 6),
    ("biased_general", "biased_general", "none", 6),
    ("activated_general(act = tanh)", "activated_general", "tanh", 6),
    ("similarity(kind = cosine)", "cosine", "none", 8),
    ("similarity(kind = l2)", "l2", "none", 8),
]


@pytest.mark.parametrize("score,kind,act,dq", HEAD_SCORES, ids=[s[1] for s in HEAD_SCORES])
def test_multi_head(gen, score, kind, act, dq):
    """q, k, v split into H slices (eq. 38), a score per head with its own parameters (eq. 39),
    c = W_O concat(c^(1), ..., c^(H)) (eq. 40)."""
    H = 2
    _, model = make(gen, qkv_spec(score, dq=dq, dv=4, extra=f"heads = {H}"))
    q, k, v, mask = qkv_inputs(dq=dq, dv=4)
    c, a, _ = model.att(q, k, v, mask)
    assert a.shape == (2, H, 3, 6)
    P = params(model.att)
    keep = keep_of(mask, 2, 3, 6)
    ctx = []
    for h in range(H):
        qs = D(q)[..., h * dq // H:(h + 1) * dq // H]
        ks = D(k)[..., h * 8 // H:(h + 1) * 8 // H]
        vs = D(v)[..., h * 4 // H:(h + 1) * 4 // H]
        ref_a, ref_c = attend_ref(pairwise(score_ref(kind, P, h, act), qs, ks), vs, keep)
        close(a[:, h], ref_a)
        check_soft_invariants(a[:, h], keep)
        ctx.append(ref_c)
    ref = torch.cat(ctx, -1) @ P["out.weight"].T + P["out.bias"]
    close(c, ref)
    if kind in ("additive", "general"):
        gradcheck_module(model.att, q[:, :2], k[:, :4], v[:, :4], mask[:, :4])


# ---- query-less multi-row attention with Lin et al.'s penalty (eq. 33) ---------------------------


def test_query_less_multi_row_attention_and_penalty(gen):
    """A = softmax(w act(W K)) with r rows (one w row per head, W shared), M = A V,
    c = W_O vec(M); Output.penalty = coefficient * ||A A^T - I||_F^2, averaged over the batch."""
    _, model = make(gen, """
    model m {
        input x: sequence[L, 8]
        attention M {
            features = x
            score    = additive(d_w = 7, act = tanh, bias = false)
            heads    = 4
            penalty  = 0.5
        }
        output out = identity(M)
    }
    """)
    x = randn(2, 6, 8, seed=21)
    mask = tail_mask(2, 6, {1: 2})
    out = model(x=x, x_mask=mask, return_attention=True)
    P, X = params(model.M), D(x)
    H = 4
    assert out.attention["M"].shape == (2, H, 1, 6)
    A = torch.zeros(2, H, 6, dtype=DT)
    for n in range(2):
        hidden = torch.tanh(X[n] @ P["W.weight"].T)  # (L, d_w): W k_l, no bias
        for h in range(H):
            A[n, h] = softmax_ref(hidden @ P["w"][h], mask[n])
    close(out.attention["M"][:, :, 0], A)
    Mat = A @ X  # (N, r, d): M = A H
    ref = Mat.flatten(1) @ P["out.weight"].T + P["out.bias"]
    close(out.output, ref)
    pen = torch.stack([((A[n] @ A[n].T - torch.eye(H, dtype=DT)) ** 2).sum() for n in range(2)])
    close(torch.as_tensor(out.penalty), 0.5 * pen.mean())
    # the penalty is 0 exactly when the rows are orthonormal: check it is not trivially 0 here
    assert float(out.penalty.detach()) > 1e-3
    gradcheck_model(model, {"x": x, "x_mask": mask}, lambda o: (o.output, o.penalty))


# ---- self-attentive queries (eq. 34, 35, 37) --------------------------------------------------------


def test_learned_query(gen):
    """eq. 34: a trainable query vector q, e_l = k_l^T W q."""
    _, model = make(gen, """
    model m {
        input x: sequence[L, 8]
        attention att { query = learned(6)  features = x  score = general }
        output out = identity(att)
    }
    """)
    x = randn(2, 5, 8, seed=31)
    mask = tail_mask(2, 5, {1: 1})
    out = model(x=x, x_mask=mask, return_attention=True)
    learned = [p for p in model.parameters(recurse=False)] or \
        [p for n, p in model.named_parameters() if not n.startswith("att.")]
    assert len(learned) == 1 and learned[0].shape == (6,)
    qv = D(learned[0])
    P, X = params(model.att), D(x)
    keep = keep_of(mask, 2, 1, 5)
    ref_a, ref_c = attend_ref(lambda n, i: torch.stack([X[n, l] @ P["W"][0] @ qv for l in range(5)]), X, keep)
    close(out.attention["att"][:, 0], ref_a)
    close(out.output, ref_c[:, 0])
    gradcheck_model(model, {"x": x, "x_mask": mask}, lambda o: o.output)


def test_self_attention_with_projected_query_and_residual_norm(gen):
    """Q = W_Q F (eq. 35), keys = values = F, then f_new = Normalize(f + c) (eq. 37)."""
    _, model = make(gen, """
    model m {
        input x: sequence[L, 8]
        feature f = identity(x)
        attention sa { query = project(f)  features = f  score = scaled_multiplicative }
        update f = norm(f + sa)
        output out = identity(f)
    }
    """)
    x = randn(2, 5, 8, seed=41)
    mask = tail_mask(2, 5, {1: 2})
    out = model(x=x, x_mask=mask, return_attention=True)
    lins = [m for m in model.modules() if isinstance(m, nn.Linear)]
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert len(lins) == 1 and len(norms) == 1
    X = D(x)
    Q = X @ D(lins[0].weight).T + (0 if lins[0].bias is None else D(lins[0].bias))
    keep = keep_of(mask, 2, 5, 5)
    ref_a, C = attend_ref(pairwise(score_ref("scaled_multiplicative", {}), Q, X), X, keep)
    close(out.attention["sa"][:, 0], ref_a)
    y = X + C
    mu = y.mean(-1, keepdim=True)
    var = ((y - mu) ** 2).mean(-1, keepdim=True)
    ref = (y - mu) / torch.sqrt(var + norms[0].eps) * D(norms[0].weight) + D(norms[0].bias)
    close(out.output, ref)
    gradcheck_model(model, {"x": x, "x_mask": mask}, lambda o: o.output)


# ---- masks ------------------------------------------------------------------------------------------

MASKS = [("causal", lambda i, j: j <= i), ("forward", lambda i, j: j < i), ("backward", lambda i, j: j > i)]


@pytest.mark.parametrize("align", ["global", "sparsemax", "entmax"])
@pytest.mark.parametrize("mask_name,rule", MASKS, ids=[m[0] for m in MASKS])
def test_structural_and_padding_masks(gen, mask_name, rule, align):
    """causal keeps j <= i, forward j < i, backward j > i (DiSAN); padded keys (`x_mask`,
    True = keep) are dropped too; masked weights are exactly 0; a query with no key left
    gets all zeros."""
    ref_align = {"global": softmax_ref, "sparsemax": sparsemax_ref, "entmax": entmax15_ref}[align]
    _, model = make(gen, f"""
    model m {{
        input x: sequence[L, 8]
        attention att {{ query = x  features = x  score = scaled_multiplicative  mask = {mask_name}  align = {align} }}
        output out = identity(att)
    }}
    """)
    x = randn(2, 6, 8, seed=51)
    mask = tail_mask(2, 6, {1: 2})
    keep = keep_of(mask, 2, 6, 6, rule)
    for m in (None, mask):
        out = model(x=x, x_mask=m, return_attention=True)
        kp = keep_of(m, 2, 6, 6, rule)
        ref_a, ref_c = attend_ref(pairwise(score_ref("scaled_multiplicative", {}), D(x), D(x)), D(x), kp, ref_align)
        a = out.attention["att"][:, 0]
        close(a, ref_a)
        close(out.output, ref_c)
        check_soft_invariants(a, kp)
    assert not torch.isnan(a).any()
    assert (a[~keep] == 0).all()
    # differentiable, also through a query row with no key left (finite gradients)
    gradcheck_model(model, {"x": x[:, :4], "x_mask": mask[:, :4]}, lambda o: o.output)


def test_padding_mask_makes_padded_values_irrelevant(gen):
    _, model = make(gen, qkv_spec("additive(d_w = 7)"))
    q, k, v, mask = qkv_inputs(pad={0: 1, 1: 3})
    out1 = model(x=k, y=q, z=v, x_mask=mask, return_attention=True)
    k2, v2 = k.clone(), v.clone()
    k2[~mask] = 100.0
    v2[~mask] = -100.0
    out2 = model(x=k2, y=q, z=v2, x_mask=mask, return_attention=True)
    assert torch.equal(out1.attention["att"], out2.attention["att"])
    close(out2.output, D(out1.output))
    assert (out1.attention["att"][:, 0][~keep_of(mask, 2, 3, 6)] == 0).all()


# ---- capsules (eq. 43-45) ------------------------------------------------------------------------------


CAPSULE_SPEC = """
model m {
    input x: sequence[L, 8]
    attention caps { query = learned(8)  features = x  score = multiplicative  capsules = 3 }
    output out = identity(caps)
}
"""


def test_capsules(gen):
    """One learned query per class (eq. 43): c_c = sum_l softmax(q_c^T k)_l v_l;
    p_c = sigmoid(w_c^T c_c + b_c) (eq. 44); r_c = p_c c_c (eq. 45); f = mean feature vector."""
    _, model = make(gen, CAPSULE_SPEC)
    x = randn(2, 6, 8, seed=61)
    mask = tail_mask(2, 6, {1: 2})
    out = model(x=x, x_mask=mask, return_attention=True)
    P, X = params(model.caps), D(x)
    Qc = P["queries"]  # (C, d_q)
    assert Qc.shape == (3, 8)
    keep = keep_of(mask, 2, 3, 6)
    ref_a, ref_c = attend_ref(lambda n, i: X[n] @ Qc[i], X, keep)
    close(out.attention["caps"][:, 0], ref_a)
    close(out.output, ref_c)
    p = torch.sigmoid((ref_c * P["prob"]).sum(-1) + P["prob_bias"])  # (N, C)
    p_got, r_got = out.capsules["caps"]
    close(p_got, p)
    close(r_got, p.unsqueeze(-1) * ref_c)
    f = torch.stack([X[n][mask[n]].mean(0) for n in range(2)])
    close(out.features["caps"], f)
    gradcheck_model(model, {"x": x, "x_mask": mask},
                    lambda o: (o.output, o.capsules["caps"][0], o.capsules["caps"][1]))


def test_capsule_loss_is_differentiable(gen):
    _, model = make(gen, CAPSULE_SPEC)
    x = randn(2, 6, 8, seed=62)
    mask = tail_mask(2, 6, {1: 2})
    target = torch.tensor([0, 2])
    out = model(x=x, x_mask=mask)
    loss = model.capsule_loss(out, target)
    assert loss.dim() == 0 and torch.isfinite(loss)
    # Wang et al.'s hinge loss as docs/codegen.md states it: the true class's p_c -> 1 and
    # r_c . f -> 1, the others -> 0
    p, r = (D(t) for t in out.capsules["caps"])
    f = torch.stack([D(x)[n][mask[n]].mean(0) for n in range(2)])
    y = torch.nn.functional.one_hot(target, 3).to(DT)
    sim = (r * f.unsqueeze(1)).sum(-1)
    ref = (y * torch.relu(1 - p) + (1 - y) * torch.relu(p)).sum(-1).mean() + \
        (y * torch.relu(1 - sim) + (1 - y) * torch.relu(sim)).sum(-1).mean()
    close(loss, ref)
    loss.backward()
    for name in ("queries", "prob", "prob_bias"):
        g = getattr(model.caps, name).grad
        assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0, name
    m64 = copy.deepcopy(model).double()
    xs = D(x).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: m64.capsule_loss(m64(x=t, x_mask=mask), target), (xs,))


# ---- parallel co-attention through affinity matrices (eq. 12-16) ---------------------------------


def test_bilinear_affinity_with_aggregate_additive_scores(gen):
    """eq. 12: C = tanh(Y W_A X^T); eq. 14-15: e_l = w^T tanh(W_q sum_t C_tl y_t + W_k x_l + b)
    for the keys x, and symmetrically for the keys y through C^T; padded query positions are
    left out of the sums; one context per input."""
    _, model = make(gen, """
    model m {
        input x: sequence[L, 8]
        input y: sequence[T, 6]
        affinity C = affinity(y, x, form = bilinear, act = tanh)
        attention ax { query = y  keys = x  affinity = C  score = additive(d_w = 7, act = tanh) }
        attention ay { query = x  keys = y  affinity = C  score = additive(d_w = 7, act = tanh) }
        output ox = identity(ax)
        output oy = identity(ay)
    }
    """)
    x, y = randn(2, 5, 8, seed=71), randn(2, 4, 6, seed=72)
    xm, ym = tail_mask(2, 5, {1: 2}), tail_mask(2, 4, {1: 1})
    WA = [p for p in model.parameters(recurse=False)]
    assert len(WA) == 1 and WA[0].shape == (6, 8)
    WA = D(WA[0])
    for xmask, ymask in ((None, None), (xm, ym)):
        out = model(x=x, y=y, x_mask=xmask, y_mask=ymask, return_attention=True)
        X, Y = D(x), D(y)
        C = torch.tanh(Y @ WA @ X.transpose(1, 2))  # (N, T, L)
        xk = torch.ones(2, 5, dtype=torch.bool) if xmask is None else xmask
        yk = torch.ones(2, 4, dtype=torch.bool) if ymask is None else ymask

        def agg_rows(P, C_, Qs, qkeep, Ks):
            # e_j = w^T tanh(W_q sum_i C_ij q_i + W_k k_j + b), padded query positions i left out
            def rows(n, _i):
                e = []
                for j in range(Ks.shape[1]):
                    s = sum(C_[n, i, j] * Qs[n, i] for i in range(Qs.shape[1]) if qkeep[n, i])
                    h = torch.tanh(P["W_q.weight"] @ s + P["W_k.weight"] @ Ks[n, j] + P["W_k.bias"])
                    e.append(P["w.weight"][0] @ h)
                return torch.stack(e)
            return rows

        Px, Py = params(model.ax), params(model.ay)
        ax_a, ax_c = attend_ref(agg_rows(Px, C, Y, yk, X), X, keep_of(xk, 2, 1, 5))
        ay_a, ay_c = attend_ref(agg_rows(Py, C.transpose(1, 2), X, xk, Y), Y, keep_of(yk, 2, 1, 4))
        close(out.attention["ax"][:, 0], ax_a)
        close(out.attention["ay"][:, 0], ay_a)
        close(out.output["ox"], ax_c[:, 0])
        close(out.output["oy"], ay_c[:, 0])
    gradcheck_model(model, {"x": x, "y": y, "x_mask": xm, "y_mask": ym},
                    lambda o: (o.output["ox"], o.output["oy"]))


def test_trilinear_affinity_rows_and_max_pool(gen):
    """eq. 13: A_ij = w_A^T [x_i; y_j; x_i o y_j]; `score = affinity` attends with A's rows
    (a context per query position); `max_pool` (eq. 16): e_i = max_j A_ij over the
    unpadded j, one context per input."""
    _, model = make(gen, """
    model m {
        input x: sequence[L, 8]
        input y: sequence[T, 8]
        affinity C = affinity(x, y, form = trilinear)
        attention rows { query = x  keys = y  affinity = C  score = affinity }
        attention pooled { query = y  keys = x  affinity = C  score = max_pool }
        output o1 = identity(rows)
        output o2 = identity(pooled)
    }
    """)
    x, y = randn(2, 5, 8, seed=81), randn(2, 4, 8, seed=82)
    xm, ym = tail_mask(2, 5, {1: 2}), tail_mask(2, 4, {1: 1})
    wA = [p for p in model.parameters(recurse=False)]
    assert len(wA) == 1 and wA[0].numel() == 3 * 8
    w = D(wA[0]).reshape(-1)  # [w1; w2; w3]
    X, Y = D(x), D(y)
    A = torch.zeros(2, 5, 4, dtype=DT)
    for n in range(2):
        for i in range(5):
            for j in range(4):
                A[n, i, j] = w @ torch.cat([X[n, i], Y[n, j], X[n, i] * Y[n, j]])
    for xmask, ymask in ((None, None), (xm, ym)):
        out = model(x=x, y=y, x_mask=xmask, y_mask=ymask, return_attention=True)
        xk = torch.ones(2, 5, dtype=torch.bool) if xmask is None else xmask
        yk = torch.ones(2, 4, dtype=torch.bool) if ymask is None else ymask
        r_a, r_c = attend_ref(lambda n, i: A[n, i], Y, keep_of(yk, 2, 5, 4))
        close(out.attention["rows"][:, 0], r_a)
        close(out.output["o1"], r_c)
        pool_rows = lambda n, _i: torch.stack([A[n, i, yk[n]].max() for i in range(5)])  # noqa: E731
        p_a, p_c = attend_ref(pool_rows, X, keep_of(xk, 2, 1, 5))
        close(out.attention["pooled"][:, 0], p_a)
        close(out.output["o2"], p_c[:, 0])
    gradcheck_model(model, {"x": x, "y": y, "x_mask": xm, "y_mask": ym},
                    lambda o: (o.output["o1"], o.output["o2"]))


# ---- multi-hop (eq. 41-42) --------------------------------------------------------------------------

HOP_SPEC = """
model m {{
    input x: sequence[L, 8]
    input u0: vector[8]
    query u = identity(u0)
    repeat hop 3{shared} {{
        attention o {{ query = u  features = x  score = additive(d_w = 7, act = tanh) }}
        update u = linear(u, 8) + o
    }}
    output out = identity(u)
}}
"""
ATT_PARAMS = 8 * 7 + 8 * 7 + 7 + 7  # W1, W2, b, w
LIN_PARAMS = 8 * 8 + 8


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per-hop"])
def test_multi_hop(gen, shared):
    """u^(s+1) = H u^(s) + o^(s), o^(s) = attention(u^(s), x); `shared` reuses one set of
    weights in every hop, otherwise each hop has its own."""
    _, model = make(gen, HOP_SPEC.format(shared=" shared" if shared else ""))
    atts = [m for m in model.modules() if hasattr(m, "W1") and hasattr(m, "W2")]
    lins = [m for m in model.modules() if isinstance(m, nn.Linear)]
    hops = 1 if shared else 3
    assert len(atts) == hops and len(lins) == hops
    assert sum(p.numel() for p in model.parameters()) == hops * (ATT_PARAMS + LIN_PARAMS)
    if not shared:
        ptrs = {p.data_ptr() for m in atts for p in m.parameters()}
        assert len(ptrs) == 3 * 4, "each hop has its own weights"
    x, u0 = randn(2, 6, 8, seed=91), randn(2, 8, seed=92)
    mask = tail_mask(2, 6, {1: 2})
    out = model(x=x, u0=u0, x_mask=mask, return_attention=True)
    X, u = D(x), D(u0)
    for s in range(3):
        P, L = params(atts[0 if shared else s]), params(lins[0 if shared else s])
        keep = keep_of(mask, 2, 1, 6)
        a, c = attend_ref(lambda n, i: torch.stack([score_ref("additive", P)(u[n], X[n, l]) for l in range(6)]),
                          X, keep)
        close(out.attention[f"hop[{s + 1}].o"][:, 0], a)
        u = u @ L["weight"].T + L["bias"] + c[:, 0]
    close(out.output, u)
    gradcheck_model(model, {"x": x[:, :4], "u0": u0, "x_mask": mask[:, :4]}, lambda o: o.output)


def test_multi_hop_shared_gradients_accumulate_in_one_module(gen):
    _, model = make(gen, HOP_SPEC.format(shared=" shared"))
    x, u0 = randn(2, 6, 8, seed=93), randn(2, 8, seed=94)
    model(x=x, u0=u0).output.sum().backward()
    att = next(m for m in model.modules() if hasattr(m, "W1"))
    # one hop alone gives a different gradient than three hops through the same weights
    g3 = att.W1.grad.clone()
    _, one = make(gen, HOP_SPEC.format(shared=" shared").replace("repeat hop 3", "repeat hop 1"))
    one.load_state_dict(model.state_dict())
    one(x=x, u0=u0).output.sum().backward()
    att1 = next(m for m in one.modules() if hasattr(m, "W1"))
    assert not torch.allclose(g3, att1.W1.grad)


# ---- a recurrent decoder with input feeding (feed = ATT) -----------------------------------------

FEED_SPEC = """
model m {{
    input x: sequence[L, 6]
    input tgt: tokens[T] (vocab = 20, autoregressive)
    query s = gru(embed(tgt, 8), 8, feed = att)
    attention att {{ query = s  features = x  score = general  align = {align} }}
    output out = concat(s, att)
}}
"""


def gru_cell_ref(cell: nn.GRUCell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """r = s(W_ir x + b_ir + W_hr h + b_hr), z = s(...), n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
    h' = (1 - z) n + z h."""
    Wi, Wh, bi, bh = D(cell.weight_ih), D(cell.weight_hh), D(cell.bias_ih), D(cell.bias_hh)
    gi, gh = x @ Wi.T + bi, h @ Wh.T + bh
    H = h.shape[-1]
    r = torch.sigmoid(gi[..., :H] + gh[..., :H])
    z = torch.sigmoid(gi[..., H:2 * H] + gh[..., H:2 * H])
    n = torch.tanh(gi[..., 2 * H:] + r * gh[..., 2 * H:])
    return (1 - z) * n + z * h


def feed_reference(model, x, tgt, mask, align_rows_keep):
    emb = next(m for m in model.modules() if isinstance(m, nn.Embedding))
    cells = [m for m in model.modules() if isinstance(m, nn.GRUCell)]
    assert len(cells) == 1
    cell = cells[0]
    P, X = params(model.att), D(x)
    B, T = tgt.shape
    h = torch.zeros(B, 8, dtype=DT)
    c = torch.zeros(B, 6, dtype=DT)  # no context before the first step
    hs, cs, As = [], [], []
    for t in range(T):
        inp = torch.cat([D(emb.weight)[tgt[:, t]], c], -1)  # input feeding: [x_t; c_(t-1)]
        h = gru_cell_ref(cell, inp, h)
        a = torch.zeros(B, X.shape[1], dtype=DT)
        c = torch.zeros(B, 6, dtype=DT)
        for n in range(B):
            e = torch.stack([X[n, l] @ P["W"][0] @ h[n] for l in range(X.shape[1])])
            a[n] = align_rows_keep(e, mask[n], t)
            c[n] = a[n] @ X[n]
        hs.append(h)
        cs.append(c)
        As.append(a)
    return torch.stack(hs, 1), torch.stack(cs, 1), torch.stack(As, 1)


def test_decoder_with_input_feeding(gen):
    """s_t = GRU([y_t; c_(t-1)], s_(t-1)) (input feeding), c_t = attention(s_t, x)."""
    _, model = make(gen, FEED_SPEC.format(align="global"))
    x = randn(2, 5, 6, seed=101)
    tgt = torch.tensor([[1, 5, 7, 2], [3, 3, 9, 0]])
    mask = tail_mask(2, 5, {1: 2})
    out = model(x=x, tgt=tgt, x_mask=mask, return_attention=True)
    hs, cs, As = feed_reference(model, x, tgt, mask, lambda e, keep, t: softmax_ref(e, keep))
    close(out.output, torch.cat([hs, cs], -1))
    close(out.attention["att"][:, 0], As)
    gradcheck_model(model, {"x": x, "tgt": tgt, "x_mask": mask}, lambda o: o.output)


def test_decoder_with_hard_alignment(gen):
    """Xu et al.'s hard attention in the decoder (eq. 26): in eval() every step takes the
    most likely key, its value is the context fed to the next step, and Output.log_probs
    holds log p(m) per step, (B, H, T)."""
    _, model = make(gen, FEED_SPEC.format(align="hard"))
    model.eval()
    x = randn(2, 5, 6, seed=103)
    tgt = torch.tensor([[1, 5, 7, 2], [3, 3, 9, 0]])
    mask = tail_mask(2, 5, {1: 2})
    out = model(x=x, tgt=tgt, x_mask=mask, return_attention=True)
    logp = []

    def hard(e, keep, t):
        p = softmax_ref(e, keep)
        m = int(p.argmax())
        logp.append((t, float(p[m].log())))
        return torch.nn.functional.one_hot(torch.tensor(m), len(e)).to(DT)

    hs, cs, As = feed_reference(model, x, tgt, mask, hard)
    close(out.attention["att"][:, 0], As)
    close(out.output, torch.cat([hs, cs], -1))
    ref_logp = torch.tensor([lp for _, lp in logp], dtype=DT).view(4, 2).T  # steps are the outer loop
    assert out.log_probs["att"].shape == (2, 1, 4)
    close(out.log_probs["att"][:, 0], ref_logp)


def test_decoder_with_local_monotonic_alignment(gen):
    """Local-m in a step-by-step decoder: at step t the window is [t - D, t + D] (eq. 27)."""
    _, model = make(gen, FEED_SPEC.format(align="local(D = 1, position = monotonic, gaussian = false)"))
    x = randn(2, 7, 6, seed=102)
    tgt = torch.tensor([[1, 5, 7, 2, 4], [3, 3, 9, 0, 8]])
    mask = tail_mask(2, 7, {1: 1})
    out = model(x=x, tgt=tgt, x_mask=mask, return_attention=True)

    def local(e, keep, t):
        win = torch.tensor([abs(l - t) <= 1 for l in range(len(e))])
        return softmax_ref(e, keep & win)

    hs, cs, As = feed_reference(model, x, tgt, mask, local)
    a = out.attention["att"][:, 0]  # (B, T, L)
    for t in range(5):
        for l in range(7):
            if abs(l - t) > 1:
                assert (a[:, t, l] == 0).all(), f"step {t} attends to key {l}, outside [t - 1, t + 1]"
    close(a, As)
    close(out.output, torch.cat([hs, cs], -1))


# ---- hierarchical attention over grouped tokens (Fig. 8) ----------------------------------------


def test_hierarchical_attention_over_groups(gen):
    """One word-level attention per sentence (the keys' leading axis S is a group), whose
    contexts are the features of a sentence-level attention; a sentence with no real word
    is masked at the upper level."""
    _, model = make(gen, """
    model m {
        input doc: tokens[S, W] (vocab = 20)
        feature e = embed(doc, 8)
        attention word { query = learned(5)  features = e  score = additive(d_w = 7, act = tanh) }
        attention sent { query = learned(6)  features = word  score = general }
        output out = identity(sent)
    }
    """)
    g = torch.Generator().manual_seed(111)
    B, S, W = 2, 3, 4
    doc = torch.randint(0, 20, (B, S, W), generator=g)
    mask = torch.ones(B, S, W, dtype=torch.bool)
    mask[1, 0, 3:] = False
    mask[1, 1, 2:] = False
    mask[1, 2, :] = False  # an empty sentence
    out = model(doc=doc, doc_mask=mask, return_attention=True)
    emb = next(m for m in model.modules() if isinstance(m, nn.Embedding))
    E = D(emb.weight)[doc]  # (B, S, W, 8)
    learned = {tuple(p.shape): D(p) for p in model.parameters(recurse=False)}
    qw, qs = learned[(5,)], learned[(6,)]
    Pw, Ps = params(model.word), params(model.sent)
    word_a = torch.zeros(B, S, W, dtype=DT)
    word_c = torch.zeros(B, S, 8, dtype=DT)
    for b in range(B):
        for s in range(S):
            e = torch.stack([score_ref("additive", Pw)(qw, E[b, s, w]) for w in range(W)])
            word_a[b, s] = softmax_ref(e, mask[b, s])
            word_c[b, s] = word_a[b, s] @ E[b, s]
    assert out.attention["word"].shape == (B, S, 1, 1, W)
    close(out.attention["word"][:, :, 0, 0], word_a)
    assert (out.attention["word"][1, 2] == 0).all(), "an empty sentence has no word to attend to"
    sent_keep = mask.any(-1)
    sent_a = torch.stack([softmax_ref(torch.stack([word_c[b, s] @ Ps["W"][0] @ qs for s in range(S)]),
                                      sent_keep[b]) for b in range(B)])
    assert out.attention["sent"].shape == (B, 1, 1, S)
    close(out.attention["sent"][:, 0, 0], sent_a)
    assert out.attention["sent"][1, 0, 0, 2] == 0
    close(out.output, torch.einsum("bs,bsd->bd", sent_a, word_c))
