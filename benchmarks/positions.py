"""Position terms in the scores (issue 27): each is written once, as FlexAttention's
``score_mod(s, b, h, i, j)``, and the explicit path (the CPU's, and any path that returns the
weights) evaluates that function over broadcast index grids. Against the same attention with
the term written directly into the scores, as the generator wrote it before (Shaw et al.'s
q_i a^K_ij with a gather, ALiBi's -m_h |i - j| and Yang et al.'s Gaussian bias as broadcasts),
the same weights, forward + backward: the grid must cost nothing."""

from __future__ import annotations

import math

import torch

B, L, D = 4, 256, 256


def direct(mod, att, q, k, v, term: str) -> torch.Tensor:
    """The module's explicit path (its own helpers: key_keep, masked_softmax) with the term
    added directly, as before issue 27: the baseline."""
    N, Lq, _ = q.shape
    H = att.heads
    q, k, v = (x.view(N, -1, H, x.shape[-1] // H).transpose(1, 2) for x in (q, k, v))
    e = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])  # (N, H, Lq, Lk)
    i, j = torch.arange(Lq)[:, None], torch.arange(k.shape[2])
    if term == "relative":
        rel = (j - i).clamp(-att.clip, att.clip) + att.clip
        qa = q @ att.rel_k.weight.T / math.sqrt(k.shape[-1])  # (N, H, Lq, 2k + 1)
        e = e + qa.gather(-1, rel.expand_as(e))
    elif term == "alibi":
        slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1) / H)
        e = e - slopes.view(-1, 1, 1) * (i - j).abs()
    else:  # gaussian
        h_loc = torch.tanh(att.loc_w(q))
        centre = k.shape[2] * torch.sigmoid(att.loc_p(h_loc))
        sigma = k.shape[2] * torch.sigmoid(att.loc_d(h_loc)) / 2
        e = e - (j - centre) ** 2 / (2 * sigma ** 2)
    keep = mod.key_keep(None, att.mask, Lq, k.shape[2], q.device)
    c = mod.masked_softmax(e, keep, dim=3) @ v  # (N, H, Lq, d_v / H)
    return att.out(c.transpose(1, 2).reshape(N, Lq, -1))


def position_terms(s) -> list[dict]:
    from .cases import build, row, train_step  # (cases lists this module in CASE_MODULES)

    rows = []
    for term in ("relative", "alibi", "gaussian"):
        mod = build("positions.attn", term)
        torch.manual_seed(0)
        model = mod.Model(mod.Config(d=D))
        att = model.self_attn
        x = torch.randn(B, L, D, requires_grad=True)
        g = torch.randn(B, L, D)

        def cand_out(model=model, x=x):
            return model(x=x).output  # need_weights=False: the explicit path on the CPU

        def base_out(model=model, att=att, x=x, term=term):
            return direct(mod, att, model.self_q_proj(x), x, x, term)

        with torch.no_grad():
            assert torch.allclose(cand_out(), base_out(), atol=1e-4), f"{term}: the sides differ"
        params = [x, *model.parameters()]
        c, b = s.alternate(train_step(model, cand_out, g, params),
                           train_step(model, base_out, g, params))
        rows.append(row(f"position_{term}", f"{term} term as a score_mod over index grids, "
                        f"B={B} L={L} d={D} H=4, forward + backward",
                        "the term written directly into the scores (gather / broadcast)",
                        c, b, c / b, "<= 1.1", c / b <= 1.1,
                        equivalence="outputs agree (tol 1e-4)"))
    return rows


CASES = [position_terms]
