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
    if tp is typing.Any:  # a mechanism's parameter values (its record's P checks them)
        return True
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
            stack.extend(getattr(x, k) for k in type(x).fields)


def wrong_fields(obj) -> list[str]:
    return [f"{type(r).__name__}.{k} = {getattr(r, k)!r} is not {tp}"
            for r in records(obj) for k, tp in _hints(type(r)).items()
            if k in type(r).fields and not fits(getattr(r, k), tp)]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_record_has_its_annotated_types(path):
    assert wrong_fields(load(path).spec) == []


def test_the_type_check_can_fail():
    """The test above can fail, and a record is checked the same way when it is built."""
    loc = Location(file="f", line=1, column=2)
    bad = [dict(cls=ir.Ref, kind="op", node="x", loc=loc),  # not a value of the Literal
           dict(cls=ir.SegmentMemory, length=True, loc=loc),  # a bool for an int
           dict(cls=ir.Hop, block="b", index=1.0, count=2, shared=False,
                template="b.x"),  # a float for an int
           dict(cls=ir.Op, fn="f", args=[ir.Ref(node="x", loc=loc)], loc=loc),  # a list
           dict(cls=ir.Op, fn="f", params=(("k", None),), loc=loc)]  # None is no Scalar
    for fields in bad:
        cls = fields.pop("cls")
        with pytest.raises(TypeError, match="is not of its field's type"):
            cls(**fields)
        unchecked = object.__new__(cls)  # as a record built before the check was
        object.__setattr__(unchecked, "__dict__", {**cls.fields, **fields})
        assert wrong_fields(unchecked), fields
    assert wrong_fields(ir.SegmentMemory(length=3, loc=loc)) == []
    with pytest.raises(TypeError, match="is not of its field's type"):
        ir.SegmentMemory(length=3, loc=loc).replace(length="3")


def test_a_mechanism_record_is_checked_against_the_registry():
    """ir.Mech: an unknown name, a parameter its record lacks or a value its P refuses is
    an error when the record is built, not later in codegen."""
    loc = Location(file="f", line=1, column=2)
    with pytest.raises(ValueError, match="no align mechanism `nosuch`.*known: global"):
        ir.Mech(kind="align", fn="nosuch", loc=loc)
    with pytest.raises(ValueError, match="has the parameters \\(k\\), got \\(\\)"):
        ir.Mech(kind="align", fn="topk", loc=loc)  # every parameter, defaults filled in
    with pytest.raises(ValueError, match="k = 0 is out of range"):
        ir.Mech(kind="align", fn="topk", params=(("k", 0),), loc=loc)
    with pytest.raises(ValueError, match="is not an int"):
        ir.Mech(kind="align", fn="topk", params=(("k", 2.0),), loc=loc)
    with pytest.raises(ValueError, match="position = 'central' is not one of"):
        ir.Mech(kind="align", fn="local", params=(("D", 2), ("position", "central"),
                                                  ("gaussian", False), ("sigma", None)),
                loc=loc)
    with pytest.raises(ValueError, match="no parameter"):
        ir.Mech(kind="align", fn="topk", params=(("k", 2),), sym=(("D", "cfg.D"),), loc=loc)
    top = ir.Mech(kind="align", fn="topk", params=(("k", 2),), sym=(("k", "K"),), loc=loc)
    assert (top.k, top.param("k"), top.record is ir.mech.ALIGNS["topk"]) == (2, 2, True)
    with pytest.raises(ValueError, match="out of range"):
        top.replace(params=(("k", -1),))


def test_a_missing_field_names_the_record_and_its_fields():
    """Reading a field or parameter a record does not have is a FieldError (an
    AttributeError, so getattr with a default still works) that lists what it has."""
    loc = Location(file="f", line=1, column=2)
    al = ir.Mech(kind="align", fn="global", loc=loc)
    with pytest.raises(ir.FieldError, match="align `global` has no field or parameter "
                       "'window' \\(fields: kind, fn, params, sym, loc; parameters: none\\)"):
        al.window
    with pytest.raises(ir.FieldError, match="has no parameter 'policy'"):
        al.param("policy")
    assert getattr(al, "policy", None) is None
    with pytest.raises(ir.FieldError, match="SegmentMemory has no field 'window' \\(its fields: "
                       "length, "):
        ir.SegmentMemory(length=3, loc=loc).window


def test_record_api():
    loc = Location(file="f", line=1, column=2)
    act = ir.Act(fn="leaky_relu", params=(("slope", 0.2),))
    x = ir.Ref(node="x", loc=loc)
    op = ir.Op(fn="linear", args=(x,), params=(("d", 8), ("act", act)), loc=loc)
    # keywords only; every field without a default given; no unknown field
    with pytest.raises(TypeError, match="missing field.*loc"):
        ir.Op(fn="linear")
    with pytest.raises(TypeError, match="unknown field.*d_x"):
        ir.Op(fn="linear", d_x=3, loc=loc)
    with pytest.raises(TypeError):
        ir.Act("tanh")
    with pytest.raises(AttributeError, match="frozen"):
        op.fn = "ffn"
    # equality and hash by type and fields; repr and str name every field
    assert op == ir.Op(fn="linear", args=(x,), params=(("d", 8), ("act", act)), loc=loc)
    assert hash(op) == hash(ir.Op(fn="linear", args=(x,), params=(("d", 8), ("act", act)),
                                  loc=loc))
    assert op != ir.Op(fn="linear", args=(x,), params=(("d", 9), ("act", act)), loc=loc)
    assert Location(file="f", line=1, column=2) != ir.Act(fn="f")
    assert repr(loc) == "Location(file='f', line=1, column=2)" and str(loc) == "f:1:2"
    assert str(ir.Hop(block="b", index=1, count=2, shared=False, template="b.x")) == \
        "block='b' index=1 count=2 shared=False template='b.x' outer=() count_sym=None"
    # replace changes the given fields only; as_dict nests records as dicts
    copy = op.replace(fn="ffn")
    assert (copy.fn, copy.params, op.fn) == ("ffn", op.params, "linear")
    with pytest.raises(TypeError, match="unknown field.*d_x"):
        op.replace(d_x=3)
    assert op.as_dict(exclude={"loc", "sym"}) == {
        "kind": "op", "fn": "linear", "args": ({"kind": "ref", "node": "x", "loc": {
            "file": "f", "line": 1, "column": 2}},),
        "params": (("d", 8), ("act", {"fn": "leaky_relu", "params": (("slope", 0.2),)}))}
    assert list(ir.Ref.fields) == ["kind", "node", "loc"] and dict(act) == {
        "fn": "leaky_relu", "params": (("slope", 0.2),)}
    assert pickle.loads(pickle.dumps(op)) == op
    score = ir.Mech(kind="score", fn="additive", params=(("d_w", 8), ("act", act),
                                                          ("bias", True)), loc=loc)
    assert pickle.loads(pickle.dumps(score)) == score and str(score) == "additive"


def test_a_cached_property_is_no_field():
    """Model.by_id is cached on the record: it takes no part in equality, hash or dumps."""
    spec = load(ROOT / "specs" / "vaswani2017.attn").spec
    a, b = spec.models[0], load(ROOT / "specs" / "vaswani2017.attn").spec.models[0]
    assert a.node("src") is a.by_id["src"]
    assert a == b and hash(a) == hash(b) and "by_id" not in a.as_dict()
