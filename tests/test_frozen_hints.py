"""A checked record class's field types are resolved as ``typing.get_type_hints`` resolves
them (frozen.hints evaluates each annotation once instead), and a record is validated as
before: a value of the wrong type is refused, with every wrong field named."""

from __future__ import annotations

import typing

import pytest

from taxcompile import ast, diagnostics, frozen, ir, params  # noqa: F401 (their records)
from taxcompile.diagnostics import Location


def _records(cls=frozen.Frozen):
    for sub in cls.__subclasses__():
        yield sub
        yield from _records(sub)


RECORDS = sorted({c for c in _records() if c.__module__.startswith("taxcompile")},
                 key=lambda c: (c.__module__, c.__qualname__))


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_field_types_are_get_type_hints(cls):
    for klass in cls.__mro__:
        own = {k for k in klass.__dict__.get("__annotations__", {}) if k in cls.fields}
        if not own:
            continue
        expected = {k: v for k, v in typing.get_type_hints(klass).items()
                    if k in own and typing.get_origin(v) is not typing.ClassVar}
        assert frozen.hints(klass, cls.fields) == expected


def test_every_field_is_tested_and_each_wrong_one_named():
    assert len(RECORDS) > 30
    for cls in RECORDS:
        if cls._checked:
            assert set(frozen._validators(cls)) == set(cls.fields), cls
    loc = Location(file="t.attn", line=1, column=1)
    with pytest.raises(TypeError, match=r"Op\(\): fn = 3, args = \['x'\] is not of its"):
        ir.Op(fn=3, args=["x"], loc=loc)
    with pytest.raises(TypeError, match=r"Ref\(\): loc = None is not"):
        ir.Ref(node="x", loc=None)
    assert ir.Op(fn="tanh", args=(ir.Ref(node="x", loc=loc),), loc=loc).args[0].node == "x"


def test_check_runs_where_a_class_has_its_own():
    loc = Location(file="t.attn", line=1, column=1)
    with pytest.raises(ValueError):
        ir.Mech(kind="score", fn="no_such_score", loc=loc)
