"""Layer stacks in a lifted sketch. A stack of N layers shows in the graph as the same block of
attentions N times over (one statement each, equal but for their names: same shapes, weights
per layer), each block reading the previous one's output, and each attention added back to
the stream its query projects (a residual). Such a run is written as the language writes a
stack: `repeat layers_K N { attention …  update F = F + att … }` over the stream F, so hop
k+1's queries read hop k's contexts, and attentions after it read the stack's output (a
decoder's cross-attention reads the encoder's last layer). What the layers compute after
their attentions (norms, feed-forward) is not read: a comment says so."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .lift_recurrent import walk
from .normalise import op, strip, tensor_args

_STREAM = re.compile(r"query = project\((\w+)\)\Z")
_READS = re.compile(r"(?:query|keys|values) = project\((\w+)(?:, \d+)?\)\Z")
MAX_BLOCK = 8  # attentions in one layer (self, cross, a nested stack of them, …)


@dataclass
class Entry:
    """One attention statement of the sketch: the attention, its name, its lines and the
    width of its context (None where not read)."""
    att: object
    name: str
    stmt: list
    width: int | None = None


@dataclass
class Stack:
    """Entries ``start`` .. ``start + block * count - 1``: ``count`` layers of ``block``
    attentions each, carried on the feature ``stream``; ``inner``: the stacks within one
    layer (their ``start`` counted from the layer's first entry)."""
    start: int
    block: int
    count: int
    stream: str
    inner: list = field(default_factory=list)


def _body(e: Entry) -> list:
    return e.stmt[1:]


def _stream(e: Entry) -> str | None:
    m = next((_STREAM.match(x.strip()) for x in _body(e) if x.strip().startswith("query")), None)
    return m.group(1) if m else None


def _reads(e: Entry, feature: str) -> list:
    """The graph nodes of ``e``'s operands written as a projection of ``feature``."""
    nodes = {"query": e.att.query, "keys": e.att.keys, "values": e.att.weighed}
    return [nodes[x.split()[0]] for x in _body(e)
            if (m := _READS.match(x.strip())) and m.group(1) == feature]


class _Graph:
    def __init__(self, r):
        self.nodes = {n.name: n for n in r.graph.nodes}
        self._after: dict = {}

    def after(self, e: Entry) -> set:
        """The nodes computed from ``e``'s context."""
        if e.name not in self._after:
            out = self.nodes.get(e.att.applied_by)
            self._after[e.name] = walk(out, lambda n: list(n.users)) if out else set()
        return self._after[e.name]

    def residual(self, e: Entry) -> bool:
        """Whether the graph adds ``e``'s context back to what its query was computed from."""
        before = walk(e.att.query, tensor_args)
        after = self.after(e)
        return any(op(n) == "add" and any(a not in after and a in before
                                          for a in tensor_args(n)) for n in after)


def _fits(g: _Graph, run: list, stream: str, width: dict) -> bool:
    """``run`` (entries in order) is a stack on ``stream``: every attention that projects
    the stream reads the one before it, and adds its context back to it, a context as wide
    as the stream (``width``: feature -> its width)."""
    on = [e for e in run if _stream(e) == stream or _reads(e, stream)]
    if any(e.width is None or e.width != width.get(stream) for e in run
           if _stream(e) == stream):
        return False
    for prev, nxt in zip(on, on[1:]):
        if not all(n is not None and (n in g.after(prev) or strip(n) in g.after(prev))
                   for n in _reads(nxt, stream)):
            return False
    return all(g.residual(e) for e in on)


def stacks(r, entries: list, width: dict) -> list[Stack]:
    """The runs of ``entries`` (consecutive attentions) that are layer stacks, in order, each
    with the stacks nested in its layers; ``width``: feature -> its width."""
    return _stacks(_Graph(r), entries, width)


def _stacks(g: _Graph, entries: list, width: dict) -> list[Stack]:
    """At each entry, the stack covering most entries from it (the fewest attentions a layer
    where two cover as many): a block of layers that each hold a stack is one stack."""
    out, i = [], 0
    while i < len(entries):
        best = None
        for b in range(1, MAX_BLOCK + 1):
            n = 1
            while i + (n + 1) * b <= len(entries) and all(
                    _body(entries[i + n * b + j]) == _body(entries[i + j]) for j in range(b)):
                n += 1
            stream = _stream(entries[i])
            run = entries[i:i + n * b]
            if n > 1 and stream and (best is None or n * b > best.block * best.count) and \
                    _fits(g, run, stream, width) and \
                    _read_later(g, run[-1], entries[i + n * b:], stream):
                best = Stack(i, b, n, stream)
        if best:
            if best.block > 1:
                best.inner = _stacks(g, entries[i:i + best.block], width)
            out.append(best)
            i += best.block * best.count
        else:
            i += 1
    return out


def _read_later(g: _Graph, last: Entry, later: list, stream: str) -> bool:
    """Attentions after the stack that project its stream read its last layer's output (in
    the sketch they read the stream as the stack leaves it)."""
    return all(n is not None and (n in g.after(last) or strip(n) in g.after(last))
               for e in later for n in _reads(e, stream))


def render(s: Stack, entries: list, name) -> tuple[list, list]:
    """(lines, comments) of the stack ``s`` as one `repeat` (named by ``name``: a base name
    -> a name not taken): its first layer's statements, each followed by its residual update
    of the stream, and the stacks nested in that layer as `repeat`s of their own."""
    first = entries[s.start:s.start + s.block]
    last = entries[s.start + s.block * s.count - 1]
    lines, notes, j = [f"repeat {name('layers')} {s.count} {{"], [], 0
    inner = {t.start: t for t in s.inner}
    while j < s.block:
        if j in inner:
            t = inner[j]
            sub, more = render(Stack(s.start + j, t.block, t.count, t.stream, t.inner),
                               entries, name)
            lines += [f"    {x}" for x in sub]
            notes += more
            j += t.block * t.count
            continue
        e = first[j]
        lines += [f"    {x}" for x in e.stmt]
        if _stream(e) == s.stream:
            lines.append(f"    update {s.stream} = {s.stream} + {e.name}")
        j += 1
    lines.append("}")
    notes = [f"# {first[0].name} to {last.name}: {s.count} layers of {s.block} "
             f"attention{'s' if s.block > 1 else ''} (same shapes, weights per layer), each",
             f"# added back to `{s.stream}`, which the next layer reads", *notes]
    if _AFTER not in notes:  # once, after the nested stacks' comments
        notes.append(_AFTER)
    return lines, notes


_AFTER = "# not lifted: what a layer computes after its attentions (norms, feed-forward)"


def is_decoder(s: Stack, entries: list) -> bool:
    """Whether the stack is a decoder's: a causal self-attention over its stream, and an
    attention queried by the stream over keys that do not read it (so the stream reads
    its own outputs and attends over another input's)."""
    run = entries[s.start:s.start + s.block]
    causal = any(x.strip() == "mask = causal" for e in run for x in e.stmt)
    return causal and any(_stream(e) == s.stream and e.att.keys not in _reads(e, s.stream)
                          for e in run)
