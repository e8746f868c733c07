"""``repeat NAME COUNT [shared] { … }`` blocks, unrolled: each hop lowers the body again
in a scope of its own (``block[i].name``), and its nodes carry an ``ir.Hop`` (the block,
the hop's index, whether hops share weights, the template they are written from). Errors
of this kind: a bad block name or hop count, a misplaced `shared`; each mistake of the
body is reported once, not once per hop."""

from __future__ import annotations

from .. import ast, ir
from .constants import Constants
from .names import Scope

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
        for i in range(1, count + 1):
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
        return True
