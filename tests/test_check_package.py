"""The checker's layout (taxcompile/check/, issue 27): its modules within the size limits,
the record fields it reads in place of mechanism names consistent with the records' other
fields, and ``taxcompile.checks`` still the name its importers use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from taxcompile import checks, mechanisms as mech
from taxcompile.check import attention

PKG = Path(__file__).resolve().parent.parent / "taxcompile"
LIMITS = {"module": 600, "class": 500, "function": 120}


@pytest.mark.parametrize("path", sorted((PKG / "check").glob("*.py")) + [PKG / "checks.py",
                                                                          PKG / "module_checks.py"],
                         ids=lambda p: p.name)
def test_check_modules_are_within_the_size_limits(path):
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") <= LIMITS["module"], path
    for node in ast.walk(ast.parse(text)):
        kind = "class" if isinstance(node, ast.ClassDef) else "function" if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if kind:
            assert node.end_lineno - node.lineno + 1 <= LIMITS[kind], (path.name, node.name)


def test_the_fields_the_checker_reads_agree_with_the_records():
    scores, aligns, mods = mech.SCORES.values(), mech.ALIGNS.values(), mech.MODIFIERS.values()
    d_w = {m.name for m in scores if any(a.name == "d_w" for a in m.ctor)}
    assert {m.name for m in scores if m.hidden} == d_w  # W1 q + W2 k of width d_w (eq. 31)
    assert set(mech.WITHOUT_QUERY) <= d_w  # eq. 33 scores the keys alone with that layer
    assert {m.name for m in scores if m.linear or m.act_sum} <= d_w
    assert not any(m.linear and m.act_sum for m in scores)
    assert {m.name for m in scores if m.needs_affinity} < {m.name for m in scores if m.affinity}
    assert {m.affinity for m in scores} == {"", "pooled", "rows"}
    assert {m.name for m in scores if m.qk} <= {m.name for m in scores if m.equal_qk}
    assert {m.name for m in scores if m.per_key} == {
        m.name for m in scores if any(a.name == "n_keys" for a in m.ctor)}
    assert {m.name for m in aligns if m.plain} <= {m.name for m in aligns if m.normalised}
    assert not any(m.normalised and (m.gate or m.centred or m.picks_one) for m in aligns)
    assert all(m.qk for m in mods if m.pairs)
    # each field the checker reads is set on some record (a field no record sets decides nothing)
    for name in ("hidden", "linear", "act_sum", "needs_affinity", "per_key", "graph", "qk"):
        assert any(getattr(m, name) for m in scores), name
    for name in ("centred", "picks_one", "normalised", "gate", "plain"):
        assert any(getattr(m, name) for m in aligns), name


def test_checks_still_exports_what_its_importers_use():
    for name in ("Checker", "CheckedModel", "CheckedSpec", "Shape", "AttentionInfo", "check",
                 "deps", "links", "expr_links", "decoder_ops", "learned_capsules",
                 "share_kind", "share_root", "version_with", "context_dim", "rescaled",
                 "operations", "weights_read", "SpecError", "ir", "_name"):
        assert hasattr(checks, name), name
    with pytest.raises(Exception):
        attention.Fit(None, None, None, None, "L", (), "none", (), None).mode = "single"
