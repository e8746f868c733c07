"""Issue 23's "A traceback from the compiler" list, and what the spec generator found
besides: each was a Python traceback; now each is a located error, or (where the model
is well defined) compiles and computes the survey's equations, checked here against
references written from the equations. The specs themselves are kept in
tests/data/regressions/ (test_spec_property.py runs them through the whole property)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import error_snapshot
from taxcompile.diagnostics import SpecError
from taxcompile.pipeline import load_text

torch = pytest.importorskip("torch")

from taxcompile import codegen  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

REG = Path(__file__).resolve().parent / "data" / "regressions"
DT = torch.float64


def compiled(text: str, name: str):
    cs = load_text(text, "t.attn")
    return load_module(codegen.generate(cs, cs.models[0], "t.attn"), name)


def close(got, want):
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def inputs(B=3, L=5, d=8):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, L, d, dtype=DT, generator=g)
    keep = torch.ones(B, L, dtype=torch.bool)
    keep[1, 3:] = False
    keep[2, 1:] = False
    return x, keep


def softmax_kept(e, keep):
    return torch.softmax(e.masked_fill(~keep, float("-inf")), -1)


# ---- attention inside nested repeats (was KeyError 'outer[1].inner[3].a') ----------------

NESTED = (REG / "nested_repeat_attention.attn").read_text(encoding="utf-8")


@pytest.mark.parametrize("ref, hop, inner", [
    ("outer.inner.a", 2, 3), ("outer[1].inner[1].a", 1, 1), ("outer.inner[2].a", 2, 2),
    ("outer[1].inner.a", 1, 3)])
def test_nested_repeat_attention_read_from_outside(ref, hop, inner):
    """`outer[i].inner[j].a` is hop (i, j)'s module: c = sum_l softmax_l(h_l . q) h_l with
    that hop's own learned query q (eq. 34, 4); the others do not enter it."""
    mod = compiled(NESTED.replace("classify(outer.inner.a, 3)", f"classify({ref}, 3)"),
                   "nested_" + ref.replace(".", "_").replace("[", "").replace("]", ""))
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x, keep = inputs()
    got = model(x=x, x_mask=keep).output
    h = model.h_linear(x)
    q = model.outer[hop - 1].inner[inner - 1].a_q
    a = softmax_kept(h @ q, keep)
    ctx = (a[..., None] * h).sum(1)
    close(got, model.o_head(ctx))
    other = model.outer[2 - hop].inner[inner - 1].a_q  # another hop's query: no effect
    with torch.no_grad():
        other.add_(1.0)
    close(model(x=x, x_mask=keep).output, got)


# ---- a repeat that updates a stream nothing reads (was AssertionError) --------------------


def test_repeat_update_nothing_reads_keeps_the_attention_right():
    """`update q = q + att` in a repeat whose q nothing reads after the last hop: the
    output reads the last hop's module, e = w^T tanh(W x_l + b), c = sum_l a_l x_l (eq. 33)."""
    mod = compiled((REG / "repeat_update_unread.attn").read_text(encoding="utf-8"), "unread")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x, keep = inputs()
    att = model.hop[1].att
    a = softmax_kept((torch.tanh(att.W(x)) @ att.w[0]), keep)
    close(model(x=x, x_mask=keep).output, model.out_head((a[..., None] * x).sum(1)))


def test_learned_query_refined_in_a_repeat():
    """The issue's learned query inside a repeat, read after it: q^(s+1) = q^(s) + c^(s)
    (eq. 41, 37), c^(s) = sum_l softmax_l(x_l^T W q^(s)) x_l, per hop's own W (general)."""
    text = (REG / "repeat_update_unread.attn").read_text(encoding="utf-8").replace(
        "attention att { features = x  score = additive }",
        "attention att { query = q  features = x  score = general }").replace(
        "classify(hop.att, 3)", "classify(q, 3)")
    mod = compiled(text, "learned_q")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x, keep = inputs()
    q = model.q_q.expand(3, -1)
    for s in range(2):
        W = model.hop[s].att.W[0]  # (d_k, d_q): k^T W q
        a = softmax_kept(torch.einsum("bld,de,be->bl", x, W, q), keep)
        q = q + (a[..., None] * x).sum(1)
    close(model(x=x, x_mask=keep).output, model.out_head(q))


# ---- coverage with an activation whose score line wraps (was an IndentationError) ---------


@pytest.mark.parametrize("act, fn", [
    ("leaky_relu(0.2)", lambda t: torch.nn.functional.leaky_relu(t, 0.2)),
    ("elu(0.5)", lambda t: torch.nn.functional.elu(t, 0.5)),
    ("scaled_tanh(c = 5)", lambda t: 5 * torch.tanh(t / 5))])
def test_coverage_with_a_parameterised_activation(act, fn):
    """See et al. eq. 10-11 with act in place of tanh: e_i^t = w^T act(W1 q_t + W2 k_i +
    b + w_c c_i^t), a^t = softmax over the kept keys, c^(t+1) = c^t + a^t."""
    text = (REG / "coverage_leaky_relu.attn").read_text(encoding="utf-8").replace(
        "act = leaky_relu(0.2)", f"act = {act}")
    mod = compiled(text, "coverage_act")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x, keep = inputs()
    att = model.a
    B, L, _ = x.shape
    c = torch.zeros(B, L, dtype=DT)
    rows = []
    for t in range(L):
        pre = (x[:, t] @ att.W1[0])[:, None] + x @ att.W2[0] + att.b[0] \
            + c[..., None] * att.w_c[0]
        a = softmax_kept(fn(pre) @ att.w[0], keep)
        rows.append(a)
        c = c + a
    a = torch.stack(rows, 1)  # (B, T, S)
    out = model(x=x, x_mask=keep, return_attention=True)
    got = out.attention["a"][:, 0]
    for b, n in enumerate(keep.sum(1).tolist()):
        close(got[b, :n], a[b, :n])


# ---- located errors where there was a traceback ----------------------------------------


@pytest.mark.parametrize("field", ["heads", "capsules", "dropout"])
def test_a_call_where_a_number_goes_is_located(field):
    text = (REG / f"{field}_is_a_call.attn").read_text(encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_text(text, "t.attn")
    d = info.value.diagnostics[0]
    line = text.split("\n")[d.loc.line - 1]
    assert line[d.loc.column - 1:].startswith("mean(x)"), (d, line)
    assert "expected a constant" in d.message


SNAPSHOTS = ["number_literal_too_long", "repeat_read_in_its_own_body",
             "lin_penalty_multi_dimensional", "affinity_with_a_dot_score"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want


def test_number_limit_leaves_long_floats_that_fit():
    """The limit is on the literal's characters: 100 characters pass (and are then
    checked as values), 101 are refused, at the literal's column."""
    base = 'paper p { cite = "P" }\nlet a = {}\nmodel m {\n input x: sequence[L, 4]\n' \
        ' attention t { query = learned(4)  features = x  score = general }\n}\n'
    load_text(base.replace("{}", "0." + "1" * 98), "t.attn")
    with pytest.raises(SpecError) as info:
        load_text(base.replace("{}", "0." + "1" * 99), "t.attn")
    d = info.value.diagnostics[0]
    assert (d.loc.line, d.loc.column) == (2, 9) and "limit is 100" in d.message


# ---- what the generator found ----------------------------------------------------------


def test_supervised_self_attention_penalty():
    """`alignment[L, L]` supervises a self-attention module over L (Liu et al. 2016):
    penalty = lam sum_{kept t, l} (a_tl - gold_tl)^2, the mean over the batch."""
    mod = compiled((REG / "supervised_self_attention.attn").read_text(encoding="utf-8"),
                   "supervised_self")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x, keep = inputs()
    gold = torch.softmax(torch.randn(3, 5, 5, dtype=DT), -1)
    out = model(x=x, x_mask=keep, gold=gold, return_attention=True)
    e = x @ x.transpose(1, 2) / 8 ** 0.5
    a = softmax_kept(e, keep[:, None, :])
    close(out.attention["s"][:, 0], a)
    pair = (keep[:, :, None] & keep[:, None, :]).to(DT)
    close(out.penalty, 0.5 * (((a - gold) ** 2) * pair).sum((1, 2)).mean())
