"""One axis of a captured tensor followed back to where it was made.

The reader asks where an axis of the weights comes from: the heads (a view splitting the
features into (H, d)), the blocks of a sequence cut into blocks (a view splitting the
positions into (n, c)), or the product's rows. Captured graphs reshape freely on the way
(torch.export lowers a batched matmul to a `bmm` over the batch and heads merged into one
axis, then splits its output again), so what is followed is a factor of an axis: its
size and its stride inside the axis, carried through axis moves, ops that keep axes in
place, reshapes (by the elements' strides) and matmuls, until a reshape made it a part of
a larger axis of its input. Sizes known only at run time are never compared by value
(that would ask the tracer to guard on data): equal expressions are equal, nothing else."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .normalise import TRANSPARENT, is_bool, op, shape, tensor_args, through_moves

# ops that keep every axis where it is (an elementwise op broadcasts a smaller operand from
# the right)
IN_PLACE = {"add", "sub", "mul", "div", "where", "clamp", "clamp_min", "clamp_max", "neg",
            "clone", "contiguous", "alias", "_to_copy", "to", "detach", "dropout",
            "native_dropout", "lift_fresh_copy", "type_as", "float", "expand", "tanh"}


def sized(*dims) -> bool:
    """Whether every dim is a number (not a size known only at run time)."""
    return all(isinstance(d, int) for d in dims)


def same(xs, ys) -> bool:
    """Whether two lists of sizes are equal: numbers by value, sizes known only at run time
    by their expressions (different expressions are not taken for equal)."""
    return len(xs) == len(ys) and all(
        x == y if sized(x, y) else str(x) == str(y) for x, y in zip(xs, ys))


def axis_order(node) -> list | None:
    """For an axis move (permute, transpose, t): the input axis each output axis comes from;
    None for any other op."""
    o, s = op(node), shape(node)
    rank = len(s or ())
    if o == "permute" and len(node.args) > 1:
        return [d % rank for d in node.args[1]]
    order = list(range(rank))
    if o == "transpose" and len(node.args) > 2:
        i, j = node.args[1] % rank, node.args[2] % rank
        order[i], order[j] = j, i
        return order
    return order[::-1] if o == "t" else None


@dataclass(frozen=True)
class Split:
    """A reshape ``view`` that made the followed factor part of axis ``axis`` of its input
    (of ``whole`` elements): ``part`` 0 where the factor is the axis's outer part (H of the
    features' (H, d), the blocks of positions cut into (n, c)), 1 its inner part (d, c),
    2 a middle one; ``size`` the factor's."""
    view: object
    axis: int
    whole: int
    size: int
    part: int

    @property
    def of_features(self) -> bool:
        """Whether the axis split is the input's last of two or more: the features (else
        positions; a flattened tensor's one axis holds everything)."""
        rank = len(shape(tensor_args(self.view)[0]))
        return rank >= 2 and self.axis == rank - 1


@dataclass(frozen=True)
class Origin:
    """A graph input (placeholder) whose axis ``axis`` the followed one is, whole, and the
    learned maps (linear layers, products with a weight) it passed on the way, each
    applied alike along it."""
    node: object
    axis: int
    maps: tuple


def _prod(dims):
    return math.prod(dims) if sized(*dims) else None


def _through_view(a, b, axis: int, lo: int, size: int):
    """(axis, lo) of a factor (stride ``lo`` inside ``b[axis]``, ``size`` elements) in shape
    ``a`` that a view turned into ``b``: where it lies inside one axis of ``a``; None where it
    spans several (a merge) or sizes are unknown."""
    inner_b = _prod(b[axis + 1:])
    if inner_b is None:
        return None
    stride = lo * inner_b  # the factor's stride among the flattened elements
    inner = 1
    for j in range(len(a) - 1, -1, -1):
        if not sized(a[j]):
            return None
        if stride < inner * a[j]:
            if stride % inner or (stride // inner) * size > a[j] or a[j] % ((stride // inner) * size):
                return None
            return j, stride // inner
        inner *= a[j]
    return None


def follow(node, axis: int, target=None, operand: int = 1, depth: int = 40, is_param=None):
    """Where ``node``'s ``axis`` comes from: the ``Split`` nearest ``node`` after which it is
    never a whole axis again (the reshape that cut it from a larger axis of its input), or
    the ``Origin`` (an input's own axis, never cut on the way); with
    ``target`` (an ancestor), the axis it is in ``target`` (an int) where it is a whole axis
    there. None where it is lost (a reduction, a merge of it with others, an op not
    followed). Through a matmul, the rows follow the first
    operand, the columns the second, the batch axes ``operand`` (0 or 1). ``is_param``
    (the reader's) tells the learned weights of maps passed on the way."""
    s = shape(node)
    if s is None or not 0 <= axis < len(s):
        return None
    n, lo, size, cut, maps = node, 1, s[axis], None, []
    for _ in range(depth):
        s, args, o = shape(n), tensor_args(n), op(n)
        if n is target:
            return axis if cut is None and lo == 1 and same([size], [s[axis]]) else None
        if n.op == "placeholder" and cut is None and lo == 1 and target is None:
            return Origin(n, axis, tuple(maps))
        if s is None or not args or shape(args[0]) is None:
            break
        a, order = shape(args[0]), axis_order(n)
        if order is not None:
            n, axis = args[0], order[axis]
        elif o == "view" and same(a, s):
            n = args[0]
        elif o == "view":
            got = _through_view(a, s, axis, lo, size)
            if got is None:
                return None  # merged with other axes: lost
            j, lo = got
            whole = lo == 1 and same([size], [a[j]])
            if not whole and cut is None:
                cut = Split(n, j, a[j], size, 0 if lo * size == a[j] else 1 if lo == 1 else 2)
            n, axis, cut = args[0], j, None if whole else cut
        elif o == "linear" and axis < len(s) - 1 and len(args) >= 2:
            x = args[1] if len(args) == 3 and "addmm" in str(n.target) else args[0]
            sx = shape(x)
            if sx is None or len(sx) != len(s) or not same([sx[axis]], [s[axis]]):
                break
            w = args[2] if x is args[1] else args[1]  # addmm(bias, x, w^T), linear(x, w, b)
            if is_param is None or _weight(w, is_param):
                maps.append(n)  # a learned map of the features, applied alike along the axis
            n = x
        elif o == "matmul" and len(args) >= 2:
            which = 0 if axis == len(s) - 2 else 1 if axis == len(s) - 1 else operand
            if which == 0 and is_param is not None and _weight(args[1], is_param):
                maps.append(n)  # x W: a learned map of the features, alike along the rows
            sx = shape(args[which])
            j = axis - (len(s) - len(sx)) if sx is not None else -1
            if j < 0 or not same([sx[j]], [s[axis]]):
                break
            n, axis = args[which], j
        elif o in IN_PLACE or (o in TRANSPARENT and same(a, s)):
            carried = _carrier(n, axis)
            if carried is None:
                break
            n, axis = carried
        else:
            break
    return cut if target is None else None


def _weight(node, is_param) -> bool:
    """Whether ``node`` is a learned weight (a parameter through moves)."""
    return through_moves(node, is_param, 4)


def _carrier(node, axis: int):
    """The operand of an op that keeps axes in place that carries ``node``'s ``axis`` (its
    size there, not a broadcast 1), and where the axis is in it; None where none does."""
    b = shape(node)
    for x in tensor_args(node):
        if is_bool(x):
            continue  # a mask: the data is in the other operands
        sx = shape(x)
        j = axis - (len(b) - len(sx)) if sx is not None else -1
        if j >= 0 and same([sx[j]], [b[axis]]):
            return x, j
    return None
