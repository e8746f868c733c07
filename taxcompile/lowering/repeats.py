"""``repeat NAME COUNT [shared] { … }`` blocks, unrolled: each hop lowers the body again
in a scope of its own (``block[i].name``) or, from the third, is the hop before it
re-labelled (``relabel.py``), and its nodes carry an ``ir.Hop`` (the block,
the hop's index, whether hops share weights, the template they are written from). Errors
of this kind: a bad block name or hop count, a misplaced `shared`; each mistake of the
body is reported once, not once per hop."""

from __future__ import annotations

from .. import ast, ir
from .constants import Constants
from .names import Scope
from .relabel import Relabel, Unsure, alike, names_block

MAX_HOPS = 64


class Repeats(Constants):
    """``repeat`` blocks (a part of ``lower.Lowerer``; the body is lowered by its
    ``body``)."""

    def hop_of(self, scope: Scope, name: str) -> ir.Hop | None:
        if scope.hop is None:
            return None
        return scope.hop.replace(template=scope.hop.template + "." + name)

    def repeat(self, s: ast.Repeat, scope: Scope) -> None:
        if s.name in scope.bindings or s.name in scope.blocks:
            self.err(s.pos, f"`{s.name}` is already defined in this model")
            return
        if not self.unrolled(s, scope):
            scope.poisoned.add(s.name)  # reported: `NAME.x` and `NAME[2].x` are not again

    def unrolled(self, s: ast.Repeat, scope: Scope) -> bool:
        """Lower the hops of ``s``; False when the block is refused (reported)."""
        if not self.check_ident(s.name, s.pos, "repeat"):
            return False
        if isinstance(s.count, ast.Ref) and s.count.name == "shared":
            self.err(s.count.pos, "expected a hop count after the repeat name, e.g. "
                     "`repeat encoder 6 { … }`; found `shared`",
                     "`repeat NAME COUNT [shared] { … }`")
            return False
        count = self.as_int(s.count, scope, "the hop count", 1, MAX_HOPS)
        if count is None:
            return False
        shared = s.shared is not None
        if shared and str(s.shared) != "shared":
            self.err(ast.Pos(s.shared.line, s.shared.column), f"expected `shared` or `{{` after "
                     f"the hop count, found `{s.shared}`",
                     "`repeat NAME COUNT shared { … }` shares weights across hops")
            return False
        block = scope.prefix + s.name
        template = block if scope.hop is None else scope.hop.template + "." + s.name
        hops: list[dict[str, str]] = []
        scope.blocks[s.name] = hops
        starts = [len(self.m.nodes)]  # where each hop's nodes begin, and the last ends
        reuse = count > 2 and not self.names_itself(s)
        for i in range(1, count + 1):
            if reuse and i > 2 and self.relabelled(s, scope, block, i, starts, hops):
                starts.append(len(self.m.nodes))
                continue
            inner = Scope(f"{block}[{i}].", scope,
                          hop=ir.Hop(block=block, index=i, count=count, shared=shared,
                                     count_sym=self.sym(s.count, scope),
                                     outer=scope.hop.outer + (scope.hop.index,) if scope.hop else (),
                                     template=template))
            before = len(self.c.diagnostics)
            self.body(s.body, inner)
            hops.append({**{k: ("node", v) for k, v in inner.bindings.items()},
                         **{k: ("block", v) for k, v in inner.blocks.items()}})
            if len(self.c.diagnostics) > before:  # report each mistake once, not once per
                del scope.blocks[s.name]  # hop, nor again where a later hop or a statement
                return False  # the mistake left out is named
            starts.append(len(self.m.nodes))
        return True

    def names_itself(self, s: ast.Repeat) -> bool:
        """Whether ``s``'s body names its block (an error today; asked once per statement,
        not once per hop of a block around it)."""
        memo = self.__dict__.setdefault("_names_itself", {})  # by id: the tree outlives it
        if id(s) not in memo:
            memo[id(s)] = names_block(s.body, s.name)
        return memo[id(s)]

    def relabelled(self, s: ast.Repeat, scope: Scope, block: str, k: int, starts: list[int],
                   hops: list[dict]) -> bool:
        """Hop ``k`` (> 2) as hop k-1 re-labelled (``relabel.py`` says why that is the
        same); False where that is not sure, and nothing was changed."""
        nodes = self.m.nodes
        before, prev = nodes[starts[k - 3]:starts[k - 2]], nodes[starts[k - 2]:starts[k - 1]]
        if not alike(before, prev) or not self.room(len(prev)):
            return False  # (past a limit: lowered again, which reports it)
        r = Relabel(block, len(scope.hop.outer) + 1 if scope.hop else 0, k, {})
        versions = dict(self.m.versions)
        try:
            fresh = {n.id: r.node_id(n.id, versions) for n in prev}
            r.ids = {**{a.id: b.id for a, b in zip(before, prev)}, **fresh}
            new = [r.value(n) for n in prev]
            names = r.bindings(hops[-1])
        except Unsure:
            return False
        for n in new:
            self.add_node(n, s.pos)
        self.m.versions.update(versions)
        hops.append(names)
        outer: Scope | None = scope  # the names this hop updates now name its nodes
        while outer is not None:
            for name, v in outer.bindings.items():
                if v in fresh:
                    outer.bindings[name] = fresh[v]
            outer = outer.parent
        return True
