"""A penalty is a record and a template: a new one, registered from outside taxcompile (its
record in the registry, its template in an extension folder, ``TEMPLATE_PATHS``), is
lowered with its parameters checked against its record, labelled, listed by the docs
table, the vocabulary and the editor's hover, and computed by the generated class. Its
value is checked against the equation written here in float64."""

from __future__ import annotations

import pytest

from taxcompile import docs_table, vocabulary
from taxcompile import mechanisms as mech
from taxcompile.diagnostics import SpecError
from taxcompile.lsp import registry as lsp_registry
from taxcompile.params import P
from taxcompile.pipeline import load_text

# sum_h sum_i sum_j a_hij^2 per example, averaged over the batch, times lambda: larger the
# more peaked the weights (the test's own penalty; no paper's)
TEMPLATE = """\
{% macro init_last() %}
        self.l2w = {{ a.attention.loss_term.param("lambda") }}  # lambda of sum a^2
{% endmacro %}
{% macro extras() %}
        extras["penalty"] = self.l2w * (a * a).sum((-1, -2, -3)).mean()
{% endmacro %}
"""

RECORD = mech.Mechanism(
    "penalty", "l2w", (P("lambda", "float", False, 1.0),),
    reason="a term of the training loss: no cell of the row changes",
    label="weights' L2 penalty {lambda:g}", doc="lambda sum a^2 (a test's penalty)",
    extras=("penalty",), template="penalty/l2w.py.j2")


@pytest.fixture
def l2w(monkeypatch, tmp_path):
    """The record in the registry, its template in a folder of its own."""
    (tmp_path / "penalty").mkdir()
    (tmp_path / "penalty" / "l2w.py.j2").write_text(TEMPLATE, encoding="utf-8")
    monkeypatch.setitem(mech.PENALTIES, "l2w", RECORD)
    monkeypatch.setitem(mech.REGISTRY, ("penalty", "l2w"), RECORD)
    monkeypatch.setattr(mech, "TEMPLATE_PATHS", [str(tmp_path)])
    vocabulary.vocabulary.cache_clear()
    yield RECORD
    vocabulary.vocabulary.cache_clear()


def spec(penalty: str, heads: int = 2) -> str:
    return ('paper t { cite = "T" }\nmodel m {\n    input x: sequence[L, 8]\n'
            "    feature q = project(x)\n"
            f"    attention a {{ query = q  keys = q  score = scaled_multiplicative  "
            f"heads = {heads}  penalty = {penalty} }}\n"
            "    output y = classify(mean(a), 3)\n}\n")


def test_a_registered_penalty_lowers_from_its_record(l2w):
    n = load_text(spec("l2w(0.5)"), "t.attn").models[0].model.attentions[0]
    assert (n.loss_term.kind, n.loss_term.fn, n.loss_term.params) == (
        "penalty", "l2w", (("lambda", 0.5),))
    assert "weights' L2 penalty 0.5" in n.traits()
    assert [(rec.name, v) for rec, v in mech.penalties(n)] == [("l2w", n.loss_term)]
    assert load_text(spec("l2w"), "t.attn").models[0].model.attentions[0].loss_term.param(
        "lambda") == 1.0  # its default


@pytest.mark.parametrize("written, message", [
    ("l2w(-1.0)", "`lambda` of `l2w` must be a positive number, got -1"),
    ("l2w(scale = 2.0)", "`l2w` has no parameter `scale`"),
    ("l2w(1.0, 2.0)", "`l2w` takes 1 argument(s): `lambda`"),
])
def test_a_registered_penalty_checks_its_parameters(l2w, written, message):
    with pytest.raises(SpecError) as info:
        load_text(spec(written), "t.attn")
    d = info.value.diagnostics[0]
    assert message in d.message, d.message
    assert d.loc.line == 5  # the statement's line


def test_a_registered_penalty_is_listed_where_mechanisms_are(l2w):
    assert "| `l2w` | — | `lambda = 1.0` |" in docs_table.render()
    assert "l2w" in vocabulary.vocabulary().mechanisms
    hover = lsp_registry.mechanism_hover(lsp_registry.spellings()["l2w"][0])
    assert "**l2w** — penalty mechanism" in hover and "`lambda = 1.0`" in hover


def test_a_registered_penalty_is_computed_by_its_template(l2w):
    torch = pytest.importorskip("torch")
    from taxcompile import codegen
    from taxcompile.run import load_module

    cs = load_text(spec("l2w(0.5)"), "t.attn")
    code = codegen.generate(cs, cs.models[0], "t.attn")
    assert "self.l2w = 0.5" in code
    gen = load_module(code, "penalty_l2w")
    torch.manual_seed(0)
    cfg = gen.Config.tiny() if hasattr(gen.Config, "tiny") else gen.Config()
    model = gen.Model(cfg).eval()
    x = gen.example_inputs(cfg=cfg)["x"]  # no padding: every weight counts
    with torch.no_grad():
        out = model(x)
    # float64: q = W x (project), heads split q (eq. 38), a = softmax(q_h k_h^T / sqrt(d_h))
    q = x.double() @ model.q_proj.weight.detach().double().T
    N, L, d = q.shape
    qh = q.view(N, L, 2, d // 2).transpose(1, 2)
    a = torch.softmax(qh @ qh.transpose(-1, -2) / (d // 2) ** 0.5, -1)
    want = 0.5 * (a * a).sum((-1, -2, -3)).mean()
    assert float(out.penalty) == pytest.approx(float(want), rel=1e-5)
    # not a constant: between uniform rows (sum a^2 = 1 / L each) and one-hot ones (1 each)
    assert 0.5 * 2 < float(want) < 0.5 * 2 * L
    # the loss adds it
    target = torch.zeros(N, dtype=torch.long)
    base = torch.nn.functional.cross_entropy(out.output, target)
    assert float(model.loss(out, target)) == pytest.approx(float(base + out.penalty), rel=1e-5)
