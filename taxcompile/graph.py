"""Stage 5: a checked model as a ``networkx.DiGraph`` (the survey's Fig. 1-2).

Nodes are typed (``input``, ``feature``, ``query``, ``output``, ``affinity``,
``attention``) and keep their IR object under ``ir``; edges carry the role they
play (``query``, ``keys``, ``values``, ``affinity``, ``mask`` (a mask or graph input),
``policy`` (what a reinforced alignment's agent reads beside each key: no query),
``input``; ``feed`` for the node a recurrent decoder reads in each step, ``init`` for its
initial state, ``state`` for the attention that replaces an RNN's previous state), whether
they are delayed (read at an earlier decoder step: ``prev(x)``, input feeding, the keys of
a ``state`` attention) and the shape of the tensor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import digraph, ir
from .checks import CheckedModel, expr_links, links
from .diagnostics import visible
from .mechanisms import align_reads

if TYPE_CHECKING:  # networkx is imported where a graph is built (it is slow to import)
    import networkx as nx


def edges(n: ir.AnyNode, feed_now: frozenset = frozenset(),
          past: frozenset = frozenset()) -> list[tuple[str, str, bool]]:
    """(source, role, delayed) for every edge into ``n``; a source feeding several roles
    of an attention module gives one edge, e.g. ``keys+values``. Delayed edges read the
    previous decoder step: ``prev(x)``, and a ``feed`` unless ``(source, n)`` is in
    ``feed_now`` (``CheckedModel.feed_now``: the fed node is computed first in the step),
    and the RNN's states a ``state`` attention reads (``CheckedModel.past``: earlier steps)."""
    if isinstance(n, ir.Attention):
        roles: dict[tuple[str, bool], list[str]] = {}
        for role, e in (("query", n.query), ("keys", n.keys), ("values", n.values)):
            for r, how in expr_links(e) if e is not None else ():
                if how not in ("read", "prev"):
                    continue
                late = how == "prev" or (r, n.id) in past
                if role not in roles.setdefault((r, late), []):
                    roles[(r, late)].append(role)
        if n.affinity:
            roles.setdefault((n.affinity, False), []).append("affinity")
        if n.mask_input:  # a mask or graph input: which keys each query may see
            roles.setdefault((n.mask_input, False), []).append("mask")
        for param, src in align_reads(n.align):  # `policy`: the agent's state, not a query
            roles.setdefault((src, False), []).append(param)
        return [(r, "+".join(v), delayed) for (r, delayed), v in roles.items()]
    out: dict[tuple[str, str, bool], None] = {}
    for r, how in links(n):
        role = {"read": "input", "prev": "input"}.get(how, how)
        delayed = how == "prev" or (how == "feed" and (r, n.id) not in feed_now)
        out[(r, role, delayed)] = None
    return list(out)


def build(cm: CheckedModel) -> nx.DiGraph:
    import networkx as nx

    g = nx.DiGraph(name=cm.model.name)
    for node_id in cm.order:
        n = cm.model.node(node_id)
        shape = cm.shapes.get(node_id)
        attrs = dict(kind=n.kind_, label=getattr(n, "name", n.id), shape=str(shape),
                     loc=str(n.loc), ir=n)
        if isinstance(n, ir.Attention):
            info = cm.attention[node_id]
            attrs.update(score=n.score.fn, align=n.align.fn, heads=n.heads,
                         dimensionality=n.dimensionality, capsules=n.capsules,
                         attended=info.attended, query_mode=info.query_mode)
        if getattr(n, "hop", None) is not None:
            attrs.update(hop=n.hop.index, hops=n.hop.count, block=n.hop.block,
                         template=n.hop.template, shared=n.hop.shared)
        g.add_node(node_id, **attrs)
    for node_id in cm.order:
        for src, role, delayed in edges(cm.model.node(node_id), cm.feed_now, cm.past):
            if delayed and g.has_edge(src, node_id) and not g.edges[src, node_id]["delayed"]:
                continue  # x and prev(x) both read: the edge within the step holds
            g.add_edge(src, node_id, role=role, shape=str(cm.shapes.get(src)), delayed=delayed)
    return g


def of(cm: CheckedModel) -> nx.DiGraph:
    """The model graph of ``cm`` (``build``), built once and shared by every later stage."""
    g = cm.__dict__.get("_graph")
    if g is None:
        g = cm.__dict__["_graph"] = build(cm)
    return g


def dataflow(g: nx.DiGraph) -> nx.DiGraph:
    """The graph without delayed edges (input feeding, ``prev``): a DAG."""
    import networkx as nx

    return nx.subgraph_view(g, filter_edge=lambda a, b: not g.edges[a, b]["delayed"])


def dataflow_of(cm: CheckedModel) -> digraph.DiGraph:
    """``dataflow(build(cm))`` as a plain ``digraph.DiGraph``, for the classifier: the same
    nodes and edges (of two edges between one pair of nodes, one read within the step
    holds, as in ``build``), without importing networkx."""
    delayed: dict[tuple[str, str], bool] = {}
    for node_id in cm.order:
        for src, _, late in edges(cm.model.node(node_id), cm.feed_now, cm.past):
            delayed[(src, node_id)] = late and delayed.get((src, node_id), True)
    g = digraph.DiGraph()
    g.add_nodes_from(cm.order)
    g.add_nodes_from(src for src, _ in delayed)
    g.add_edges_from(pair for pair, late in delayed.items() if not late)
    return g


def _plain(g: nx.DiGraph) -> nx.DiGraph:
    """The graph without its IR objects, every text made visible (a file name with an ESC
    would make the GraphML ill-formed XML: 1.0 forbids most control characters)."""
    import networkx as nx

    def text(v):
        return visible(v) if isinstance(v, str) else v

    h = nx.DiGraph(name=text(g.graph.get("name", "")))
    for n, a in g.nodes(data=True):
        h.add_node(n, **{k: text(v) for k, v in a.items() if k != "ir" and v is not None})
    for a, b, e in g.edges(data=True):
        h.add_edge(a, b, **{k: text(v) for k, v in e.items()})
    return h


def to_json(g: nx.DiGraph) -> str:
    import json  # (the table and the classifier need none)

    import networkx as nx

    return json.dumps(nx.node_link_data(_plain(g), edges="edges"), indent=2, sort_keys=True)


def to_graphml(g: nx.DiGraph) -> str:
    import networkx as nx

    return "\n".join(nx.generate_graphml(_plain(g)))
