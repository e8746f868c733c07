"""Shape, P, Fit and table.Row are frozen records (frozen.py), not frozen dataclasses:
defining a dataclass generates and compiles its methods, some 0.5 ms a class on a cold
start. They behave as the dataclasses did: built by position or keyword, equal and hashed
by value, frozen, the same repr and str, ``replace``d (reference: the dataclasses below)."""

from __future__ import annotations

import dataclasses

import pytest

from taxcompile import params, shapes, table
from taxcompile.check.attention import Fit


@dataclasses.dataclass(frozen=True)
class RefShape:
    axes: tuple
    dim: object


@dataclasses.dataclass(frozen=True)
class RefP:
    name: str
    type: str
    required: bool = True
    default: object = None
    choices: tuple = ()
    lo: int = 1
    below: object = None
    hi: object = None
    sign: str = "positive"


def _same_as_dataclass(ours, ref, name: str):
    assert not dataclasses.is_dataclass(ours)
    assert repr(ours) == repr(ref).replace(type(ref).__name__, name, 1)
    assert hash(ours) == hash(dataclasses.astuple(ref))


def test_shape_is_the_dataclass_it_was():
    s = shapes.Shape(("B", "N"), 64)
    _same_as_dataclass(s, RefShape(("B", "N"), 64), "Shape")
    assert s == shapes.Shape(axes=("B", "N"), dim=64) and s != shapes.Shape(("N",), 64)
    assert {s: 1}[shapes.Shape(("B", "N"), 64)] == 1
    assert str(s) == "(B, N, 64)" and str(shapes.Shape(("N",), None)) == "(N)"
    with pytest.raises(AttributeError):
        s.dim = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        shapes.Shape(("N",))


def test_p_is_the_dataclass_it_was():
    p = params.P("d", "int", False, 64, lo=2, hi=8)
    _same_as_dataclass(p, RefP("d", "int", False, 64, lo=2, hi=8), "P")
    assert (p.required, p.default, p.choices, p.sign) == (False, 64, (), "positive")
    assert p.refuses(9) and not p.refuses(4)


def test_fit_replace_and_row():
    s = shapes.Shape(("N",), 8)
    f = Fit(None, s, s, s, "N", (), "sequence", ("N",), None)
    g = f.replace(mode="single", ctx_axes=())
    assert (g.mode, g.ctx_axes, g.k, f.mode) == ("single", (), s, "sequence")
    assert g == Fit(None, s, s, s, "N", (), "single", (), None) and g != f
    r = table.Row({"paper": "X"}, 3, "x.attn")
    assert (r.paper.row, r.paper.cite, r.spec.file, r.row()) == (3, "X", "x.attn", {"paper": "X"})


def test_a_diagnostic_gets_its_kinds_hint_and_attention_info_is_a_record():
    from taxcompile.check.core import AttentionInfo
    from taxcompile.diagnostics import Diagnostic, Location
    from taxcompile.hints import FALLBACK, hint_for

    loc = Location(file="t.attn", line=2, column=5)
    msg = "unknown name `foo`"
    d = Diagnostic(loc, msg)
    assert d.hint == (hint_for(msg) or FALLBACK) and d.hint
    assert Diagnostic(loc, msg, "mine").hint == "mine" == Diagnostic(loc=loc, message=msg,
                                                                    hint="mine").hint
    assert d == Diagnostic(loc, msg) and len({d, Diagnostic(loc, msg)}) == 1
    with pytest.raises(AttributeError):
        d.hint = "x"  # type: ignore[misc]
    info = AttentionInfo("N", ("B",), "sequence", 64, 64, 32)
    assert (info.attended, info.groups, info.d_q, info.d_v) == ("N", ("B",), 64, 32)
    assert not dataclasses.is_dataclass(d) and not dataclasses.is_dataclass(info)
