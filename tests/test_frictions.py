"""What a newcomer tripped on (issue 24, point 5): the score and affinity spellings, the
did-you-mean of an unknown name, `compile -o FILE`, py.typed, the report's Table III of
specs without `row =`, and heatmaps of 1 × N weights drawn as strips."""

import textwrap
import tomllib

import pytest

from conftest import ROOT, classify_text

from taxcompile.diagnostics import SpecError
from taxcompile.pipeline import load_text

CO = textwrap.dedent("""\
    paper p { cite = "P" }
    model m {
        input a: sequence[S, 8]
        input b: sequence[T, 8]
        affinity C = affinity(a, b, form = FORM)
        attention att { query = mean(b)  features = a  score = SCORE  align = global }
        output y = classify(att, 2)
    }
""")


def spec(form="bilinear", score="additive") -> str:
    return CO.replace("FORM", form).replace("SCORE", score)


def affinity_form(text: str) -> str:
    node = load_text(text).models[0].model.node("C")
    return dict(node.expr.params)["form"]


@pytest.mark.parametrize("written,meant", [("scaled_multiplicative", "scaled_dot"),
                                           ("multiplicative", "dot")])
def test_an_affinity_form_takes_the_score_s_spelling(written, meant):
    assert affinity_form(spec(form=written)) == affinity_form(spec(form=meant)) == meant


@pytest.mark.parametrize("written,label", [("scaled_dot", "Scaled Multiplicative"),
                                           ("dot", "Multiplicative")])
def test_a_score_takes_the_affinity_form_s_spelling(written, label):
    assert classify_text(spec(score=written))["scoring"] == label
    cs = load_text(spec(score=written))
    meant = {"scaled_dot": "scaled_multiplicative", "dot": "multiplicative"}[written]
    assert cs.models[0].model.node("att").score.fn == meant


@pytest.mark.parametrize("text,hint", [
    (spec(score="general_biased"), "did you mean `biased_general`?"),
    (spec(score="scaled_multiplictive"), "did you mean `scaled_multiplicative`?"),
    (spec(form="scaled_dott"), "did you mean `scaled_dot`?"),
    (spec(score="additive(d_w = 4, atc = tanh)"), "did you mean `act`?"),
    (spec().replace("features = a", "featurse = a"), "did you mean `features`?"),
    (spec().replace("mean(b)", "mena(b)"), "did you mean `mean`?"),
])
def test_an_unknown_name_gets_a_did_you_mean(text, hint):
    with pytest.raises(SpecError) as e:
        load_text(text)
    assert f"hint: {hint}" in e.value.render()


def test_compile_into_an_existing_file_says_what_o_is(tmp_path, capsys):
    from taxcompile.cli import main

    target = tmp_path / "rev.attn"
    target.write_text(spec(), encoding="utf-8")
    assert main(["compile", str(target), "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"-o {target}: it is a file, not a directory" in err and "File exists" not in err
    assert target.read_text(encoding="utf-8") == spec()


def test_the_package_is_typed():
    assert (ROOT / "taxcompile" / "py.typed").is_file()
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in conf["tool"]["setuptools"]["package-data"]["taxcompile"]


def test_every_package_folder_is_listed_for_the_wheel():
    # an editable install finds a package that pyproject.toml forgets; a wheel does not
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(conf["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "taxcompile").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def test_a_report_of_specs_without_row_lists_their_rows(tmp_path):
    pytest.importorskip("torch")
    from taxcompile import pipeline, report

    specs = [(p, pipeline.load(p)) for p in (ROOT / "examples" / "memory_network.attn",
                                             ROOT / "examples" / "alibi.attn")]
    report.build(specs, tmp_path / "site", train_steps=0, cache=None)
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'id="table3-rows"' not in index  # no empty Table III
    rows = index[index.index('id="other-rows"'):]
    for path, cs in specs:
        assert f'href="papers/{cs.spec.paper.id}.html">{cs.spec.paper.cite}</a>' in rows


@pytest.mark.parametrize("shape,ratio", [((1, 9), 1 / 9), ((6, 6), 1.0), ((9, 3), 3.0),
                                         ((1, 40), 1 / 12)])
def test_a_heatmap_keeps_its_cells_square(shape, ratio):
    np = pytest.importorskip("numpy")
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from taxcompile import heatmap

    fig = heatmap.figure({"m.att": np.full(shape, 1 / shape[1])}, "title")
    fig.canvas.draw()
    box = fig.axes[0].get_window_extent()
    plt.close(fig)
    assert box.height / box.width == pytest.approx(ratio, rel=0.03)


def _text_box(t, pad: float) -> tuple:
    """A generous box of an SVG text: 0.6 em per character (wider than graphviz's own
    estimate, as browsers' fallback fonts are)."""
    x, y, size = float(t.get("x")), float(t.get("y")), float(t.get("font-size"))
    w = 0.6 * size * len(t.text or "")
    anchor = t.get("text-anchor")
    x0 = x - w / 2 if anchor == "middle" else x - w if anchor == "end" else x
    return (x0 - pad, y - size * 0.8 - pad, x0 + w + pad, y + size * 0.25 + pad)


def _curve(d: str) -> list:
    """Points along an SVG path of cubic Bézier segments (how dot draws edges)."""
    import re

    nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
    pts, out = list(zip(nums[0::2], nums[1::2])), []
    for i in range(0, len(pts) - 3, 3):
        p0, p1, p2, p3 = pts[i:i + 4]
        for k in range(41):
            s = k / 40
            out.append(tuple((1 - s) ** 3 * a + 3 * (1 - s) ** 2 * s * b + 3 * (1 - s) * s * s * c
                             + s ** 3 * e for a, b, c, e in zip(p0, p1, p2, p3)))
    return out


@pytest.mark.parametrize("path", ["specs/lu2016.attn", "specs/vaswani2017.attn",
                                  "specs/yu2018.attn", "examples/memory_network.attn"])
def test_no_edge_or_edge_label_runs_over_a_cluster_title(path):
    """Every cluster's title (`repeat encoder × 6`, `co-attention through C_w`): no edge
    label within 4 points of it, no edge drawn through it."""
    import shutil
    import xml.etree.ElementTree as ET

    from taxcompile import diagrams, pipeline

    if shutil.which("dot") is None:
        pytest.skip("graphviz's dot is not installed")
    ns = "{http://www.w3.org/2000/svg}"
    svg = ET.fromstring(diagrams.render_svg(pipeline.load(ROOT / path)))
    titles, labels, edges = [], [], []
    for g in svg.iter(f"{ns}g"):
        kind, name = g.get("class"), g.findtext(f"{ns}title", "")
        if kind == "cluster" or kind == "node" and name.endswith("/title"):
            titles += [(_text_box(t, 0), t.text) for t in g.findall(f"{ns}text")]
        if kind == "edge":
            labels += [(_text_box(t, 4), t.text, name) for t in g.findall(f"{ns}text")]
            edges += [(_curve(p.get("d")), name) for p in g.findall(f"{ns}path")]
    assert any("repeat" in t or "co-attention" in t for _, t in titles)

    def overlap(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    bad = [f"label {text!r} of {edge} on {title!r}" for box, text, edge in labels
           for tbox, title in titles if overlap(box, tbox)]
    bad += [f"edge {edge} through {title!r}" for pts, edge in edges for tbox, title in titles
            if any(tbox[0] <= x <= tbox[2] and tbox[1] <= y <= tbox[3] for x, y in pts)]
    assert not bad, bad
