"""Lin et al.'s penalty (||A A^T - I||_F^2, `penalty = λ`) is a record like the other
penalties: it lowers into ``ir.Attention.loss_term``, and what it needs of the module
(several rows of weights, one weight per key) is record data that the checker reads for
every penalty, so a penalty registered from outside taxcompile is refused with its own
words. Two modules that share one class keep one coefficient of the penalty the class
computes."""

from __future__ import annotations

import pytest

from taxcompile import mechanisms as mech
from taxcompile.diagnostics import SpecError
from taxcompile.params import P
from taxcompile.pipeline import load_text

HEADER = 'paper t { cite = "T" }\n'


def statement(fields: str, more: str = "") -> str:
    return (HEADER + "model m {\n    input x: sequence[L, 8]\n    feature q = project(x)\n"
            f"    attention a {{ query = q  keys = q  score = scaled_multiplicative  {fields} }}\n"
            f"{more}    output y = classify(mean(a), 3)\n}}\n")


def refusal(text: str):
    with pytest.raises(SpecError) as info:
        load_text(text, "t.attn")
    return info.value.diagnostics[0]


def test_disagreement_is_a_loss_term_of_its_record():
    """Li et al. 2018: lowered into loss_term; what the class returns for it (each head's
    values or outputs) and what its call reads are its record's."""
    def lowered(on):
        text = statement(f"heads = 2  penalty = disagreement(0.5, on = {on})")
        return load_text(text, "t.attn").models[0].model.attentions[0]

    n = lowered("subspace")
    assert (n.loss_term.fn, n.loss_term.params) == (
        "disagreement", (("lambda", 0.5), ("on", "subspace")))
    assert "disagreement on subspace 0.5" in n.traits()
    assert [mech.heads_extra(lowered(on)) for on in ("subspace", "position", "output")] == [
        "values", "", "output"]
    rec = n.loss_term.record
    assert rec.text("call", n.loss_term, a="h", qmask="qm", kmask="km") == \
        "disagreement_penalty(h, km, 0.5, True)"
    p = lowered("position").loss_term
    assert rec.text("call", p, a="w", qmask="qm", kmask="km") == \
        "disagreement_penalty(w, qm, 0.5, False)"


def test_lins_penalty_is_a_loss_term_of_its_record():
    n = load_text(statement("heads = 2  penalty = 0.5"), "t.attn").models[0].model.attentions[0]
    assert (n.loss_term.kind, n.loss_term.fn, n.loss_term.params) == (
        "penalty", "frobenius", (("lambda", 0.5),))
    assert [(rec.name, v) for rec, v in mech.penalties(n)] == [("frobenius", n.loss_term)]
    assert "penalty 0.5" in n.traits()
    assert mech.class_penalty(n)  # its class computes it (extras["penalty"])


# a test's penalty over the heads' rows of weights (no paper's), with what it needs as data
RECORD = mech.Mechanism(
    "penalty", "rowsum", (P("lambda", "float", False, 1.0),),
    reason="a term of the training loss: no cell of the row changes", label="rowsum {lambda:g}",
    extras=("penalty",), template="penalty/rowsum.py.j2",
    several_heads=("the rowsum penalty compares the heads' rows", "set `heads = 2` or more"),
    single="the rowsum penalty compares rows of one weight per key",
    no_query=lambda m: "the rowsum penalty reads each head's own values" if m.param(
        "lambda") > 0.5 else "", no_query_hint="give the module a query")


@pytest.fixture
def rowsum(monkeypatch):
    monkeypatch.setitem(mech.PENALTIES, "rowsum", RECORD)
    monkeypatch.setitem(mech.REGISTRY, ("penalty", "rowsum"), RECORD)
    return RECORD


def test_a_registered_penalty_over_the_heads_is_refused_in_its_own_words(rowsum):
    d = refusal(statement("penalty = rowsum(0.5)"))
    assert d.message == "attention `a`: the rowsum penalty compares the heads' rows"
    assert d.hint == "set `heads = 2` or more"


def test_a_registered_penalty_of_one_weight_per_key_refuses_multi_dimensional_weights(rowsum):
    text = (HEADER + "model m {\n    input x: sequence[L, 6]\n    feature h = linear(x, 8)\n"
            "    attention rows { features = h  score = additive(d_w = 8)  heads = 4\n"
            "        dimensionality = multi  penalty = rowsum(0.5) }\n"
            "    output o = classify(rows, 3)\n}\n")
    d = refusal(text)
    assert d.message == "attention `rows`: the rowsum penalty compares rows of one weight per key"
    assert d.hint == "use `dimensionality = single`"


def test_modules_of_one_class_keep_one_coefficient_of_its_penalty():
    twin = "    attention b { query = q  keys = q  score = scaled_multiplicative  heads = 2  " \
           "penalty = 0.25  share = a }\n"
    d = refusal(statement("heads = 2  penalty = 0.5", twin))
    assert "`a` has penalty = 0.5 and this one 0.25" in d.message, d.message


def test_a_registered_penalty_that_needs_a_query_is_refused_in_its_own_words(rowsum):
    text = (HEADER + "model m {\n    input x: sequence[L, 8]\n"
            "    attention s { keys = x  score = additive  heads = 2  penalty = rowsum(1.0) }\n"
            "    output u = s\n}\n")
    d = refusal(text)
    assert (d.message, d.hint) == ("attention `s`: the rowsum penalty reads each head's own "
                                   "values", "give the module a query")
    load_text(text.replace("rowsum(1.0)", "rowsum(0.5)"), "t.attn")  # its record: not at 0.5


def test_supervised_attention_is_a_loss_term_of_its_record():
    text = (HEADER + "model m {\n    input x: sequence[L, 8]\n    input y: sequence[T, 8]\n"
            "    input gold: alignment[T, L]\n"
            "    attention s { query = y  keys = x  score = scaled_multiplicative\n"
            "        penalty = supervised(gold, 0.5, loss = cross_entropy) }\n"
            "    output u = s\n}\n")
    n = load_text(text, "t.attn").models[0].model.attentions[0]
    m = n.loss_term
    assert (m.fn, m.params) == ("supervised", (("gold", "gold"), ("lambda", 0.5),
                                               ("loss", "cross_entropy")))
    assert (m.loc.line, m.loc.column) == (7, 30)  # the target's name, where errors point
    assert m.record.target == "gold"
    assert "supervised by gold (cross entropy, 0.5)" in n.traits()
    assert m.record.text("call", m, a="a", qmask="qm", kmask="km", target="g") == \
        'supervised_penalty(a, g, qm, km, 0.5, "cross_entropy")'


def test_a_registered_penalty_with_a_target_is_checked_as_supervised_attentions(monkeypatch):
    """A record with a `target` parameter: its target must be an alignment input."""
    rec = mech.Mechanism("penalty", "aligned", (P("to", "node"),), reason="a loss term",
                         label="aligned to {to}", call="aligned({a}, {target})", target="to")
    monkeypatch.setitem(mech.PENALTIES, "aligned", rec)
    monkeypatch.setitem(mech.REGISTRY, ("penalty", "aligned"), rec)
    text = (HEADER + "model m {\n    input x: sequence[L, 8]\n    input y: sequence[T, 8]\n"
            "    attention s { query = y  keys = x  score = scaled_multiplicative\n"
            "        penalty = aligned(to = y) }\n    output u = s\n}\n")
    d = refusal(text)
    assert d.message == ("attention `s`: `aligned` compares the weights with a target "
                         "alignment, but `y` is a `sequence` input")
