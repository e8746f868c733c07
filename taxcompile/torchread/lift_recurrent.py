"""Recurrent decoders in a lifted sketch. A decoder unrolled over its steps shows in the graph
as one attention per step: step t+1's query reads step t's context through a recurrent cell
(its gates split three ways for a GRU, four for an LSTM), while the keys do not (they are
the encoder's, read by every step alike). Such a chain is written as the language writes a
decoder: one `query s = gru|lstm(x, hidden, feed = att)` over the decoder's input, marked
`autoregressive`, and one attention statement queried by the state (`prev(s)` where the
first step is queried before the decoder reads its input: Bahdanau's s_{i-1}; `s` where it
reads it first: Luong's h_t fed h~_{t-1})."""
from __future__ import annotations

from dataclasses import dataclass

from .normalise import op, strip, tensor_args

MAX_WALK = 20_000  # nodes visited between two steps
CELLS = {3: "gru", 4: "lstm"}  # gate splits: r, z, n / i, f, g, o


@dataclass
class Decoder:
    """Attentions ``first``..``last`` (indices into the recognised list) are the steps of one
    decoder of kind ``cell`` (`gru`/`lstm`) of ``hidden`` features; ``reads_input_first``:
    step 1's query reads the decoder's input (query = s), else it is queried by the initial
    state (query = prev(s))."""
    first: int
    last: int
    cell: str
    hidden: int
    reads_input_first: bool


def walk(start, step, limit: int = MAX_WALK) -> set:
    """``start`` and the nodes reached from it by ``step`` (a node's users: what is computed
    from it; its tensor args: what it is computed from), about ``limit`` at most."""
    seen, frontier = {start}, [start]
    while frontier and len(seen) < limit:
        frontier = [m for n in frontier for m in step(n) if m not in seen]
        seen.update(frontier)
    return seen


def _gates(node) -> tuple | None:
    """(cell, hidden) where a split of equal parts of the last axis makes a cell's gates."""
    if op(node) not in ("split_with_sizes", "split", "unsafe_split_with_sizes") or \
            len(node.args) < 2 or not isinstance(node.args[1], (list, tuple)):
        return None
    sizes = node.args[1]
    if len(sizes) in CELLS and len(set(sizes)) == 1 and isinstance(sizes[0], int):
        return CELLS[len(sizes)], sizes[0]
    return None


def step_cell(nodes: dict, prev, nxt) -> tuple | None:
    """The cell (`gru`/`lstm`, hidden) through which ``nxt``'s query reads ``prev``'s context while
    ``nxt``'s keys do not; None where the two are not steps of one decoder."""
    if prev.query is None or nxt.query is None or nxt.keys is None:
        return None
    if (prev.names.get("score"), prev.heads) != (nxt.names.get("score"), nxt.heads):
        return None
    out = nodes.get(prev.applied_by)
    if out is None:
        return None
    after = walk(out, lambda n: list(n.users))
    before = walk(nxt.query, tensor_args)
    if out not in before or strip(nxt.keys) in after or nxt.keys in after:
        return None
    kinds = {_gates(n) for n in after & before} - {None}
    return kinds.pop() if len(kinds) == 1 else None


def decoders(r, atts) -> list[Decoder]:
    """The chains of recognised attentions that are the steps of one recurrent decoder."""
    out, i, nodes = [], 0, {n.name: n for n in r.graph.nodes}
    while i < len(atts) - 1:
        cell, j = None, i
        while j + 1 < len(atts) and atts[j].recognised and atts[j + 1].recognised:
            c = step_cell(nodes, atts[j], atts[j + 1])
            if c is None or cell not in (None, c):
                break
            cell, j = c, j + 1
        if cell is not None:
            out.append(Decoder(i, j, *cell, _reads_input(r, atts[i])))
        i = j + 1
    return out


def _reads_input(r, a) -> bool:
    """Whether the query of the first step reads an input its keys do not (the decoder's)."""
    return bool(r.roots(a.query) - r.roots(a.keys))


def mark_autoregressive(lines: list, name: str) -> list:
    """The input lines with the input ``name`` marked `autoregressive` (a decoder steps over
    it)."""
    head = f"input {name}: "
    return [x[:-1] + ", autoregressive)" if x.startswith(head) and x.endswith(")") else x
            for x in lines]
