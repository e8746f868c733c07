"""The generated Config stays consistent when its fields change: a size the checker equates
with a fixed axis's length follows that axis's Config field wherever it sits (inside
`stack`, `context`, a dot-product score's query, an input's features, a `repeat`), or is
refused with a located error (a part of a `concat`); long chains of `let`s fold into
properties one level deep. Values are checked against float64 references written here."""

from __future__ import annotations

import pytest

from conftest import error_snapshot

torch = pytest.importorskip("torch")

from torch_support import build_model, one_thread  # noqa: E402, F401

DT = torch.float64
HEADER = 'paper t { cite = "T" }\n'

# ---- sizes tied to an axis length ------------------------------------------------------------

TIED = """model m {
    input x: set[N, 4] (N = 16)
    attention a { query = learned(4)  features = x  score = multiplicative }
%s
}
"""
CASES = {
    "stack": """    feature e = stack(learned(16), tanh(linear(mean(x), 16)))
    output y = context(x, e)""",
    "context_values": """    input z: set[M, 3] (M = 5)
    attention b { query = learned(3)  features = z  score = multiplicative }
    feature w = context(linear(z, 16), b.weights)
    output y = context(x, w)""",
    "input_features": """    input z: set[M, 16] (M = 5)
    output y = concat(context(x, z), a)""",
    "stacked_weights": """    output y = mean(stack(a.weights, learned(16)))""",
    "dot_score_query": """    attention b { query = learned(16)  keys = stack(a.weights, a.weights)
                  score = multiplicative }
    output y = b""",
    "repeat": """    feature q = mean(x)
    repeat r 2 {
        feature c = context(x, stack(learned(16), linear(q, 16)))
        update q = q + mean(c)
    }
    output y = concat(q, a)""",
}


def reference(case: str, model, x, z):
    """The float64 computation each case's spec writes, from the model's parameters."""
    P = dict(model.named_parameters())
    aw = torch.softmax(x @ P["a_q"], -1)  # (B, N)
    a = (aw.unsqueeze(1) @ x).squeeze(1)  # (B, 4)
    B = x.shape[0]
    if case == "stack":
        g = torch.tanh(x.mean(1) @ P["e_linear.weight"].T + P["e_linear.bias"])
        e = torch.stack([P["e_q"].expand(B, -1), g], 1)  # (B, 2, N)
        return e @ x
    if case == "context_values":
        bw = torch.softmax(z @ P["b_q"], -1)
        w = (bw.unsqueeze(1) @ (z @ P["w_linear.weight"].T + P["w_linear.bias"])).squeeze(1)
        return (w.unsqueeze(1) @ x).squeeze(1)
    if case == "input_features":
        c = z @ x  # (B, M, 4): z's N features weigh x's N positions
        return torch.cat([c, a.unsqueeze(1).expand(-1, z.shape[1], -1)], -1)
    if case == "stacked_weights":
        return (aw + P["y_q"]) / 2
    if case == "dot_score_query":
        k = torch.stack([aw, aw], 1)  # (B, 2, N)
        w = torch.softmax(k @ P["b_q"], -1)
        return (w.unsqueeze(1) @ k).squeeze(1)
    q = x.mean(1)
    for i in range(2):
        g = q @ P[f"r.{i}.c_linear.weight"].T + P[f"r.{i}.c_linear.bias"]
        e = torch.stack([P[f"r.{i}.c_q"].expand(B, -1), g], 1)
        q = q + (e @ x).mean(1)
    return torch.cat([q, a], -1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_size_tied_to_an_axis_follows_its_config_field(case):
    """`learned(16)` beside `(N = 16)` (and the other sizes equated with N) change with N:
    Config.tiny() and Config(N = 10) built and ran wrongly or not at all when they stayed 16."""
    mod = build_model(HEADER + TIED % CASES[case], f"cfg_tied_{case}")
    assert mod.Config.tiny().N < 16
    for cfg in (mod.Config(), mod.Config.tiny(), mod.Config(N=10)):
        torch.manual_seed(0)
        model = mod.Model(cfg).to(DT).eval()
        x = torch.randn(2, cfg.N, 4, dtype=DT)
        inputs = {"x": x}
        z = None
        if "input z" in CASES[case]:
            width = cfg.N if case == "input_features" else 3
            z = inputs["z"] = torch.randn(2, cfg.M, width, dtype=DT)
        want = reference(case, model, x, z)
        torch.testing.assert_close(model(**inputs).output, want, atol=1e-10, rtol=0)


def test_a_concat_of_written_sizes_tied_to_an_axis_is_refused():
    """concat(learned(8), learned(8)) as weights over N = 16 cannot follow Config(N = …):
    a located error at the first written part (check accepted it; forward failed)."""
    got, want = error_snapshot("tied_size_in_concat")
    assert got == want


WEIGHED = HEADER + """let d = 8
model m {
    input x: set[N, 5] (N = 8)
    feature h = linear(x, d)
    attention a { query = learned(d)  features = h  score = multiplicative }
    output y = mean(a.weights * h)
}
"""


def test_a_constant_equal_to_an_axis_length_keeps_its_own_value():
    """`a.weights * h` scales each position of h by its weight: h's features are not tied
    to the N weights, so `let d = 8` beside `(N = 8)` stays d (h was sized cfg.N, so
    Config.tiny() and Config(N = 10) silently gave h N features instead of d)."""
    mod = build_model(WEIGHED, "cfg_weighed")
    for cfg in (mod.Config(), mod.Config.tiny(), mod.Config(N=10)):
        torch.manual_seed(0)
        model = mod.Model(cfg).to(DT).eval()
        P = dict(model.named_parameters())
        assert P["h_linear.weight"].shape == (8, 5) and P["a_q"].shape == (8,)  # d
        x = torch.randn(2, cfg.N, 5, dtype=DT)
        h = x @ P["h_linear.weight"].T + P["h_linear.bias"]  # (B, N, d)
        w = torch.softmax(h @ P["a_q"], -1)  # multiplicative: q . k_l
        want = (w.unsqueeze(-1) * h).mean(1)
        torch.testing.assert_close(model(x=x).output, want, atol=1e-10, rtol=0)


# ---- long chains of `let`s ---------------------------------------------------------------------

def chain_spec(n: int) -> str:
    """a0 and n - 1 aliases of it; b_i = b_(i-1) + 1 (a deep sum); c_i = (c_(i-1) + 2) * 3 -
    2 * c_(i-1) - 5, i.e. c_(i-1) + 1, written so that its text doubles at every step (20
    of them: a few properties reading earlier ones)."""
    lets = ["let a0 = 4", "let b0 = 3", "let c0 = 2"]
    lets += [f"let a{i} = a{i - 1}" for i in range(1, n)]
    lets += [f"let b{i} = b{i - 1} + 1" for i in range(1, n)]
    lets += [f"let c{i} = (c{i - 1} + 2) * 3 - 2 * c{i - 1} - 5" for i in range(1, 20)]
    return HEADER + "\n".join(lets) + f"""
model m {{
    input x: set[N, a{n - 1}] (N = 6)
    feature h = linear(x, b{n - 1})
    attention att {{ query = learned(c19)  keys = linear(h, c19)  values = h
                    score = multiplicative }}
    output y = att
}}
"""


def test_a_thousand_lets_fold_into_a_shallow_config():
    """1,000 aliases and a 1,000-step sum check, compile, build and run (the generated
    Config's properties called each other 1,000 deep: RecursionError at build), and the
    sizes are the arithmetic done here, at the defaults and with a root changed."""
    mod = build_model(chain_spec(1000), "cfg_let_chain")
    for cfg, (a, b, c) in ((mod.Config(), (4, 3, 2)), (mod.Config(a0=5, b0=7, c0=3), (5, 7, 3))):
        want_a, want_b, want_c = a, b, c
        for _ in range(999):
            want_b += 1
        for _ in range(19):
            want_c = (want_c + 2) * 3 - 2 * want_c - 5
        assert (cfg.a999, cfg.b999, cfg.c19) == (want_a, want_b, want_c)
        torch.manual_seed(0)
        model = mod.Model(cfg).to(DT).eval()
        x = torch.randn(2, cfg.N, want_a, dtype=DT)
        P = dict(model.named_parameters())
        lin = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert [tuple(m.weight.shape) for m in lin] == [(want_b, want_a), (want_c, want_b)]
        h = x @ lin[0].weight.T + lin[0].bias
        k = h @ lin[1].weight.T + lin[1].bias
        q = next(p for n, p in P.items() if p.shape == (want_c,) and "bias" not in n)
        w = torch.softmax(k @ q, -1)
        torch.testing.assert_close(model(x=x).output, (w.unsqueeze(1) @ h).squeeze(1),
                                   atol=1e-10, rtol=0)
    text = __import__("inspect").getsource(mod.Config)
    assert "self.a998" not in text and "self.b998" not in text  # one property deep


def test_a_let_chain_too_deep_for_the_config_is_a_located_error():
    """A chain whose text doubles at every step, 1,000 long, would need properties calling
    each other hundreds deep: refused at the first let past the limit."""
    from taxcompile import pipeline
    from taxcompile.diagnostics import SpecError

    lets = ["let c0 = 2"] + [f"let c{i} = (c{i - 1} + 2) * 3 - 2 * c{i - 1} - 5"
                             for i in range(1, 1000)]
    text = HEADER + "\n".join(lets) + """
model m {
    input x: set[N, c999] (N = 6)
    attention att { query = learned(c999)  keys = x  score = multiplicative }
}
"""
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    diags = info.value.diagnostics
    assert len(diags) == 1 and "properties would call each other" in diags[0].message
    assert diags[0].loc.line > 100


# ---- inputs with many axes -------------------------------------------------------------------

def many_axes_spec(k: int, fixed: bool) -> str:
    axes = [f"A{i}" for i in range(k)]
    sizes = " (" + ", ".join(f"{a} = 16" for a in axes) + ")" if fixed else ""
    return HEADER + f"""model m {{
    input x: sequence[{', '.join(axes)}, 3]{sizes}
    feature h = linear(x, 8)
    attention a {{ query = learned(8)  features = h  score = general }}
    output y = a
}}
"""


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("k", [6, 8])
def test_many_axes_give_small_example_inputs(k, fixed):
    """An input with 6 or 8 axes (free, or fixed at 16 each): example_inputs() at
    Config.tiny() holds at most 4,096 positions per example (8 free axes asked for 2.2 GB),
    every axis at least 2 long, and the model computes the attention of each group over
    the last axis, padding left out, as the reference here."""
    mod = build_model(many_axes_spec(k, fixed), f"cfg_many_axes_{k}_{fixed}")
    cfg = mod.Config.tiny()
    inputs = mod.example_inputs(2, cfg=cfg)
    x, mask = inputs["x"].to(DT), inputs["x_mask"]
    assert x.dim() == k + 2 and x[0, ..., 0].numel() <= 4096 and min(x.shape[1:-1]) >= 2
    torch.manual_seed(0)
    model = mod.Model(cfg).to(DT).eval()
    P = dict(model.named_parameters())
    h = x @ P["h_linear.weight"].T + P["h_linear.bias"]  # (B, A0, …, A_k-1, 8)
    e = h @ (P["a.W"][0] @ P["a_q"])  # k_l^T W q, (B, A0, …, A_k-1)
    w = torch.softmax(e.masked_fill(~mask, float("-inf")), -1)
    want = (w.unsqueeze(-1) * h).sum(-2)
    torch.testing.assert_close(model(x=x, x_mask=mask).output, want, atol=1e-10, rtol=0)


def test_an_input_with_too_many_axes_is_a_located_error():
    """40 axes checked and compiled, then example_inputs() failed ("Storage size calculation
    overflowed"): refused at the input, with the limit."""
    got, want = error_snapshot("input_too_many_axes")
    assert got == want
