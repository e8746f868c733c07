"""Names and scopes of one model: every reference names a node that exists (forward
references are allowed, so a model is a dataflow graph, not a program), ``feed`` and
``prev(…)`` name nodes of a decoder's step, the dataflow has no cycle (a decoder's
``feed =`` and ``prev(…)`` may read a step later), the inputs agree on their axes'
lengths. ``ScopeChecks.model`` then runs the other parts in order: each node's shape
(``features``, ``values``, ``attention``), the decoders (``decoders``) and the shared
weights (``sharing``)."""

from __future__ import annotations

from .. import digraph as nx  # networkx's algorithms that checks uses, without its import
from .. import ir
from . import prev_reads
from .. import mechanisms as mech
from ..lower import MASK_KINDS
from .core import CheckedModel, Shape, decoder_ops, deps, feeds, links, past_pairs, state_ops
from .ties import check_ties

MAX_AXES = 8  # of an input: example_inputs() keeps them at most 4,096 positions (codegen/config.py)


class ScopeChecks:
    """``Checker.model`` and its passes over the model's graph."""

    def model(self, m: ir.Model) -> CheckedModel | None:
        before = len(self.c.diagnostics)
        ids = {n.id: n for n in m.nodes}
        g = self.dataflow(m, ids)
        if g is None:
            return None
        g, now = g
        rank = {n.id: f"{i:06d}" for i, n in enumerate(m.nodes)}
        order = list(nx.lexicographical_topological_sort(g, key=rank.__getitem__))
        self.cm = CheckedModel(m, {}, {}, {}, {}, order, feed_now=frozenset(now),
                               past=past_pairs(m))
        self.decoder_steps(m, g, ids)
        if (late := prev_reads.outside_reads(m, self.cm.steps)):  # read after the loop
            g.add_edges_from(late)
            self.cm.order = list(nx.lexicographical_topological_sort(g, key=rank.__getitem__))
        self.op_inputs: dict[int, list[Shape]] = self.cm.arg_shapes
        self.input_axes(m)
        if not self.shape_all(m, ids, order, rank):
            return None
        for n in m.nodes:
            if decoder_ops(n):
                self.check_feed(n)
            if state_ops(n):
                self.check_state(n)
            self.check_prev(n)
        # (every shape known: the diagnostics may not grow in a variant whose base
        # already reported the same error)
        if len(self.c.diagnostics) == before and all(x.id in self.cm.shapes for x in m.nodes):
            for n in m.nodes:
                if decoder_ops(n) or state_ops(n):
                    self.check_feed_loop(n)
        if len(self.c.diagnostics) > before:
            return None
        for n in m.nodes:
            self.check_sharing(n)
        check_ties(self, m)
        if len(self.c.diagnostics) > before:
            return None
        return self.cm

    def dataflow(self, m: ir.Model, ids: dict) -> tuple[nx.DiGraph, set] | None:
        """The graph of what each node reads within a step, with the ``feed`` edges that
        read this step's value; None (reported) when a reference is unknown, a ``feed`` or
        ``prev`` names no node of a decoder step, or the graph has a cycle."""
        before = len(self.c.diagnostics)
        g = nx.DiGraph()
        past = past_pairs(m)  # an attention over an RNN's earlier states runs first in a step
        for n in m.nodes:
            g.add_node(n.id)
        for n in m.nodes:
            for d in deps(n):
                if (d, n.id) in past:
                    continue
                if d not in ids:  # a forward reference to a node that failed to lower
                    self.err(n.loc, f"`{d}` is referenced but not defined")
                    continue
                g.add_edge(d, n.id)
            if len(feeds(n)) > 1:
                self.err(n.loc, f"`{n.id}` has {len(feeds(n))} recurrent models with "
                         "`feed`; a statement runs one decoder step by step",
                         "give each decoder its own statement")
            self.step_links(n, ids)
        if len(self.c.diagnostics) > before:
            return None
        # A `feed` reads the fed node's previous value when the node depends on the decoder
        # within the step (input feeding), else its value of this step, computed first.
        now = set()
        for n in m.nodes:
            for d in feeds(n):
                if d in ids and not nx.has_path(g, n.id, d):
                    now.add((d, n.id))
                    g.add_edge(d, n.id)
        try:
            cycle = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            path = [a for a, _ in cycle] + [cycle[0][0]]
            first = ids[cycle[0][1]]
            self.err(first.loc, "cycle in the dataflow: " + " → ".join(f"`{p}`" for p in path),
                     "a model is a dataflow graph; a decoder that reads its previous context "
                     "uses `gru(x, 512, feed = ATTENTION)`")
            return None
        return g, now

    def step_links(self, n: ir.AnyNode, ids: dict) -> None:
        """``feed`` and ``prev(…)`` of ``n`` name nodes computed in each step of a decoder
        (not an input, not an affinity matrix; a fed context as wide as the values)."""
        for d, how in links(n):
            if how not in ("feed", "prev") or d not in ids:
                continue
            if isinstance(ids[d], ir.Input) or (how == "feed" and isinstance(
                    ids[d], ir.Node) and ids[d].kind_ == "affinity"):
                what = "an input" if isinstance(ids[d], ir.Input) else "an affinity matrix"
                self.err(n.loc, f"`{d}` is {what}, not a node of the decoder step, so "
                         f"{'`feed`' if how == 'feed' else '`prev`'} cannot read it",
                         "`feed` and `prev(…)` name nodes computed in each step of a "
                         "decoder, e.g. `feed = att`, `query = prev(s)`")
            if how == "feed" and isinstance(ids[d], ir.Attention) and ids[d].heads > 1 \
                    and not mech.HEADS_OUT[ids[d].heads_out].full_width:
                self.err(n.loc, f"`feed = {d}`: a decoder reads a context as wide as the "
                         f"values, and `{d}` has `heads_out = {ids[d].heads_out}`",
                         "use the default `heads_out = project` (W_O, eq. 40) on a module "
                         "a decoder reads")

    def decoder_steps(self, m: ir.Model, g: nx.DiGraph, ids: dict) -> None:
        """``cm.steps``: each decoder's strongly connected component through ``feed`` and
        ``prev`` edges, the nodes computed in each of its steps. (Each component is tested
        against the decoders, not against every node: that was quadratic in a deep stack of
        layers; a model without a decoder has no steps to find.)"""
        stepped = [n for n in m.nodes if decoder_ops(n) or state_ops(n)]
        if not stepped:
            return
        full = g.copy()
        full.add_edges_from(self.cm.past)
        for n in m.nodes:
            for d, how in links(n):
                if how in ("prev", "feed") and d in ids:
                    full.add_edge(d, n.id)
        for comp in nx.strongly_connected_components(full):
            for n in stepped:
                if n.id in comp:
                    self.cm.steps[n.id] = set(comp)

    def input_axes(self, m: ir.Model) -> None:
        """The inputs' axes: one length per axis, masks over the other inputs' axes,
        pointers into another input's axis."""
        fixed_by: dict[str, ir.Input] = {}
        data_axes = {a for n in m.inputs if n.kind not in MASK_KINDS for a in n.axes}
        for n in m.inputs:
            if len(n.axes) > MAX_AXES:
                self.err(n.loc, f"input `{n.id}` has {len(n.axes)} axes, more than the "
                         f"{MAX_AXES} an input may have (each axis multiplies its size, and "
                         "the batch, heads and queries add dimensions to its tensors)",
                         "merge axes into one (read a (S, W, C) hierarchy as (S, W*C) "
                         "positions), or split the input")
            if n.kind in MASK_KINDS:
                for a in dict.fromkeys(n.axes):
                    if a not in data_axes:
                        self.err(n.loc, f"axis `{a}` of {n.kind} input `{n.id}` is no axis of "
                                 "the model's other inputs", "a mask or graph input names the "
                                 "axes of the inputs it masks, e.g. `input x: set[N, 64]` and "
                                 "`input adj: graph[N]`")
                if n.kind == "mask" and any(i.autoregressive for i in m.inputs):
                    self.err(n.loc, f"mask input `{n.id}` in a model with an autoregressive "
                             "input: generate() decodes one position at a time from a KV cache, "
                             "which a (B, T, S) mask given once does not follow",
                             "use `mask = causal` for the decoder's own positions, or drop "
                             "`autoregressive`")
                continue
            for a, s in zip(n.axes, n.sizes):
                if s is not None:
                    other = fixed_by.setdefault(a, n)
                    size = other.sizes[other.axes.index(a)]
                    if size != s:
                        self.err(n.loc, f"axis `{a}` has length {s} here but {size} in input "
                                 f"`{other.id}`", "one axis has one length in every input")
                    self.cm.sizes[a] = s
                else:
                    self.cm.sizes.setdefault(a, None)
                self.cm.axis_origin.setdefault(a, n.id)
        for n in m.inputs:  # pointers index the positions of another input's axis
            if n.kind == "pointers" and (n.into not in self.cm.axis_origin or n.into in n.axes):
                self.err(n.loc, f"`into = {n.into}`: pointers index the positions of an axis "
                         "of another input", "e.g. `input x: sequence[S, 2]` and "
                         f"`input {n.id}: pointers[T] (into = S)`")

    def shape_all(self, m: ir.Model, ids: dict, order: list[str], rank: dict) -> bool:
        """Every node's shape, in the order of what each reads, ``prev(…)`` included (a
        decoder's fed node and initial state do not change its shape); False (reported)
        when a node of a decoder step reads its own previous value."""
        gs = nx.DiGraph()
        gs.add_nodes_from(order)
        # an RNN's `state` attention may read its own previous context (LSTMN's h~_(t-1)):
        # its width is the RNN's, known before it (check_state)
        own = {str(e.param("state")): n.id for n in m.nodes for e in state_ops(n)}
        gs.add_edges_from((d, n.id) for n in m.nodes for d, how in links(n)
                          if how in ("read", "prev") and d in ids and
                          not (d == n.id and how == "prev" and d in own))
        try:
            shape_order = list(nx.lexicographical_topological_sort(gs, key=rank.__getitem__))
        except nx.NetworkXUnfeasible:
            a, b = nx.find_cycle(gs)[0]
            self.err(ids[b].loc, f"`{b}` reads itself through `prev(…)`: a node of a decoder "
                     "step cannot be computed from its own previous value",
                     "the decoder's recurrence is its RNN: read `prev(s)` of the decoder `s`")
            return False
        for node_id in shape_order:
            n = ids[node_id]
            if node_id in own and own[node_id] in self.cm.shapes:
                self.cm.shapes[node_id] = self.cm.shapes[own[node_id]]  # its prev(…), for now
            if any(d not in self.cm.shapes for d, how in links(n) if how in ("read", "prev")):
                if node_id in own:
                    self.cm.shapes.pop(node_id, None)
                continue  # an upstream error was reported
            if isinstance(n, ir.Input):
                self.cm.shapes[n.id] = Shape(n.axes, n.dim)
            elif isinstance(n, ir.Node):
                s = self.node(n)
                if s is not None:
                    self.cm.shapes[n.id] = s
            else:
                s = self.attention(n)
                if s is not None:
                    self.cm.shapes[n.id] = s
                elif node_id in own:
                    self.cm.shapes.pop(n.id, None)
        return True
