"""Graph attention over an edge list, read by taxcompile/torchread/graphs.py: torch_geometric's
`GATConv` (no softmax node: a softmax over each node's incoming edges built from scatter ops)
gives the row that `taxcompile table` gives for GAT's spec (examples/gat.attn), with the
registry's `activated_concat` score; an edge score it does not cover (GATv2's) and a
"softmax" whose sum runs over other segments than its weights give no row."""
from pathlib import Path

import pytest
import torch

import taxcompile

pyg = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed")

ROOT = Path(__file__).parents[1]
X = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
# a small directed graph: a ring, two chords, a node (5) with one in-edge
EDGES = torch.tensor([[0, 1, 2, 3, 4, 5, 1, 3], [1, 2, 3, 4, 5, 0, 0, 2]])
READ = ("scoring", "alignment", "query_type")


def _classify(m, inputs):
    torch.manual_seed(0)
    return taxcompile.classify(m.eval(), inputs)


def test_gatconv_gives_the_row_of_gats_spec():
    res = _classify(pyg.GATConv(8, 4, heads=2), (X, EDGES))
    want = taxcompile.classify(str(ROOT / "examples/gat.attn"), "gat").row()
    got = res.row()
    assert {d: got[d] for d in READ} == {d: want[d] for d in READ}, res.text()
    assert got["query_multiplicity"] == want["query_multiplicity"] == "Multi-Head"
    (a,) = res.attentions
    assert a.names == {"score": "activated_concat", "align": "global"}
    text = res.text()
    assert "softmax over each node's neighbours" in text and "2 heads per edge" in text
    assert "gat_conv.py" in text  # the source line kept by the graph


def test_one_head_is_singular_and_mean_heads_are_heads():
    one = _classify(pyg.GATConv(8, 4, heads=1), (X, EDGES)).row()
    assert (one["scoring"], one["query_multiplicity"]) == ("Additive", "Singular")
    mean = _classify(pyg.GATConv(8, 4, heads=3, concat=False, add_self_loops=False),
                     (X, EDGES)).row()
    assert (mean["scoring"], mean["query_multiplicity"]) == ("Additive", "Multi-Head")


def test_bipartite_gatconv_queries_another_input():
    """Source nodes x_s and target nodes x_t: the query (the receiving node) reads x_t,
    which the keys do not."""
    m = pyg.GATConv((8, 5), 4, heads=2, add_self_loops=False)
    res = _classify(m, ((X, torch.randn(6, 5)), EDGES))
    assert res.row()["query_type"] == "Basic", res.text()


def test_gatv2_edge_score_is_not_guessed():
    """GATv2 scores a^T act(W [h_i; h_j]): no record of the registry reads it over edges."""
    res = _classify(pyg.GATv2Conv(8, 4, heads=2), (X, EDGES))
    assert res.row() == {}
    (a,) = res.attentions
    assert not a.recognised
    assert "softmax over each node's incoming edges" in a.why_not
    assert "matches no score pattern" in a.why_not


class _EdgeWeights(torch.nn.Module):
    """exp(e) divided by its sum over each node's incoming edges (``by_target``) or, which is
    no softmax (a node's incoming weights do not sum to one), over the edges' sources."""

    def __init__(self, by_target: bool):
        super().__init__()
        self.by_target = by_target

    def forward(self, x, edges):
        src, dst = edges[0], edges[1]
        e = torch.tanh(x.sum(-1)).index_select(0, src)
        ex = e.exp()
        seg = dst if self.by_target else src
        den = torch.zeros(x.shape[0]).scatter_add(0, seg, ex).index_select(0, dst)
        w = ex / den
        return torch.zeros_like(x).index_add(0, dst, w.unsqueeze(-1) * x.index_select(0, src))


def test_a_sum_over_other_segments_is_no_attention():
    # the same code with the sum over the targets is a softmax (its score is no record's)
    (a,) = _classify(_EdgeWeights(True), (X, EDGES)).attentions
    assert not a.recognised and "edge score `index_select`" in a.why_not
    res = _classify(_EdgeWeights(False), (X, EDGES))
    assert res.attentions == [] and res.row() == {}, res.text()


def test_docs_show_the_gatconv_row():
    doc = (ROOT / "docs" / "classify-code.md").read_text()
    assert ("| torch_geometric GATConv(8, 4, heads=2) | torch.export | Additive | Global | "
            "Self-Attentive | Multi-Head |") in doc
    assert "GATv2Conv" in doc
