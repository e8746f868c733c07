"""The IR's frozen records (taxcompile/frozen.py): what pydantic checked when each object
was built is checked here, over every record the specs and examples lower to: each field's
value has its annotation's type (Literal values, tuples, unions, nested records; no bool
for an int, no int for a float). And the record API the compiler reads behaves as
pydantic's did."""

from __future__ import annotations

import pickle
import typing
from pathlib import Path

import pytest

from taxcompile import ir
from taxcompile.diagnostics import Location
from taxcompile.frozen import Frozen
from taxcompile.pipeline import load

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.attn")) + sorted((ROOT / "examples").glob("*.attn"))
_HINTS: dict[type, dict] = {}


def _hints(cls: type) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def fits(value, tp) -> bool:
    """Whether ``value`` has type ``tp`` (strictly: ``True`` is no int, ``1`` no float)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return value is None
    if origin is typing.Union or (origin is not None and origin.__name__ == "UnionType"):
        return any(fits(value, a) for a in args)
    if origin is typing.Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(fits(v, args[0]) for v in value)
        return len(value) == len(args) and all(fits(v, a) for v, a in zip(value, args))
    if tp in (bool, int, float, str):
        return type(value) is tp
    return isinstance(value, tp)


def records(obj):
    """``obj`` and every record inside it."""
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif isinstance(x, Frozen):
            yield x
            stack.extend(getattr(x, k) for k in type(x).model_fields)


def wrong_fields(obj) -> list[str]:
    return [f"{type(r).__name__}.{k} = {getattr(r, k)!r} is not {tp}"
            for r in records(obj) for k, tp in _hints(type(r)).items()
            if k in type(r).model_fields and not fits(getattr(r, k), tp)]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_record_has_its_annotated_types(path):
    assert wrong_fields(load(path).spec) == []


def test_the_type_check_can_fail():
    loc = Location(file="f", line=1, column=2)
    bad = [ir.Score(fn="cosine", loc=loc),  # not a score function of the Literal
           ir.Score(fn="additive", d_w=True, loc=loc),  # a bool for an int
           ir.Supervision(gold="g", lam=1, loc=loc),  # an int for a float
           ir.Op(fn="f", args=[ir.Ref(node="x", loc=loc)], loc=loc),  # a list for a tuple
           ir.Op(fn="f", params=(("k", None),), loc=loc)]  # None is no Scalar
    for obj in bad:
        assert wrong_fields(obj), obj
    assert wrong_fields(ir.Score(fn="additive", d_w=3, loc=loc)) == []


def test_record_api():
    loc = Location(file="f", line=1, column=2)
    act = ir.Act(fn="leaky_relu", params=(("slope", 0.2),))
    score = ir.Score(fn="additive", d_w=8, act=act, loc=loc)
    # keywords only; every field without a default given; no unknown field
    with pytest.raises(TypeError, match="missing field.*loc"):
        ir.Score(fn="additive")
    with pytest.raises(TypeError, match="unknown field.*d_x"):
        ir.Score(fn="additive", d_x=3, loc=loc)
    with pytest.raises(TypeError):
        ir.Act("tanh")
    with pytest.raises(AttributeError, match="frozen"):
        score.d_w = 4
    # equality and hash by type and fields; repr and str as pydantic writes them
    assert score == ir.Score(fn="additive", d_w=8, act=act, loc=loc)
    assert hash(score) == hash(ir.Score(fn="additive", d_w=8, act=act, loc=loc))
    assert score != ir.Score(fn="additive", d_w=9, act=act, loc=loc)
    assert Location(file="f", line=1, column=2) != ir.Act(fn="f")
    assert repr(loc) == "Location(file='f', line=1, column=2)" and str(loc) == "f:1:2"
    assert str(ir.Hop(block="b", index=1, count=2, shared=False, template="b.x")) == \
        "block='b' index=1 count=2 shared=False template='b.x' outer=() count_sym=None"
    # model_copy changes the given fields only; model_dump nests records as dicts
    copy = score.model_copy(update={"d_w": 16})
    assert (copy.d_w, copy.act, score.d_w) == (16, act, 8)
    assert score.model_dump(exclude={"loc", "sym"}) == {
        "fn": "additive", "d_w": 8, "act": {"fn": "leaky_relu", "params": (("slope", 0.2),)},
        "bias": True, "similarity": None, "scale": None}
    assert list(ir.Ref.model_fields) == ["kind", "node", "loc"] and dict(act) == {
        "fn": "leaky_relu", "params": (("slope", 0.2),)}
    assert pickle.loads(pickle.dumps(score)) == score


def test_a_cached_property_is_no_field():
    """Model.by_id is cached on the record: it takes no part in equality, hash or dumps."""
    spec = load(ROOT / "specs" / "vaswani2017.attn").spec
    a, b = spec.models[0], load(ROOT / "specs" / "vaswani2017.attn").spec.models[0]
    assert a.node("src") is a.by_id["src"]
    assert a == b and hash(a) == hash(b) and "by_id" not in a.model_dump()
