"""Find every attention in a captured graph and place it in Table III.

An attention is a normalisation over a key axis (softmax, log-softmax, sigmoid, sparsemax,
1.5-entmax) whose input is a score and whose output weighs values through a matmul, an
elementwise product summed over the key axis or a convolution's kernel, possibly after a
pick of one key (argmax, sampling: hard attention). The marginals of a linear-chain CRF over
the keys (structured attention), which no normalisation node makes, are found by ``crf``
from the forward and backward recursions that compute them. A softmax over each node's incoming
edges built from scatter ops (graph attention over an edge list) is read by ``graphs``.
Once each is read, ``queries`` reads query types and hops over all of them. Each one's score, alignment, heads and query source are read by the
graph patterns of ``patterns``, which the registry's records name (``recognised_by``)."""
from __future__ import annotations

from . import (alignments, coverage, crf, feature_dims, graphs, inplace, lse, lsh_chunks,
               patterns, pointer, queries, talking)
from .found import Attention
from .normalise import TRANSPARENT, is_bool, op, shape, source_line, strip, tensor_args

NORMS = {"softmax", "log_softmax", "sigmoid"}


def given_index(idx) -> bool:
    """Whether an index is given by the inputs: integer-valued all the way back to an
    integer input (pointers, ids, shifted or clamped), so which rows it reads is data of
    what is read; a position the model computed (a rounded prediction, a window's start
    from arange) is not."""
    seen, stack, found = set(), [idx], False
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        v = n.meta.get("val") if hasattr(n, "meta") else None
        if v is None or not hasattr(v, "dtype") or v.dtype.is_floating_point or is_bool(n):
            return False
        found = found or n.op == "placeholder"
        stack.extend(tensor_args(n))
    return found
APPLY = {"matmul", "mul"}
# Ops between an alignment and the values it weighs: masks, dropout, zeroing fully-masked
# rows (SDPA's decomposition), a renormalisation.
# `index` spreads a kernel's weights over positions (a learned kernel's taps).
FORWARD_THROUGH = TRANSPARENT | {"where", "mul", "div", "full_like", "index"}




class Reader:
    def __init__(self, graph, params: dict):
        self.graph = graph
        self.params = params
        self._roots: dict = {}
        self.mixes: dict = {}  # normalisation -> its heads' mixes (talking heads)
        self.covered: dict = {}  # coverage terms in scores -> their learned weight
        self.crf: dict | None = None  # a CRF's weights -> (scores, alignment, args): crf.found
        self._order: dict = {}

    def order(self) -> dict:
        """{node: its place in the graph's (topological) order}."""
        if not self._order:
            self._order = {n: i for i, n in enumerate(self.graph.nodes)}
        return self._order

    def is_param(self, node) -> bool:
        return node.op == "get_attr" or (node.op == "placeholder" and node.name in self.params)

    def roots(self, node) -> frozenset:
        """The user inputs (placeholders, not parameters nor boolean masks) a node reads as
        data: a mask's condition is no data."""
        memo = self._roots
        stack = [node]
        while stack:
            n = stack[-1]
            if n in memo:
                stack.pop()
                continue
            if n.op == "placeholder":
                memo[n] = frozenset() if self.is_param(n) or is_bool(n) else frozenset([n.name])
                stack.pop()
                continue
            args = tensor_args(n)
            if op(n) == "where" and n.args and hasattr(n.args[0], "op"):
                args = [a for a in n.args[1:] if hasattr(a, "op")]  # the condition is no data
            elif op(n) in alignments.GATHERS and args and not self.is_param(strip(args[0])) \
                    and not any(given_index(i) for i in args[1:]):
                args = args[:1]  # which rows a computed position reads is no data (a window)
            todo = [a for a in args if a not in memo]
            if todo:
                stack.extend(todo)
                continue
            memo[n] = frozenset().union(*(memo[a] for a in args)) if args else frozenset()
            stack.pop()
        return memo[node]

    def applied(self, norm):
        """(the node that weighs values with the alignment's output, the values operand, the
        picks on the way: argmax or sampling, for hard attention, the differences of two
        maps on the way: A1 - lambda A2)."""
        seen, frontier, picks, diffs = set(), [norm], [], []
        in_place = None  # a product weighing values in place, taken if nothing sums later
        # a sigmoid weighs values directly (a gate inside a recurrent cell does not reach a
        # matmul through moves alone)
        through = TRANSPARENT | {"where"} if op(norm) == "sigmoid" else FORWARD_THROUGH
        steps = 12  # a kernel spread over positions passes index, mask and moves
        while steps > 0:
            steps -= 1
            nxt = []
            for n in frontier:
                for u in n.users:
                    if u in seen:
                        continue
                    seen.add(u)
                    o = op(u)
                    args = tensor_args(u)
                    mine = seen | {n, norm}
                    if talking.after(self, u, norm):
                        nxt.append(u)  # a learned map mixes the heads' weights
                        steps += 12  # and reshapes them there and back
                        continue
                    if o == "matmul" and len(args) >= 2 and args[0] in mine:
                        return u, args[1], picks, diffs
                    if o == "mul" and len(args) == 2 and _sums(u):
                        return u, (args[1] if args[0] in mine else args[0]), picks, diffs
                    if o == "mul" and in_place is None and not picks and not diffs and \
                            (v := inplace.values(norm, u, mine)) is not None and \
                            not is_bool(v) and self.roots(v):
                        in_place = (u, v)
                    if o == "matmul" and len(args) >= 2 and args[1] in mine \
                            and alignments.windows(args[0]):  # a kernel over unfolded windows
                        return u, args[0], picks, diffs
                    if o == "convolution" and len(args) >= 2 and args[1] in mine:
                        return u, args[0], picks, diffs  # the weights are the kernel
                    if o == "gather" and picks and len(args) >= 2 and args[-1] in mine:
                        return u, args[0], picks, diffs  # the picked index selects values
                    if o == "sub" and len(args) == 2 and op(norm) == "softmax" and not picks \
                            and all(_weights(x) for x in args):
                        diffs.append(u)
                        nxt.append(u)  # A1 - lambda A2: two maps subtracted
                    elif alignments.is_pick(u):
                        picks.append(u)
                        nxt.append(u)
                    elif o in through or (picks and o in alignments.AFTER_PICK) or (
                            o == "cat" and len(args) == 1) or (  # one step's weights gathered
                            not picks and inplace.over_queries(u, norm)):  # averaged over queries
                        nxt.append(u)
            frontier = nxt
        if in_place is not None:
            return in_place[0], in_place[1], [], []
        return None, None, [], []


def _weights(node) -> bool:
    """Whether ``node`` is (a scaling of, a slice of) a softmax's output."""
    return any(op(x) == "softmax" for x in [node, *patterns.ancestors(node, 6)])


def _sums(node) -> bool:
    return any(op(u) == "sum" for u in node.users)


def _norm_kind(r, n):
    """(start, align) for a node that may be an alignment: start is the score's node where it is
    not the node's input, align the (name, reason) read from the node itself; False where the
    node is no alignment."""
    if (marginals := crf.marginals(r, n)) is not None:
        return marginals  # a CRF's marginals over the keys: no normalisation node
    o = op(n)
    if o in NORMS:
        return None, None
    if (soft := lse.softmax_of(n)) is not None and soft[1] == len(shape(n) or ()) - 1:
        return soft[0], None  # exp(e - logsumexp e) over the last axis: a softmax written out
    if o in alignments.CLAMPS or o == "pow":
        sparse = alignments.sparse_norm(n)
        if sparse:
            return sparse[1], (sparse[0], alignments.sparse_reason(sparse[0], n))
    if alignments.is_pick(n) and not alignments.picked_by_norm(n, NORMS):
        return None, None  # argmax over the scores themselves
    return False


def find(graph, params: dict) -> list[Attention]:
    return read_model(graph, params)[0]


def read_model(graph, params: dict) -> tuple[list[Attention], dict]:
    """Every attention of the graph, and the model's feature dimensions read over them."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode as Guard

    r = Reader(graph, params)
    out = []
    for n in graph.nodes:
        try:
            got = _read_node(r, graph, n)
        except Guard as e:  # a size known only at run time compared
            got = Attention(n.name, n.name, nodes=[n.name], recognised=False, why_not=(
                f"reading `{n.name}` would compare sizes known only when the model runs "
                f"(whether {getattr(e, 'cond', '?')}): not read rather than guessed"))
        if got is not None:
            out.append(got)
    queries.refine(r, out)
    return out, feature_dims.read(r, out, {n.name: n for n in graph.nodes})


def _read_node(r, graph, n) -> Attention | None:
    """The attention whose alignment is ``n``; None where ``n`` is none."""
    if op(n) == "sdpa":
        return patterns.read_sdpa(r, n)
    if op(n) == "div" and (edges := graphs.read(r, n)) is not None:
        return edges  # a softmax over each node's incoming edges (GAT)
    if lsh_chunks.rounds_of(r, n) is not None:
        return None  # LSH's rounds weighted by their normalisers: part of its attention
    kind = _norm_kind(r, n)
    if kind is False:
        return None
    app, values, picks, diffs = r.applied(n)
    if app is None:
        out_node = pointer.output_of(n) if kind == (None, None) else None
        got = pointer.read(r, n, out_node, patterns) if out_node is not None else None
        if got is not None:  # its weights are the output: a pointer network
            got.source = [s for s in dict.fromkeys(
                source_line(x) for x in _by_name(graph, got.nodes)) if s]
        return got  # None: a normalisation that weighs no values (an output layer, a gate)
    start, align = kind
    if picks and align is None:
        how = op(picks[0])
        if how == "max" and alignments.noise(tensor_args(n)[0]):
            how = "the largest weight after Gumbel noise: a sample, straight-through"
        align = (patterns.PICK, f"`{picks[0].name}` picks one key ({how}) and "
                 f"`{app.name}` takes its value alone (eq. 26)")
    a = Attention(n.name, app.name, align_args=crf.align_args(r, n))
    patterns.read(r, n, app, values, a, start, align, diffs[0] if diffs else None)
    talking.note(r, n, a)
    if op(app) == "mul" and not _sums(app):
        if not a.recognised:
            return None  # a product in place is an attention only as one the patterns read:
            # a recurrent cell's gates (sigmoid(W x + U h) * h) are none
        inplace.note(a, app)
    coverage.note(r, next(iter(_by_name(graph, a.nodes[1:2])), n), a)
    a.source = [s for s in dict.fromkeys(source_line(x) for x in _by_name(graph, a.nodes)) if s]
    return a


def _by_name(graph, names):
    want = set(names)
    return [n for n in graph.nodes if n.name in want]
