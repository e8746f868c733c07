"""Every spec error carries a hint (issue 23: 15 % had none). An error site that gives no
hint gets its kind's from taxcompile/hints.py; this fails on any error of the test corpus
(tests/data/errors/, test_errors.py's cases, mutations of specs/ and examples/) whose
hint is missing or only the last-resort ``FALLBACK``."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings

from taxcompile.diagnostics import Collector, Diagnostic, SpecError
from taxcompile.hints import FALLBACK, HINTS, hint_for
from taxcompile.pipeline import load_text
from taxcompile.suggest import suggest
from conftest import error_snapshot
from test_errors import CASES
from test_properties import COMMON, mutants

DATA = Path(__file__).resolve().parent / "data" / "errors"


def unhinted(text: str, file: str = "x.attn") -> list[str]:
    """The messages of ``text``'s errors that have no hint of their own kind."""
    try:
        load_text(text, file)
    except SpecError as e:
        return [d.message for d in e.diagnostics
                if not d.hint or d.hint == FALLBACK or d.hint.rstrip().endswith("one of:")]
    return []


def test_every_error_of_the_corpus_has_a_hint():
    texts = [p.read_bytes().decode("utf-8", "replace") for p in sorted(DATA.glob("*.attn"))]
    texts += [c.data.decode("utf-8", "replace") for c in CASES]
    missing = sorted({m for t in texts for m in unhinted(t)})
    assert missing == []


@settings(max_examples=120, **COMMON)
@given(mutants())
def test_every_error_of_a_mutated_spec_has_a_hint(case):
    name, text = case
    assert unhinted(text, name) == []


def test_a_site_without_a_hint_gets_its_kinds_and_a_given_one_is_kept():
    c = Collector("x.attn")
    c.error(c.loc(1, 1), "constant `d` is defined twice")
    c.error(c.loc(2, 1), "constant `e` is defined twice", "my own hint")
    assert [d.hint for d in c.diagnostics] == [hint_for("constant `d` is defined twice"),
                                                "my own hint"]
    assert c.diagnostics[0].hint and c.diagnostics[0].hint != FALLBACK
    assert Diagnostic(c.loc(1, 1), "something new").hint == FALLBACK


def test_hints_are_sentences_not_echoes():
    for pattern, hint in HINTS:
        assert hint.strip() and hint != pattern and len(hint) <= 160, pattern


def test_a_block_that_defines_no_names_says_so_not_an_empty_list():
    # a body of updates only binds nothing of its own: the hint was "one of: " (nothing)
    got, want = error_snapshot("repeat_defines_no_names")
    assert got == want and "one of" not in got
    assert suggest("q", []) == "nothing of that kind is defined here"
