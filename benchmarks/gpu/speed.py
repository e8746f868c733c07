"""Speed and peak memory against the peers, side by side in one run, at the sizes where GPUs
are used (bf16 on CUDA) or at small sizes on the CPU (float32). Every row goes through
``benchmarks.peers.compare``: both sides are checked to compute the same function first (in
float32), then timed alternately and their peak memory measured. A peer that is not
installed gives a skipped row with the reason.

torch.compile rows use inductor on CUDA; on the CPU (the kit's own test) the "eager"
backend, so that the row runs (dynamo traces the model) without minutes of compiling. A
compiled row is checked in the dtype it runs in (``compare_here``): a float32 check would
compile every module a second time, and the eager rows have checked both sides in float32.
"""

from __future__ import annotations

import math

import torch

from .. import peers
from ..cases import Settings, _mha, build, row
from ..peers import Pair, compare

# name -> (GPU sizes, CPU sizes)
SIZES = {
    "encoder": (dict(B=8, L=1024, d=512, h=8, layers=6, d_ff=2048),
                dict(B=2, L=64, d=64, h=4, layers=2, d_ff=128)),
    "mha": (dict(B=8, L=2048, d=1024, h=16), dict(B=2, L=64, d=64, h=4)),
    "positions": (dict(B=8, L=2048, d=512), dict(B=2, L=64, d=256)),
    "local": (dict(B=8, L=8192, d=512, h=8, window=64), dict(B=1, L=512, d=64, h=4, window=64)),
    "sparse": ((8, 8, 1024, 1024), (2, 2, 64, 64)),
    "gat": (dict(N=20000, degree=10, heads=8, d=512), dict(N=200, degree=5, heads=4, d=64)),
    "generate": (dict(d_model=512, heads=8, layers=6, d_ff=2048, vocab=32000, B=8, src=128,
                      tokens=128),
                 dict(d_model=64, heads=4, layers=2, d_ff=128, vocab=100, B=2, src=16,
                      tokens=8)),
    "core": (dict(B=8, H=16, L=4096, D=64, n=8192), dict(B=2, H=2, L=128, D=64, n=256)),
}


def settings(ctx) -> Settings:
    cuda = ctx.device == "cuda"
    return Settings(repeats=5 if cuda else 2, local_lengths=(), device=torch.device(ctx.device),
                    dtype=torch.bfloat16 if cuda else torch.float32, quick=not cuda)


def size(ctx, name: str):
    return SIZES[name][0 if ctx.device == "cuda" else 1]


def relative_error(pair: Pair) -> float:
    """The largest relative L2 error ||ours - peer|| / ||peer|| over the outputs and input
    gradients (robust to bf16's scattered rounding, unlike an elementwise tolerance)."""
    a, b = pair._outputs(pair.ours), pair._outputs(pair.peer)
    return max(((x - y).norm() / y.norm().clamp_min(1e-30)).item() if x.shape == y.shape
               else float("inf") for x, y in zip(a, b))


def compare_here(case: str, ours: str, peer: str, s: Settings, make, note: str) -> dict:
    """peers.compare, with the equivalence checked in the run's dtype: relative L2 error at
    most 1e-4 in float32, 5e-2 in bf16 (a wrong weight or term is off by about 1)."""
    try:
        pair = make(s)
    except peers.Missing as e:
        return peers.skipped(case, ours, peer, peers.TARGET, str(e))
    err, tol = relative_error(pair), (1e-4 if s.dtype == torch.float32 else 5e-2)
    ok = err <= tol
    dtype = str(s.dtype).replace("torch.", "")
    eq = (f"outputs and input gradients agree in {dtype}: relative L2 error {err:.1e} (tol "
          f"{tol:g}); {note}" if ok else f"**differ** in {dtype}: relative L2 error {err:.1e} "
          f"> {tol:g}")
    if not ok:
        return row(case, ours, peer, None, None, None, peers.TARGET, False, equivalence=eq,
                   skipped="the equivalence check failed")
    c, b = s.alternate(pair.ours_step, pair.peer_step)
    cp, bp = s.peak(pair.ours_step), s.peak(pair.peer_step)
    return row(case, ours, peer, c, b, c / b, peers.TARGET, c / b <= 0.9 and cp <= bp, cp, bp,
               peak_ratio=cp / bp if bp else None, equivalence=eq)


def compiled(pair: Pair, s: Settings, call_ours, call_peer) -> Pair:
    """The same pair with both modules under torch.compile (inductor on CUDA)."""
    backend = "inductor" if s.device.type == "cuda" else "eager"
    ours, peer = (torch.compile(m, backend=backend) for m in pair.modules)
    x = pair.inputs[0]
    return Pair(lambda: call_ours(ours, x), lambda: call_peer(peer, x), pair.inputs, pair.grad,
                pair.params, pair.differs, (ours, peer))


def _label(e: dict, what: str) -> str:
    return f"{what}, " + ", ".join(f"{k} {v}" for k, v in e.items())


def _encoders(ctx):
    e = size(ctx, "encoder")
    return e, (("encoder_vs_nn", "nn.TransformerEncoder", lambda s: peers.encoder_nn_pair(s, **e)),
               ("encoder_vs_xtransformers", "x_transformers.Encoder (attn_flash=True)",
                lambda s: peers.encoder_xt_pair(s, **e)))


def encoder(ctx) -> None:
    s, (e, rows) = settings(ctx), _encoders(ctx)
    for case, peer, make in rows:
        ctx.emit(compare(case, _label(e, "generated encoder, train step"), peer, s, make))


def encoder_compiled(ctx) -> None:
    s, (e, rows) = settings(ctx), _encoders(ctx)
    ours_call, peer_call = (lambda m, x: m(src=x).output), (lambda m, x: m(x))
    for case, peer, make in rows:
        ctx.emit(compare_here(case + "_compiled",
                              _label(e, "generated encoder + torch.compile, train step"),
                              peer + " + torch.compile", s,
                              lambda s, make=make: compiled(make(s), s, ours_call, peer_call),
                              "both sides compiled; the eager row checked them in float32"))


def mha(ctx) -> None:
    s, e = settings(ctx), size(ctx, "mha")

    def make(s):
        cand, base, x = _mha(s, **e)
        x.requires_grad_(True)
        return Pair(lambda: cand(x=x).output, lambda: base(x, x, x, need_weights=False)[0], [x],
                    torch.randn_like(x), (list(cand.parameters()), list(base.parameters())),
                    "nn.MultiheadAttention's in-projection bias is 0", (cand, base))
    ctx.emit(compare("mha_train", _label(e, "generated MHA block, forward + backward"),
                     "nn.MultiheadAttention(need_weights=False)", s, make))


def dense_bias(term: str, att, q, L: int) -> torch.Tensor:
    """The position term as a dense (B | 1, H, L, L) float bias, -inf where masked."""
    H, dev = att.heads, q.device
    i, j = torch.arange(L, device=dev)[:, None], torch.arange(L, device=dev)
    if term == "alibi":
        slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, device=dev) / H)
        bias = -slopes.view(-1, 1, 1) * (i - j).abs()
        return bias.masked_fill(j > i, -math.inf).unsqueeze(0).to(q.dtype)
    rel = (j - i).clamp(-att.clip, att.clip) + att.clip  # Shaw et al.: q_i a^K_ij
    qa = q @ att.rel_k.weight.T.to(q.dtype) / math.sqrt(q.shape[-1])  # (N, H, L, 2k + 1)
    return qa.gather(-1, rel.expand(*qa.shape[:2], L, L))


def positions(ctx) -> None:
    s, e = settings(ctx), size(ctx, "positions")
    cuda = ctx.device == "cuda"
    for term in ("alibi", "relative"):
        def make(s, term=term):
            mod = build("positions.attn", term)
            torch.manual_seed(0)
            model = s.put(mod.Model(mod.Config(d=e["d"])))
            att = model.self_attn
            run = torch.compile(model) if cuda else model  # FlexAttention: compiled, on CUDA
            x = s.randn(e["B"], e["L"], e["d"], requires_grad=True)

            def dense():
                N, L, _ = x.shape
                q, k, v = (t.view(N, L, att.heads, -1).transpose(1, 2)
                           for t in (model.self_q_proj(x), x, x))
                c = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=dense_bias(term, att, q, L))
                return att.out(c.transpose(1, 2).reshape(N, L, -1))
            return Pair(lambda: run(x=x, validate=False).output, dense, [x], s.randn(*x.shape),
                        (list(model.parameters()), list(model.parameters())),
                        modules=(model, None))
        path = "FlexAttention (torch.compile)" if cuda else "the explicit path (CPU)"
        ctx.emit(compare_here(f"position_{term}",
                              _label(e, f"{term} term through {path}, train step"),
                              f"the {term} term as a dense bias in SDPA (attn_mask)", s, make,
                              "the same weights"))
    ctx.emit(row("position_rotary", "rotary", "", None, None, None, "(report)", None,
                 skipped="rotary rotates q and k before the product: no score term to write "
                         "as a dense bias"))


def alignments(ctx) -> None:
    s = settings(ctx)
    e = size(ctx, "local")
    ctx.emit(compare("local_vs_local_attention", _label(e, "generated local attention, train step"),
                     "local_attention.LocalAttention (exact_windowsize)", s,
                     lambda s: peers.local_pair(s, **e)))
    shape = size(ctx, "sparse")
    for which, peer in (("sparsemax", "entmax.sparsemax"), ("entmax", "entmax.entmax15")):
        ctx.emit(compare(f"{which}_vs_entmax", f"generated {which} alignment, {shape}, forward + "
                         "backward", peer, s, lambda s, w=which: peers.sparse_pair(s, w, shape)))


def gat(ctx) -> None:
    s, e = settings(ctx), size(ctx, "gat")
    ctx.emit(compare("gat_vs_gatconv", _label(e, "generated graph attention, train step"),
                     "torch_geometric GATConv", s, lambda s: peers.gat_pair(s, **e)))


STAGES = {"speed_encoder": encoder, "speed_compile": encoder_compiled, "speed_mha": mha, "speed_positions": positions,
          "speed_alignments": alignments, "speed_gat": gat}
