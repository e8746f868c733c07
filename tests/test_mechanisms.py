"""The mechanism registry (taxcompile.mechanisms): every attention mechanism the language
and the IR admit has one record, every record's template and helpers exist, the stages
that read it agree with it, and the front end tests no mechanism's name as a string."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from taxcompile import classification, ir, lower, mechanisms as mech, ops

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "taxcompile"
TEMPLATES = PKG / "templates" / "codegen"


def literal_values(model, field: str) -> set[str]:
    """The values a ``Literal`` field of an IR class admits."""
    hint = typing.get_type_hints(model)[field]
    while typing.get_origin(hint) is typing.Union:  # Literal[...] | None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return set(typing.get_args(hint))


def test_every_mechanism_the_ir_admits_has_a_record():
    assert set(mech.MASKS) == literal_values(ir.Attention, "mask")
    assert set(mech.HEADS_OUT) == literal_values(ir.Attention, "heads_out")


def test_records_are_keyed_by_their_name_and_kind():
    for (kind, name), m in mech.REGISTRY.items():
        assert (m.kind, m.name) == (kind, name)
        assert kind in mech.KINDS
    for table, kind in ((mech.SCORES, "score"), (mech.ALIGNS, "align"),
                        (mech.POSITIONS, "position"), (mech.BIASES, "bias"),
                        (mech.MASKS, "mask"), (mech.PENALTIES, "penalty")):
        assert {m.kind for m in table.values()} == {kind}
    with pytest.raises(Exception):
        mech.SCORES["additive"].reading = "General"  # frozen


def test_every_template_and_helper_exists_and_has_a_record():
    for m in mech.REGISTRY.values():
        if m.template:
            assert (TEMPLATES / m.template).is_file(), (m.name, m.template)
        for h in (*m.helpers, *m.query_helpers):
            assert (TEMPLATES / "helpers" / f"{h}.py.j2").is_file(), (m.name, h)
    # no mechanism template without its record: one file per mechanism, named after it
    recorded = {m.template for m in mech.REGISTRY.values() if m.template}
    for folder in ("score", "align", "position", "bias", "penalty", "heads_out", "heads"):
        for f in (TEMPLATES / folder).glob("*.py.j2"):
            assert f"{folder}/{f.name}" in recorded, f
    for m in mech.REGISTRY.values():  # the forms of one kind that share a class (qk_norm's
        if m.template and "/" in m.template:  # l2 and rms) share a template named after it
            folder = m.template.split("/")[0]
            assert m.template in (f"{folder}/{m.name}.py.j2", f"{folder}/{m.kind}.py.j2"), m


def test_every_score_and_alignment_reads_as_a_table_iii_value_with_a_reason():
    for table, dim in ((mech.SCORES, "scoring"), (mech.ALIGNS, "alignment")):
        for m in table.values():
            # `score = none` (no score: its alignment's weights are its own) sets no value
            assert (m.reading or "no_score" in m.caps) and m.reason and m.label and m.doc, m.name
            if isinstance(m.reading, str) and m.reading:
                assert m.reading in classification.ORDER[dim], (m.name, m.reading)
    for form in mech.scores.AFFINITY_READING:
        for act in ("none", "tanh"):
            assert mech.affinity_reading(None, form, act) in classification.ORDER["scoring"]
    for m in mech.MODIFIERS.values():
        assert m.reason and m.class_part and m.doc and m.label and m.reading is None, m.name


def test_class_name_parts_are_unique():
    for table in (mech.SCORES, mech.ALIGNS, mech.MODIFIERS):
        parts = [m.class_part for m in table.values() if isinstance(m.class_part, str)]
        assert len(parts) == len(set(parts)), parts
    traits = [m.class_part for m in mech.TRAITS.values() if m.class_part]
    assert len(traits) == len(set(traits))


def test_constructor_arguments_name_fields_of_the_ir():
    owners = {"attention": ir.Attention}
    names = []
    for m in mech.REGISTRY.values():
        for a in m.ctor:
            assert a.owner in (*owners, "score", "align", "position", "heads", "join",
                               "qk_norm"), (m.name, a)
            if a.field and a.owner in owners:
                assert a.field in owners[a.owner].fields, (m.name, a.field)
            elif a.field:  # a parameter of a generic mechanism record (ir.Mech)
                rec = m if a.owner != "heads" else mech.HEAD_MECHANISMS[a.mechanism]
                assert a.field in [p.name for p in rec.params] + [k for k, _ in rec.fixed], \
                    (m.name, a.field)
            assert a.required or a.default is not None
            names.append(a.name)
    assert "clip" in names and "dropout" in names


def test_the_constructor_list_orders_required_arguments_first_in_the_signature():
    n = _statement("query = project(x)  keys = x  values = x  score = scaled_multiplicative  "
                   "position = relative(k = 4)  dropout = 0.1  "
                   "mask = causal")
    args = mech.constructor(n, dropout=True)
    assert [a.name for a in args] == ["d_q", "d_k", "d_v", "heads", "mask", "dropout", "clip"]
    assert mech.signature(args) == ("d_q: int", "d_k: int", "d_v: int", "heads: int",
                                     "clip: int",
                                     'mask: str = "none"', "dropout: float = 0.0")
    assert [a.name for a in args if a.passed(n)] == [a.name for a in args]
    plain = _statement("features = x  score = additive")
    assert [a.name for a in mech.constructor(plain, query=False) if a.passed(plain)] == \
        ["d_k", "d_v", "heads", "d_w"]


def test_an_unset_optional_argument_of_an_alignment_is_in_the_signature(monkeypatch):
    """An alignment's optional constructor argument with a default (sigmoid attention's
    bias, None: -log n) is in the class's signature whether or not the spec sets it: its
    template reads it in __init__. Only a required one computed from a node the statement
    may not have (reinforced's d_p) is left out when it has none."""
    rec = mech.ALIGNS["local"]
    probe = mech.CtorArg("sigma", "float | None", "None", owner="align", field="sigma")
    monkeypatch.setitem(mech.ALIGNS, "local", rec._replace(ctor=rec.ctor + (probe,)))
    n = _statement("query = project(x)  keys = x  values = x  score = scaled_multiplicative  "
                   "align = local(D = 2)")
    args = mech.constructor(n)
    assert "sigma: float | None = None" in mech.signature(args)
    assert [a.name for a in args if a.passed(n)] == ["d_q", "d_k", "d_v", "heads", "window"]
    plain = _statement("query = project(x)  keys = x  values = x  score = multiplicative  "
                       "align = reinforced")
    assert "d_p" not in [a.name for a in mech.constructor(plain)]


def _statement(fields: str) -> ir.Attention:
    from taxcompile import pipeline

    cs = pipeline.load_text("paper t { cite = \"T\" }\nmodel m {\n input x: sequence[L, 8]\n"
                            f" attention a {{ {fields} }}\n}}\n", "t.attn")
    return cs.models[0].model.attentions[0]


def test_lower_reads_the_registry():
    assert lower.SCORES == {k: m.params for k, m in mech.spellings(mech.SCORES).items()}
    assert list(lower.SCORES)[:4] == ["additive", "concat", "multiplicative", "dot"]
    assert lower.ALIGNS["soft"] is mech.ALIGNS["global"].params
    assert lower.POSITIONS.keys() == mech.POSITIONS.keys()
    assert lower.BIASES.keys() == mech.BIASES.keys()
    assert lower.MASKS.choices == tuple(mech.MASKS)
    # a join with required parameters is listed as its call: `routing(capsules = …)`
    assert [c.partition("(")[0] for c in lower.HEADS_OUT.choices] == list(mech.HEADS_OUT)


def test_every_penalty_says_where_it_lowers_to():
    """Lowering reads a penalty's spelling from its record: one written as a bare
    coefficient (`penalty = λ`), the others as calls (Li et al.'s and supervised attention's
    arguments read by functions of lowering/penalties.py, in their own words); every one
    lowers into ``ir.Attention.loss_term``, its record's ir.Mech, which
    mechanisms.penalties reads."""
    from types import SimpleNamespace

    from taxcompile.lowering import penalties

    assert [m.name for m in mech.PENALTIES.values() if m.bare] == ["frobenius"]
    assert set(penalties.ARGUMENTS) <= set(mech.PENALTIES)
    assert not {"penalty", "disagreement", "supervised"} & set(ir.Attention.fields)
    assert mech.penalties(SimpleNamespace(loss_term=None)) == []
    for m in mech.PENALTIES.values():  # a record of its own: its template or its call
        assert m.template or m.call, m.name
    disagreement = _statement("query = project(x)  keys = x  score = additive  heads = 2  "
                              "penalty = disagreement(0.5, on = output)").loss_term
    assert (disagreement.fn, disagreement.params) == (
        "disagreement", (("lambda", 0.5), ("on", "output")))
    spec = _statement("query = project(x)  keys = x  score = additive  "
                      "penalty = doubly_stochastic(0.5)")
    assert (spec.loss_term.fn, spec.loss_term.param("lambda")) == ("doubly_stochastic", 0.5)
    lin = _statement("features = x  score = additive  heads = 2  heads_out = concat  "
                     "penalty = 0.25").loss_term
    assert (lin.fn, lin.params) == ("frobenius", (("lambda", 0.25),))


# ---- no mechanism's name tested as a string in the modules that read the registry ----------

# The names a spec writes for a mechanism. Left out: names that are also feature operators
# (`concat(...)`, `sigmoid(x)`: a test of an operator's name is not a mechanism's), "none"
# (no mask, no activation) and "dot" (an affinity's form, graphviz's program).
SPELLED = (mech.SCORES, mech.ALIGNS, mech.MODIFIERS, mech.MASKS, mech.HEADS_OUT, mech.PENALTIES)
NAMES = {n for table in SPELLED for n in mech.spellings(table)} - set(ops.OPS) - {"none", "dot"}


def name_tests(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each comparison of a value with a mechanism's name (``fn == "local"``,
    ``fn in ("hard", "reinforced")``) in a module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            consts = side.elts if isinstance(side, (ast.Tuple, ast.Set, ast.List)) else [side]
            out += [(node.lineno, c.value) for c in consts
                    if isinstance(c, ast.Constant) and c.value in NAMES]
    return out


LOWERING = ["lower.py", *sorted(f"lowering/{p.name}" for p in (PKG / "lowering").glob("*.py"))]
# the checker's modules (taxcompile/check/), each one, new ones included
CHECK_MODULES = sorted(str(p.relative_to(PKG)) for p in (PKG / "check").glob("*.py"))


@pytest.mark.parametrize("module", ["classification.py", "feature_dimensions.py", "diagrams.py", "fmt.py",
                                    "codegen/classes.py", "codegen/layer.py",
                                    "codegen/layer_config.py", "codegen/layer_kv.py",
                                    "codegen/attention.py", "codegen/decoder.py", "train.py",
                                    "combinations.py", "combination_space.py", "checks.py",
                                    "module_checks.py",
                                    "codegen/generate.py", "study/models.py",
                                    "study/evaluate.py", *CHECK_MODULES, *LOWERING])
def test_front_end_modules_test_no_mechanism_name(module):
    """classify, diagram and fmt (and the attention classes' names, docstrings and
    constructors, the drop-in layer, the attention plan rules, the decoder loop, the
    report's training tasks, the combination generator, the checker, lowering and the
    study's models and measures) read the registry instead."""
    assert not name_tests(PKG / module)


def jinja_names(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each comparison with a mechanism's name inside a Jinja tag of a
    template (``x == "local"``, ``x in ("hard", …)``: the template's own logic; the generated
    code's text, such as ``self.mask == "causal"``, is outside the tags)."""
    import re

    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for tag in re.findall(r"{%.*?%}|{{.*?}}", line):
            for cmp in re.findall(r'[=!]=\s*"\w+"|\bin\s*\([^)]*\)', tag):
                out += [(i, s) for s in re.findall(r'"(\w+)"', cmp) if s in NAMES]
    return out


def test_the_attention_template_composes_mechanisms_without_naming_them():
    """attention.py.j2 and its stage templates (attention/) import the templates the
    statement's records name and call their slots (macros): no test of a mechanism's name,
    no ``part`` switch in any of them."""
    assert not jinja_names(TEMPLATES / "attention.py.j2")
    for path in sorted((TEMPLATES / "attention").glob("*.py.j2")):
        assert not jinja_names(path), path.name
    for m in mech.REGISTRY.values():
        if m.template and m.kind != "score" or m.template and "/" in m.template:
            text = (TEMPLATES / m.template).read_text(encoding="utf-8")
            assert "part ==" not in text, m.template


def test_a_term_of_the_scores_is_written_once_as_its_score_mod():
    """Each position term or bias in the scores defines the score_mod slot and no line of
    the scores elsewhere: the class defines score_mod once, and the explicit path evaluates
    it over the index grids (FlexAttention's path calls the same function)."""
    from taxcompile import codegen, pipeline

    for name, m in mech.MODIFIERS.items():
        text = (TEMPLATES / m.template).read_text(encoding="utf-8")
        assert ("macro score_mod()" in text) == m.in_scores, name
        assert "e = e" not in text, name
        if m.in_scores:
            assert "score_grid" in m.helpers, name
    field = {"relative": "position = relative(k = 2)", "alibi": "bias = alibi",
             "gaussian": "bias = gaussian"}
    for name, mod in field.items():
        cs = pipeline.load_text(
            "paper t { cite = \"T\" }\nmodel m {\n input x: sequence[L, 8]\n"
            f" attention a {{ query = project(x)  features = x  score = scaled_multiplicative "
            f" heads = 2  {mod} }}\n output o = identity(a)\n}}\n", "t.attn")
        src = codegen.generate(cs, cs.models[0], "t.attn")
        assert src.count("def score_mod(") == 1, name
        assert src.count("score_mod(e, *score_grid(e))") == 1, name
        past = "" if name == "gaussian" else ", past"  # query i at past + i (query_offset)
        assert "flex_context(q, k, v, key_mask, self.mask, k.shape[-1] ** -0.5, score_mod" \
            f"{past})" in src, name


def test_the_registry_adds_no_import():
    """Importing the registry loads nothing but the operator registry it shares P with (the
    front end loads both anyway): no jinja2, no torch."""
    import subprocess
    import sys

    code = ("import sys; before = set(sys.modules); import taxcompile.mechanisms; "
            "print(sorted(m for m in set(sys.modules) - before "
            "if not m.startswith('taxcompile.mechanisms')))")
    out = subprocess.run([sys.executable, "-c", "import taxcompile.ops\n" + code],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]", out


def macros_of(path: Path) -> set[str]:
    import re

    return set(re.findall(r"{%-?\s*macro\s+(\w+)", path.read_text(encoding="utf-8")))


def test_every_slot_a_mechanism_template_defines_is_a_step_of_a_stage():
    """The order of an attention class's lines is data (codegen/stages.py): a macro of a
    mechanism's template that no stage calls would never be rendered (a slot misspelt,
    or one the stages do not have yet), and a stage's own step names a macro of its
    template."""
    from taxcompile.codegen import stages

    slots = stages.slots()
    for m in mech.REGISTRY.values():
        if m.template and "/" in m.template:
            extra = macros_of(TEMPLATES / m.template) - slots
            assert not extra, (m.template, extra)
    for stage in stages.STAGES + stages.PARTS:
        own = macros_of(TEMPLATES / "attention" / f"{stage.name}.py.j2")
        for step in stage.steps:
            if not step.of:
                assert step.slot in own, (stage.name, step.slot)
            assert set(step.of) <= set(stages.GROUPS), step
            if step.default:
                assert step.default in own or step.default in {
                    s.name for s in stages.PARTS}, (stage.name, step.default)
