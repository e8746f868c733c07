"""Rows against the libraries a user would pick instead (issue 16): ``nn.TransformerEncoder``,
``x_transformers.Encoder``, ``local_attention.LocalAttention``, ``entmax.sparsemax`` and
``entmax.entmax15``, ``torch_geometric``'s ``GATConv``.

Every row builds both sides, copies our generated module's weights into the peer (or
sets ours to what the peer cannot express, e.g. zero biases it does not have), checks that
both give the same outputs and input gradients (to 1e-4 in fp32) *before* timing, then
times them interleaved (``harness.alternate``) and measures each side's peak memory. Target
per row: time <= 0.9x the peer's and peak memory <= the peer's. A peer that is not installed
(``pip install -e '.[bench]'``) gives a skipped row with the reason, never an error.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
from torch import nn

from .cases import ROOT, Settings, build, row, skipped

TARGET = "time <= 0.9, peak <= peer"


class Missing(Exception):
    """A peer library that is not installed, or a construct the language lacks."""


def missing(module: str) -> str:
    return (f"peer `{module}` not installed (make bench, or pip install -e '.[bench]')")


def need(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise Missing(f"{missing(module)}: {e}") from None


@dataclass
class Pair:
    """Our side and the peer's: each a forward call on the same inputs, and the step that is
    timed: forward + backward with the fixed output gradient ``grad`` (or a no-grad forward)."""

    ours: Callable[[], torch.Tensor]
    peer: Callable[[], torch.Tensor]
    inputs: list[torch.Tensor]  # the tensors whose gradients are compared (requires_grad)
    grad: torch.Tensor | None  # None: inference, timed under no_grad
    params: tuple[list, list] = field(default_factory=lambda: ([], []))  # grads reset per step
    differs: str = ""  # what the two sides do not share, where the semantics cannot match
    modules: tuple = (None, None)  # (ours, peer) when they are modules

    def _step(self, fn, params):
        if self.grad is None:
            def step():
                with torch.no_grad():
                    return fn()
            return step

        def step():
            for t in (*self.inputs, *params):
                t.grad = None
            fn().backward(self.grad)
        return step

    @property
    def ours_step(self):
        return self._step(self.ours, self.params[0])

    @property
    def peer_step(self):
        return self._step(self.peer, self.params[1])

    def _outputs(self, fn) -> list[torch.Tensor]:
        for t in self.inputs:
            t.grad = None
        if self.grad is None:
            with torch.no_grad():
                return [fn().float()]
        y = fn()
        y.backward(self.grad)
        return [y.detach().float(), *(t.grad.float() for t in self.inputs)]

    def check(self, tol: float) -> tuple[bool, float]:
        """(outputs and input gradients agree to tol, the largest absolute difference)."""
        a, b = self._outputs(self.ours), self._outputs(self.peer)
        ok = all(x.shape == y.shape and torch.allclose(x, y, atol=tol, rtol=tol)
                 for x, y in zip(a, b))
        diff = max((x - y).abs().max().item() if x.shape == y.shape else float("inf")
                   for x, y in zip(a, b))
        return ok, diff


def compare(case: str, ours: str, peer: str, s: Settings, make: Callable[[Settings], Pair],
            **extra) -> dict:
    """One row: build the pair (skip when the peer is missing), check, time, measure."""
    try:
        pair = make(s)
    except Missing as e:
        return skipped(case, ours, peer, TARGET, str(e))
    # the check runs in fp32 (on the same device): in bf16 rounding alone moves a sparse
    # support or a 6-layer output by more than any useful tolerance
    fp32 = s if s.dtype == torch.float32 else replace(s, dtype=torch.float32)
    ok, diff = (pair if fp32 is s else make(fp32)).check(fp32.tol)
    what = "outputs" + (" and input gradients" if pair.grad is not None else "")
    where = "" if fp32 is s else ", checked in fp32"
    equivalence = (f"{what} agree: max abs diff {diff:.1e} (tol {fp32.tol:g}{where})" if ok else
                   f"**differ**: max abs diff {diff:.1e} > tol {fp32.tol:g}{where}")
    if pair.differs:
        equivalence += f"; {pair.differs}"
    if not ok:  # timing two different computations would mean nothing
        return row(case, ours, peer, None, None, None, TARGET, False, equivalence=equivalence,
                   skipped="the equivalence check failed", **extra)
    ours_step, peer_step = pair.ours_step, pair.peer_step
    c, b = s.alternate(ours_step, peer_step)
    cp, bp = s.peak(ours_step), s.peak(peer_step)
    return row(case, ours, peer, c, b, c / b, TARGET, c / b <= 0.9 and cp <= bp, cp, bp,
               peak_ratio=cp / bp if bp else None, equivalence=equivalence, **extra)


# ---- the 6-layer encoder: nn.TransformerEncoder, x_transformers.Encoder, torch.compile ----------

ENCODER = dict(B=8, L=256, d=512, h=8, layers=6, d_ff=2048)


def encoder_ours(s: Settings, d: int, h: int, layers: int, d_ff: int, biases: bool = True):
    """Our generated 6-layer post-norm encoder (benchmarks/specs/encoder.attn), with layer
    norms away from their identity initialisation (so that a mis-copied one shows); without
    ``biases``, its layer-norm and W_O biases are 0 (x-transformers has none)."""
    mod = build("encoder.attn", "encoder")
    torch.manual_seed(0)
    ours = mod.Model(mod.Config(d_model=d, heads=h, layers=layers, d_ff=d_ff))
    with torch.no_grad():
        for layer in ours.encoder:
            for norm in (layer.x_1_norm, layer.x_2_norm):
                norm.weight.normal_(1.0, 0.1)
                norm.bias.normal_(0.0, 0.1) if biases else norm.bias.zero_()
            if not biases:
                layer.self_attn.out.bias.zero_()
    return ours


def _encoder_pair(s: Settings, ours: nn.Module, peer: nn.Module, B: int, L: int, d: int,
                  compile: bool = False, differs: str = "") -> Pair:
    ours, peer = s.put(ours), s.put(peer)
    if compile:
        ours, peer = torch.compile(ours), torch.compile(peer)
    x = s.randn(B, L, d, requires_grad=True)
    return Pair(lambda: ours(src=x).output, lambda: peer(x), [x], s.randn(B, L, d),
                (list(ours.parameters()), list(peer.parameters())), differs, (ours, peer))


def encoder_nn_pair(s: Settings, B=8, L=256, d=512, h=8, layers=6, d_ff=2048,
                    compile: bool = False) -> Pair:
    """Ours against nn.TransformerEncoder (post-norm, ReLU, dropout 0) with our weights; its
    in-projection bias (which our project() has not) is 0."""
    ours = encoder_ours(s, d, h, layers, d_ff)
    peer = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(d, h, d_ff, dropout=0.0, batch_first=True), layers,
        enable_nested_tensor=False)
    with torch.no_grad():
        for mine, theirs in zip(ours.encoder, peer.layers):
            theirs.self_attn.in_proj_weight.copy_(mine.self_qkv_proj.weight)
            theirs.self_attn.in_proj_bias.zero_()
            theirs.self_attn.out_proj.load_state_dict(mine.self_attn.out.state_dict())
            theirs.linear1.load_state_dict(mine.x_2_ffn[0].state_dict())
            theirs.linear2.load_state_dict(mine.x_2_ffn[2].state_dict())
            theirs.norm1.load_state_dict(mine.x_1_norm.state_dict())
            theirs.norm2.load_state_dict(mine.x_2_norm.state_dict())
    return _encoder_pair(s, ours, peer, B, L, d, compile)


def encoder_xt_pair(s: Settings, B=8, L=256, d=512, h=8, layers=6, d_ff=2048) -> Pair:
    """Ours against x_transformers.Encoder(pre_norm=False, attn_flash=True, ReLU feed-forward)
    with our weights; x-transformers has no W_O or layer-norm biases, so ours are 0."""
    xt = need("x_transformers")
    ours = encoder_ours(s, d, h, layers, d_ff, biases=False)
    peer = xt.Encoder(dim=d, depth=layers, heads=h, attn_dim_head=d // h, attn_flash=True,
                      pre_norm=False,
                      ff_custom_activation=nn.ReLU(), ff_mult=d_ff // d)
    with torch.no_grad():
        for i, mine in enumerate(ours.encoder):
            attn_norms, attn = peer.layers[2 * i][0], peer.layers[2 * i][1]
            ff_norms, ff = peer.layers[2 * i + 1][0], peer.layers[2 * i + 1][1]
            wq, wk, wv = mine.self_qkv_proj.weight.chunk(3, 0)
            attn.to_q.weight.copy_(wq)
            attn.to_k.weight.copy_(wk)
            attn.to_v.weight.copy_(wv)
            attn.to_out.weight.copy_(mine.self_attn.out.weight)
            # the post-main norms: normalise(x) * (gamma + unit_offset)
            attn_norms[2].gamma.copy_(mine.x_1_norm.weight - float(attn_norms[2].unit_offset))
            ff.ff[0][0].load_state_dict(mine.x_2_ffn[0].state_dict())
            ff.ff[2].load_state_dict(mine.x_2_ffn[2].state_dict())
            ff_norms[2].gamma.copy_(mine.x_2_norm.weight - float(ff_norms[2].unit_offset))
    return _encoder_pair(s, ours, peer, B, L, d,
                         differs="ours with W_O and layer-norm biases 0 (x-transformers has none)")


def _encoder_label(compiled: bool = False) -> str:
    e = ENCODER
    return (f"generated 6-layer encoder{' + torch.compile' if compiled else ''}, d {e['d']}, "
            f"{e['h']} heads, B {e['B']}, L {e['L']}, train step")


def encoder_vs_nn(s: Settings) -> list[dict]:
    return [compare("encoder_vs_nn", _encoder_label(), "nn.TransformerEncoder", s,
                    lambda s: encoder_nn_pair(s, **ENCODER))]


def encoder_vs_xtransformers(s: Settings) -> list[dict]:
    return [compare("encoder_vs_xtransformers", _encoder_label(),
                    "x_transformers.Encoder (attn_flash=True)", s,
                    lambda s: encoder_xt_pair(s, **ENCODER))]


def encoder_compiled(s: Settings) -> list[dict]:
    return [compare("encoder_compiled", _encoder_label(True),
                    "nn.TransformerEncoder + torch.compile", s,
                    lambda s: encoder_nn_pair(s, **ENCODER, compile=True))]


# ---- local attention: local_attention.LocalAttention ---------------------------------------------

class LocalPeer(nn.Module):
    """The multi-head block around LocalAttention: fused Q, K, V projection, 8 heads of the
    package's banded kernel, W_O; the same computation as our local(D = window) module with
    exact_windowsize (position i sees keys i - D .. i + D; no rotary embedding)."""

    def __init__(self, local_attention, d: int, h: int, window: int):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.attn = local_attention.LocalAttention(
            window_size=window, causal=False, look_backward=1, look_forward=1,
            exact_windowsize=True, autopad=True)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        B, L, d = x.shape
        q, k, v = (t.view(B, L, self.h, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        c = self.attn(q, k, v)  # (B, h, L, d / h)
        return self.out(c.transpose(1, 2).reshape(B, L, d))


LOCAL = dict(B=2, L=4096, d=512, h=8, window=64)


def local_pair(s: Settings, B=2, L=4096, d=512, h=8, window=64) -> Pair:
    la = need("local_attention")
    mod = build("local_mha.attn", "local")
    torch.manual_seed(0)
    ours = mod.Model(mod.Config(d_model=d, heads=h))
    if getattr(ours.self_attn, "window", window) != window:
        raise ValueError(f"benchmarks/specs/local_mha.attn has D != {window}")
    peer = LocalPeer(la, d, h, window)
    with torch.no_grad():
        peer.qkv.weight.copy_(ours.self_qkv_proj.weight)
        peer.out.load_state_dict(ours.self_attn.out.state_dict())
    ours, peer = s.put(ours), s.put(peer)
    x = s.randn(B, L, d, requires_grad=True)
    return Pair(lambda: ours(x=x).output, lambda: peer(x), [x], s.randn(B, L, d),
                (list(ours.parameters()), list(peer.parameters())), modules=(ours, peer))


def local_vs_package(s: Settings) -> list[dict]:
    e = LOCAL
    return [compare("local_vs_local_attention",
                    f"generated local attention, D {e['window']}, L {e['L']}, {e['h']} heads, "
                    f"d {e['d']}, B {e['B']}, train step",
                    "local_attention.LocalAttention (exact_windowsize)", s,
                    lambda s: local_pair(s, **LOCAL))]


def local_single_head_peer(s: Settings):
    """For the scaling curve of cases.local: L -> a train step of LocalAttention alone on
    (2, L, 64) (q = k = v = x, window 64, exact), checked first against our local.attn;
    None when the package is not installed."""
    try:
        la = need("local_attention")
    except Missing:
        return None
    attn = s.put(la.LocalAttention(window_size=64, causal=False, look_backward=1,
                                   look_forward=1, exact_windowsize=True, autopad=True))
    mod = build("local.attn", "local")
    ours = s.put(mod.Model(mod.Config(d=64)))
    x = s.randn(1, 256, 64, requires_grad=True)
    ok, diff = Pair(lambda: ours(x=x).output, lambda: attn(x, x, x), [x], s.randn(1, 256, 64)
                    ).check(s.tol)
    if not ok:
        raise AssertionError(f"local.attn and LocalAttention differ by {diff:.1e}")

    def make(L: int):
        x = s.randn(2, L, 64, requires_grad=True)
        g = s.randn(2, L, 64)

        def step():
            x.grad = None
            attn(x, x, x).backward(g)
        return step
    return make


# ---- the sparse alignments: entmax.sparsemax, entmax.entmax15 ------------------------------------

SPARSE_SHAPE = (8, 8, 512, 512)


def sparse_pair(s: Settings, which: str, shape=SPARSE_SHAPE) -> Pair:
    """Our generated alignment function (`sparsemax` or `entmax15` of the module compiled
    from benchmarks/specs/sparse.attn) against the entmax package's, on the same scores."""
    em = need("entmax")
    mod = build("sparse.attn", which)
    ours_fn = mod.sparsemax if which == "sparsemax" else mod.entmax15
    peer_fn = em.sparsemax if which == "sparsemax" else em.entmax15
    torch.manual_seed(0)
    e = s.randn(*shape, requires_grad=True)
    return Pair(lambda: ours_fn(e, None, -1), lambda: peer_fn(e, dim=-1), [e], s.randn(*shape))


def sparsemax_vs_entmax(s: Settings) -> list[dict]:
    return [compare("sparsemax_vs_entmax", f"generated sparsemax alignment, {SPARSE_SHAPE}, "
                    "forward + backward", "entmax.sparsemax", s,
                    lambda s: sparse_pair(s, "sparsemax"))]


def entmax15_vs_entmax(s: Settings) -> list[dict]:
    return [compare("entmax15_vs_entmax", f"generated 1.5-entmax alignment, {SPARSE_SHAPE}, "
                    "forward + backward", "entmax.entmax15", s,
                    lambda s: sparse_pair(s, "entmax"))]


# ---- graph attention: torch_geometric GATConv -------------------------------------------------------

GAT_SPEC = ROOT / "examples" / "gat.attn"  # the paper's 2-layer model (the language has it)
GRAPH = dict(N=2000, degree=10, heads=8, d=512)
NOT_YET = "graph attention not in the language yet (issue 14)"


def random_graph(N: int, degree: int, seed: int = 0) -> torch.Tensor:
    """edge_index (2, N * degree): each node receives `degree` edges from random sources."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.arange(N).repeat_interleave(degree)
    src = torch.randint(0, N, (N * degree,), generator=g)
    return torch.stack([src, dst])


def gat_pair(s: Settings, N=2000, degree=10, heads=8, d=512) -> Pair:
    """One GAT layer, benchmarks/specs/gat_layer.attn (node features (1, N, d), the graph an
    edge list (2, E), the sparse path), against GATConv(d, d / heads, heads) with its default
    self loops, our weights copied in (W, a_src, a_dst, the bias)."""
    pyg = need("torch_geometric.nn")
    mod = build("gat_layer.attn", "gat")
    torch.manual_seed(0)
    ours = mod.Model(mod.Config(d=d, heads=heads)).eval()
    peer = pyg.GATConv(d, d // heads, heads=heads).eval()
    with torch.no_grad():
        ours.layer.bias.normal_(0.0, 0.1)  # away from its zero initialisation
        peer.lin.weight.copy_(ours.wh_proj.weight)
        peer.att_src.copy_(ours.layer.att_src.view(1, heads, -1))
        peer.att_dst.copy_(ours.layer.att_dst.view(1, heads, -1))
        peer.bias.copy_(ours.layer.bias)
    ours, peer = s.put(ours), s.put(peer)
    edges = random_graph(N, degree).to(s.device)
    x = s.randn(1, N, d, requires_grad=True)
    return Pair(lambda: ours(x, edges, validate=False).output[0], lambda: peer(x[0], edges),
                [x], s.randn(N, d), (list(ours.parameters()), list(peer.parameters())),
                modules=(ours, peer))


def gat_vs_pyg(s: Settings) -> list[dict]:
    e = GRAPH
    ours = (f"generated graph attention (edge list), N {e['N']}, degree {e['degree']}, "
            f"{e['heads']} heads, d {e['d']}, train step")
    r = compare("gat_vs_gatconv", ours, "torch_geometric GATConv", s,
                lambda s: gat_pair(s, **GRAPH))
    if r["ratio"] is not None:  # the curve vs N x degree (bench_graph_scaling.png)
        r["curve"] = {}
        sizes = ((1000, 5), (2000, 10)) if s.quick else \
            ((500, 10), (2000, 5), (2000, 10), (2000, 20), (8000, 10), (20000, 10))
        for N, degree in sizes:
            pair = gat_pair(s, **{**GRAPH, "N": N, "degree": degree})
            t = s.alternate(pair.ours_step, pair.peer_step)
            r["curve"][str(N * degree)] = {
                "ours_s": t[0], "peer_s": t[1], "ours_peak_bytes": s.peak(pair.ours_step),
                "peer_peak_bytes": s.peak(pair.peer_step)}
    return [r]


CASES = [encoder_vs_nn, encoder_vs_xtransformers, encoder_compiled, local_vs_package,
         sparsemax_vs_entmax, entmax15_vs_entmax, gat_vs_pyg]
