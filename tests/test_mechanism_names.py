"""Every list of mechanism names derives from the registry (taxcompile/mechanisms): the
highlighter's words, the combinations' scores and alignments, the property test's
generator and the docs' table of mechanisms. A fake record of each kind, added to the
registry in a fresh interpreter, must show up in each of them; the committed
docs/mechanisms.md must be what the registry gives."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT

# Adds one fake record per kind to the registry, then imports each list's module and
# prints what the fakes became there.
PROBE = r"""
import json, sys
sys.path.insert(0, "tests")
from taxcompile import mechanisms as mech
from taxcompile.ops import P

FAKES = {"score": "fake_score", "align": "fake_align", "position": "fake_position",
         "bias": "fake_bias", "mask": "fake_mask", "heads_out": "fake_join"}
for kind, name in FAKES.items():
    params = (P("width", "int"),) if kind == "align" else ()
    reading = {"score": "General", "align": "Sparse"}.get(kind)
    mech.REGISTRY[(kind, name)] = mech.Mechanism(kind, name, params=params, reading=reading)

from pygments.token import Name
from taxcompile import combinations, lexer
import specgen, specgen_parts
try:
    from taxcompile.docs_table import render
    doc = render()
except ImportError:
    doc = ""

tokens = list(lexer.AttnLexer().get_tokens(
    "attention a { features = x  score = fake_score  align = fake_align(width = 2) "
    "position = fake_position  bias = fake_bias  mask = fake_mask  heads_out = fake_join }"))
found = {
    "lexer: highlighted": sorted(v for t, v in tokens if t in Name.Builtin),
    "combinations: scores": list(combinations.SCORES),
    "combinations: alignments": list(combinations.ALIGNMENTS),
    "combinations: labels": sorted(combinations.LABELS["scoring"].items())
                            + sorted(combinations.LABELS["alignment"].items()),
    "combinations: specs": [" ".join(line.split()) for c, t in combinations.enumerate()
                            if c.score == "fake_score" and c.align == "fake_align"
                            for line in t.splitlines()],
    "specgen: scores": specgen.SCORES,
    "specgen: alignments": specgen.ALIGNS,
    "specgen: position terms": specgen_parts.POSITION_TERMS,
    "specgen: biases, masks, heads_out": [*getattr(specgen, "BIASES", []),
                                          *getattr(specgen, "MASKS", []),
                                          *getattr(specgen, "HEADS_OUTS", [])],
    "docs table": [line for line in doc.splitlines() if "fake_" in line],
}
print(json.dumps(found))
"""

EXPECTED = {
    "lexer: highlighted": ["fake_align", "fake_bias", "fake_join", "fake_mask",
                           "fake_position", "fake_score"],
    "combinations: scores": ["fake_score"],
    "combinations: alignments": ["fake_align"],
    "combinations: labels": [["fake_align", "Sparse"], ["fake_score", "General"]],
    "combinations: specs": ["align = fake_align(width = 2)", "score = fake_score"],
    "specgen: scores": ["fake_score"],
    "specgen: alignments": ["fake_align(width = 2)"],
    "specgen: position terms": ["fake_position"],
    "specgen: biases, masks, heads_out": ["fake_bias", "fake_mask", "fake_join"],
    "docs table": ["`fake_score`", "`fake_align`", "`width` (int)", "`fake_position`",
                   "`fake_bias`", "`fake_mask`", "`fake_join`"],
}


@pytest.fixture(scope="module")
def with_fakes() -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("where", list(EXPECTED))
def test_a_new_record_shows_up(with_fakes, where):
    got = with_fakes[where]
    text = json.dumps(got)
    missing = [e for e in EXPECTED[where] if json.dumps(e) not in text and e not in text]
    assert not missing, (where, missing, got)


def test_the_combinations_leave_out_only_records_that_exist():
    from taxcompile import combinations, mechanisms

    names = {n for (k, n) in mechanisms.REGISTRY if k in ("score", "align")}
    assert set(combinations.OUTSIDE) <= names
    assert set(combinations.SCORES) | set(combinations.ALIGNMENTS) | set(combinations.OUTSIDE) \
        == names


def test_docs_table_is_up_to_date():
    """docs/mechanisms.md is what ``python -m taxcompile.docs_table`` writes."""
    from taxcompile import docs_table

    committed = (ROOT / "docs" / "mechanisms.md").read_text(encoding="utf-8")
    assert committed == docs_table.render(), (
        "docs/mechanisms.md is stale: run `python -m taxcompile.docs_table -o docs/mechanisms.md`")


def test_docs_table_cites_equations_and_defaults():
    from taxcompile import docs_table

    text = docs_table.render()
    assert "| `local` | — | `D` (int), `position = predictive` (monotonic \\| predictive), " \
           "`gaussian = true`, `sigma` (float, optional) | Local | 27–29 |" in text
    assert "| `multiplicative` | `dot` | — | Multiplicative | — |" in text
    assert "| `doubly_stochastic` | — | `lambda = 1.0` | — | 14 (Xu et al.) |" in text


def test_docs_table_command_writes_the_file(tmp_path):
    from taxcompile import docs_table

    out = tmp_path / "m.md"
    run = subprocess.run([sys.executable, "-m", "taxcompile.docs_table", "-o", str(out)],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert out.read_text(encoding="utf-8") == docs_table.render()
    bad = subprocess.run([sys.executable, "-m", "taxcompile.docs_table", "--nope"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
