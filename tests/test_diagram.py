"""Diagrams: every spec renders with the real `dot`, with one SVG node per drawn graph
node and the labels a reader looks for; without `dot` the .dot source is written."""

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, SPECS
from taxcompile import diagrams, ir, pipeline
from taxcompile.pipeline import load

SPEC_FILES = sorted(SPECS.glob("*.attn"))
SVG = "{http://www.w3.org/2000/svg}"


def drawn_nodes(cs) -> int:
    """Nodes a diagram shows: a repeat's body once (its first hop)."""
    return sum(1 for cm in cs.models for n in cm.model.nodes
               if getattr(n, "hop", None) is None or n.hop.first)


def test_dot_is_installed():
    # `make test` installs graphviz; the rendering tests below need it.
    assert shutil.which("dot"), "graphviz's `dot` is missing: run `make test`, which installs it"


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_svg_renders_with_a_node_per_graph_node(path, tmp_path):
    cs = load(path)
    out = tmp_path / f"{path.stem}.svg"
    written, note = diagrams.write(cs, out)
    assert written == [out] and note == ""
    root = ET.parse(out).getroot()
    groups = root.iter(f"{SVG}g")
    nodes = [g for g in groups if g.get("class") == "node"
             and not g.findtext(f"{SVG}title", "").endswith("/title")]  # clusters' titles
    assert len(nodes) == drawn_nodes(cs)
    text = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    for cm in cs.models:
        assert f"model {cm.model.name}" in text
        for n in cm.model.nodes:
            if isinstance(n, ir.Attention) and (n.hop is None or n.hop.first):
                assert f"attention {n.name}" in text
                assert f"score: {n.score.fn.replace('_', ' ')}" in text
            if isinstance(n, ir.Input):
                assert f"input {n.id}" in text
    clusters = [g for g in root.iter(f"{SVG}g") if g.get("class") == "cluster"]
    assert len(clusters) >= len(cs.models)


def test_repeat_is_drawn_once_with_its_count_and_edges_carry_shapes(tmp_path):
    cs = load(SPECS / "vaswani2017.attn")
    source = diagrams.build(cs).source
    assert "repeat encoder × 6" in source and "repeat decoder × 6" in source
    assert source.count("attention cross") == 1
    assert 'label="k, v (S, 512)"' in source      # encoder output into every cross-attention
    assert 'label="next hop"' in source            # the stream carried to the next layer
    assert "8 heads · causal mask" in source


def test_coattention_partners_and_levels_are_grouped():
    lu = diagrams.build(load(SPECS / "lu2016.attn")).source
    assert "co-attention through C_w" in lu and 'label=question' in lu.replace('"', "")
    han = diagrams.build(load(SPECS / "yang2016.attn")).source
    assert "level (S, W)" in han and "level (S)" in han


def test_output_is_deterministic():
    cs = load(SPECS / "yu2018.attn")
    assert diagrams.build(cs).source == diagrams.build(load(SPECS / "yu2018.attn")).source


def test_without_dot_the_source_is_written_and_the_user_told(tmp_path, monkeypatch):
    monkeypatch.setattr(diagrams.shutil, "which", lambda name: None)
    written, note = diagrams.write(load(SPECS / "bahdanau2015.attn"), tmp_path / "b.png")
    assert written == [tmp_path / "b.dot"]
    assert not (tmp_path / "b.png").exists()
    assert "graphviz's `dot` program was not found" in note and "apt-get install" in note
    assert (tmp_path / "b.dot").read_text().startswith("digraph bahdanau2015 {")


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "taxcompile", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_cli_formats_and_errors(tmp_path):
    for suffix in ("svg", "pdf", "png", "dot"):
        out = tmp_path / f"v.{suffix}"
        r = run("diagram", "specs/xu2015.attn", "-o", str(out))
        assert r.returncode == 0, r.stderr
        assert out.stat().st_size > 100
    assert (tmp_path / "v.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "v.png").read_bytes().startswith(b"\x89PNG")
    r = run("diagram", "specs/xu2015.attn", "-o", str(tmp_path / "v.jpg"))
    assert r.returncode == 2 and "the diagram formats are .svg, .png, .pdf, .dot" in r.stderr
    r = run("diagram", "specs/")
    assert r.returncode == 2 and "is a directory" in r.stderr
    bad = tmp_path / "bad.attn"
    bad.write_text("paper p { cite = \"X\" }\nmodel m {\n")
    r = run("diagram", str(bad), "-o", str(tmp_path / "bad.svg"))
    assert r.returncode == 1 and re.search(r"bad\.attn:\d+:\d+: error:", r.stderr)
    assert not (tmp_path / "bad.svg").exists()


def _boxes(svg: str, cls: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    """(title, (x0, y0, x1, y1)) of each SVG group of class ``cls`` (node or cluster), from
    the coordinates of its outline (polygon points or path data)."""
    out = []
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if g.get("class") != cls:
            continue
        shape = g.find(f"{SVG}polygon")
        if shape is None:
            shape = g.find(f"{SVG}path")
        if shape is None:
            continue
        nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", shape.get("points") or
                                             shape.get("d") or "")]
        xs, ys = nums[0::2], nums[1::2]
        out.append((g.find(f"{SVG}title").text, (min(xs), min(ys), max(xs), max(ys))))
    return out


@pytest.mark.parametrize("stem", ["yu2018", "lu2016"])
def test_nodes_stay_clear_of_cluster_borders_and_labels_of_node_text(stem):
    """In the larger diagrams no node straddles a cluster's border, and no edge label is
    written over a node (edges between clusters get external labels)."""
    svg = diagrams.render_svg(load(SPECS / f"{stem}.attn"))
    nodes = _boxes(svg, "node")
    clusters = [(t, b) for t, b in _boxes(svg, "cluster") if t.startswith("cluster_")]
    assert len(nodes) > 10 and len(clusters) >= 3
    for name, (x0, y0, x1, y1) in nodes:
        for cluster, (cx0, cy0, cx1, cy1) in clusters:
            inside = x0 >= cx0 and x1 <= cx1 and y0 >= cy0 and y1 <= cy1
            apart = x1 <= cx0 or x0 >= cx1 or y1 <= cy0 or y0 >= cy1
            assert inside or apart, f"{name} straddles the border of {cluster}"
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if g.get("class") != "edge":
            continue
        for text in g.iter(f"{SVG}text"):
            x, y = float(text.get("x")), float(text.get("y"))
            for name, (x0, y0, x1, y1) in nodes:
                assert not (x0 < x < x1 and y0 < y - 3 < y1), \
                    f"label {text.text!r} is written over node {name}"


TWO_INPUTS = """paper t { cite = "T" }
model qanet {
    input context: tokens[N] (vocab = 100)
    input question: tokens[M] (vocab = 100)
    feature c = embed(context, 16)
    feature q = embed(question, 16)
    repeat conv_c 2 {
        update c = c + cnn(norm(c), 16, kernel = 3)
    }
    attention S { query = q  keys = c  score = multiplicative }
    attention T { query = c  keys = q  score = multiplicative }
    output y = classify(concat(mean(S), mean(T)), 3)
}
"""


def test_a_repeat_over_one_input_is_drawn_inside_that_input():
    source = diagrams.build(pipeline.load_text(TWO_INPUTS, "t.attn")).source
    context = source.index("subgraph cluster_qanet_input_context")
    repeat = source.index("subgraph cluster_qanet_hop_conv_c")
    closing = source.index("\t}", context)  # the input's cluster closes after the repeat
    assert context < repeat < closing


def test_weights_inside_an_infix_expression_are_drawn_as_written():
    """`z * a.weights` (issue 25's weights times features) as a node's text: `.weights` is an
    operand, not an infix operator with a precedence (it raised KeyError in the report)."""
    m = load(ROOT / "examples" / "wang2016_input_attention.attn").models[0].model
    r = m.node("r")
    assert diagrams.expr_text(m, r.expr) == "tanh(z1 * a1.weights + z2 * a2.weights + b)"
