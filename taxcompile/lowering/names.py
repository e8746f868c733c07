"""Names and scopes: a model body's bindings and each ``repeat`` hop's, forward
declarations, and the resolution of ``x``, ``encoder.self`` (the last hop),
``encoder[2].self`` and ``att.weights`` to node ids. Errors of this kind: a name defined
twice, an unknown name (with a suggestion), a hop that does not exist, a block or constant
where a node is expected. Whether a forward reference is ever defined is for checks.py."""

from __future__ import annotations

from .. import ast, ir
from ..diagnostics import article
from ..suggest import suggest
from .base import LowerBase


POISONED = ("poisoned", None)


class Scope:
    """Name bindings of a model body or of one hop of a ``repeat``."""

    __slots__ = ("prefix", "parent", "bindings", "declared", "consts", "blocks", "hop",
                 "updates", "poisoned")

    def __init__(self, prefix: str, parent: "Scope | None",
                 consts: dict[str, ir.Scalar] | None = None, hop: ir.Hop | None = None,
                 poisoned: set[str] | None = None):
        self.prefix = prefix  # "" or "encoder[2]."
        self.parent = parent
        self.bindings: dict[str, str] = {}  # name -> current node id
        self.declared: dict[str, str] = {}  # names declared later (forward refs)
        self.consts: dict[str, ir.Scalar] = {} if consts is None else consts
        self.blocks: dict[str, list[dict[str, str]]] = {}  # repeat -> hops' bindings
        self.hop = hop
        self.updates: dict[str, int] = {}  # `update` statements seen, by name
        # names whose definition was refused (reported there): known, so that their uses
        # give no second error ("unknown name")
        self.poisoned: set[str] = set() if poisoned is None else poisoned

    def lookup(self, name: str):
        """("const", value), ("node", id), ("block", hops), ("poisoned", None) or None."""
        s: Scope | None = self
        while s is not None:
            if name in s.consts:
                return ("const", s.consts[name])
            if name in s.bindings:
                return ("node", s.bindings[name])
            if name in s.declared:
                return ("node", s.declared[name])
            if name in s.blocks:
                return ("block", s.blocks[name])
            if name in s.poisoned:
                return POISONED
            s = s.parent
        return None

    def owner(self, name: str) -> "Scope | None":
        s: Scope | None = self
        while s is not None:
            if name in s.bindings:
                return s
            s = s.parent
        return None


class Names(LowerBase):
    """Binding and resolving names (a part of ``lower.Lowerer``)."""

    def declare(self, stmts, scope: Scope) -> None:
        for s in stmts:
            if isinstance(s, (ast.Input, ast.Attention)) or (
                    isinstance(s, ast.Feature) and s.role != "update"):
                scope.declared.setdefault(s.name, scope.prefix + s.name)

    def bind(self, scope: Scope, name: str, pos: ast.Pos, what: str) -> str | None:
        if not self.check_ident(name, pos, what):
            scope.declared.pop(name, None)
            scope.poisoned.add(name)
            return None
        if name in scope.bindings or name in scope.consts or name in scope.blocks:
            self.err(pos, f"`{name}` is already defined in this model",
                     "use `update NAME = …` to refine a feature, or pick another name")
            return None
        node_id = scope.prefix + name
        scope.bindings[name] = node_id
        scope.declared.pop(name, None)
        return node_id

    def resolve(self, r: ast.Ref, scope: Scope, what: str = "feature") -> str | None:
        """``x``, ``encoder.self`` (the last hop), ``encoder[2].self`` -> a node id."""
        indexes = r.indexes or (None,) * len(r.parts)
        found = scope.lookup(r.parts[0])
        if found is POISONED:
            return None  # its definition was refused, and reported
        if found is None:
            known = sorted(self._visible(scope) - {self.defining.name})
            self.err(r.pos, f"unknown name `{r.parts[0]}`",
                     suggest(r.parts[0], known) if known else "define it before using it")
            return None
        for i, (part, index) in enumerate(zip(r.parts, indexes)):
            if index is not None or i + 1 < len(r.parts):
                if found[0] != "block":
                    self.err(r.part_pos[i], f"`{part}` is not a `repeat` block, so "
                             + ("its hops cannot be numbered" if index is not None
                                else f"`.{r.parts[i + 1]}` cannot be looked up in it"))
                    return None
                hops = found[1]
                if not hops:  # read inside its own body: no hop is complete yet
                    self.err(r.part_pos[i], f"`{part}` is read inside its own body",
                             f"inside `repeat {part}`, name its statements without "
                             f"`{part}.` (they are this hop's)")
                    return None
                if index is not None and not 1 <= index <= len(hops):
                    self.err(r.part_pos[i], f"`{part}` has hops 1 to {len(hops)}; there is "
                             f"no hop {index}" if index > 0 else "hops are numbered from 1")
                    return None
                hop = hops[index - 1] if index is not None else hops[-1]
            if i + 1 == len(r.parts):
                break
            name = r.parts[i + 1]
            if name not in hop:
                self.err(r.part_pos[i + 1], f"`{part}` has no `{name}`",
                         suggest(name, sorted(hop)) if hop else
                         f"`{part}` defines no name of its own: a name its `update`s change "
                         f"is read by that name after the block")
                return None
            found = hop[name]
        if found[0] == "const":
            self.err(r.pos, f"`{r.name}` is a constant, not {article(what)} {what}")
            return None
        if found[0] == "block":
            self.err(r.pos, f"`{r.name}` is a `repeat` block; name a node inside it, "
                     f"e.g. `{r.name}.NAME`")
            return None
        return found[1]

    def _visible(self, scope: Scope) -> set[str]:
        out: set[str] = set()
        s: Scope | None = scope
        while s is not None:
            out |= set(s.bindings) | set(s.declared) | set(s.consts) | set(s.blocks)
            s = s.parent
        return out

    def weights_ref(self, e: ast.Ref, scope: Scope) -> ast.Ref | None:
        """``att.weights`` (or ``block.att.weights``): the reference to the node whose
        attention weights are read, when the name before ``.weights`` is a node and not a
        ``repeat`` block (a block may hold a statement called ``weights``)."""
        if len(e.parts) < 2 or e.parts[-1] != "weights" or (
                e.indexes and e.indexes[-1] is not None):
            return None
        found = scope.lookup(e.parts[0])
        indexes = e.indexes or (None,) * len(e.parts)
        for part, index in zip(e.parts[1:-1], indexes[:-2]):
            if found is None or found[0] != "block":
                return None
            hops = found[1]
            if not hops:  # read inside its own body: `resolve` says so
                return None
            hop = hops[index - 1] if index is not None and 1 <= index <= len(hops) else \
                hops[-1] if index is None else None
            if hop is None or part not in hop:
                return None
            found = hop[part]
        if found is None or found[0] != "node" or indexes[-2] is not None:
            return None
        return ast.Ref(e.pos, e.parts[:-1], e.part_pos[:-1], tuple(indexes[:-1]))
