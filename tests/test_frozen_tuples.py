"""A checked record's tuple field (``tuple[X, ...]``: an operation's (name, value)
parameters, a model's nodes, an input's axes) is tested without a Python call per item,
and stays as strict as a test per item: ``True`` is no int, ``1`` no float, a row of the
wrong width or a record of another class is refused."""

from __future__ import annotations

import sys
from typing import Any, Literal, Union

import pytest

from taxcompile import frozen, ir
from taxcompile.diagnostics import Location

LOC = Location(file="t.attn", line=1, column=1)


def python_calls(fn, *args) -> int:
    """The Python-level calls ``fn(*args)`` makes (C builtins are not counted)."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("tp, items", [
    (tuple[tuple[str, str], ...], tuple((f"k{i}", "v") for i in range(1000))),
    (tuple[tuple[str, Union[bool, int, float, str]], ...],
     tuple((f"k{i}", i if i % 2 else 0.5) for i in range(1000))),
    (tuple[str, ...], tuple(f"a{i}" for i in range(1000))),
    (tuple[Union[int, None], ...], tuple(i if i % 3 else None for i in range(1000))),
])
def test_a_long_tuple_is_checked_in_a_few_calls(tp, items):
    test = frozen.fits(tp)
    assert test(items)
    assert python_calls(test, items) < 20  # a call per item made it 1000 and more


@pytest.mark.parametrize("tp, good, bad", [
    (tuple[tuple[str, str], ...], (("a", "b"),),
     [(("a", 1),), ((1, "b"),), (("a", "b", "c"),), (["a", "b"],), ("ab",), [("a", "b")]]),
    (tuple[int, ...], (1, 2), [(True,), (1.0,), (1, None), ("1",)]),
    (tuple[Union[int, None], ...], (1, None), [(False,), (1.5,)]),
    (tuple[float, ...], (1.0,), [(1,)]),
    (tuple[tuple[str, Any], ...], (("a", object()), ("b", None)), [(("a",),), ((None, 1),)]),
    (tuple[Literal["x", "y"], ...], ("x", "y"), [("z",), (1,)]),
    (tuple[tuple[str, Union[bool, int, float, str], Union[str, None]], ...],
     (("d", 4, None), ("e", 1.5, "d * 2")), [(("d", 4),), (("d", None, None),)]),
])
def test_a_tuple_field_is_as_strict_as_a_test_per_item(tp, good, bad):
    test = frozen.fits(tp)
    assert test(good) and test(())
    for value in bad:
        assert not test(value), value


def test_a_record_of_another_class_in_a_tuple_is_refused():
    ref = ir.Ref(node="x", loc=LOC)
    op = ir.Op(fn="identity", args=(ref, ref), loc=LOC)
    assert op.args == (ref, ref)
    with pytest.raises(TypeError, match="args = "):
        ir.Op(fn="identity", args=(ref, LOC), loc=LOC)
    with pytest.raises(TypeError, match="params = "):
        ir.Op(fn="identity", args=(ref,), params=(("p", 1), ("q", [1])), loc=LOC)
