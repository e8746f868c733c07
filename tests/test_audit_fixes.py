"""Issue 25's audit fixes: a value named in an enum field's error, `positions(x)` (a position
table alone), QANet's [c; a; c∘a; c∘b], sizes tied to an axis length in the generated
Config, GAT's `bias = false`, and `prev(x)` read outside a decoder's step. Values are checked
against float64 references written here."""

from __future__ import annotations

import math

import pytest

from conftest import ROOT, error_snapshot
from taxcompile import ir, pipeline

torch = pytest.importorskip("torch")

from torch_support import build_model, one_thread  # noqa: E402, F401

DT = torch.float64
HEADER = 'paper t { cite = "T" }\n'


def build(text: str, name: str):
    return build_model(HEADER + text, name)


def close(got, want):
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


# ---- an enum field given something that is not one of its names ---------------------------

@pytest.mark.parametrize("name", ["heads_out_call", "heads_out_string"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


# ---- positions(x): the position table alone -------------------------------------------------

POSITIONS = """model m {
    input x: sequence[L, 6] (L = 5)
    feature p = positions(x)
    feature s = positions(x, kind = sinusoid)
    attention a { query = x + p  keys = x  values = s  score = multiplicative }
    output o = a
}
"""


def sinusoid_table(n: int, d: int):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…) (Vaswani et al. 3.5)."""
    pe = torch.zeros(n, d, dtype=DT)
    for pos in range(n):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
    return pe


def test_positions_is_the_table_broadcast_over_the_batch():
    mod = build(POSITIONS, "aud_positions")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT)
    x = torch.randn(3, 5, 6, dtype=DT)
    P = model.p_pos.weight  # (L, d): the learned table, one row per position
    assert P.shape == (5, 6)
    e = (x + P) @ x.transpose(1, 2)  # q^T k, q = x + P
    want = torch.softmax(e, -1) @ sinusoid_table(5, 6).expand(3, 5, 6)
    out = model(x)
    # the sinusoid helper builds its table in float32 (as positional does): 1e-7 of it
    torch.testing.assert_close(out.output, want, atol=1e-6, rtol=0)
    out.output.sum().backward()
    assert P.grad is not None and P.grad.abs().sum() > 0


# ---- QANet's context-query attention output -------------------------------------------------

def test_qanet_model_encoder_reads_c_a_c_times_a_and_c_times_b():
    """Yu et al. 2.2: the model encoder's input is [c; a; c∘a; c∘b]."""
    cm = pipeline.load(ROOT / "specs" / "yu2018.attn").models[0]
    m = cm.model.by_id["m"]
    concat = m.expr.args[0]
    assert concat.fn == "concat"

    def show(e):
        if isinstance(e, ir.Ref):
            return e.node.split("@")[0]  # c@7: c after its updates
        return f"{show(e.args[0])} * {show(e.args[1])}" if e.fn == "mul" else e.fn

    assert [show(a) for a in concat.args] == ["c", "c2q", "c * c2q", "c * c2q2c"]


# ---- GAT without its output bias -------------------------------------------------------------

GAT_NO_BIAS = """model m {
    input x: set[N, 5]
    input adj: graph[N]
    feature wh = project(x, 6)
    attention att { query = wh  features = wh  score = activated_concat(act = leaky_relu(0.2))
                    heads = 2  heads_out = concat  mask = adj  self_loops = true  bias = false }
    output o = identity(att)
}
"""


def test_gat_without_bias_matches_the_equations_and_gatconv():
    from test_graph_attention import features, gat_reference, random_graph, randomize

    mod = build(GAT_NO_BIAS, "aud_gat_no_bias")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT).eval()
    randomize(model)
    assert [n for n, _ in model.att.named_parameters()] == ["att_dst", "att_src"]
    x, ei = features(2, 7, 5, seed=11), random_graph(2, 7, 40, seed=12)
    ref = gat_reference(x, ei, model.wh_proj.weight, model.att.att_src, model.att.att_dst,
                        torch.zeros(6, dtype=DT), 2, "concat", True)
    ours = model(x, ei).output
    torch.testing.assert_close(ours, ref, rtol=1e-9, atol=1e-9)
    pyg = pytest.importorskip("torch_geometric.nn")
    conv = pyg.GATConv(5, 3, heads=2, concat=True, bias=False).to(DT).eval()
    with torch.no_grad():
        conv.lin.weight.copy_(model.wh_proj.weight)
        conv.att_src.copy_(model.att.att_src.view(1, 2, 3))
        conv.att_dst.copy_(model.att.att_dst.view(1, 2, 3))
    theirs = conv(x.reshape(14, 5), ei).view(2, 7, 6)
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-9)


def test_a_bias_switch_needs_graph_attention():
    got, want = error_snapshot("bias_switch_without_graph")
    assert got == want


# ---- a size that must equal an axis length is that axis's Config field ----------------------

TIED = """let d = 16
model m {
    input x: set[N, 8] (N = 16)
    feature w = learned(16)                      # one weight per position of N
    feature c = context(x, w)
    feature g = tanh(linear(mean(x), 16))        # weights predicted from the set
    feature c2 = context(x, g)
    feature c3 = context(x, dropout(learned(d), 0.1))
    attention a { query = learned(8)  features = x  score = multiplicative }
    feature z = a.weights + learned(16)          # a vector added to the weights over N
    output y = concat(c, c2, c3, a, z)
}
"""


def test_sizes_tied_to_an_axis_follow_its_config_field():
    """`learned(16)` beside `(N = 16)` weighs N's positions (or is added to weights over
    them): Config(N = 10) and Config.tiny() change the table with N (they failed at run time
    when it stayed 16)."""
    mod = build(TIED, "aud_tied")
    assert mod.Config.tiny().N < 16
    for cfg in (mod.Config(), mod.Config.tiny(), mod.Config(N=10)):
        torch.manual_seed(0)
        model = mod.Model(cfg).to(DT).eval()
        x = torch.randn(2, cfg.N, 8, dtype=DT)
        w, u = model.w_q, model.c3_q
        assert w.shape == u.shape == (cfg.N,)
        lin = model.g_linear
        g = torch.tanh(x.mean(1) @ lin.weight.T + lin.bias)  # (B, N)
        q = model.a_q  # (8,)
        a = torch.softmax(x @ q, -1)
        assert model.z_q.shape == (cfg.N,)
        want = torch.cat([w @ x, (g.unsqueeze(1) @ x).squeeze(1), u @ x,
                          (a.unsqueeze(1) @ x).squeeze(1), a + model.z_q], -1)
        close(model(x).output, want)


# ---- prev(x) read after a decoder's steps ----------------------------------------------------

DECODER = """model m {
    input src: tokens[S] (vocab = 30)
    input tgt: tokens[T] (vocab = 30, autoregressive)
    feature h = embed(src, 8)
    query s = gru(embed(tgt, 8), 8, feed = att)
    %s
    attention att { query = %s  keys = h  score = multiplicative }
    output y = classify(concat(s, %s, att), 30)
}
"""
# prev(s) written in the output, as a feature the step computes, and as one only the output
# reads: the same model (the output reads s at step t - 1, zeros at t = 0)
PREV_FORMS = {"inline": ("", "prev(s)", "prev(s)"),
              "feature": ("feature s_prev = prev(s)", "s_prev", "s_prev"),
              "output_only": ("feature s_prev = prev(s)", "prev(s)", "s_prev")}


def test_prev_in_an_output_reads_the_previous_step():
    mods = {k: build(DECODER % v, f"aud_prev_{k}") for k, v in PREV_FORMS.items()}
    torch.manual_seed(0)
    ref = mods["feature"].Model(mods["feature"].Config()).to(DT).eval()
    inputs = mods["feature"].example_inputs(cfg=mods["feature"].Config())
    src, tgt = inputs["src"], inputs["tgt"]
    # a float64 reference of the decoder: s_t = GRU([E y_t; c_t], s_(t-1)), c_t the
    # attention of q = s_(t-1) over h, y_t = W [s_t; s_(t-1); c_t] + b
    h = ref.h_embed.weight[src]
    e = ref.s_embed.weight[tgt]
    cell = ref.s_gru_cells[0]
    prev, rows = torch.zeros(src.shape[0], 8, dtype=DT), []
    for t in range(tgt.shape[1]):
        a = torch.softmax((h @ prev.unsqueeze(-1)).squeeze(-1), -1)
        c = (a.unsqueeze(1) @ h).squeeze(1)
        s = cell(torch.cat([e[:, t], c], -1), prev)
        rows.append(ref.y_head(torch.cat([s, prev, c], -1)))
        prev = s
    want = torch.stack(rows, 1)
    for k, mod in mods.items():
        model = mod.Model(mod.Config()).to(DT).eval()
        model.load_state_dict(ref.state_dict())
        close(model(src, tgt).output, want)
        # generate(): the cache carries s_(t-1) across calls as the loop does
        want_tokens = ref.generate(src, max_len=5, bos=1, eos=2, incremental=False)
        for incremental in (True, False):
            got = model.generate(src, max_len=5, bos=1, eos=2, incremental=incremental)
            assert torch.equal(got, want_tokens), (k, incremental)
