"""The lowering stage's layout (issue 27): lower.py and the parts in taxcompile/lowering/
stay within the size limits, and every part says in its docstring which errors it reports
(the rule of what lowering checks and what checks.py checks)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "taxcompile"
MODULES = [PKG / "lower.py", *sorted((PKG / "lowering").glob("*.py"))]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_lowering_modules_respect_the_size_limits(path):
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 600
    tree = ast.parse(text)
    for n in ast.walk(tree):
        size = (n.end_lineno or n.lineno) - n.lineno + 1 if hasattr(n, "lineno") else 0
        if isinstance(n, ast.ClassDef):
            assert size <= 500, (n.name, size)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert size <= 120, (n.name, size)
    doc = ast.get_docstring(tree) or ""
    assert "checks.py" in doc or path.name in ("base.py", "constants.py", "spec.py",
                                               "repeats.py"), path.name
    assert "error" in doc.lower(), path.name  # each part names the errors it reports


def test_lowering_imports_no_torch_or_jinja2():
    import subprocess
    import sys

    code = ("import sys, taxcompile.lower; "
            "print([m for m in ('torch', 'jinja2') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PKG.parent, check=True).stdout
    assert out.strip() == "[]"


def _error(body: str):
    from taxcompile import pipeline
    from taxcompile.diagnostics import SpecError

    text = ('paper p { cite = "X" }\nmodel m {\n    input x: sequence[L, 8]\n' + body +
            "    attention a { features = x  score = additive }\n}\n")
    with pytest.raises(SpecError) as e:
        pipeline.load_text(text, "t.attn")
    return e.value.diagnostics[0]


def test_a_blocks_weights_read_inside_its_own_body_is_a_located_error():
    # `hop.x.weights` inside `repeat hop`: no hop is complete yet (it was an IndexError)
    d = _error("    repeat hop 2 {\n        attention x { features = x  score = additive }\n"
               "        feature y = x + hop.x.weights\n    }\n")
    assert (d.loc.line, d.loc.column) == (6, 25)
    assert d.message == "`hop` is read inside its own body"


def test_an_unknown_parameter_lists_the_operators_parameters_in_their_order():
    # the hint listed a set: its order changed from run to run (PYTHONHASHSEED)
    d = _error("    feature y = linear(x, 8, sharing = x)\n")
    assert d.message == "`linear` has no parameter `sharing`"
    assert d.hint == "did you mean `share`?"
    d = _error("    feature y = linear(x, 8, colour = x)\n")
    assert d.hint == "one of: `x`, `d`, `act`, `bias`, `share`"


@pytest.mark.parametrize("written,field", [("doubly_stochastic", "doubly_stochastic"),
                                           ("coverage", "coverage"),
                                           ("coverage()", "coverage")])
def test_a_penalty_named_alone_is_its_call_with_lambda_one(written, field):
    """`penalty = coverage` is `coverage()`, λ = 1 as the docs say (it once read as an
    unknown `let` constant); a `let` of that name is still Lin et al.'s coefficient."""
    from taxcompile import pipeline

    body = """paper p {{
    cite = "X"
}}
{let}model m {{
    input x: sequence[L, 8]
    input q: sequence[T, 8]
    attention att {{ query = q  features = x  score = general  heads = 2  penalty = {p} }}
    output o = classify(att, 3)
}}
"""
    (att,) = [n for n in pipeline.load_text(body.format(let="", p=written), "t.attn")
              .models[0].model.nodes if n.kind_ == "attention"]
    assert (att.loss_term.fn, att.loss_term.param("lambda")) == (field, 1.0)
    if "(" not in written:
        (att,) = [n for n in pipeline.load_text(
            body.format(let=f"let {written} = 0.5\n", p=written), "t.attn").models[0].model.nodes
            if n.kind_ == "attention"]
        assert (att.loss_term.fn, att.loss_term.param("lambda")) == ("frobenius", 0.5)
