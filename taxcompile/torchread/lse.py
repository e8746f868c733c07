"""A softmax written out: exp(e - logsumexp e), as code that keeps the normaliser (Reformer's
sorted chunks) writes it. ``torch.logsumexp`` is one node under torch.fx and, decomposed at
ATen level, log(sum(exp(e - m))) + m with m the row's maximum (kept finite). Both read here
only where the subtracted logsumexp is taken over the very tensor it is subtracted from,
along one axis: exp(a - logsumexp b) for another b (a CRF's marginals, a loss) is no
softmax of a."""
from __future__ import annotations

from .normalise import ancestors, op, shape, tensor_args


def _axis(dims, node):
    """The one axis ``dims`` (an int or a one-element list) names, non-negative; None where
    it names several or none."""
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    rank = len(shape(node) or ())
    if len(dims) != 1 or not isinstance(dims[0], int) or not rank:
        return None
    return dims[0] % rank


def of(node):
    """(e, axis) where ``node`` is logsumexp(e) over one axis (kept); None otherwise."""
    o, args = op(node), tensor_args(node)
    if o == "logsumexp" and args:
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        axis = _axis(dims, args[0])
        return (args[0], axis) if axis is not None else None
    if o != "add" or len(args) != 2:
        return None
    for logged, shift in (args, args[::-1]):
        s = tensor_args(logged)[0] if op(logged) == "log" and tensor_args(logged) else None
        x = tensor_args(s)[0] if s is not None and op(s) == "sum" and tensor_args(s) else None
        d = tensor_args(x)[0] if x is not None and op(x) == "exp" and tensor_args(x) else None
        if d is None or op(d) != "sub" or len(tensor_args(d)) != 2 \
                or tensor_args(d)[1] is not shift:
            continue
        e = tensor_args(d)[0]
        peaks = [a for a in [shift, *ancestors(shift, 3)]
                 if op(a) in ("amax", "max") and tensor_args(a) and tensor_args(a)[0] is e]
        axis = _axis(s.args[1], e) if len(s.args) > 1 else None
        if peaks and axis is not None:
            return e, axis
    return None


def softmax_of(node):
    """(e, axis) where ``node`` is exp(e - logsumexp e) over one axis: a softmax of e over
    that axis; None otherwise."""
    args = tensor_args(node)
    if op(node) != "exp" or len(args) != 1 or op(args[0]) != "sub" \
            or len(tensor_args(args[0])) != 2:
        return None
    e, lse = tensor_args(args[0])
    got = of(lse)
    return got if got is not None and got[0] is e else None
