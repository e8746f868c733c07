"""taxcompile.digraph gives networkx's answers (checks imports it in networkx's place, and a
cycle's error message prints find_cycle's edges): compared on random small digraphs with
self loops and cycles, and on a deep chain (no recursion limit)."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from taxcompile import digraph as dg


def pair(rng: random.Random):
    n = rng.randint(1, 9)
    nodes = [f"n{i}" for i in rng.sample(range(20), n)]
    G, D = nx.DiGraph(), dg.DiGraph()
    G.add_nodes_from(nodes)
    D.add_nodes_from(nodes)
    for _ in range(rng.randint(0, 14)):
        a, b = rng.choice(nodes), rng.choice(nodes)
        if a != b or rng.random() < 0.15:
            G.add_edge(a, b)
            D.add_edge(a, b)
    return nodes, G, D


def outcome(f, *args, exc):
    try:
        return list(f(*args))
    except exc:
        return "raised"


@pytest.mark.parametrize("seed", range(4))
def test_the_algorithms_give_networkx_answers(seed):
    rng = random.Random(seed)
    for _ in range(150):
        nodes, G, D = pair(rng)
        assert outcome(nx.find_cycle, G, exc=nx.NetworkXNoCycle) == \
            outcome(dg.find_cycle, D, exc=dg.NetworkXNoCycle), list(G.edges)
        rank = {x: f"{rng.random():.6f}" for x in nodes}
        assert outcome(nx.lexicographical_topological_sort, G, rank.__getitem__,
                       exc=nx.NetworkXUnfeasible) == \
            outcome(dg.lexicographical_topological_sort, D, rank.__getitem__,
                    exc=dg.NetworkXUnfeasible)
        assert sorted(map(sorted, nx.strongly_connected_components(G))) == \
            sorted(map(sorted, dg.strongly_connected_components(D)))
        for x in nodes:
            assert nx.ancestors(G, x) == dg.ancestors(D, x)
            assert nx.descendants(G, x) == dg.descendants(D, x)
            assert list(G.successors(x)) == list(D.successors(x))
            for y in nodes:
                assert nx.has_path(G, x, y) == dg.has_path(D, x, y)


def test_a_deep_chain():
    D = dg.DiGraph()
    D.add_edges_from((i, i + 1) for i in range(5000))
    assert len(list(dg.strongly_connected_components(D))) == 5001
    assert list(dg.lexicographical_topological_sort(D, key=lambda i: i)) == list(range(5001))
    D.add_edge(5000, 0)
    assert len(dg.find_cycle(D)) == 5001
    assert dg.ancestors(D, 0) == set(range(1, 5001))
