"""generate()'s cached source keys and source-side memory are chosen from plan data, not
from the emitted code.

A cross-attention over the source computes its keys once (``generate.cache_keys``: they go
in an ``if cache … else:`` block that runs at the first step only). Which statements go
there is the plan's record (``Stmt.part``, tagged while the keys and values are planned),
not a search of the statements' text for the target's names: a query planned in several
statements, the later ones reading only the earlier ones' locals, was taken for the keys'
and moved into the block (a local read before it was bound, with or without a cache).
The memory the source side keeps (``generate.memory``) is likewise what its statements
bind (``Stmt.binds``) and the target side reads, not the names found in the target side's
text (which took a bound ``_`` for a read)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from taxcompile import codegen, pipeline  # noqa: E402
from torch_support import fast_cpu, inline_builder  # noqa: E402

DT = torch.float64
HEADER = """\
paper gen {
    cite  = "Test"
    title = "cached source keys"
    year  = 2024
}
"""
# the query: two learned position tables over project(y), one local each (the second
# reads the first's local only, not a name of the target)
BODY = """
model chained {
    input src: tokens[S] (vocab = 40)
    input tgt: tokens[T] (vocab = 40, autoregressive)
    feature x = embed(src, 16)
    feature y = positional(embed(tgt, 16), kind = learned)
    attention cross {
        query = positional(positional(project(y), kind = learned), kind = learned)
        keys = project(x)  values = x  score = general
    }
    output logits = classify(concat(y, cross), 40)
}
"""


@pytest.fixture(autouse=True)
def one_thread():
    with fast_cpu():
        yield


def model(tmp_path):
    mod = inline_builder(tmp_path, HEADER, "_taxcompile_plan_reads")(BODY)
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m.to(DT).eval()


def reference(m, src, tgt, src_mask):
    """The survey's equations in float64: x = E_x[src]; y = E_y[tgt] + P[t];
    q = W_Q y + P1[t] + P2[t]; k_l = W_K x_l; e_l = k_l^T W q (general score);
    a = softmax over the kept keys; c = sum_l a_l x_l; logits = W_o [y; c] + b."""
    T = tgt.shape[1]
    x = m.x_embed.weight[src]
    y = m.y_embed.weight[tgt] + m.y_pos.weight[:T]
    q = y @ m.cross_q_proj.weight.T + m.cross_q_pos.weight[:T] + m.cross_q_pos2.weight[:T]
    k = x @ m.cross_k_proj.weight.T
    W = m.cross.W[0]  # (d_k, d_q), one head
    e = torch.einsum("btq,dq,bsd->bts", q, W, k)
    e = e.masked_fill(~src_mask[:, None, :], float("-inf"))
    c = e.softmax(-1) @ x
    return torch.cat([y, c], -1) @ m.logits_head.weight.T + m.logits_head.bias


def inputs():
    g = torch.Generator().manual_seed(3)
    src = torch.randint(0, 40, (2, 5), generator=g)
    tgt = torch.randint(0, 40, (2, 6), generator=g)
    src_mask = torch.ones(2, 5, dtype=torch.bool)
    src_mask[1, 3:] = False
    return src, tgt, src_mask


def test_a_query_of_several_statements_stays_out_of_the_cached_keys(tmp_path):
    m = model(tmp_path)
    src, tgt, src_mask = inputs()
    want = reference(m, src, tgt, src_mask)
    with torch.no_grad():
        full = m(src, tgt, src_mask).output
        torch.testing.assert_close(full, want, rtol=1e-10, atol=1e-10)
        # one token per call with the cache: each position as the whole-sequence run
        cache: dict = {}
        steps = [m(src, tgt[:, t:t + 1], src_mask, cache=cache).output for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), want, rtol=1e-10, atol=1e-10)
    # generate() (greedy, the cache) against greedy decoding by the reference on prefixes
    tokens = torch.full((2, 1), 1)
    for _ in range(5):
        tokens = torch.cat([tokens, reference(m, src, tokens, src_mask)[:, -1:].argmax(-1)], 1)
    got = m.generate(src, max_len=5, bos=1, eos=39, src_mask=src_mask)
    assert torch.equal(got, tokens[:, 1:1 + got.shape[1]])


def test_statements_record_what_they_were_planned_for():
    """The plan itself: the statements built for the keys are tagged ("cross", "keys");
    the query's are not, and generate()'s cached block holds exactly the keys'."""
    cs = pipeline.load_text(HEADER + BODY, "t.attn")
    plan = codegen.plan(cs, cs.models[0], "t.attn")
    body = plan.model.body
    keys = [s for s in body if s.part == ("cross", "keys")]
    assert [s.code for s in keys] == ["cross_k = self.cross_k_proj(x)"]
    at = body.index(keys[0])
    assert body[at - 1].code == "else:" and keys[0].depth == body[at - 1].depth + 1
    query = [s.code for s in body if s.code.startswith(("h_2 =", "h_3 =", "cross_q ="))]
    assert len(query) == 3
    assert all(s.part is None for s in body if s.code in query)
    assert all(s.depth == body[at - 1].depth for s in body if s.code in query)


SPECS = Path(__file__).resolve().parent.parent / "specs"
# a source-side attention (its call binds `_`, as the target side's do) and a source-side
# output beside the decoded one
POOLED = """
paper gen {
    cite = "Test"
}
model m {
    input src: tokens[S] (vocab = 20)
    input tgt: tokens[T] (vocab = 20, autoregressive)
    feature h = embed(src, 8)
    attention b { query = learned(8)  features = h  score = general }
    feature y = positional(embed(tgt, 8), kind = sinusoid)
    attention c { query = project(y)  features = h  score = multiplicative }
    output o0 = classify(b, 3)
    output o1 = classify(concat(y, c), 20)
}
"""


def planned(text: str, model: str):
    """The planner after planning ``model`` of spec ``text`` (its plan data kept)."""
    from taxcompile.codegen import planner

    cs = pipeline.load_text(text, "t.attn")
    cm = next(m for m in cs.models if m.model.name == model)
    p = planner.Planner(cs, cm, "t.attn")
    return p, p.run()


@pytest.mark.parametrize("text, model, kept, others", [
    # the encoder's states, the decoder's initial state (a node), W2 k + b projected once
    ((SPECS / "bahdanau2015.attn").read_text(encoding="utf-8"), "rnnsearch",
     ("h", "s0", "att_wk"), {"att_wk"}),
    # an encoder's final states a decoder starts from (`init = h`), then its states
    ((SPECS / "luong2015.attn").read_text(encoding="utf-8"), "global_dot",
     ("h_final", "h"), {"h_final"}),
    # the source-side output (returned by every call), not the `_` its attention binds
    # (the text's names took the target side's `c, c_a, _ = …` for a read of it)
    (POOLED, "m", ("h", "o0"), set()),
])
def test_the_source_sides_memory_is_what_its_statements_bind_and_the_target_reads(
        text, model, kept, others):
    """generate()'s memory comes from plan data: the names each statement binds
    (``Stmt.binds``, recorded where it is built) and what the target side reads (the
    source nodes it reads by the model's graph or returns, plus ``Decoding.reads``)."""
    p, plan = planned(text, model)
    body = plan.model.body
    names = ", ".join(kept) + ("," if len(kept) == 1 else "")
    assert [s.code for s in body if s.code.startswith("memory = (")] == [f"memory = ({names})"]
    assert p.gen.reads == others
    at = next(i for i, s in enumerate(body) if s.code == "if memory is None:")
    end = next(i for i in range(at + 1, len(body)) if body[i].depth == body[at].depth)
    assert set(kept) <= {name for s in body[at + 1:end] for name in s.binds}
