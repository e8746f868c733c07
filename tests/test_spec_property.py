"""`check` accepts => it compiles and runs (issue 23), over generated and mutated specs.

The oracle and the generator live in tests/specgen.py. A quick profile runs in
``make test``; ``make fuzz`` sets ``TAXCOMPILE_FUZZ_EXAMPLES`` (10,000 by default) for a
nightly run of the same properties. Derandomized, without an example database: CI sees
the same specs every run; the nightly run sets ``TAXCOMPILE_FUZZ_SEED`` to explore.

Every failure found is kept under tests/data/regressions/ (one ``.attn`` each, its first
line a comment saying what failed) and ``test_regression_spec`` runs it through the
same oracle.

``specgen.KNOWN_DEFECTS`` names the defects found and not yet fixed on main: both
profiles leave out the constructs or oracles it flags (``AVOID``, ``SKIP``), and a
regression file marked ``# known: FLAG`` is expected to fail while FLAG is listed.
"""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import HealthCheck, event, given, seed, settings

import specgen

pytest.importorskip("torch")

FUZZ = int(os.environ.get("TAXCOMPILE_FUZZ_EXAMPLES", "0"))
SEED = os.environ.get("TAXCOMPILE_FUZZ_SEED")


QUICK_TOTAL = 160  # the quick profile's specs over the three properties below


def profile(quick: int):
    """The quick profile (``quick`` examples, derandomized), or the long one: its
    ``TAXCOMPILE_FUZZ_EXAMPLES`` specs shared in the quick profile's proportions."""
    common = dict(deadline=None, database=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                         HealthCheck.data_too_large])
    if FUZZ:
        return settings(max_examples=max(1, FUZZ * quick // QUICK_TOTAL),
                        derandomize=SEED is None, **common)
    return settings(max_examples=quick, derandomize=True, **common)


def seeded(fn):
    return seed(int(SEED))(fn) if SEED is not None else fn


KNOWN = frozenset(specgen.KNOWN_DEFECTS)
AVOID = KNOWN  # flags of generator parts (the others are not drawn in any case)
SKIP = KNOWN  # flags of oracles


def _check(text: str, skip=SKIP) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # e.g. conv1d's padding='same' note
        return specgen.check_spec(text, skip=skip)


@seeded
@profile(100)
@given(specgen.generated_specs(avoid=AVOID))
def test_generated_specs_check_then_run(text):
    for construct in specgen.constructs(text):
        event(f"construct: {construct}")
    event(_check(text))


@seeded
@profile(40)
@given(specgen.mutated_specs())
def test_mutated_specs_check_then_run(text):
    event(_check(text))


@seeded
@profile(20)
@given(specgen.mutated_generated(avoid=AVOID))
def test_mutated_generated_specs_check_then_run(text):
    event(_check(text))


REGRESSIONS = sorted(specgen.REGRESSIONS.glob("*.attn"))


def _known(path) -> str | None:
    """The KNOWN_DEFECTS flag of a regression file's ``# known: FLAG`` line, if any."""
    line = path.read_text(encoding="utf-8").split("\n", 3)[2]
    return line.removeprefix("# known: ") if line.startswith("# known: ") else None


@pytest.mark.parametrize("path", [
    pytest.param(p, id=p.stem, marks=pytest.mark.xfail(
        strict=True, reason=f"known defect {_known(p)}: {specgen.KNOWN_DEFECTS[_known(p)]}"))
    if _known(p) in KNOWN else pytest.param(p, id=p.stem) for p in REGRESSIONS])
def test_regression_spec(path):
    """A spec the generator once failed on: refused with a location, or runs clean (every
    oracle of check_spec), as its second line says (``# expect: ran`` where the fix made
    it work). A third line ``# known: FLAG`` marks a defect of KNOWN_DEFECTS not fixed
    yet: the test is expected to fail until the flag is removed."""
    text = path.read_text(encoding="utf-8")
    first, second = text.split("\n", 2)[:2]
    assert first.startswith("# "), f"{path.name}: the first line says what failed"
    want = second.removeprefix("# expect: ")
    assert want in ("ran", "refused"), f"{path.name}: the second line is `# expect: ran|refused`"
    assert _check(text, skip=frozenset()) == want, path.name


def test_regressions_are_kept():
    assert len(REGRESSIONS) >= 8


def test_generator_reaches_codegen_errors_and_every_construct():
    """The generator is not vacuous: among its first 300 specs (derandomized) check
    refuses some and accepts some, and it accepts some with each construct of
    specgen.CONSTRUCTS, so that the property and the oracles run on them (the draws of
    KNOWN_DEFECTS left out)."""
    seen: dict[str, int] = dict.fromkeys(specgen.CONSTRUCTS, 0)
    verdicts = {True: 0, False: 0}

    @settings(max_examples=300, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(specgen.generated_specs(avoid=AVOID))
    def count(text):
        ok = _accepted(text)
        verdicts[ok] += 1
        for c in specgen.constructs(text) if ok else ():
            seen[c] += 1

    count()
    assert verdicts[True] >= 100 and verdicts[False] >= 30, verdicts
    missing = [c for c, n in seen.items() if n == 0]
    assert not missing, (missing, seen)


def _accepted(text: str) -> bool:
    from taxcompile.diagnostics import SpecError
    from taxcompile.pipeline import load_text

    try:
        load_text(text, "gen.attn")
    except SpecError:
        return False
    return True


