"""Structured attention (Kim et al. 2017) found by its graph: the weights are the marginals
p(z_l = 1 | e) of a linear-chain CRF over the key positions, computed by a forward and a
backward recursion over the positions (in log space or not), with unary potentials sliced
position by position from the scores e and pairwise potentials from a learned transition.
No normalisation node starts it, so the pattern is found from the slices:

- the scores (a tensor reading the inputs, through moves, an exp and a stack with
  constants: the potentials of z = 0) are sliced at every position of their last axis (the
  keys), one slice per step (select, a size-one slice, unbind);
- each node downstream of the slices gets the set of positions it reads (a bit mask): a
  forward recursion leaves a node reading exactly the positions 0..l for every l, and a
  transition (a node from a 2 x 2 parameter, per head, that reads no input: theta(z_l,
  z_l+1)) is combined with each of them; a backward recursion the same with l..L-1;
- the forward states are stacked in position order (each reading 0..l or 0..l-1), the
  backward ones too (l..L-1 or l+1..L-1), each pair covering every position, and the first
  exp, product or quotient reading both stacks is the marginals;
- the stacked axis, followed forward through moves, is the axis the values' product sums
  over (the weights are over the keys), and a division by the sum over that axis on the way
  is Kim et al.'s lambda (``crf(normalize = true)``).

Anything else (a forward recursion alone, no 2 x 2 transition, a recursion over the queries'
axis, marginals never applied over the recursion's axis) is no CRF: refused, not guessed; a
recursion over an input that is no score is an attention whose score is not recognised."""
from __future__ import annotations

import heapq
import math

from .axes import sized
from .normalise import TRANSPARENT, op, shape as _shape, tensor_args

PATTERN = "forward_backward_marginals"
# Ops whose value does not depend on their input's values: constants shaped like it.
LIKE = {"full_like", "zeros_like", "ones_like", "empty_like", "full", "zeros", "ones",
        "scalar_tensor", "empty", "new_zeros", "new_ones", "new_full", "new_empty"}
MARGINALS = {"exp", "mul", "div"}
_PAST_FULL = 24  # steps past the recursion's last state where the marginals may be made
_MAX_NODES = 20000  # nodes one group's propagation may visit
_AXIS_OPS = TRANSPARENT | {"where", "div", "mul", "add", "sub", "clamp", "clamp_min",
                           "masked_fill", "exp", "neg", "abs"}


def _static(node):
    """The node's shape where every size is a known int, else None: the pattern compares
    sizes, and a size known only at run time is never compared (that would guard on
    data)."""
    s = _shape(node)
    return s if s is not None and sized(*s) else None


def found(r) -> dict:
    """{alignment node: (score node, (PATTERN, reason), the alignment's parameters)} for
    every CRF's marginals in the reader's graph, computed once per reader."""
    if r.crf is None:
        r.crf = {}
        for (base, dim), nodes in _slice_groups(r.graph).items():
            got = _read_group(r, base, dim, nodes)
            if got is not None:
                r.crf[got[0]] = got[1:]
    return r.crf


def marginals(r, node):
    """(score node, (PATTERN, reason)) where ``node`` is a CRF's marginals as they weigh
    the values; None otherwise (the catalogue's entry)."""
    got = found(r).get(node)
    return got[:2] if got is not None else None


def align_args(r, node) -> dict:
    """The record's parameters read for the CRF whose marginals are ``node``: normalize
    where they are divided by their sum over the keys; {} for none or the defaults."""
    got = found(r).get(node)
    return dict(got[2]) if got is not None else {}


# --- the slices of one tensor, position by position ---

def _slice_of(n):
    """(base, axis, index) where ``n`` takes one position of a tensor along an axis."""
    o, args = op(n), tensor_args(n)
    if o == "select" and len(n.args) >= 3 and isinstance(n.args[2], int):
        return args[0], n.args[1], n.args[2]
    if o == "slice" and len(n.args) >= 4 and all(isinstance(a, int) for a in n.args[1:4]) \
            and (len(n.args) < 5 or n.args[4] == 1) and _static(n) is not None:
        axis = n.args[1] % len(_static(n))
        if _static(n)[axis] == 1:
            return args[0], axis, n.args[2]
    if o == "getitem" and args and isinstance(n.args[1], int):
        src = args[0]
        if op(src) == "unbind" and tensor_args(src):
            return tensor_args(src)[0], (src.args[1] if len(src.args) > 1 else 0), n.args[1]
        if op(src) in ("split", "split_with_sizes") and tensor_args(src) and \
                _unit_split(src):
            return tensor_args(src)[0], (src.args[2] if len(src.args) > 2 else 0), n.args[1]
    return None


def _unit_split(n) -> bool:
    size = n.args[1] if len(n.args) > 1 else None
    return size == 1 or (isinstance(size, (list, tuple)) and all(s == 1 for s in size))


def _slice_groups(graph) -> dict:
    """{(base, axis): {position: [slice nodes]}} for tensors sliced at each of their
    positions along an axis (at least two)."""
    groups: dict = {}
    for n in graph.nodes:
        got = _slice_of(n)
        s = _static(got[0]) if got else None
        if not s or not isinstance(got[1], int):
            continue
        axis = got[1] % len(s)
        size = s[axis]
        if not isinstance(size, int) or size < 2 or not -size <= got[2] < size:
            continue
        groups.setdefault((got[0], axis), {}).setdefault(got[2] % size, []).append(n)
    return {k: v for k, v in groups.items() if len(v) == _static(k[0])[k[1]]}


def _scores(base, axis):
    """(the scores, their axis) that ``base``'s ``axis`` comes from, back through moves, an
    exp (potentials in probability space) and a stack or concatenation with constants (the
    potentials of z = 0); None where the axis is lost or the base is a constant."""
    n = base
    for _ in range(40):
        o, args = op(n), tensor_args(n)
        if o in LIKE:
            return None
        if o == "cat":
            data = [a for a in args if not _constant(a)]
            dim = n.args[1] if len(n.args) > 1 else 0
            if len(data) != 1 or axis == dim % len(_static(n)):
                return n, axis
            n = data[0]
            continue
        if o == "exp" and args:
            n = args[0]  # potentials in probability space: exp of the scores
            continue
        if o not in TRANSPARENT or not args or o in ("select", "slice", "getitem"):
            return n, axis
        back = _axis_back(n, args[0], axis)
        if back is None:
            return None
        n, axis = args[0], back
    return None


def _constant(n) -> bool:
    """Whether ``n`` is (a move of) a constant shaped like a tensor."""
    for _ in range(12):
        if op(n) in LIKE:
            return True
        if op(n) not in TRANSPARENT or not tensor_args(n):
            return False
        n = tensor_args(n)[0]
    return False


def _axis_back(n, src, axis):
    """The axis of ``src`` (``n``'s input) that ``n``'s ``axis`` comes from; None if not
    one axis."""
    so, si = _static(n), _static(src)
    if so is None or si is None:
        return None
    o = op(n)
    if o == "permute":
        return n.args[1][axis] % len(si)
    if o in ("transpose", "t"):
        d = [a % len(so) for a in n.args[1:3]] if o == "transpose" else [0, 1]
        return d[1] if axis == d[0] else d[0] if axis == d[1] else axis
    if len(si) == len(so) and (o != "view" or tuple(si) == tuple(so)):
        return axis  # clone, expand, a copy
    if o in ("unsqueeze", "squeeze", "view"):
        return _view_axis(so, axis, si)
    return None


def _view_axis(s_from, axis, s_to):
    """The axis of shape ``s_to`` holding the whole axis ``axis`` of ``s_from`` (same
    elements, reshaped), or None."""
    if any(not isinstance(d, int) for d in (*s_from, *s_to)):
        return None
    inner = math.prod(s_from[axis + 1:])
    for a in range(len(s_to)):
        if math.prod(s_to[a + 1:]) == inner and s_to[a] == s_from[axis]:
            return a
    return None


# --- the positions each node reads ---

def _propagate(r, slices) -> dict:
    """{node: bit mask of the positions it reads} downstream of ``slices`` ({position:
    nodes}), up to _PAST_FULL steps past the first node reading them all."""
    order = r.order()
    full = (1 << len(slices)) - 1
    mask, past, heap = {}, {}, []
    for pos, nodes in slices.items():
        for n in nodes:
            mask[n], past[n] = 1 << pos, None
            heapq.heappush(heap, (order[n], n.name))
    by_name = {n.name: n for nodes in slices.values() for n in nodes}
    done = set()
    while heap and len(done) < _MAX_NODES:
        _, name = heapq.heappop(heap)
        n = by_name[name]
        if n in done:
            continue
        done.add(n)
        if n not in mask:
            ins = [a for a in tensor_args(n) if a in mask]
            mask[n] = 0
            for a in ins:
                mask[n] |= mask[a]
            steps = [past[a] for a in ins if mask[a] == full]
            past[n] = (min(steps) + 1) if steps else (0 if mask[n] == full else None)
        if past[n] is not None and past[n] >= _PAST_FULL:
            continue
        for u in n.users:
            if u not in done and op(u) not in LIKE and u.op != "output":
                by_name[u.name] = u
                heapq.heappush(heap, (order[u], u.name))
    return mask


def _prefix(i: int) -> int:
    return (1 << (i + 1)) - 1 if i >= 0 else 0


def _suffix(i: int, n: int) -> int:
    return ((1 << n) - 1) & ~_prefix(i - 1) if i < n else 0


def _stacks(mask, n: int):
    """(forward stacks, backward stacks): nodes stacking the states of a recursion in
    position order, as {stack: shift} (0: state l reads position l, 1: it does not)."""
    fwd, bwd = {}, {}
    for s in mask:
        if op(s) not in ("cat", "stack"):
            continue
        got = [mask.get(a, 0) for a in tensor_args(s)]
        if len(got) != n:
            continue
        for shift in (0, 1):
            if got == [_prefix(i - shift) for i in range(n)]:
                fwd[s] = shift
            if got == [_suffix(i + shift, n) for i in range(n)]:
                bwd[s] = shift
    return fwd, bwd


def _read_group(r, base, axis, slices):
    """(the node to read as the weights, the scores, (PATTERN, reason), the record's
    parameters) where the slices of ``base`` along ``axis`` ({position: nodes}) feed a
    CRF's marginals over the keys; None otherwise."""
    n = len(slices)
    got = _scores(base, axis)
    if got is None:
        return None
    e, e_axis = got
    if not r.roots(e) or e_axis != len(_static(e) or ()) - 1:
        return None  # a recursion over no data, or over another axis than the keys'
    mask = _propagate(r, slices)
    present = set(mask.values())
    if not all(_prefix(i) in present and _suffix(i + 1, n) in present for i in range(n - 1)):
        return None  # no forward recursion, or no backward one
    fwd, bwd = _stacks(mask, n)
    pairs = [(f, b) for f in fwd for b in bwd if all(
        _prefix(i - fwd[f]) | _suffix(i + bwd[b], n) == (1 << n) - 1 for i in range(n))]
    m = _marginals(r, mask, pairs, n)
    if m is None:
        return None
    node, (f, b) = m
    trans = _transitions(r, mask, n)
    if trans is None:
        return None  # no learned pairwise potential enters each step
    applied = _applied_over(node, _stack_axis(f, node, mask))
    if applied is None:
        return None
    norm, app, div = applied
    why = (f"`{node.name}` is the marginals p(z_l = 1) of a linear-chain CRF over the {n} "
           f"keys (structured attention, Kim et al.): a forward recursion (states stacked "
           f"by `{f.name}`) and a backward one (`{b.name}`) over the scores `{e.name}` "
           f"position by position, with the learned transitions "
           f"`{r.params.get(trans.name) or trans.name}` at each step")
    if div is not None:
        why += f", divided by their sum over the keys (`{div.name}`: lambda, normalised)"
    return norm, e, (PATTERN, why), ({"normalize": True} if div is not None else {})


def _marginals(r, mask, pairs, n: int):
    """(the first exp, product or quotient reading all ``n`` positions and a forward and a
    backward stack that pair position by position, the pair)."""
    order = r.order()
    full = (1 << n) - 1
    below: dict = {}
    for x in sorted(mask, key=order.get):
        got = {s for a in tensor_args(x) for s in below.get(a, ())}
        got |= {x} if any(x in p for p in pairs) else set()
        below[x] = got
        for f, b in pairs:
            if mask[x] == full and op(x) in MARGINALS and f in got and b in got:
                return x, (f, b)
    return None


def _transitions(r, mask, n):
    """A 2 x 2 parameter (per head) read apart from the data: the learned pairwise
    potentials theta(z_l, z_l+1) of two labels, combined with every forward state but the
    last and every backward state but the first; None where some step has none."""
    want = {_prefix(i) for i in range(n - 1)} | {_suffix(i, n) for i in range(1, n)}
    seen, found_at = {}, set()
    for x, m in mask.items():
        if m not in want or m in found_at:
            continue
        args = tensor_args(x)
        if not any(mask.get(a, 0) == m for a in args):
            continue
        for a in args:
            if mask.get(a, 0) == 0 and not r.roots(a):
                p = next((p for p in _params(r, a, 8)
                          if tuple(_static(p) or ())[-2:] == (2, 2)), None)
                if p is not None:
                    seen[m] = p
                    found_at.add(m)
                    break
    return next(iter(seen.values())) if found_at == want else None


def _params(r, node, depth: int):
    """The parameters ``node`` reads within ``depth`` steps back."""
    seen, frontier, out = {node}, [node], []
    while frontier and depth >= 0:
        nxt = []
        for x in frontier:
            if r.is_param(x):
                out.append(x)
            for a in tensor_args(x):
                if a not in seen:
                    seen.add(a)
                    nxt.append(a)
        frontier = nxt
        depth -= 1
    return out


# --- the stacked axis, forward to the values ---

def _stack_axis(stack, end, mask):
    """The axis of ``end`` holding the positions ``stack`` stacks, followed through the
    nodes between them (in ``mask``); None where it is lost."""
    dim = stack.args[1] if len(stack.args) > 1 else 0
    s_in, s_out = _static(tensor_args(stack)[0]), _static(stack)
    if s_in is None or s_out is None:
        return None
    if op(stack) == "stack":
        at, block = dim % len(s_out), 1
    else:
        at = dim % len(s_out)
        block = s_in[at]  # the positions are the outer block of the axis
    track = {stack: (at, block)}
    frontier = [stack]
    while frontier:
        nxt = []
        for x in frontier:
            for u in x.users:
                if u in track or u not in mask:
                    continue
                got = _axis_forward(u, x, *track[x])
                if got is not None:
                    track[u] = got
                    nxt.append(u)
        frontier = nxt
    got = track.get(end)
    return got[0] if got is not None and got[1] == 1 else None


def _axis_forward(n, src, axis, block):
    """(axis, inner block) of ``n`` holding the positions that ``src``'s ``axis`` holds
    (as its outer block of ``block`` elements each); None where they are lost."""
    so, si = _static(n), _static(src)
    if so is None or si is None or op(n) not in _AXIS_OPS | {"cat", "stack", "unsqueeze"}:
        return None
    o = op(n)
    if o == "permute":
        return list(n.args[1]).index(axis) if axis in n.args[1] else None, block
    if o in ("transpose", "t"):
        d = [a % len(so) for a in n.args[1:3]] if o == "transpose" else [0, 1]
        return (d[1] if axis == d[0] else d[0] if axis == d[1] else axis), block
    if o in ("view", "unsqueeze", "squeeze") and len(so) != len(si) or (
            o == "view" and tuple(so) != tuple(si)):
        if any(not isinstance(d, int) for d in (*so, *si)):
            return None
        stride = block * math.prod(si[axis + 1:])
        positions = si[axis] // block
        for a in range(len(so)):
            inner = math.prod(so[a + 1:])
            if stride % inner == 0 and so[a] == positions * (stride // inner):
                return a, stride // inner
        return None
    if o in ("select", "slice"):
        dim = n.args[1] % len(si)
        if dim == axis:
            return None
        return (axis - 1 if o == "select" and dim < axis else axis), block
    if o in ("cat", "stack", "getitem", "split", "split_with_sizes", "unbind", "chunk"):
        return None
    return axis + len(so) - len(si), block  # elementwise, broadcast from the right


def _applied_over(m, axis):
    """(the node to read as the weights, the node applying them to the values, the
    division by their sum on the way or None), where the marginals ``m`` (positions on
    ``axis``) weigh the values summed over that axis; None otherwise."""
    if axis is None:
        return None
    track, frontier, div = {m: axis}, [m], None
    norm = m if axis == len(_static(m)) - 1 else None
    for _ in range(16):
        nxt = []
        for x in frontier:
            for u in x.users:
                if u in track:
                    continue
                o, args, a = op(u), tensor_args(u), track[x]
                rank = len(_static(x) or ())
                if o == "matmul" and args and args[0] is x and a == rank - 1:
                    return norm or m, u, div
                if o == "matmul" and len(args) > 1 and args[1] is x and a == rank - 2:
                    return norm or m, u, div
                if o == "mul" and any(op(s) == "sum" and _sum_dims(s) == {
                        a + len(_static(s.args[0]) or ()) - rank} for s in u.users):
                    return norm or m, u, div
                if o == "sum" or o not in _AXIS_OPS:
                    continue
                if o == "div" and len(args) == 2 and args[0] is x and _sum_of(args[1], x, a):
                    div = u
                got = _axis_forward(u, x, a, 1)
                if got is None or got[1] != 1:
                    continue
                track[u] = got[0]
                if norm is None and got[0] == len(_static(u)) - 1:
                    norm = u
                nxt.append(u)
        frontier = nxt
    return None


def _sum_dims(s) -> set:
    dims = s.args[1] if len(s.args) > 1 else None
    rank = len(_static(s.args[0]) or ())
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    return {d % rank for d in dims} if rank else set()


def _sum_of(d, x, axis) -> bool:
    """Whether ``d`` is (a clamp of, an epsilon added to) the sum of ``x`` over ``axis``."""
    for _ in range(6):
        if op(d) == "sum":
            return d.args[0] is x and _sum_dims(d) == {axis}
        if op(d) not in TRANSPARENT | {"clamp", "clamp_min", "add"} or not tensor_args(d):
            return False
        d = tensor_args(d)[0]
    return False
