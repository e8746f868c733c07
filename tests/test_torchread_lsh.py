"""LSH attention's sorted chunks read from code (taxcompile/torchread/lsh_chunks.py): a
Reformer-style layer written here (not taxcompile's code: heads folded into the batch, the
rounds hashed and sorted as one sequence with offset buckets, the look-back by slices, keys
normalised after sorting, exp(e - logsumexp e)), checked against a brute-force oracle and
read as the registry's `lsh`; near misses that must not read as LSH (blocks of positions,
chunks without a hash, a hash no sort uses, one chunk of every key); exp(e - logsumexp e)
over a whole row read as the softmax it is; and taxcompile's own fast path cut in several
chunks, each beside the one before."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import taxcompile
from taxcompile import api

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
SELF, OUT = -1e5, -1e9  # a query's own key, a key of another bucket (Reformer's masks)


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Reformer(nn.Module):
    """Kitaev et al. (2020) §2, written for this test. Shared QK over ``heads`` heads folded
    into the batch; each of ``rounds`` rounds hashes h(x) = argmax([xR_r; -xR_r]) with a
    random rotation R_r; the rounds' buckets offset so that one sort of (bucket, position)
    over all rounds orders every round apart; the sorted sequence cut into chunks of
    ``chunk``, each chunk's queries scoring the unit-length keys of their chunk and the one
    before (the first looks back at the last); a query skips its own key unless it has no
    other, and (``bucket_mask``) keys of another bucket; each chunk normalised by
    exp(e - logsumexp e) (``norm="lse"``) or a softmax; the contexts put back in the
    positions' order and the rounds weighted by exp(lse_r - logsumexp_r lse_r).

    The near misses: ``sort_by="position"`` (fixed blocks of positions: the hash, if any,
    orders nothing), ``hashed=False`` (no hash at all: blocks of positions),
    ``put_back=False`` (the contexts left in the sorted order); ``put_back="scatter"``
    writes each sorted row at its position instead of gathering by the inverse order."""

    def __init__(self, d=16, heads=2, buckets=4, rounds=2, chunk=4, bucket_mask=True,
                 norm="lse", sort_by="hash", hashed=True, put_back=True):
        super().__init__()
        self.h, self.nb, self.rounds, self.chunk = heads, buckets, rounds, chunk
        self.bucket_mask, self.norm, self.sort_by, self.hashed = bucket_mask, norm, sort_by, hashed
        self.put_back = put_back
        self.qk, self.v = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, d)
        self.register_buffer("rot", _x(rounds, d // heads, buckets // 2, seed=5))

    def hash(self, x):
        """(BH, R L) buckets, round r's offset by r * buckets."""
        xr = torch.einsum("bld,rdk->brlk", x, self.rot)
        b = torch.cat([xr, -xr], -1).argmax(-1)  # (BH, R, L)
        return (b + torch.arange(self.rounds).view(1, -1, 1) * self.nb).flatten(1)

    def split(self, t):
        B, L, _ = t.shape
        return t.view(B, L, self.h, -1).transpose(1, 2).reshape(B * self.h, L, -1)

    def forward(self, x):
        B, L, _ = x.shape
        qk, v = self.split(self.qk(x)), self.split(self.v(x))
        BH, R, c = qk.shape[0], self.rounds, self.chunk
        ticker = torch.arange(R * L).expand(BH, -1)  # (BH, R L)
        if self.hashed:
            buckets = self.hash(qk)
        else:  # the rounds' blocks apart, no hash
            buckets = (ticker // L).contiguous()
        key = L * buckets + ticker % L if self.sort_by == "hash" else ticker
        skey, sorted_at = key.sort(-1)
        st = ticker.gather(1, sorted_at)  # the sorted positions, round by round
        undo = st.sort(-1)[1] if self.put_back else ticker  # the near miss: left sorted

        def sort(t):
            return t.gather(1, (st % L).unsqueeze(-1).expand(-1, -1, t.shape[-1]))

        def look_back(t):  # each chunk beside the one before
            return torch.cat([t, torch.cat([t[:, -1:], t[:, :-1]], 1)], 2)

        n = R * L // c
        sq, sv = sort(qk).view(BH, n, c, -1), sort(v).view(BH, n, c, -1)
        sk = look_back(F.normalize(sq, p=2, dim=-1))
        pq = (st % L).view(BH, n, c)
        pk = look_back(pq)
        dots = sq @ sk.transpose(-1, -2) * sq.shape[-1] ** -0.5  # (BH, n, c, 2c)
        dots = dots.masked_fill(pq.unsqueeze(-1) == pk.unsqueeze(-2), SELF)
        if self.bucket_mask:
            bq = (skey // L).view(BH, n, c)
            dots = dots.masked_fill(bq.unsqueeze(-1) != look_back(bq).unsqueeze(-2), OUT)
        if self.norm == "lse":
            lse = torch.logsumexp(dots, -1, keepdim=True)
            w = torch.exp(dots - lse)
        else:
            w = dots.softmax(-1)
        o = (w @ look_back(sv)).reshape(BH, R * L, -1)
        if self.put_back == "scatter":  # each sorted row written at its position
            o = torch.zeros_like(o).scatter(1, st.unsqueeze(-1).expand_as(o), o)
            lse = torch.zeros(BH, R * L, dtype=o.dtype).scatter(1, st, lse.reshape(BH, -1))
        else:
            o = o.gather(1, undo.unsqueeze(-1).expand(-1, -1, o.shape[-1]))
            lse = lse.reshape(BH, R * L).gather(1, undo) if self.norm == "lse" else None
        o = o.view(BH, R, L, -1)
        if self.norm == "lse":
            lse = lse.view(BH, R, L)
            p = torch.exp(lse - torch.logsumexp(lse, 1, keepdim=True))
            c_ = (o * p.unsqueeze(-1)).sum(1)
        else:
            c_ = o.sum(1)  # one round (the softmax keeps no normaliser)
        return self.out(c_.view(B, self.h, L, -1).transpose(1, 2).reshape(B, L, -1))


def _oracle(m, x):
    """float64, query by query: in each round the keys of the query's bucket (offset by the
    round) among the sorted positions of its chunk and the chunk before (cyclic over the
    rounds' sequence), not its own unless none other; a softmax of q_i . k_j / |k_j| /
    sqrt(d) over them, the rounds weighted by the softmax of their logsumexps (a round
    where the query meets only itself scores it SELF, as Reformer's mask does)."""
    B, L, _ = x.shape
    qk, v = m.split(m.qk(x)), m.split(m.v(x))
    BH, R, c, d = qk.shape[0], m.rounds, m.chunk, qk.shape[-1]
    out = torch.zeros_like(qk)
    for b in range(BH):
        buckets = []  # per (round, position), computed apart from the module's hash
        for r in range(R):
            for i in range(L):
                xr = qk[b, i] @ m.rot[r]
                buckets.append(int(torch.cat([xr, -xr]).argmax()) + r * m.nb)
        order = sorted(range(R * L), key=lambda t: (buckets[t], t % L))  # ticks by sort key
        place = {t: s for s, t in enumerate(order)}
        n = R * L // c
        for i in range(L):
            ctx, lses = [], []
            for r in range(R):
                s = place[r * L + i]
                ch = s // c
                near = [order[ch * c + j] for j in range(c)] + \
                    [order[((ch - 1) % n) * c + j] for j in range(c)]
                same = [t for t in near if buckets[t] == buckets[r * L + i]]
                keys = [t for t in same if t % L != i]
                e = torch.stack([qk[b, i] @ (qk[b, t % L] / qk[b, t % L].norm()) / math.sqrt(d)
                                 for t in keys]) if keys else torch.tensor([SELF]).double()
                keys = keys or [r * L + i]  # alone: its own value, the round's lse SELF
                a = e.softmax(0)
                ctx.append(sum(w * v[b, t % L] for w, t in zip(a, keys)))
                lses.append(torch.logsumexp(e, 0))
            wr = torch.stack(lses).softmax(0)
            out[b, i] = sum(w * cr for w, cr in zip(wr, ctx))
    return m.out(out.view(B, m.h, L, -1).transpose(1, 2).reshape(B, L, -1))


def _read(model, *inputs):
    res = taxcompile.classify(model, inputs)
    return res, res.recognised


def test_the_layer_is_lsh_attention():
    """The oracle: the layer written here computes LSH attention as its docstring says
    (float64, position by position), and its hashes spread over several buckets."""
    m = Reformer().double().eval()
    x = _x(2, 16, 16, seed=3).double()
    assert len(set(m.hash(m.split(m.qk(x))).flatten().tolist())) > 4
    assert torch.allclose(m(x), _oracle(m, x), atol=1e-9)
    m.put_back = "scatter"
    assert torch.allclose(m(x), _oracle(m, x), atol=1e-9)


@pytest.mark.parametrize("bucket_mask, put_back", [(True, True), (False, True),
                                                   (True, "scatter")],
                         ids=["bucket_mask", "chunks_alone", "scattered_back"])
def test_a_reformer_layer_written_by_hand_reads_as_lsh(bucket_mask, put_back):
    res, got = _read(Reformer(bucket_mask=bucket_mask, put_back=put_back).eval(),
                     _x(2, 16, 16, seed=3))
    assert len(got) == 1 and len(res.attentions) == 1, res.text()  # the rounds' softmax is part of it
    a = got[0]
    assert a.names == {"score": "scaled_multiplicative", "align": "lsh"}, res.text()
    row = res.row()
    assert (row["scoring"], row["alignment"], row["query_type"], row["query_multiplicity"],
            row["dimensionality"]) == ("Scaled Multiplicative", "Sparse", "Self-Attentive",
                                       "Multi-Head", "Single-Dimensional"), res.text()
    why = a.values["alignment"][1]
    assert "argmax([xR; -xR])" in why and "_rot`" in why and "exp(e - logsumexp e)" in why
    assert "each beside the one before" in why  # 8 of the 16 sorted keys, and the look-back
    assert ("compares the hashed codes" in why) == bucket_mask
    assert a.heads == 2 and "folds 2 heads" in a.values["query_multiplicity"][1]


def test_a_softmax_over_sorted_chunks_of_one_round_reads_as_lsh():
    res, got = _read(Reformer(rounds=1, norm="softmax").eval(), _x(2, 16, 16, seed=3))
    assert [a.names.get("align") for a in got] == ["lsh"], res.text()
    assert "by a softmax" in got[0].values["alignment"][1]


def _not_lsh(res):
    assert all(a.names.get("align") != "lsh" for a in res.recognised), res.text()
    assert all(a.values["alignment"][0] != "Sparse" for a in res.recognised), res.text()


@pytest.mark.parametrize("kw", [dict(sort_by="position", bucket_mask=False),
                                dict(hashed=False, bucket_mask=False),
                                dict(hashed=False, sort_by="position", bucket_mask=False),
                                dict(sort_by="position", bucket_mask=True)],
                         ids=["hash_orders_nothing", "sorted_blocks_no_hash", "fixed_blocks",
                              "buckets_in_fixed_blocks"])
def test_chunks_of_positions_are_no_lsh(kw):
    """Near misses: the same chunks and look-back over positions sorted by position (fixed
    blocks), or by a key with no hash in it, or hashed but sorted by position with no bucket
    compared (or with one, by position: a hybrid the reader does not name): which keys a
    query meets follows no hash. Refused, not read as every key with the chunks for heads."""
    res = taxcompile.classify(Reformer(**kw).eval(), (_x(2, 16, 16, seed=3),))
    _not_lsh(res)
    assert not res.recognised, res.text()
    assert "meet 8 of its 32 sorted positions, but no hash" in res.attentions[0].why_not


def test_contexts_left_in_the_sorted_order_are_refused():
    """Near miss: hashed, sorted and chunked, but no context goes back to its position
    (each row of the output is some other position's): the rest of LSH is not found."""
    res = taxcompile.classify(Reformer(put_back=False).eval(), (_x(2, 16, 16, seed=3),))
    _not_lsh(res)
    assert not res.recognised and "contexts put back" in res.attentions[0].why_not, res.text()


class Blocks(nn.Module):
    """Near miss: chunked attention with no hash and no sort, each block of positions beside
    the one before, normalised by exp(e - logsumexp e)."""

    def __init__(self, d=8, chunk=4):
        super().__init__()
        self.q, self.k, self.v, self.chunk = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), chunk

    def forward(self, x):
        B, L, d = x.shape
        n, c = L // self.chunk, self.chunk
        q, k, v = (f(x).view(B, n, c, d) for f in (self.q, self.k, self.v))
        k, v = (torch.cat([t, torch.cat([t[:, :1] * 0, t[:, :-1]], 1)], 2) for t in (k, v))
        e = q @ k.transpose(-1, -2) / math.sqrt(d)
        return (torch.exp(e - e.logsumexp(-1, keepdim=True)) @ v).view(B, L, d)


def test_chunked_attention_without_a_hash_is_no_lsh():
    """(It reads as a softmax over every key, its blocks taken for heads: blocks cut by a
    view, not by `unfold` nor a sort, are not read as a window; no LSH either way.)"""
    res = taxcompile.classify(Blocks(), (_x(2, 8, 8),))
    assert res.recognised, res.text()
    _not_lsh(res)


class SortedWhole(Reformer):
    """Near miss: sorted by hash, but one chunk of every key and no bucket compared: a
    softmax over every key in another order."""

    def __init__(self):
        super().__init__(rounds=1, chunk=16, bucket_mask=False, norm="softmax")

    def forward(self, x):
        qk, v = self.split(self.qk(x)), self.split(self.v(x))
        L = qk.shape[1]
        order = (L * self.hash(qk) + torch.arange(L)).argsort(-1)
        idx = order.unsqueeze(-1).expand(-1, -1, qk.shape[-1])
        sq, sv = qk.gather(1, idx), v.gather(1, idx)
        o = (sq @ F.normalize(sq, dim=-1).transpose(-1, -2) / 8 ** 0.5).softmax(-1) @ sv
        o = o.gather(1, order.argsort(-1).unsqueeze(-1).expand_as(o))
        return o.view(x.shape[0], self.h, L, -1).transpose(1, 2).reshape(x.shape)


def test_one_sorted_chunk_of_every_key_is_no_lsh():
    res = taxcompile.classify(SortedWhole().eval(), (_x(2, 16, 16, seed=3),))
    assert [a.values["alignment"][0] for a in res.recognised] == ["Global"], res.text()
    _not_lsh(res)


class ExpSoftmax(nn.Module):
    """exp(e - logsumexp e) over the whole row: a softmax written out."""

    def __init__(self, d=8):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        e = self.q(x) @ self.k(x).transpose(-1, -2) / math.sqrt(x.shape[-1])
        return torch.exp(e - torch.logsumexp(e, -1, keepdim=True)) @ self.v(x)


def test_exp_minus_logsumexp_over_a_row_reads_as_a_softmax():
    m, x = ExpSoftmax().double(), _x(2, 5, 8).double()
    ref = (m.q(x) @ m.k(x).transpose(-1, -2) / math.sqrt(8)).softmax(-1) @ m.v(x)
    assert torch.allclose(m(x), ref, atol=1e-12)
    res = taxcompile.classify(ExpSoftmax(), (_x(2, 5, 8),))
    assert [a.names.get("align") for a in res.recognised] == ["global"], res.text()
    a = res.recognised[0]
    assert a.values["alignment"][0] == "Global"
    assert "exp(e - logsumexp e)" in a.values["alignment"][1]
    assert a.values["scoring"][0] == "Scaled Multiplicative", a.values["scoring"][1]


def test_exp_minus_another_rows_logsumexp_is_no_softmax():
    """Near miss: exp(e - logsumexp f) for another f does not sum to one over the keys."""

    class Other(ExpSoftmax):
        def forward(self, x):
            e = self.q(x) @ self.k(x).transpose(-1, -2)
            return torch.exp(e - torch.logsumexp(e * 2, -1, keepdim=True)) @ self.v(x)

    res = taxcompile.classify(Other(), (_x(2, 5, 8),))
    assert not res.recognised, res.text()


def test_taxcompile_s_fast_path_in_several_chunks_reads_as_lsh():
    """The generated module's sorted chunks with the look-back (chunk 4 of 9 positions,
    3 chunks: a roll of the chunks), not only the one chunk of the tiny round trip."""
    spec = str(ROOT / "examples/kitaev2020_reformer.attn")
    mod = api.module(spec, "kitaev2020_reformer")
    cfg = api.config(mod, tiny=True, chunk=4)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    res = api.classify(mod.Model(cfg).eval(), inputs)
    assert len(res.attentions) == cfg.layers and all(
        a.names.get("align") == "lsh" for a in res.attentions), res.text()
    why = res.recognised[0].values["alignment"][1]
    assert "each beside the one before" in why and "compares the hashed codes" in why
    assert res.row()["query_multiplicity"] == "Multi-Head"
