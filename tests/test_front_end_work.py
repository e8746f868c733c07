"""The front end does each piece of work once: the checker works out a node's links and
its recurrent operations once per node, and a checked record class resolves only its own
fields' annotations (not its base's class variables, once per class)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, ClassVar

import pytest

from conftest import SPECS
from taxcompile import checks, frozen, ir
from taxcompile.check import core
from taxcompile.diagnostics import Location
from taxcompile.pipeline import load

if TYPE_CHECKING:
    from decimal import Decimal  # a name this module never binds at run time


@pytest.fixture
def counted(monkeypatch):
    """Calls of the checker's link and operation walks, by (node id, what)."""
    calls: Counter = Counter()
    links, ops_with = core._links, core._ops_with

    def count_links(n):
        calls[id(n), "links"] += 1
        return links(n)

    def count_ops(n, param):
        calls[id(n), param] += 1
        return ops_with(n, param)

    monkeypatch.setattr(core, "_links", count_links)
    monkeypatch.setattr(core, "_ops_with", count_ops)
    return calls


@pytest.mark.parametrize("spec", ["vaswani2017.attn", "bahdanau2015.attn", "luong2015.attn"])
def test_a_nodes_links_and_recurrent_ops_are_walked_once(counted, spec):
    cs = load(SPECS / spec)
    assert counted and max(counted.values()) == 1, counted.most_common(3)
    # and what is kept is what a fresh walk gives
    for cm in cs.models:
        for n in cm.model.nodes:
            fresh = n.replace()  # a copy has no memo: worked out anew
            assert checks.links(n) == checks.links(fresh)
            assert checks.decoder_ops(n) == checks.decoder_ops(fresh)
            assert core.state_ops(n) == core.state_ops(fresh)


def test_a_memo_is_no_field():
    cs = load(SPECS / "bahdanau2015.attn")
    n = cs.models[0].model.nodes[-1]
    checks.links(n), checks.decoder_ops(n)
    assert "_links" in vars(n) and "_links" not in type(n).fields
    assert n == n.replace() and hash(n) == hash(n.replace())
    assert "_links" not in n.as_dict() and "_links" not in repr(n)


def test_expr_links_reads_the_last_of_a_repeated_parameter():
    loc = Location(file="t.attn", line=1, column=1)
    x = ir.Ref(node="x", loc=loc)
    op = ir.Op(fn="lstm", args=(x,), params=(("feed", "a"), ("feed", "b"), ("init", "h0")),
               loc=loc)
    assert core.expr_links(op) == [("b", "feed"), ("h0", "init"), ("x", "read")]
    prev = ir.Op(fn="prev", args=(op,), loc=loc)
    assert core.expr_links(prev) == [("b", "feed"), ("h0", "init"), ("x", "prev")]


class _Base(frozen.Frozen, checked=True):
    # resolved by typing.get_type_hints(cls) for every class, though no field: a name
    # imported for type checkers only made building the first record a NameError
    scale: ClassVar["Decimal"]


class _Record(_Base):
    n: int
    names: tuple[str, ...] = ()
    pair: tuple[str, "int | None"] = ("a", None)


def test_a_record_resolves_only_its_fields_annotations():
    r = _Record(n=3, names=("x",), pair=("b", 2))
    assert (r.n, r.names, r.pair) == (3, ("x",), ("b", 2))
    for bad in (dict(n=True), dict(n=1, names=["x"]), dict(n=1, pair=("b", 2.0)),
                dict(n=1, pair=(1, 2)), dict(n=1, pair=("b",))):
        with pytest.raises(TypeError, match="is not of its field's type"):
            _Record(**bad)
