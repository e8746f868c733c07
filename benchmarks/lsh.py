"""LSH attention (`align = lsh(…)`, Kitaev et al. 2020): the sort-and-chunk path against
global self-attention (the fused SDPA kernel) at the same length, forward + backward, in the
same run. Reformer's point is that the cost grows as O(L · chunk · rounds) where global
attention's grows as O(L²): the ratio at the longest L is the target, and the scaling from
the shortest to the longest L is reported beside it. Before timing, the chunked path is
checked against the explicit one (the weights' path) on the same input."""

from __future__ import annotations

import torch


def _step(s, mod, L: int, B: int, d: int, **cfg):
    from .cases import train_step

    torch.manual_seed(0)
    model = s.put(mod.Model(mod.Config(d=d, **cfg))).eval()  # eval: the rotations are fixed
    x = s.randn(B, L, d, requires_grad=True)
    return train_step(model, lambda: model(x=x).output, s.randn(B, L, d), [x])


def lsh_vs_global(s) -> list[dict]:
    from .cases import build, row

    lsh, full = build("lsh.attn", "lsh"), build("lsh.attn", "full")
    d, B, chunk, rounds = 64, 2, 64, 2
    m = s.put(lsh.Model(lsh.Config(d=d, buckets=8, chunk=16, rounds=rounds))).eval()
    x = s.randn(1, 300, d)
    with torch.no_grad():  # the chunked path computes the explicit path's function
        fast, slow = m(x=x).output, m(x=x, return_attention=True).output
        assert torch.allclose(fast, slow, atol=s.tol), (fast - slow).abs().max()
    lengths = (2048, 8192) if s.quick else (4096, 16384)
    times, peaks = {}, {}
    for L in lengths:
        cfg = dict(buckets=L // chunk, chunk=chunk, rounds=rounds)  # ~chunk keys per bucket
        sides = (_step(s, lsh, L, B, d, **cfg), _step(s, full, L, B, d))
        times[L] = s.alternate(*sides)
        peaks[L] = [s.peak(fn) for fn in sides]
    lo, hi = lengths
    vs = times[hi][0] / times[hi][1]
    scale = times[hi][0] / times[lo][0]
    return [
        row("lsh_vs_global", f"LSH attention ({hi // chunk} buckets, {rounds} rounds, chunks "
            f"of {chunk}), L={hi}, forward + backward", f"global attention (fused SDPA), "
            f"L={hi}", times[hi][0], times[hi][1], vs, "< 1", vs < 1, peaks[hi][0],
            peaks[hi][1], scaling=scale, global_scaling=times[hi][1] / times[lo][1],
            lengths=list(lengths)),
    ]


CASES = [lsh_vs_global]
