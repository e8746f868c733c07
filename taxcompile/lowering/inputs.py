"""``input`` statements: the kind, the axes (named, sized by a constant, or fixed by an
option), the feature size and the options (``vocab``, ``autoregressive``, ``of``,
``into``, an axis's length). Errors of this kind: an unknown kind or option, axes or a
feature size the kind does not take, a repeated axis, a token input without a vocabulary,
pointers without their ``into`` axis, an input inside ``repeat``, a name that would give
``forward()`` two parameters of one name. Whether ``into`` names an axis of another input
is checked in checks.py."""

from __future__ import annotations

from .. import ast, ir
from ..diagnostics import article
from ..ops import P
from ..suggest import suggest
from .constants import Constants
from .names import POISONED, Scope

# `alignment[T, S]`: a target alignment (B, T, S) for supervised attention, no feature size
# `pointers[T] (into = S)`: target positions of axis S, one per position of T (a pointer
# network's outputs, Vinyals et al. 2015), read by `pointed(X, C)`
INPUT_KINDS = ("tokens", "sequence", "grid", "set", "vector", "alignment", "pointers",
               "mask", "graph")
# Inputs that only say which keys a query may see: `mask[T, S]`, a (B, T, S) bool mask, and
# `graph[N]`, a graph over the N positions of an axis (an edge list or a dense adjacency).
MASK_KINDS = ("mask", "graph")
# The inputs with a NAME_mask (their padding mask, a parameter of `forward()`)
PADDED_KINDS = ("tokens", "sequence", "set", "pointers")


class InputShape:
    """An input's axes, their sizes (None: given at run time) and its feature size."""

    __slots__ = ("axes", "sizes", "dim")

    def __init__(self, axes: list[str], sizes: list[int | None], dim: int | None) -> None:
        self.axes, self.sizes, self.dim = axes, sizes, dim


class InputOptions:
    """The options of an input, as written (``(vocab = 100, autoregressive)``)."""

    __slots__ = ("vocab", "vocab_given", "autoregressive", "view_of", "into")

    def __init__(self) -> None:
        self.vocab: int | None = None
        self.vocab_given = False  # written, even with a bad value (reported where it is)
        self.autoregressive = False
        self.view_of: str | None = None  # `of = words`: the input this one is another view of
        self.into: str | None = None  # pointers: the axis they index


class Inputs(Constants):
    """``input`` statements (a part of ``lower.Lowerer``)."""

    def input(self, s: ast.Input, scope: Scope) -> None:
        if scope.hop is not None:
            self.err(s.pos, "inputs are declared at the top of a model, not inside `repeat`")
            return
        twin = next((n.id for n in self.m.nodes if isinstance(n, ir.Input) and (
            n.id == s.name + "_mask" and s.kind in PADDED_KINDS
            or n.id + "_mask" == s.name and n.kind in PADDED_KINDS)), None)
        if twin is not None:  # forward(x, x_mask, x_mask=None): one parameter, two inputs
            mask = max(twin, s.name, key=len)
            self.err(s.pos, f"input name `{s.name}` is taken: `forward()` would have two "
                     f"parameters `{mask}`, input `{mask}` and the padding mask of input "
                     f"`{min(twin, s.name, key=len)}`", f"pick another name, e.g. `{s.name}2`")
            return
        node_id = self.bind(scope, s.name, s.pos, "input")
        if node_id is None:
            return
        if s.kind not in INPUT_KINDS:
            self.err(s.kind_pos, f"unknown input kind `{s.kind}`", suggest(s.kind, INPUT_KINDS))
            return
        syms: dict[str, str] = {}
        shape = self.input_shape(s, scope, syms)
        if shape is None:
            return
        o = self.input_options(s, scope, shape, syms)
        if s.kind == "tokens" and o.vocab is None:
            if o.vocab_given:
                return
            self.err(s.kind_pos, f"token input `{s.name}` needs a vocabulary size",
                     f"write `input {s.name}: tokens[…] (vocab = 30000)`")
            return
        if s.kind != "tokens" and o.vocab is not None:
            self.err(s.kind_pos, "only token inputs have a vocabulary")
            return
        if s.kind == "pointers" and o.into is None:
            self.err(s.kind_pos, f"pointers `{s.name}` need the axis they point into",
                     f"write `input {s.name}: pointers[{', '.join(shape.axes)}] (into = S)`")
            return
        self.add_node(ir.Input(id=node_id, kind=s.kind, axes=tuple(shape.axes),
                               sizes=tuple(shape.sizes), dim=shape.dim, vocab=o.vocab,
                               autoregressive=o.autoregressive, view_of=o.view_of,
                               into=o.into,
                               sym=tuple(sorted(syms.items())), loc=self.loc(s.pos)), s.pos)

    def input_shape(self, s: ast.Input, scope: Scope,
                    syms: dict[str, str]) -> InputShape | None:
        """The axes and feature size ``input NAME: KIND[…]`` writes (None: an error)."""
        dims = list(s.dims)
        dim = None
        if s.kind in MASK_KINDS and len(dims) != (2 if s.kind == "mask" else 1):
            self.err(s.kind_pos, "a mask input has the query's axis and the keys' axis, e.g. "
                     "`mask[T, S]` (a (B, T, S) bool tensor)" if s.kind == "mask" else
                     "a graph input has one axis, its nodes: `graph[N]` (an edge list (2, E) or "
                     "a (B, N, N) adjacency)")
            return None
        if s.kind not in ("tokens", "alignment", "pointers", "mask", "graph"):
            if not dims:
                self.err(s.kind_pos, "missing feature size")
                return None
            dim_e = dims.pop()
            dim = self.as_int(dim_e, scope, f"the feature size of `{s.name}`")
            if dim is None:
                return None
            if t := self.sym(dim_e, scope):
                syms["dim"] = t
        elif not dims:
            self.err(s.kind_pos, "tokens need at least one axis, e.g. `tokens[S]`")
            return None
        if s.kind == "grid" and len(dims) != 2:
            self.err(s.kind_pos, "a grid has two spatial axes and a channel size: `grid[H, W, C]`")
            return None
        if s.kind == "pointers" and len(dims) != 1:
            self.err(s.kind_pos, "pointers have one axis, the target positions, and no "
                     "feature size: `pointers[T] (into = S)`")
            return None
        if s.kind == "alignment" and len(dims) != 2:
            self.err(s.kind_pos, "an alignment has two axes, the attention's query and key "
                     "positions, and no feature size: `alignment[T, S]`")
            return None
        if s.kind in ("sequence", "set") and not dims:
            self.err(s.kind_pos, f"{article(s.kind)} {s.kind} needs an axis and a feature size, e.g. `{s.kind}[L, 300]`")
            return None
        shape = self.input_axes(s, dims, scope, syms)
        if shape is None:
            return None
        shape.dim = dim
        if len(set(shape.axes)) != len(shape.axes) and s.kind not in ("mask", "alignment"):
            self.err(s.kind_pos, f"input `{s.name}` repeats an axis name")  # self-attention
            return None
        return shape

    def input_axes(self, s: ast.Input, dims: list[ast.Expr], scope: Scope,
                   syms: dict[str, str]) -> InputShape | None:
        """Each axis: a name (its length given at run time or by a constant of that name)
        or a number (an axis named after the input and its place)."""
        axes: list[str] = []
        sizes: list[int | None] = []
        for i, d in enumerate(dims):
            if isinstance(d, ast.Ref) and len(d.parts) == 1:
                found = scope.lookup(d.name) or (("const", self.consts[d.name])
                                                 if d.name in self.consts else None)
                if found is POISONED:
                    return None  # a `let` refused where it is defined, and reported there
                if found and found[0] == "const":
                    size = self.as_int(d, scope, f"axis `{d.name}`")
                    axes.append(d.name)
                    sizes.append(size)
                    if t := self.sym(d, scope):
                        syms["size:" + d.name] = t
                elif found:
                    self.err(d.pos, f"axis `{d.name}` clashes with a node of the same name")
                    return None
                else:
                    if not self.check_ident(d.name, d.pos, "axis"):
                        return None
                    axes.append(d.name)
                    sizes.append(None)
            else:
                size = self.as_int(d, scope, "an axis size")
                if size is None:
                    return None
                axes.append(f"{s.name}_{i}")
                sizes.append(size)
        return InputShape(axes, sizes, None)

    def input_options(self, s: ast.Input, scope: Scope, shape: InputShape,
                      syms: dict[str, str]) -> InputOptions:
        """The options in parentheses after the kind (a bad one is reported and skipped)."""
        o = InputOptions()
        axes, sizes = shape.axes, shape.sizes
        for a in s.args:
            if s.kind == "pointers" and isinstance(a, ast.Kwarg) and a.name == "into":
                if isinstance(a.value, ast.Ref) and len(a.value.parts) == 1 and \
                        self.check_ident(a.value.name, a.value.pos, "axis"):
                    o.into = a.value.name  # checks.py: an axis of another input
                else:
                    self.err(a.value.pos, "`into` names the axis the pointers index",
                             "e.g. `input C: pointers[T] (into = S)`")
            elif isinstance(a, ast.Ref) and a.name == "autoregressive":
                o.autoregressive = True
            elif isinstance(a, ast.Kwarg) and a.name == "vocab":
                o.vocab_given = True  # a bad value is reported where it is written
                o.vocab = self.as_int(a.value, scope, "`vocab`")
                if t := self.sym(a.value, scope):
                    syms["vocab"] = t
            elif isinstance(a, ast.Kwarg) and a.name == "autoregressive":
                o.autoregressive = bool(self.as_param(P("autoregressive", "bool"), a.value,
                                                      scope, "`autoregressive`"))
            elif isinstance(a, ast.Kwarg) and a.name == "of":
                # `(of = words)`: another view of the same data, e.g. its characters
                target = a.value.name if isinstance(a.value, ast.Ref) else None
                found = scope.bindings.get(target) if target else None
                if found is None or self.m.roles.get(found) != "input":
                    self.err(a.value.pos, "`of` names an input declared above: the data this "
                             "input is another view of", "e.g. `input chars: tokens[W, C] "
                             "(vocab = 300, of = words)`")
                else:
                    o.view_of = found
            elif s.kind in MASK_KINDS:
                name = a.name if isinstance(a, (ast.Kwarg, ast.Ref)) else "this"
                self.err(a.pos, f"a {s.kind} input takes no options (`{name}`): its axes are "
                         "those of the inputs it masks, which fix their lengths")
            elif isinstance(a, ast.Kwarg) and a.name in axes:
                i = axes.index(a.name)  # `(S = 50)`: the axis has a fixed length
                if sizes[i] is not None:
                    self.err(a.pos, f"axis `{a.name}` already has a size ({sizes[i]})")
                else:
                    sizes[i] = self.as_int(a.value, scope, f"the length of `{a.name}`")
                    if t := self.sym(a.value, scope):
                        syms["size:" + a.name] = t
            else:
                name = a.name if isinstance(a, (ast.Kwarg, ast.Ref)) else "this"
                self.err(a.pos, f"unknown input option `{name}`",
                         suggest(name, ("vocab", "autoregressive", "of", *axes)))
        return o
