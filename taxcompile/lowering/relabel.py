"""A ``repeat`` hop built from the hop before it, node ids re-labelled, instead of lowered
again (``repeats.Repeats``: hops after the second were about a third of lowering specs/,
mostly yu2018's nested blocks). Hops 1 and 2 are lowered: hop 1 reads the names from
outside the block, which follow no pattern.

Why it is the same: a hop's lowering reads the body (the same each hop), the constants and
outer names (the same), the names the previous hop updated (hop k reads hop k-1's node
where hop k-1 read hop k-2's) and, of the nodes it reads, only their kind (``roles``,
``ids``; ``nodes`` only for inputs, which a body may not declare). So where hop k-1 and
hop k-2 built the same statements with the same kinds, hop k is hop k-1 with each of hop
k-1's ids swapped for hop k's and each of hop k-2's for hop k-1's, and its ``Hop`` records
pointing one hop on. Not used (``Unsure``; the hop is lowered again) where the body names
its own block (``B[1].x`` is the same node in every hop), where a record holds something
this walk does not know, or where the hop would pass a node limit (the limit's error is
then reported as before). A hop's node id has a ``[`` or an ``@``, so no name or option
is taken for one; an ``ir.Op`` is never shared between hops (the checker and codegen key
an operation's facts by ``id()``). It reports no error of its own, and the checker (``checks.py``)
still checks every hop. ``tests/test_repeat_relabel.py`` compares both ways on every spec,
example and error snapshot."""

from __future__ import annotations

from typing import Any

from .. import ast, ir
from ..diagnostics import Location
from ..frozen import Frozen


_PLAIN = frozenset({type(None), bool, int, float, Location})  # hold no node id


class Unsure(Exception):
    """The hop is not provably its predecessor re-labelled: lower it again."""


def names_block(body: tuple, name: str) -> bool:
    """Whether a reference in ``body`` (nested blocks too) starts with ``name``."""
    stack: list[Any] = list(body)
    while stack:
        v = stack.pop()
        if isinstance(v, ast.Ref):
            if v.parts[0] == name:
                return True
        elif isinstance(v, Frozen):
            stack.extend(value for _, value in v)
        elif isinstance(v, (tuple, list)):
            stack.extend(v)
    return False


def alike(a: list, b: list) -> bool:
    """Two hops' nodes built by the same statements, of the same kinds, in one order."""
    return len(a) == len(b) and all(
        type(x) is type(y) and x.kind_ == y.kind_ and x.hop.template == y.hop.template
        for x, y in zip(a, b))


class Relabel:
    """Hop ``k - 1`` of block ``block`` (nested ``depth`` repeats deep) -> hop ``k``.
    ``ids``: every id to swap (hop k-1's -> hop k's, hop k-2's -> hop k-1's)."""

    def __init__(self, block: str, depth: int, k: int, ids: dict[str, str]):
        self.block, self.depth, self.k, self.ids = block, depth, k, ids
        self.done: dict[int, Any] = {}  # id of a record of hop k-1 (alive) -> hop k's
        self.old, self.new = f"{block}[{k - 1}].", f"{block}[{k}]."

    def value(self, v: Any) -> Any:
        """``v`` with its ids swapped (the same object where nothing changes). (Dispatched
        on the exact type, leaves in ``items``' loop: a cold table walks some 9,000 values.)"""
        t = type(v)
        if t is str:
            return self.ids.get(v, v)
        if t in _PLAIN:
            return v
        if t is tuple:
            return self.items(v)
        if not isinstance(v, Frozen):
            raise Unsure(t.__name__)
        done = self.done.get(id(v))  # one record read twice (a query that is the keys)
        if done is None:  # stays one record
            if t is ir.Hop:
                done = self.hop(v)
            elif t is ir.Op:  # one of its own per hop, as lowering gives: the checker and
                done = v._rebuilt(self.items(v._values(v)))  # codegen key facts by id()
            else:
                old = v._values(v)
                new = self.items(old)
                done = v if new is old else v._rebuilt(new)  # each of its field's type
            self.done[id(v)] = done
        return done

    def items(self, values: tuple) -> tuple:
        ids, changed, out = self.ids, False, []
        for x in values:
            t = type(x)
            y = ids.get(x, x) if t is str else x if t in _PLAIN else self.value(x)
            out.append(y)
            changed = changed or y is not x
        return tuple(out) if changed else values

    def hop(self, h: ir.Hop) -> ir.Hop:
        if h.block == self.block and h.index == self.k - 1:
            return h._rebuilt(h._values(h)[:1] + (self.k,) + h._values(h)[2:])
        if not h.block.startswith(self.old) or h.outer[self.depth] != self.k - 1:
            raise Unsure(h.block)
        outer = h.outer[:self.depth] + (self.k,) + h.outer[self.depth + 1:]
        return h.replace(block=self.new + h.block[len(self.old):], outer=outer)

    def node_id(self, node_id: str, versions: dict[str, int]) -> str:
        """Hop k's id of hop k-1's node ``node_id``; an `update`'s takes the next version
        of its name, as lowering it would (``versions``: a copy of the model's, advanced)."""
        base, at, _ = node_id.partition("@")
        if base.startswith(self.old):
            base = self.new + base[len(self.old):]
        elif not at:
            raise Unsure(node_id)
        if not at:
            return base
        versions[base] = versions.get(base, 1) + 1
        return f"{base}@{versions[base]}"

    def bindings(self, hop: dict) -> dict:
        """A hop's names (``Scope.blocks``): nodes and nested blocks' hops."""
        out = {}
        for name, (kind, v) in hop.items():
            if kind == "node":
                if v not in self.ids:
                    raise Unsure(v)
                out[name] = (kind, self.ids[v])
            else:
                out[name] = (kind, [self.bindings(h) for h in v])
        return out
