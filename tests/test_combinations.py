"""Every combination of score × alignment × dimensionality × query type × query
multiplicity for one attention module (taxcompile.combinations, docs/combinations.md).

A valid combination compiles, runs forward and backward with finite outputs and
gradients, and classifies back to the values it was built from. An invalid one is
refused by `taxcompile check` with an error that says why. Which combinations are
invalid is written down here from the survey's math, independently of checks.py, and
compared with what `check` does."""

from __future__ import annotations

import functools
import itertools
import os
import zlib
from collections import Counter

import pytest

from conftest import ROOT
from taxcompile import combinations as C
from taxcompile import codegen
from taxcompile.diagnostics import SpecError
from taxcompile.pipeline import load_text
from taxcompile.run import load_module

COMBOS = C.combos()


# ---- the expected validity, from the survey ---------------------------------------------

class Rule:
    """A reason a combination is invalid: when it applies, what `check`'s error says,
    the equations behind it, and what the line the error points at holds."""

    def __init__(self, name: str, applies, says: str, why: str, at: str):
        self.name, self.applies, self.says, self.why, self.at = name, applies, says, why, at

    def __repr__(self):
        return self.name


RULES = [
    # eq. 30-32: a weight per feature comes from a d_v-dimensional score, which the
    # survey defines only with the additive form W_d^T act(W1 q + W2 k + b) (eq. 31);
    # concat is that form without the activation. The other scores give one number per key.
    Rule("multi-dimensional needs an additive score",
         lambda c: c.dimensionality == "multi" and c.score not in ("additive", "concat"),
         "multi-dimensional attention scores each feature", "eq. 31", "score"),
    # eq. 26: hard attention samples one position and takes its whole value vector;
    # multi-dimensional weights are a distribution per feature (eq. 32).
    Rule("hard alignment is not multi-dimensional",
         lambda c: c.dimensionality == "multi" and c.align == "hard",
         "hard alignment picks one value vector", "eq. 26, 32", "align"),
    # eq. 43: each capsule (class) has its own learned query q_c; a query that comes
    # from an input or another module is not one per class.
    Rule("capsules learn their queries",
         lambda c: c.multiplicity == "capsule" and c.query_type != "self_attentive",
         "capsule-based attention learns one query per class", "eq. 43", "attention att"),
    # Table II's concat, w^T W [q; k_l] = w^T W1 q + w^T W2 k_l, is linear: the query term
    # is the same for every key and every alignment here is shift-invariant per query, so
    # the query could never change the weights. (Every combination has a query.)
    Rule("concat ignores a query",
         lambda c: c.score == "concat",
         "the concat score w^T W [q; k_l] = w^T W1 q + w^T W2 k_l is linear", "Table II",
         "score"),
    # Oktay et al.'s sigmoid gate: a_l = sigmoid(w^T act(W1 q_l + W2 k_l + b) + b_psi), one
    # weight per key position from that position's key and query alone (the additive form,
    # eq. 6); the other scores are not computed per position.
    Rule("a sigmoid gate scores with the additive form",
         lambda c: c.align == "sigmoid" and c.score != "additive",
         "a sigmoid gate scores each position on its own", "eq. 6, Oktay et al.", "score"),
    # The gate pairs key position l with query l (or one query for all): a query sequence
    # over other positions (the auxiliary input s over T) has no query at l.
    Rule("a sigmoid gate needs the query at the keys' positions",
         lambda c: c.align == "sigmoid" and c.score == "additive" and c.query_type == "basic",
         "a sigmoid gate pairs each key position with the query at the same position",
         "Oktay et al.", "query"),
    # Capsules weigh all keys for one query per class (eq. 43); a gate weighs each on its own.
    Rule("a sigmoid gate has no capsules",
         lambda c: c.align == "sigmoid" and c.score == "additive" and c.query_type != "basic"
         and c.multiplicity == "capsule",
         "a sigmoid gate weighs each position on its own, so it takes no `capsules`",
         "eq. 43", "attention att"),
    # The gate's result is the gated values at the keys' positions, not one context vector,
    # so eq. 41's q^(s+1) = q^(s) + c^(s) (eq. 37) has no c^(s) of the query's shape.
    Rule("a sigmoid gate gives no context for a hop's query",
         lambda c: c.align == "sigmoid" and c.score == "additive" and c.query_type != "basic"
         and c.multiplicity == "multi_hop",
         "shapes differ", "eq. 37, 41", "update q"),
]
# LightConv (Wu et al. 2019) weighs the keys with its own kernel, `score = none` beside it,
# so it stands outside the matrix (every score of it computes scores LightConv would not
# read): test_lightconv_is_outside_the_matrix_and_refuses_every_score checks that.
# Location with heads is valid: eq. 38-40 give each head its own projected query,
# e^(j) = W_a^(j) q^(j), over the same fixed-length keys.


def expected(c: C.Combo) -> list[Rule]:
    return [r for r in RULES if r.applies(c)]


# ---- what check does --------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def checked():
    """Combo -> CheckedSpec or the SpecError `check` raised."""
    out = {}
    for c, text in C.enumerate():
        try:
            out[c] = load_text(text, "combo.attn")
        except SpecError as e:
            out[c] = e
    return out


def test_every_score_and_alignment_combines():
    """Every score and alignment of the registry but those that cannot stand alone in one
    module (C.OUTSIDE) is a row and a column: 1944 with the 9 scores and 9 alignments the
    matrix first had, more with each alignment added."""
    total = len(C.SCORES) * len(C.ALIGNMENTS) * 2 * 3 * 4
    assert len(C.SCORES) >= 9 and len(C.ALIGNMENTS) >= 9 and total >= 1944
    assert len(COMBOS) == len(set(COMBOS)) == total
    assert len({c.model for c in COMBOS}) == total
    assert [c for c, _ in C.enumerate()] == COMBOS


@pytest.mark.parametrize("score", ["additive", "scaled_multiplicative", "location"])
def test_lightconv_is_outside_the_matrix_and_refuses_every_score(score):
    """LightConv makes its weights without scores: beside any of the matrix's scores
    `check` refuses it and says to write `score = none`."""
    assert "lightconv" in C.OUTSIDE and "lightconv" not in C.ALIGNMENTS
    text = C.spec_text(C.Combo(score, "global", "single", "basic", "singular"))
    text = text.replace(f"score    = {score}",
                        f"score    = {score}\n        align    = lightconv(kernel = 3)")
    with pytest.raises(SpecError) as e:
        load_text(text, "combo.attn")
    assert any("LightConv cannot go with" in d.message and "score = none" in (d.hint or "")
               for d in e.value.diagnostics), [d.message for d in e.value.diagnostics]


def test_specs_are_formatted():
    """The score is one word of the spec: the other fields' combinations, with the
    longest score name and the additive one, cover every layout spec_text writes."""
    from taxcompile.fmt import format_text

    unformatted = [c.name for c, text in C.enumerate()
                   if c.score in ("additive", "scaled_multiplicative")
                   and format_text(text, "combo.attn") != text]
    assert not unformatted, unformatted[:10]


def test_check_refuses_exactly_the_invalid_combinations():
    problems = []
    for c, r in checked().items():
        rules = expected(c)
        if not isinstance(r, SpecError):
            if rules:
                problems.append(f"{c.name}: accepted, but {rules} forbid it")
            continue
        messages = [d.message for d in r.diagnostics]
        if not rules:
            problems.append(f"{c.name}: refused for no reason of the survey: {messages}")
            continue
        # check reports the first rule it finds; every error must be one of the expected
        for m in messages:
            if not any(rule.says in m for rule in rules):
                problems.append(f"{c.name}: error {m!r} is not one of {rules}")
    assert not problems, "\n".join(problems[:30]) + f"\n({len(problems)} in all)"


def test_counts():
    verdicts = checked()
    refused = [c for c in COMBOS if isinstance(verdicts[c], SpecError)]
    assert len(refused) == sum(bool(expected(c)) for c in COMBOS)
    assert (len(COMBOS) - len(refused), len(refused)) == (808, 1352)


# ---- every valid combination runs and classifies back -----------------------------------

def run_combo(c: C.Combo, cs, tmp_path) -> tuple[list[str], dict[str, float]]:
    """Problems found, and the largest |gradient| of each attention parameter."""
    import torch

    from taxcompile.codegen import generate

    problems: list[str] = []
    src = generate(cs, cs.models[0], "combo.attn")
    name = f"combo_{c.model}"
    mod = load_module(src, name)
    torch.manual_seed(0)
    cfg = mod.Config()
    model = mod.Model(cfg)
    model.train()
    out = model(**mod.example_inputs(cfg=cfg))
    if not torch.isfinite(out.output).all():
        problems.append("non-finite output")
    loss = out.output.pow(2).mean()
    if c.align in ("hard", "reinforced"):  # REINFORCE terms: the sample has no gradient
        if not getattr(out, "log_probs", None):
            problems.append("hard/reinforced alignment returned no log_probs")
        for lp in getattr(out, "log_probs", {}).values():
            loss = loss - lp.sum()
    if c.multiplicity == "capsule":
        if not getattr(out, "capsules", None):
            problems.append("capsule attention returned no capsules")
        target = torch.zeros(out.output.shape[0], dtype=torch.long)
        loss = loss + model.capsule_loss(out, target)
    if not torch.isfinite(loss):
        problems.append(f"non-finite loss {loss}")
    loss.backward()
    grads: dict[str, float] = {}
    # `att`, or in a repeat `hop.att` (shared) / `hop.<i>.att` (one per hop)
    att = [n for n, _ in model.named_modules() if n.split(".")[-1] == "att"]
    if not att:
        problems.append(f"no attention module in {[n for n, _ in model.named_modules()]}")
    for pname, p in model.named_parameters():
        if p.grad is None:
            problems.append(f"parameter {pname} got no gradient")
        elif not torch.isfinite(p.grad).all():
            problems.append(f"parameter {pname} has a non-finite gradient")
        elif any(pname.startswith(a + ".") for a in att):
            leaf = pname.split(".att.", 1)[-1] if ".att." in pname else pname.split(".", 1)[1]
            grads[leaf] = max(grads.get(leaf, 0.0), float(p.grad.abs().max()))
    return problems, grads


def classification_problems(c: C.Combo, cs) -> list[str]:
    from taxcompile.classification import classify_model

    cells = classify_model(cs.models[0]).cells
    names = ("`att`",) if c.multiplicity != "multi_hop" else \
        ("`hop.att`", "`hop[1].att`", "`hop[2].att`")
    out = []
    for dim, label in c.labels().items():
        reasons = cells[dim].values.get(label)
        if reasons is None:
            out.append(f"{dim}: {label} not in {cells[dim].labels(dim)}")
        elif not any(n in r for r in reasons for n in names):
            out.append(f"{dim}: no reason for {label} names {names[0]}: {reasons}")
    return out


# Alignments added after the matrix first ran (issue 25) act on the scores e alone, which
# every score makes with the same shape: they run with the additive score (every
# dimensionality, query type and multiplicity) and a dot-product one (the fast paths), and
# classify back with all of them; this keeps the test's time about what it was.
NEW_ALIGNS, RUN_WITH = ("topk", "crf", "sigmoid_attn"), ("additive", "scaled_multiplicative")
# The suite runs a fixed third of the rest (by a hash of the combination's name, so every
# score, alignment, dimensionality, query type and multiplicity is among them); `make fuzz`
# (TAXCOMPILE_COMBOS_ALL=1) runs every one. All of them classify back in either.
ALL = os.environ.get("TAXCOMPILE_COMBOS_ALL") == "1"


def runs(c: C.Combo) -> bool:
    if c.align in NEW_ALIGNS and c.score not in RUN_WITH:
        return False
    return ALL or zlib.crc32(c.name.encode()) % 3 == 0


def test_the_suites_third_covers_every_value_and_every_score_with_every_alignment():
    valid = [c for c in COMBOS if not expected(c)]
    ran = [c for c in valid if runs(c)]
    for field in ("score", "align", "dimensionality", "query_type", "multiplicity"):
        assert {getattr(c, field) for c in ran} == {getattr(c, field) for c in valid}, field
    pairs = {(c.score, c.align) for c in valid if c.align not in NEW_ALIGNS or c.score in RUN_WITH}
    assert {(c.score, c.align) for c in ran} == pairs


@pytest.mark.parametrize("score", C.SCORES)
def test_valid_combinations_run_and_classify_back(score, tmp_path):
    pytest.importorskip("torch")
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    problems, ran = [], 0
    trained: dict[tuple, float] = {}
    try:
        for c, r in checked().items():
            if c.score != score or isinstance(r, SpecError):
                continue
            found, grads = [], {}
            if runs(c):
                ran += 1
                try:
                    found, grads = run_combo(c, r, tmp_path)
                except Exception as e:  # noqa: BLE001 (report every combination that fails)
                    found = [f"{type(e).__name__}: {e}"]
            found += classification_problems(c, r)
            problems += [f"{c.name}: {p}" for p in found]
            for leaf, g in grads.items():
                key = (c.align, c.dimensionality, leaf)
                trained[key] = max(trained.get(key, 0.0), g)
    finally:
        torch.set_num_threads(threads)
    assert ran == sum(c.score == score and not expected(c) and runs(c) for c in COMBOS)
    # Over all combinations of an alignment and dimensionality, every parameter of the
    # attention module is trained by something (a sparse alignment or a sampled subset
    # can zero one combination's gradients, not all of them).
    for (align, dim, leaf), g in sorted(trained.items()):
        if g == 0.0:
            problems.append(f"{score} × {align} × {dim}: `{leaf}` never gets a gradient")
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} in all)"


def test_location_with_heads_is_valid(tmp_path):
    pytest.importorskip("torch")
    c = C.Combo("location", "global", "single", "basic", "multi_head")
    verdict = checked()[c]
    assert not isinstance(verdict, SpecError), verdict
    problems, grads = run_combo(c, verdict, tmp_path)
    assert not problems and grads["W"] > 0


# ---- refusals through the command line ---------------------------------------------------

def one_per_reason():
    seen, out = set(), []
    for c in COMBOS:
        rules = tuple(expected(c))
        if len(rules) == 1 and rules not in seen:
            seen.add(rules)
            out.append((c, rules[0]))
    return out


@pytest.mark.parametrize("combo,rule", one_per_reason(), ids=lambda x: getattr(x, "name", ""))
def test_cli_check_says_why(combo, rule, tmp_path, capsys):
    from taxcompile.cli import main

    path = tmp_path / "combo.attn"
    path.write_text(C.spec_text(combo), encoding="utf-8")
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:") and ": error: " in first, err
    loc = first[len(str(path)) + 1:].split(": error: ")[0]
    line, col = (int(x) for x in loc.split(":"))
    assert 1 <= line <= len(C.spec_text(combo).splitlines()) and col >= 1, err
    assert rule.says in first, err
    assert C.spec_text(combo).splitlines()[line - 1].strip().startswith(rule.at), err
    assert err.splitlines()[1].strip().startswith(rule.at), err  # the source line is shown


def test_reasons_cover_every_rule():
    """Each rule refuses some combination alone, so each is tested through the CLI."""
    assert {r for _, r in one_per_reason()} == set(RULES)


# ---- the committed matrix ------------------------------------------------------------------

def test_docs_matrix_is_up_to_date():
    committed = (ROOT / "docs" / "combinations.md").read_text(encoding="utf-8")
    assert committed == C.render(C.matrix(), C.pair_matrix()), \
        "run `python -m taxcompile.combinations > docs/combinations.md`"


def test_docs_matrix_counts():
    text = (ROOT / "docs" / "combinations.md").read_text(encoding="utf-8")
    verdicts = checked()
    refused = Counter(isinstance(verdicts[c], SpecError) for c in COMBOS)
    assert f"- **valid**: {refused[False]}\n" in text
    assert f"- **refused** by `taxcompile check`: {refused[True]}\n" in text


QUERYLESS = """paper p {{ cite = "X" }}
model m {{
    input x: sequence[N, 8]
    attention att {{ features = x  score = {score}  align = {align}  dimensionality = {dim}  heads = {heads} }}
    output y = classify(att, 3)
}}
"""


@pytest.mark.parametrize("score", ["concat(d_w = 8)", "additive(d_w = 8)"])
def test_scores_without_a_query(score, tmp_path):
    """Eq. 33: `concat` and `additive` score the keys alone with every alignment but local
    (whose window a query places); hard alignment stays single-dimensional (R2)."""
    torch = pytest.importorskip("torch")
    aligns = ["global", "hard", "local(D = 2)", "reinforced", "sparsemax", "entmax"]
    for align, dim, heads in itertools.product(aligns, ["single", "multi"], [1, 2]):
        text = QUERYLESS.format(score=score, align=align, dim=dim, heads=heads)
        try:
            cs = load_text(text, "q.attn")
        except SpecError as e:
            why = e.diagnostics[0].message
            assert align.startswith("local") and "local alignment centres a window" in why \
                or align == "hard" and dim == "multi" and "hard alignment picks" in why, why
            continue
        assert not align.startswith("local") and not (align == "hard" and dim == "multi")
        name = f"ql_{score[:3]}_{aligns.index(align)}_{dim}_{heads}"
        mod = load_module(codegen.generate(cs, cs.models[0], "q.attn"), name)
        cfg = mod.Config.tiny()
        model = mod.Model(cfg)
        out = model(**mod.example_inputs(cfg=cfg), return_attention=True)
        assert out.output.shape == (2, 3) and torch.isfinite(out.output).all()
        w = out.attention["att"]
        assert w.shape[:3] == (2, heads, 1), w.shape
        loss = out.output.sum() - sum(lp.sum() for lp in getattr(out, "log_probs", {}).values())  # REINFORCE
        loss.backward()
        assert model.att.W.weight.grad is not None, (align, dim, heads)
