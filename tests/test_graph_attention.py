"""Mask inputs and graph attention (issue 14, item 1): `input m: mask[T, S]` with
`mask = m` / `mask = causal * m`, and `input adj: graph[N]` with `mask = adj`, which makes a
module graph attention (GAT, Velickovic et al. 2018, survey ref. [83]).

1. the generated graph attention against torch_geometric's GATConv (its weights copied in),
   forward and gradients in float64, concat and mean heads, with and without self loops, on
   random sparse graphs (duplicate edges, self loops in the data, nodes without in-edges);
2. against a float64 reference of the paper's equations written here (eq. 1-6), one node
   at a time; the dense (B, N, N) path against the edge-list path;
3. the edge-list path never makes an N x N tensor (every tensor an op returns is watched at
   N = 20000, E = 200000, where N x N would be 4e8 entries);
4. a mask input in an ordinary module: the keys each query sees, against a reference;
5. run-time checks of the mask and graph inputs; the classifier's reading; the example;
   misuse is a located error (snapshots).
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
from torch_support import inline_fixture, one_thread  # noqa: E402, F401

ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64

HEADER = """\
paper graphs {
    cite  = "Test"
    title = "Graph attention tests"
    year  = 2024
}
"""

GAT = """
model m {{
    input x: set[N, {f_in}]
    input adj: graph[N]
    feature wh = project(x, {width})
    attention att {{ query = wh  features = wh  score = activated_concat(act = leaky_relu({slope}))
                    heads = {heads}  {join}  mask = adj  self_loops = {loops} }}
    output o = identity(att)
}}
"""


gen = inline_fixture("graphs", HEADER)


def gat_model(gen, f_in=6, heads=3, out=4, join="concat", loops=True, slope=0.2, seed=0):
    body = GAT.format(f_in=f_in, width=heads * out, heads=heads, slope=slope,
                      join=f"heads_out = {join}" if heads > 1 else "",
                      loops="true" if loops else "false")
    mod = gen(body)
    torch.manual_seed(seed)
    return mod, mod.Model(mod.Config()).to(DT).eval()


def random_graph(B, N, E, seed, duplicates=True, lonely=True):
    """An edge list over B graphs of N nodes (node n of graph b is b * N + n), with self
    loops and, unless told otherwise, duplicate edges and one node with no in-edge."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, B * N, (E,), generator=g)
    src = dst // N * N + torch.randint(0, N, (E,), generator=g)
    src[:3] = dst[:3]  # self loops in the data
    if lonely:
        keep = dst != 1  # node 1 of graph 0 gets no edge (only its self loop, if added)
        src, dst = src[keep], dst[keep]
    ei = torch.stack([src, dst])
    if not duplicates:
        ei = torch.unique(ei, dim=1)
    elif ei.shape[1] > 4:
        ei = torch.cat([ei, ei[:, :4]], 1)  # repeated edges count twice, as in GATConv
    return ei


def features(B, N, f_in, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, f_in, generator=g, dtype=DT)


def copy_into_pyg(model, conv, heads, out):
    with torch.no_grad():
        conv.lin.weight.copy_(model.wh_proj.weight)
        conv.att_src.copy_(model.att.att_src.view(1, heads, out))
        conv.att_dst.copy_(model.att.att_dst.view(1, heads, out))
        conv.bias.copy_(model.att.bias)


def randomize(model, seed=3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)


# ---- 1. torch_geometric's GATConv --------------------------------------------------------------


@pytest.mark.parametrize("join", ["concat", "mean"])
@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("B", [1, 2])
def test_matches_gatconv_forward_and_gradients(gen, join, loops, B):
    pyg = pytest.importorskip("torch_geometric.nn")
    heads, out, f_in, N = 3, 4, 6, 11
    mod, model = gat_model(gen, f_in, heads, out, join, loops)
    randomize(model)
    conv = pyg.GATConv(f_in, out, heads=heads, concat=join == "concat", add_self_loops=loops,
                       negative_slope=0.2, dropout=0.0, bias=True).to(DT).eval()
    copy_into_pyg(model, conv, heads, out)
    x = features(B, N, f_in, seed=5)
    ei = random_graph(B, N, 5 * B * N, seed=7)
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    ours = model(x1, ei).output  # (B, N, d)
    theirs = conv(x2.reshape(B * N, f_in), ei).view(B, N, -1)
    assert ours.shape == theirs.shape == (B, N, heads * out if join == "concat" else out)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    r = torch.randn(ours.shape, generator=torch.Generator().manual_seed(9), dtype=DT)
    (ours * r).sum().backward()
    (theirs * r).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    pairs = [(model.wh_proj.weight, conv.lin.weight), (model.att.bias, conv.bias),
             (model.att.att_src, conv.att_src), (model.att.att_dst, conv.att_dst)]
    for a, b in pairs:
        torch.testing.assert_close(a.grad, b.grad.view(a.shape), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["chunked", "compiled"])
def test_index_add_paths_match_gatconv(gen, monkeypatch, path):
    """EdgeSum's paths other than the sparse CSR product, forced here in float64, against
    GATConv, forward and gradients: chunks of messages summed with index_add_ (dtypes without
    the sparse kernels), and all of them in one index_add_ under torch.compile /
    torch.export (no fake-tensor kernels for sparse CSR, a data-dependent number of edges
    once self loops are replaced)."""
    pyg = pytest.importorskip("torch_geometric.nn")
    concat = path == "compiled"
    mod, model = gat_model(gen, 6, 2, 5, "concat" if concat else "mean", True)
    randomize(model)
    if concat:
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    else:
        monkeypatch.setattr(mod.EdgeSum, "csr_dtypes", ())
    conv = pyg.GATConv(6, 5, heads=2, concat=concat).to(DT).eval()
    copy_into_pyg(model, conv, 2, 5)
    seed = 41 if concat else 31
    x, ei = features(2, 10, 6, seed=seed), random_graph(2, 10, 60, seed=seed + 1)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ours, theirs = model(x1, ei).output, conv(x2.reshape(20, 6), ei).view(2, 10, -1)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    ours.square().sum().backward()
    theirs.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    for a, b in ((model.att.att_src, conv.att_src), (model.att.att_dst, conv.att_dst)):
        torch.testing.assert_close(a.grad, b.grad.view(2, 5))


def test_an_edge_list_model_exports(gen):
    """torch.export captures the edge-list path (the PyTorch reader's capture) and the
    exported program computes what the module does."""
    mod, model = gat_model(gen, 6, 2, 5, "concat", True)
    randomize(model)
    x, ei = features(2, 10, 6, seed=43), random_graph(2, 10, 60, seed=44)

    class Out(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x, ei):
            return self.m(x, ei).output

    ep = torch.export.export(Out(model).eval(), (x, ei), strict=False)
    torch.testing.assert_close(ep.module()(x, ei), model(x, ei).output, rtol=1e-6, atol=1e-6)


def test_one_head_matches_gatconv(gen):
    pyg = pytest.importorskip("torch_geometric.nn")
    mod, model = gat_model(gen, 5, heads=1, out=7)
    randomize(model)
    conv = pyg.GATConv(5, 7, heads=1).to(DT).eval()
    copy_into_pyg(model, conv, 1, 7)
    x, ei = features(1, 9, 5, seed=2), random_graph(1, 9, 30, seed=4)
    torch.testing.assert_close(model(x, ei).output[0], conv(x[0], ei), rtol=1e-5, atol=1e-5)


# ---- 2. the paper's equations; dense and sparse -------------------------------------------------


def gat_reference(x, edges, W, a_src, a_dst, bias, heads, join, loops, slope=0.2):
    """Velickovic et al. eq. 1-6, node by node: e_ij = LeakyReLU(a^T [W h_i || W h_j]) with
    a = [a_dst; a_src] written as one vector over the concatenation, alpha_ij the softmax over
    the neighbours j of i (edges j -> i, each edge once, plus i itself with self loops),
    h'_i = sum_j alpha_ij W h_j per head; heads concatenated or averaged; plus the bias."""
    B, N, _ = x.shape
    flat = x.reshape(B * N, -1)
    Wh = flat @ W.T  # (B N, H C)
    C = Wh.shape[1] // heads
    into: dict[int, list[int]] = {i: [] for i in range(B * N)}
    for s, t in edges.T.tolist():
        if loops and s == t:
            continue  # GATConv's remove_self_loops, then one loop per node
        into[t].append(s)
    if loops:
        for i in range(B * N):
            into[i].append(i)
    out = []
    for i in range(B * N):
        per_head = []
        for h in range(heads):
            a = torch.cat([a_dst[h], a_src[h]])  # a in R^{2C}: [W h_i || W h_j] (eq. 1)
            hi = Wh[i, h * C:(h + 1) * C]
            if not into[i]:
                per_head.append(torch.zeros(C, dtype=x.dtype))
                continue
            e = torch.stack([torch.nn.functional.leaky_relu(
                a @ torch.cat([hi, Wh[j, h * C:(h + 1) * C]]), slope) for j in into[i]])
            alpha = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()  # eq. 3
            per_head.append(sum(alpha[n] * Wh[j, h * C:(h + 1) * C]
                                for n, j in enumerate(into[i])))  # eq. 4
        h_new = torch.cat(per_head) if join == "concat" else torch.stack(per_head).mean(0)
        out.append(h_new + bias)
    return torch.stack(out).view(B, N, -1)


@pytest.mark.parametrize("join,loops", [("concat", True), ("mean", False)])
def test_matches_reference_of_the_equations(gen, join, loops):
    heads, out = 2, 3
    mod, model = gat_model(gen, 4, heads, out, join, loops, slope=0.1)
    randomize(model)
    x, ei = features(2, 7, 4, seed=11), random_graph(2, 7, 40, seed=12)
    ref = gat_reference(x, ei, model.wh_proj.weight, model.att.att_src, model.att.att_dst,
                        model.att.bias, heads, join, loops, slope=0.1)
    torch.testing.assert_close(model(x, ei).output, ref, rtol=1e-9, atol=1e-9)


def dense_of(ei, B, N):
    adj = torch.zeros(B, N, N, dtype=torch.bool)
    src, dst = ei
    adj[src // N, src % N, dst % N] = True  # adj[b, j, i]: edge j -> i (to_dense_adj's layout)
    return adj


@pytest.mark.parametrize("loops", [True, False])
def test_dense_adjacency_matches_edge_list(gen, loops):
    mod, model = gat_model(gen, 5, 2, 3, "concat", loops)
    randomize(model)
    B, N = 2, 8
    ei = random_graph(B, N, 30, seed=21, duplicates=False)
    x = features(B, N, 5, seed=22)
    xs, xd = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    sparse = model(xs, ei, return_attention=True)
    dense = model(xd, dense_of(ei, B, N), return_attention=True)
    torch.testing.assert_close(sparse.output, dense.output, rtol=1e-10, atol=1e-10)
    sparse.output.square().sum().backward()
    dense.output.square().sum().backward()
    torch.testing.assert_close(xs.grad, xd.grad, rtol=1e-10, atol=1e-10)
    # the weights: (E', H) per edge, and (B, H, N, N) with alpha_ij at [b, h, i, j]
    a_dense = dense.attention["att"]
    assert a_dense.shape == (B, 2, N, N)
    assert torch.allclose(a_dense.sum(-1)[a_dense.sum(-1) > 0], torch.tensor(1.0, dtype=DT))
    a_sparse = sparse.attention["att"]
    g = torch.unique(ei, dim=1)
    if loops:
        g = torch.unique(torch.cat([g[:, g[0] != g[1]], torch.arange(B * N).repeat(2, 1)], 1),
                         dim=1)
    assert a_sparse.shape == (g.shape[1], 2)
    assert float(a_sparse.detach().sum()) == pytest.approx(float(a_dense.detach().sum()))


def test_sparse_path_never_builds_n_by_n(gen):
    """Every tensor an op of forward and backward returns is watched (a dispatch mode): at
    N = 20000 nodes and E = 200000 edges, none has N x N = 4e8 entries, nor even all the
    messages at once, E' x H x C (E' = E + N with the self loops)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        most = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):  # a sparse matrix holds its nonzeros only
                    n = t.numel() if t.layout == torch.strided else t._nnz()
                    Largest.most = max(Largest.most, n)
            return out

    heads, out, N, E = 8, 8, 20_000, 200_000
    mod, model = gat_model(gen, 16, heads, out, "concat", True)
    model = model.float()
    g = torch.Generator().manual_seed(0)
    dst = torch.randint(0, N, (E,), generator=g)
    src = torch.randint(0, N, (E,), generator=g)
    x = torch.randn(1, N, 16, generator=g).requires_grad_(True)
    with Largest():
        y = model(x, torch.stack([src, dst]), validate=False).output
        y.sum().backward()
    assert y.shape == (1, N, heads * out)
    # O(E H + N H C): the scores and weights (E' x H), the nodes' features (N x H x C)
    # (and in other dtypes one chunk of messages, 2^21 entries), never E' x H x C nor N x N
    assert Largest.most <= max((E + N) * heads, N * heads * out)
    assert Largest.most < (E + N) * heads * out < N * N // 20
    assert torch.isfinite(x.grad).all()


# ---- 4. a mask input in an ordinary module -----------------------------------------------------

MASKED = """
model m {{
    input x: sequence[L, 8]
    input keep: mask[L, L]
    attention att {{ query = project(x)  keys = project(x)  values = project(x)
                    score = scaled_multiplicative  heads = 2  mask = {mask} }}
    output o = identity(att)
}}
"""


@pytest.mark.parametrize("mask", ["keep", "causal * keep"])
@pytest.mark.parametrize("need", [True, False])
def test_mask_input_narrows_the_keys(gen, mask, need):
    """The class gets pair_mask (N, Lq, Lk): a query sees key j iff the mask input, the
    padding mask (and the causal mask) all keep it; reference per head, with W_O (eq. 40)."""
    mod = gen(MASKED.format(mask=mask))
    names = [n for n, c in vars(mod).items() if isinstance(c, type) and n.endswith("Attention")]
    cls = getattr(mod, names[0])
    m = cls(d_q=8, d_k=8, d_v=8, heads=2, mask="causal" if "causal" in mask else "none").to(DT)
    randomize(m)
    g = torch.Generator().manual_seed(4)
    N, L, H = 2, 6, 2
    q, k, v = (torch.randn(N, L, 8, generator=g, dtype=DT) for _ in range(3))
    key_mask = torch.ones(N, L, dtype=torch.bool)
    key_mask[1, 4:] = False
    pair = torch.rand(N, L, L, generator=g) < 0.6
    pair[:, :, 0] = True
    c, a, _ = m(q, k, v, key_mask, pair_mask=pair, need_weights=need)
    keep = pair & key_mask[:, None, :]
    if "causal" in mask:
        keep = keep & torch.ones(L, L, dtype=torch.bool).tril()
    qh, kh, vh = (t.view(N, L, H, 4).transpose(1, 2) for t in (q, k, v))
    e = (qh @ kh.transpose(-1, -2) / math.sqrt(4)).masked_fill(~keep[:, None], float("-inf"))
    alpha = torch.nan_to_num(torch.softmax(e, -1), nan=0.0)
    ref = (alpha @ vh).transpose(1, 2).reshape(N, L, 8) @ m.out.weight.T + m.out.bias
    torch.testing.assert_close(c, ref, rtol=1e-10, atol=1e-10)
    if need:
        torch.testing.assert_close(a, alpha, rtol=1e-10, atol=1e-10)


def test_mask_input_reaches_the_module(gen):
    """Through Model.forward: a key the mask input hides gets weight 0, and the weights
    change when the mask does."""
    mod = gen(MASKED.format(mask="keep"))
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).to(DT).eval()
    inputs = mod.example_inputs(2, seed=3)
    inputs["x"] = inputs["x"].to(DT)
    out = model(**inputs, return_attention=True)
    a = out.attention["att"]  # (B, H, L, L)
    assert a.shape[-2:] == inputs["keep"].shape[-2:]
    assert float(a.detach().masked_select(~inputs["keep"][:, None]).abs().max()) == 0.0
    assert not inputs["keep"].all()


# ---- 5. run-time checks, classification, the example, errors ------------------------------------


def test_run_time_checks(gen):
    mod = gen(MASKED.format(mask="keep"))
    model = mod.Model(mod.Config())
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"input `keep`: expected a mask of shape \(2, 5, 5\) "
                       r"\(B, queries, keys; True = keep\), got \(2, 5, 4\)"):
        model(x, torch.ones(2, 5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="input `keep`: expected a bool mask .* got torch.float32"):
        model(x, torch.ones(2, 5, 5))
    gmod, gat = gat_model(gen, 6, 3, 4)
    x = torch.randn(2, 5, 6, dtype=DT)
    with pytest.raises(ValueError, match=r"input `adj`: node ids must be in \[0, B \* N\) = "
                       r"\[0, 10\), got 10"):
        gat(x, torch.tensor([[0, 10], [1, 2]]))
    with pytest.raises(ValueError, match=r"input `adj`: expected an edge list \(2, E\) int64 .* "
                       r"got shape \(3, 2\)"):
        gat(x, torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"got shape \(2, 5, 4\)"):
        gat(x, torch.ones(2, 5, 4, dtype=torch.bool))


def test_classifier_reads_graph_attention():
    text = HEADER + GAT.format(f_in=6, width=12, heads=3, slope=0.2, join="heads_out = concat",
                               loops="true")
    from taxcompile.classification import classify_model
    cl = classify_model(pipeline.load_text(text, "t.attn").models[0])
    row = cl.row()
    assert row["scoring"] == "Additive" and row["alignment"] == "Global"
    assert row["query_type"] == "Self-Attentive" and row["query_multiplicity"] == "Multi-Head"
    reason = " ".join(cl.cells["alignment"].values["Global"])
    assert "global alignment over the neighbours" in reason and "`adj`" in reason
    assert "activated concat" in " ".join(cl.cells["scoring"].values["Additive"])
    masked = classify_text(HEADER + MASKED.format(mask="causal * keep"))
    assert masked["alignment"] == "Global" and masked["scoring"] == "Scaled Multiplicative"


def test_gat_example_compiles_runs_and_classifies():
    path = ROOT / "examples" / "gat.attn"
    cs = pipeline.load(path)
    src = codegen.generate(cs, cs.models[0], str(path))
    assert "MultiHeadGraphAttention" in src and "MeanHeadGraphAttention" in src
    assert "self.out =" not in src  # no W_O: GAT concatenates or averages its heads
    row = classify_text(path.read_text(encoding="utf-8"))
    assert row["scoring"] == "Additive" and row["alignment"] == "Global"
    mod = load_module(src, "_taxcompile_graph_gat_example")
    cfg = mod.Config()
    assert (cfg.heads, cfg.hidden, cfg.classes, cfg.p_drop) == (8, 8, 7, 0.6)
    torch.manual_seed(0)
    model = mod.Model(mod.Config.tiny())
    inputs = mod.example_inputs(2, seed=1, cfg=mod.Config.tiny())
    out = model(**inputs).output
    assert out.shape == (2, inputs["x"].shape[1], mod.Config.tiny().classes)
    assert torch.isfinite(out).all()
    out.square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.layer1.att_src.grad.abs().sum() > 0


SNAPSHOTS = ["graph_activated_concat_without_graph", "graph_mask_with_autoregressive",
             "graph_mask_axes", "graph_mask_as_feature", "graph_score", "graph_self_loops_alone",
             "graph_heads_project", "mask_input_with_coverage",
             "graph_weights"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want
