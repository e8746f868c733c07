"""The mechanisms the survey's §5 proposes to combine (taxcompile.combinations.pairs,
docs/combinations.md "Pairs of mechanisms"): capsules (eq. 43-45) with heads (eq. 38-40)
and over hops (eq. 41-42), parallel co-attention (eq. 12, 14-15) with heads and
multi-dimensional weights (eq. 30-32), and eq. 9's shared weights with multi-dimensional
weights.

Every pair `check` accepts compiles, and its output, attention weights (and capsule
probabilities and representations) and the gradients of every parameter match a float64
reference of the survey's equations written below from the parameters alone. Every pair
it refuses gives a located error with its reason (a snapshot of all of them), and the
accepted ones classify back to their Table III values."""

from __future__ import annotations

import math

import pytest

from conftest import ROOT
from taxcompile import codegen
from taxcompile import combinations as C
from taxcompile.diagnostics import SpecError
from taxcompile.pipeline import load_text
from taxcompile.run import load_module

PAIRS = C.pairs()
VERDICTS = C.pair_matrix()
VALID = [pr for pr in PAIRS if VERDICTS[pr] is None]
REFUSED = [pr for pr in PAIRS if VERDICTS[pr] is not None]


def ids(pr: C.Pair) -> str:
    return pr.name


# ---- which pairs are valid, from the survey ------------------------------------------------

def expected_valid(pr: C.Pair) -> bool:
    """Written down from the equations, independently of checks.py."""
    if pr.family == "capsule":
        # eq. 43-45 with a query per class: any score with a query (concat's linear query
        # term is cancelled by the softmax, Table II); p_c reads the whole context c_c of
        # width d_v (eq. 44), which heads joined by W_O (eq. 40) or side by side keep and an
        # average of the heads (d_v / H) does not
        return pr.score != "concat" and pr.heads_out != "mean"
    if pr.family == "parallel":
        # eq. 14-15 have weights W_q, W_k, w per direction that heads (eq. 38) and W_d
        # (eq. 31) extend; eq. 16's max-pooling and the affinity's own rows (eq. 12-13) are
        # one number per pair of positions. A capsule learns its query (eq. 43); a
        # co-attention module's query is the other input.
        return pr.score == "additive" and pr.extra != "capsules"
    # eq. 9: the same function and weights as eq. 7 with a query: one shape of w (or W_d),
    # so both sides single- or both multi-dimensional, and one head (eq. 7's W reads whole
    # keys, a head's query a slice)
    return pr.dims[0] == pr.dims[1] and pr.heads == 1


def test_pairs():
    assert len(PAIRS) == len({pr.name for pr in PAIRS}) == 61
    assert (len(VALID), len(REFUSED)) == (33, 28)
    wrong = [pr.name for pr in PAIRS if (VERDICTS[pr] is None) != expected_valid(pr)]
    assert not wrong, wrong


def test_specs_are_formatted():
    from taxcompile.fmt import format_text

    bad = [pr.name for pr in PAIRS
           if format_text(C.pair_text(pr), "p.attn") != C.pair_text(pr)]
    assert not bad, bad


# ---- the float64 references ----------------------------------------------------------------

def masked_softmax(e, keep, dim):
    """Softmax over `dim`; keep: True where a key may be attended (eq. 25)."""
    return e.masked_fill(~keep, float("-inf")).softmax(dim)


def head_score(torch, kind: str, P: dict, pre: str, j: int, H: int, q, k):
    """Table II for head j: q (B, Lq, d/H), k (B, L, d/H) -> e (B, Lq, L)."""
    if kind == "additive":  # w^T tanh(W1 q + W2 k_l + b) (eq. 6)
        h = (q @ P[pre + "W1"][j])[:, :, None] + (k @ P[pre + "W2"][j])[:, None]
        if pre + "b" in P:
            h = h + P[pre + "b"][j]
        return torch.tanh(h) @ P[pre + "w"][j]
    if kind == "multiplicative":  # q^T k_l
        return q @ k.transpose(1, 2)
    if kind == "scaled_multiplicative":  # q^T k_l / sqrt(d_k)
        return q @ k.transpose(1, 2) / math.sqrt(k.shape[-1])
    if kind == "general":  # k_l^T W q
        return torch.einsum("bld,de,bqe->bql", k, P[pre + "W"][j], q)
    if kind == "biased_general":  # k_l^T (W q + b)
        return torch.einsum("bld,bqd->bql", k, q @ P[pre + "W"][j].T + P[pre + "b"][j])
    if kind == "activated_general":  # tanh(k_l^T W q + b)
        return torch.tanh(torch.einsum("bld,de,bqe->bql", k, P[pre + "W"][j], q)
                          + P[pre + "b"][j])
    if kind == "similarity":  # cos(q, k_l)
        return (q / q.norm(dim=-1, keepdim=True)) @ (k / k.norm(dim=-1, keepdim=True)).transpose(1, 2)
    if kind == "location":  # W_a q + b: one score per key position from the query alone
        if H == 1:
            return q @ P[pre + "W.weight"].T + P[pre + "W.bias"]
        return q @ P[pre + "W"][j] + P[pre + "b"][j]
    raise AssertionError(kind)


def capsules_ref(torch, P, pre, kind, q, x, keep, H, heads_out="project"):
    """Capsule attention (eq. 43-45) with H heads (eq. 38-40): capsule c's query q_c (a
    learned vector or row c of an earlier capsule output), split into H slices with the
    keys and values; c_c = W_O concat(c_c^(1..H)); p_c = sigmoid(w_c^T c_c + b_c);
    r_c = p_c c_c. q (B, C, d), x (B, N, d) the keys and values, keep (B, N)."""
    d = x.shape[-1]
    dh = d // H
    parts, weights = [], []
    for j in range(H):
        s = slice(j * dh, (j + 1) * dh)
        e = head_score(torch, kind, P, pre, j, H, q[..., s], x[..., s])  # (B, C, N)
        a = masked_softmax(e, keep[:, None, :], -1)
        parts.append(a @ x[..., s])
        weights.append(a)
    c = torch.cat(parts, -1)  # (B, C, d)
    if H > 1 and heads_out == "project":
        c = c @ P[pre + "out.weight"].T + P[pre + "out.bias"]  # W_O (eq. 40)
    p = torch.sigmoid((c * P[pre + "prob"]).sum(-1) + P[pre + "prob_bias"])  # eq. 44
    return c, torch.stack(weights, 1), p, p[..., None] * c  # eq. 45


def co_ref(torch, W_q, W_k, b, w, out, q_in, k_in, A, keep_q, keep_k, H, multi):
    """Parallel co-attention's aggregate additive score (eq. 14-15) per head (eq. 38):
    e^(j) = w^(j)T tanh(W_q^(j) (A^T Q^(j)) + W_k^(j) K^(j) + b^(j)), or with W_d^(j) a score
    per feature (eq. 31) normalised per feature (eq. 32); one context per input, heads
    joined by W_O (eq. 40). A (B, Lq, Lk): row i relates query position i to the keys;
    padded query positions contribute nothing."""
    A = A * keep_q[..., None]
    d = k_in.shape[-1]
    dh = d // H
    parts, weights = [], []
    for j in range(H):
        s = slice(j * dh, (j + 1) * dh)
        Aq = A.transpose(1, 2) @ q_in[..., s]  # (B, Lk, d/H): sum_i A_il q_i
        h = Aq @ W_q[j] + k_in[..., s] @ W_k[j]
        if b is not None:
            h = h + b[j]
        e = torch.tanh(h) @ w[j]  # (B, Lk) or (B, Lk, d/H)
        if multi:
            a = masked_softmax(e, keep_k[..., None], 1)  # over the keys, per feature
            parts.append((a * k_in[..., s]).sum(1))
        else:
            a = masked_softmax(e, keep_k, 1)
            parts.append(a @ k_in[..., s] if a.dim() == 3 else (a[..., None] * k_in[..., s]).sum(1))
        weights.append(a)
    c = torch.cat(parts, -1)
    if H > 1:
        c = c @ out[0].T + out[1]
    return c, torch.stack(weights, 1)


def reference(torch, pr: C.Pair, P: dict, inp: dict):
    """(output, {module: weights}, {module: (p, r)}) from the equations."""
    x, keep_x = inp["x"], inp["x_mask"]
    head = (P["out_head.weight"], P["out_head.bias"])
    if pr.family == "capsule":
        H = C.HEADS if "heads" in pr.extra else 1
        B = x.shape[0]
        if "hop" not in pr.extra:
            q = P["att.queries"].expand(B, -1, -1)
            c, a, p, r = capsules_ref(torch, P, "att.", pr.score, q, x, keep_x, H, pr.heads_out)
            return c @ head[0].T + head[1], {"att": a}, {"att": (p, r)}
        # hop 0: the learned capsule queries (eq. 43)
        c, a, p, r = capsules_ref(torch, P, "caps.", pr.score,
                                  P["caps.queries"].expand(B, -1, -1), x, keep_x, 1)
        weights, caps = {"caps": a}, {"caps": (p, r)}
        q = c
        for s in range(C.HOPS):  # q^(s+1) = q^(s) + c^(s) (eq. 41, 37)
            c, a, p, r = capsules_ref(torch, P, f"hop.{s}.att.", pr.score, q, x, keep_x, H)
            weights[f"hop[{s + 1}].att"], caps[f"hop[{s + 1}].att"] = a, (p, r)
            q = q + c
        return c @ head[0].T + head[1], weights, caps
    y, keep_y = inp["y"], inp["y_mask"]
    if pr.family == "parallel":
        H = C.HEADS if "heads" in pr.extra else 1
        multi = "multi" in pr.extra
        A = torch.tanh(x @ P["C_W"] @ y.transpose(1, 2))  # (B, N, M) (eq. 12)

        def params(m):
            out = (P[f"{m}.out.weight"], P[f"{m}.out.bias"]) if H > 1 else None
            return P.get(f"{m}.b"), P[f"{m}.w"], out

        c_x, a_x = co_ref(torch, P["ax.W_q"], P["ax.W_k"], *params("ax"), y, x,
                          A.transpose(1, 2), keep_y, keep_x, H, multi)
        # the other direction: with `share`, ax's W_k reads x (this one's query) and its W_q
        # reads y (this one's keys): one W1 and one W2 for both (eq. 14-15)
        W_q, W_k = (P["ax.W_k"], P["ax.W_q"]) if pr.share else (P["ay.W_q"], P["ay.W_k"])
        c_y, a_y = co_ref(torch, W_q, W_k, *params("ay"), x, y, A, keep_x, keep_y, H, multi)
        out = torch.cat([c_x, c_y], -1) @ head[0].T + head[1]
        return out, {"ax": a_x[:, :, None], "ay": a_y[:, :, None]}, {}
    # alternating co-attention (eq. 7-9)
    W, bW, w0 = P["a0.W.weight"], P["a0.W.bias"], P["a0.w"][0]
    multi = pr.dims[0] == "multi"
    e0 = torch.tanh(x @ W.T + bW) @ w0  # eq. 7: no query
    a0 = masked_softmax(e0, keep_x[..., None] if multi else keep_x, 1)
    c0 = (a0 * x).sum(1) if multi else (a0[..., None] * x).sum(1)
    # eq. 8: c0 queries the second input (the additive score, eq. 6)
    h2 = (c0 @ P["a2.W1"][0])[:, None] + y @ P["a2.W2"][0] + P["a2.b"][0]
    a2 = masked_softmax(torch.tanh(h2) @ P["a2.w"][0], keep_y, 1)
    c2 = (a2[..., None] * y).sum(1)
    # eq. 9: c2 queries the first input with eq. 7's W, b and w (W_d), and its own W1
    e1 = torch.tanh((c2 @ P["a1.W1"][0])[:, None] + x @ W.T + bW) @ w0
    a1 = masked_softmax(e1, keep_x[..., None] if multi else keep_x, 1)
    c1 = (a1 * x).sum(1) if multi else (a1[..., None] * x).sum(1)
    out = torch.cat([c1, c2], -1) @ head[0].T + head[1]
    return out, {"a0": a0, "a2": a2, "a1": a1}, {}


def build(pr: C.Pair):
    cs = load_text(C.pair_text(pr), f"{pr.name}.attn")
    src = codegen.generate(cs, cs.models[0], f"{pr.name}.attn")
    return cs, load_module(src, f"s5_{pr.name}")


@pytest.mark.parametrize("pr", VALID, ids=ids)
def test_valid_pair_matches_its_equations(pr):
    torch = pytest.importorskip("torch")
    _, mod = build(pr)
    torch.manual_seed(0)
    cfg = mod.Config()
    model = mod.Model(cfg).double()
    with torch.no_grad():  # no zero-initialised parameter may hide a term
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    inp = {k: v.double() if v.is_floating_point() else v
           for k, v in mod.example_inputs(batch_size=3, cfg=cfg).items()}
    for k in [k for k in inp if k.endswith("_mask")]:  # example b pads its last b positions
        L = inp[k].shape[1]
        inp[k] = torch.arange(L)[None] < (L - torch.arange(3))[:, None]
    out = model(**inp, return_attention=True)
    P = dict(model.named_parameters(remove_duplicate=False))
    want, weights, caps = reference(torch, pr, P, inp)
    torch.testing.assert_close(out.output, want, rtol=1e-9, atol=1e-10)
    # without return_attention the module may take a fast path (a fused kernel, blocks)
    torch.testing.assert_close(model(**inp).output, want, rtol=1e-9, atol=1e-10)
    for name, a in weights.items():
        got = out.attention[name]
        if pr.family == "alternating":  # (B, 1, 1, L[, d]): one head, one query
            got = got[:, 0, 0]
        torch.testing.assert_close(got, a, rtol=1e-9, atol=1e-10, msg=name)
    for name, (p, r) in caps.items():
        torch.testing.assert_close(out.capsules[name][0], p, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(out.capsules[name][1], r, rtol=1e-9, atol=1e-10)
    # backward: every parameter's gradient is the reference's, through the output and the
    # capsules' p_c and r_c (which the joint capsule loss trains)
    gen = torch.Generator().manual_seed(1)

    def scalar(output, capsules):
        total = (output * torch.randn(output.shape, dtype=torch.float64, generator=gen)).sum()
        for name in sorted(caps):
            for t in capsules[name]:
                total = total + (t * torch.randn(t.shape, dtype=torch.float64, generator=gen)).sum()
        return total

    params = [p for _, p in model.named_parameters()]
    gen.manual_seed(1)
    got = torch.autograd.grad(scalar(out.output, out.capsules if caps else {}), params,
                              allow_unused=True)
    gen.manual_seed(1)
    ref = torch.autograd.grad(scalar(want, caps), params, allow_unused=True)
    for (name, _), a, b in zip(model.named_parameters(), got, ref):
        assert a is not None and b is not None, f"{name} gets no gradient"
        assert torch.isfinite(a).all(), name
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10, msg=name)
        if name != "C_W" or pr.family != "parallel":
            assert a.abs().max() > 0, f"{name}: zero gradient"


@pytest.mark.parametrize("pr", [pr for pr in VALID if pr.family == "capsule"], ids=ids)
def test_capsule_loss_trains(pr):
    """The joint capsule loss (eq. 43-45's training) reaches every parameter."""
    torch = pytest.importorskip("torch")
    _, mod = build(pr)
    torch.manual_seed(0)
    cfg = mod.Config()
    model = mod.Model(cfg)
    out = model(**mod.example_inputs(cfg=cfg))
    loss = model.capsule_loss(out, torch.zeros(out.output.shape[0], dtype=torch.long))
    assert torch.isfinite(loss)
    loss.backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().max() > 0}
    assert {n for n, _ in model.named_parameters() if n.split(".")[0] in ("att", "caps", "hop")
            and not n.startswith("out_head")} <= trained | {n for n, _ in model.named_parameters()
                                                            if n.endswith("out.bias")}


# ---- Table III rows ---------------------------------------------------------------------

def row_of(pr: C.Pair) -> dict[str, set[str]]:
    """The Table III labels each valid pair should classify as."""
    heads = "heads" in pr.extra
    if pr.family == "capsule":
        hop = "hop" in pr.extra
        qm = {"Capsule-Based"} | ({"Multi-Head"} if heads else set()) | \
            ({"Multi-Hop"} if hop else set())
        # hop 0 learns its queries (Self-Attentive, eq. 34); the hops' queries are built
        # from its context (Specialized)
        qt = {"Self-Attentive", "Specialized"} if hop else {"Self-Attentive"}
        return {"feature_multiplicity": {"Singular"},
                "scoring": {C.LABELS["scoring"][pr.score]}, "alignment": {"Global"},
                "dimensionality": {"Single-Dimensional"}, "query_type": qt,
                "query_multiplicity": qm}
    if pr.family == "parallel":
        return {"feature_multiplicity": {"Parallel Co-attention"}, "scoring": {"Additive"},
                "alignment": {"Global"},
                "dimensionality": {"Multi-Dimensional" if "multi" in pr.extra
                                   else "Single-Dimensional"},
                "query_type": {"Specialized"},
                "query_multiplicity": {"Multi-Head"} if heads else {"Singular"}}
    dims = {"Multi-Dimensional" if d == "multi" else "Single-Dimensional" for d in pr.dims}
    return {"feature_multiplicity": {"Alternating Co-attention"}, "scoring": {"Additive"},
            "alignment": {"Global"}, "dimensionality": dims | {"Single-Dimensional"},
            "query_type": {"Self-Attentive", "Specialized"},
            "query_multiplicity": {"Singular"}}


@pytest.mark.parametrize("pr", VALID, ids=ids)
def test_valid_pair_classifies(pr):
    from taxcompile.classification import classify_model

    cs = load_text(C.pair_text(pr), "p.attn")
    cells = classify_model(cs.models[0]).cells
    for dim, labels in row_of(pr).items():
        assert set(cells[dim].values) == labels, (dim, cells[dim].values)


def test_capsule_hop_reasons():
    """The hops' capsule modules say where their queries come from."""
    from taxcompile.classification import classify_model

    cs = load_text(C.pair_text(C.Pair("capsule", "general", "hop")), "p.attn")
    reasons = classify_model(cs.models[0]).cells["query_multiplicity"].values["Capsule-Based"]
    assert any("`caps`" in r and "learned query" in r for r in reasons), reasons
    assert any("`hop.att`" in r and "earlier capsule module's output" in r for r in reasons), \
        reasons
    hop = classify_model(cs.models[0]).cells["query_multiplicity"].values["Multi-Hop"]
    assert any("`hop.att` runs 2 hops" in r for r in hop), hop


# ---- refusals --------------------------------------------------------------------------------

def refusals() -> str:
    out = []
    for pr in REFUSED:
        with pytest.raises(SpecError) as info:
            load_text(C.pair_text(pr), f"{pr.name}.attn")
        out.append(f"== {pr.name}\n{info.value.render()}")
    return "\n".join(out) + "\n"


SNAPSHOT = ROOT / "tests" / "data" / "errors" / "s5_pairs_refused.expected"


def test_refusals_snapshot():
    """Every refused pair: `file:line:col: error: …`, the source line, `^` and a hint."""
    assert refusals() == SNAPSHOT.read_text(encoding="utf-8"), \
        "python -c 'import sys; sys.path[:0] = [\"tests\"]; import test_combinations_s5 as t; " \
        "print(t.refusals(), end=\"\")' > tests/data/errors/s5_pairs_refused.expected"


AT = {  # where each refusal points, and the equation its reason cites
    "concat": ("score", "eq. 6"),
    "mean": ("attention att", "eq. 44"),
    "capsules": ("attention ax", "eq. 43"),
    "pooled": ("attention ax", "eq. 16"),
    "rows": ("attention ax", "eq. 12-13"),
    "eq9": ("attention a1", "eq. 9"),
}


def why(pr: C.Pair) -> str:
    if pr.family == "capsule":
        return "concat" if pr.score == "concat" else "mean"
    if pr.family == "parallel":
        return "capsules" if pr.extra == "capsules" else \
            "pooled" if pr.score == "max_pool" else "rows"
    return "eq9"


@pytest.mark.parametrize("pr", REFUSED, ids=ids)
def test_refused_pair_is_located(pr):
    with pytest.raises(SpecError) as info:
        load_text(C.pair_text(pr), f"{pr.name}.attn")
    d = info.value.diagnostics[0]
    at, eq = AT[why(pr)]
    line = C.pair_text(pr).splitlines()[d.loc.line - 1].strip()
    assert line.startswith(at), (line, d.message)
    assert eq in d.message + " " + d.hint, d.message
    # the docs list the reason beside the spec
    docs = (ROOT / "docs" / "combinations.md").read_text(encoding="utf-8")
    row = next(x for x in docs.splitlines() if x.startswith(f"| `{pr.name}` |"))
    assert "valid" not in row.split("|")[-2]


def test_docs_list_every_pair():
    docs = (ROOT / "docs" / "combinations.md").read_text(encoding="utf-8")
    for pr in PAIRS:
        assert f"| `{pr.name}` |" in docs, pr.name
    assert f"- **valid**: {len(VALID)}\n" in docs and f"- **refused** by `taxcompile check`: " \
        f"{len(REFUSED)}\n" in docs


# ---- capsules over hops: the query's classes, and the drop-in layer ----------------------------

def test_capsule_query_must_hold_one_row_per_class(tmp_path, capsys):
    from taxcompile.cli import main

    text = C.pair_text(C.Pair("capsule", "general", "hop")).replace(
        "        capsules = 3\n        }", "        capsules = 4\n        }")
    assert "capsules = 4" in text
    path = tmp_path / "caps.attn"
    path.write_text(text, encoding="utf-8")
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("error: attention `att`: the query holds 3 capsules' outputs, "
                           "one per class, but this module has capsules = 4"), err
    assert err[1].strip() == "attention att {" and err[3].strip() == \
        "hint: write `capsules = 3` (one capsule per class, eq. 43)"
    # a single query vector is not one per class (eq. 43)
    text = C.pair_text(C.Pair("capsule", "general", "hop")).replace(
        "feature q = caps", "feature q = mean(x)")
    with pytest.raises(SpecError) as info:
        load_text(text, "c.attn")
    assert "capsule-based attention learns one query per class (eq. 43)" in \
        info.value.diagnostics[0].message


def test_capsule_hop_as_a_drop_in_layer():
    """`compile --layer hop.att`: the caller passes the C queries; the layer is the model's
    class, checked against the float64 reference."""
    torch = pytest.importorskip("torch")
    from taxcompile.codegen import layer

    pr = C.Pair("capsule", "biased_general", "heads_hop")
    cs = load_text(C.pair_text(pr), "p.attn")
    mod = load_module(layer.generate(cs, cs.models[0], "hop.att", "p.attn"), "s5_layer_hop")
    torch.manual_seed(0)
    lay = mod.Layer(mod.Config()).double()
    with torch.no_grad():
        for p in lay.parameters():
            p.normal_(0.0, 0.5)
    x, q = torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(2, 3, 8, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    c, a, ex = lay(q, x, mask=mask, need_weights=True, need_extras=True)
    P = {f"L.{k}": v for k, v in lay.attn.named_parameters()}
    cr, ar, p, r = capsules_ref(torch, P, "L.", "biased_general", q, x, mask, 2)
    torch.testing.assert_close(c, cr)
    torch.testing.assert_close(a, ar)
    torch.testing.assert_close(ex["capsule"][0], p)
    torch.testing.assert_close(ex["capsule"][1], r)
    with pytest.raises(ValueError, match="one query per class"):
        lay(q[:, :2], x)
