"""The few directed-graph algorithms the front end's checks and classifier use, over a
plain adjacency dict: importing networkx costs a cold ``taxcompile table`` more than
checking every spec (about 80 ms of 0.45 s, its backends' entry points included), and
``check`` and ``classify`` need only these. The names and results are networkx's
(``checks`` imports this module as ``nx``): nodes and edges are kept in insertion order,
``find_cycle`` reports the cycle a depth-first search meets first, as networkx's does (an
error message prints it), and ``lexicographical_topological_sort`` is Kahn's algorithm with
a heap keyed as networkx keys it. The model graph itself (``graph.build``: exported,
drawn, read by codegen) stays a ``networkx.DiGraph``."""

from __future__ import annotations

import heapq
from typing import Callable, Hashable, Iterable, Iterator

Node = Hashable


class NetworkXException(Exception):
    """(networkx's exception names: ``checks`` catches them by these names)"""


class NetworkXNoCycle(NetworkXException):
    pass


class NetworkXUnfeasible(NetworkXException):
    pass


class DiGraph:
    """A directed graph: nodes and each node's successors, in insertion order."""

    def __init__(self) -> None:
        self._succ: dict[Node, dict[Node, None]] = {}
        self._pred: dict[Node, dict[Node, None]] = {}

    def add_node(self, n: Node) -> None:
        if n not in self._succ:
            self._succ[n] = {}
            self._pred[n] = {}

    def add_nodes_from(self, nodes: Iterable[Node]) -> None:
        for n in nodes:
            self.add_node(n)

    def add_edge(self, a: Node, b: Node) -> None:
        self.add_node(a)
        self.add_node(b)
        self._succ[a][b] = None
        self._pred[b][a] = None

    def add_edges_from(self, edges: Iterable[tuple[Node, Node]]) -> None:
        for a, b in edges:
            self.add_edge(a, b)

    def copy(self) -> "DiGraph":
        g = DiGraph()
        g._succ = {n: dict(s) for n, s in self._succ.items()}
        g._pred = {n: dict(p) for n, p in self._pred.items()}
        return g

    def successors(self, n: Node) -> Iterator[Node]:
        return iter(self._succ[n])

    def predecessors(self, n: Node) -> Iterator[Node]:
        return iter(self._pred[n])

    def __contains__(self, n: Node) -> bool:
        return n in self._succ

    def __iter__(self) -> Iterator[Node]:
        return iter(self._succ)

    def __len__(self) -> int:
        return len(self._succ)


def _reach(adj: dict[Node, dict[Node, None]], source: Node) -> set[Node]:
    seen, stack = set(), [source]
    while stack:
        for m in adj[stack.pop()]:
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen


def ancestors(g: DiGraph, n: Node) -> set[Node]:
    """The nodes with a path to ``n`` (``n`` itself left out, as in networkx)."""
    return _reach(g._pred, n) - {n}


def descendants(g: DiGraph, n: Node) -> set[Node]:
    return _reach(g._succ, n) - {n}


def has_path(g: DiGraph, source: Node, target: Node) -> bool:
    return source == target or target in _reach(g._succ, source)


def find_cycle(g: DiGraph) -> list[tuple[Node, Node]]:
    """The edges of the first cycle a depth-first search meets, starting from each node in
    order and following edges in order, beginning at the node the search returned to
    (networkx's ``find_cycle``); ``NetworkXNoCycle`` when there is none."""
    done: set[Node] = set()
    for start in g:
        if start in done:
            continue
        path: list[tuple[Node, Node]] = []  # the edges of the active path
        on_path = {start}
        stack = [(start, iter(g._succ[start]))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, _END)
            if nxt is _END:  # node finished: back to the node before it
                stack.pop()
                done.add(node)
                on_path.discard(node)
                if path:
                    path.pop()
                continue
            if nxt in done:
                continue
            path.append((node, nxt))
            if nxt in on_path:
                first = next(i for i, (a, _) in enumerate(path) if a == nxt)
                return path[first:]
            on_path.add(nxt)
            stack.append((nxt, iter(g._succ[nxt])))
    raise NetworkXNoCycle("No cycle found.")


_END = object()


def lexicographical_topological_sort(g: DiGraph, key: Callable[[Node], object]
                                     ) -> Iterator[Node]:
    """Kahn's algorithm taking the least ``key`` first among the nodes ready (networkx's);
    ``NetworkXUnfeasible`` when a cycle leaves nodes unsorted."""
    order = {n: i for i, n in enumerate(g)}
    indegree = {n: len(p) for n, p in g._pred.items() if p}
    ready = [(key(n), order[n], n) for n, p in g._pred.items() if not p]
    heapq.heapify(ready)
    while ready:
        _, _, n = heapq.heappop(ready)
        for m in g._succ[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                heapq.heappush(ready, (key(m), order[m], m))
                del indegree[m]
        yield n
    if indegree:
        raise NetworkXUnfeasible("Graph contains a cycle or graph changed during iteration")


def strongly_connected_components(g: DiGraph) -> Iterator[set[Node]]:
    """Tarjan's algorithm, iteratively (a spec's graph can be deeper than the recursion
    limit)."""
    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    stack: list[Node] = []
    on_stack: set[Node] = set()
    for root in g:
        if root in index:
            continue
        work = [(root, iter(g._succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(g._succ[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    yield comp
