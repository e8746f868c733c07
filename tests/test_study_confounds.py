"""The slice's confounds (taxcompile/study/models.py, permodel.py) and the learning-curve
plots (curves.py): every pair_recall co-attention is trained with the additive score and
again with the scaled dot product, each compared with the base of its own score; the local
alignment predicts its window from a query that has read x; `study report -o` draws test
accuracy against steps, one line per value of a dimension."""

from __future__ import annotations

import math

import pytest

from taxcompile import pipeline
from taxcompile.classification import classify_model
from taxcompile.study import curves, permodel, report
from taxcompile.study import protocol as proto
from taxcompile.study import models as Mdl
from taxcompile.study.runs import plan

COATTENTION = ("alternating", "interactive", "parallel")


def test_the_plan_has_each_co_attention_with_the_dot_product_score():
    runs, _ = plan("smoke", tasks=["pair_recall"])
    by = {r.model: r for r in runs if not r.supervised}
    names = [f"study_{v}" for v in COATTENTION]
    assert set(names) | {n + "_dot" for n in names} | {"study_base", "study_base_dot"} \
        <= set(by)
    for name in ["study_base"] + names:
        for model, score in ((name, "Additive"), (name + "_dot", "Scaled Multiplicative")):
            r = by[model]
            cm = pipeline.load_text(r.spec, r.source).models[0]
            row = classify_model(cm).cells
            assert row["scoring"].text("scoring") == score, model
            # the dot twin differs from its additive model in the score alone
            twin = pipeline.load_text(by[name].spec, by[name].source).models[0]
            other = classify_model(twin).cells
            assert {d for d in row if row[d].text(d) != other[d].text(d)} <= {"scoring"}


def _run(source: str, model: str, seed: int, acc: float) -> dict:
    return dict(task="pair_recall", budget=600, width=32, supervised=False, spec=source,
                model=model, model_hash=model, seed=seed, accuracy=acc, row={},
                attention={}, steps_to_threshold=None, curve=[[600, acc]])


def test_score_controls_compare_each_co_attention_with_the_base_of_its_score():
    """With the additive score the co-attention is compared with the additive base, with
    the dot product with the dot-product base: per seed, acc(model) - acc(its base)."""
    accs = {"slice:pair_recall:base=base": (0.20, 0.30, 0.25),
            "slice:pair_recall:feature_multiplicity=alternating": (0.50, 0.40, 0.60),
            "slice:pair_recall:base=base+scoring=scaled_multiplicative": (0.90, 0.95, 0.99),
            "slice:pair_recall:feature_multiplicity=alternating+scoring=scaled_multiplicative":
                (0.91, 0.90, 0.99)}
    runs = [_run(src, src.split(":")[-1], s, a) for src, v in accs.items()
            for s, a in enumerate(v)]
    (c,) = permodel.score_controls(runs)
    assert (c["dimension"], c["value"], c["score"]) == ("feature_multiplicity", "alternating",
                                                         "scaled_multiplicative")
    for side, (mine, base) in (("with_base_score", (1, 0)), ("with_score", (3, 2))):
        srcs = list(accs)
        d = [a - b for a, b in zip(accs[srcs[mine]], accs[srcs[base]])]
        mean = sum(d) / 3
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
        half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2)
        got = c[side]
        assert got["n"] == 3 and got["diff_mean"] == pytest.approx(mean)
        assert got["diff_ci95"] == pytest.approx([mean - half, mean + half])
    assert permodel.is_control(srcs[3]) and not permodel.is_control(srcs[2])


def _centre_probe(model):
    """The local alignment's predicted window centre, p = S sigmoid(w_p^T tanh(W_p q))
    (eq. 28), caught at its last linear map."""
    got = []
    (w_p,) = [m for n, m in model.named_modules() if n.endswith("w_p")]
    w_p.register_forward_hook(lambda mod, inp, out: got.append(out.detach().clone()))
    return got


def test_the_local_alignment_predicts_its_window_from_a_query_that_has_read_x():
    torch = pytest.importorskip("torch")
    from taxcompile.study import tasks as T
    from taxcompile.study.runner import build
    from taxcompile.study.runs import Run

    (m,) = [m for m in Mdl.slice_models("mqar4", 16) if m.value == "local"]
    b = build(Run(m.source, Mdl.spec_text(m), m.name, "mqar4", (0,), (0.01,), "smoke"))
    torch.manual_seed(0)
    model = b.mod.Model(b.cfg).eval()
    got = _centre_probe(model)
    batch = T.batch("mqar4", torch.Generator().manual_seed(0), 8)
    other = batch["x"].roll(5, dims=1)  # the same queries, the pairs elsewhere in x
    with torch.no_grad():
        model(x=batch["x"], q=batch["q"])
        model(x=other, q=batch["q"])
    assert got[0].shape == got[1].shape
    assert (got[0] - got[1]).abs().max() > 1e-4  # the centre moves with x


def _doc() -> dict:
    """Three values of `scoring` (the base's Additive among them) and one of `alignment`
    (not plotted: nothing to compare), two seeds each; a seed that stops early keeps its
    last accuracy."""
    base = {"scoring": "Additive", "alignment": "Global"}
    curves_of = {
        "Additive": ([[20, 0.2], [40, 0.5], [60, 0.7]], [[20, 0.4], [40, 0.99]]),
        "Multiplicative": ([[20, 0.1], [40, 0.2], [60, 0.3]], [[20, 0.3], [40, 0.4], [60, 0.5]]),
        "General": ([[20, 0.6], [40, 1.0]], [[20, 0.8], [40, 0.9], [60, 1.0]]),
    }
    runs = [dict(task="copy", supervised=False, budget=60, width=16, seed=s,
                 row=dict(base, scoring=v), curve=c)
            for v, cs in curves_of.items() for s, c in enumerate(cs)]
    return {"runs": runs, "base": {"copy": base}}, curves_of


def test_curves_are_the_mean_over_seeds_per_step_one_line_per_value():
    doc, curves_of = _doc()
    lines = curves.lines(doc, "copy", "scoring")
    assert sorted(lines) == sorted(curves_of)
    # General: seed 0 stopped at 40 with 1.0 and keeps it at 60
    for value, want in (("General", [0.7, 0.95, 1.0]), ("Additive", [0.3, 0.745, 0.845])):
        assert [t for t, _ in lines[value]] == [20, 40, 60]
        assert [a for _, a in lines[value]] == pytest.approx(want)
    assert curves.lines(doc, "copy", "alignment") == {}
    assert curves.plots(doc) == [("copy", "scoring")]


def test_report_draws_one_line_per_value_and_links_the_png(tmp_path):
    pytest.importorskip("matplotlib")
    doc, curves_of = _doc()
    fig = curves.figure(doc, "copy", "scoring")
    (ax,) = fig.axes
    labels = sorted(line.get_label() for line in ax.get_lines())
    assert labels == ["Additive (base)", "General", "Multiplicative"]
    general = next(line for line in ax.get_lines() if line.get_label() == "General")
    assert list(general.get_xdata()) == [20, 40, 60]
    assert list(general.get_ydata()) == pytest.approx([0.7, 0.95, 1.0])
    import matplotlib.pyplot as plt

    plt.close(fig)
    name = curves.name("copy", "scoring")
    png = curves.png(doc, "copy", "scoring")
    assert png.startswith(b"\x89PNG")
    assert f"[scoring]({name})" in "\n".join(curves.links_md(doc, "copy"))
    assert report.plot_name("copy") == "effects_copy.png"


class _Store:
    """A study file's content as report.document reads it (study_fake's base row)."""

    # a whole protocol: the report checks what it writes against its schema
    protocol = {"version": proto.PROTOCOL_VERSION, "profile": "smoke",
                "settings": {**proto.PROFILES["smoke"].settings(), "steps": 60, "d": 16}}

    def __init__(self, doc: dict):
        import study_fake

        self.rows = [dict(source=f"mine:{r['row']['scoring']}", model=r["row"]["scoring"],
                          model_hash=r["row"]["scoring"], row=study_fake.BASE | r["row"],
                          task="copy", supervised=False, seed=r["seed"], lr=0.01, params=1,
                          steps=r["curve"][-1][0], seconds=1.0, seconds_per_step=0.1,
                          accuracy=r["curve"][-1][1], final_loss=0.1, val_accuracy=0.5,
                          steps_to_threshold=None, attention={}, engine="local",
                          curve=r["curve"], budget=60, width=16) for r in doc["runs"]]

    def results(self):
        return self.rows

    def skips(self):
        return []


def test_report_o_writes_a_curve_png_per_dimension_and_links_it(tmp_path):
    pytest.importorskip("matplotlib")
    doc = report.document(_Store(_doc()[0]))
    files = report.write(doc, tmp_path)
    png = tmp_path / curves.name("copy", "scoring")
    assert png in files and png.read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / curves.name("copy", "alignment")).exists()
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert f"[scoring]({png.name})" in md


def test_the_html_study_page_has_a_row_per_model_and_the_curves(tmp_path):
    pytest.importorskip("matplotlib")
    from taxcompile import report as site

    doc = report.document(_Store(_doc()[0]))
    files = site._study_page(site._env(), doc)
    page = files["study.html"]
    assert page.count('<tr class="model">') == 3
    assert '<tr class="model"><td>General</td><td>mine:General</td><td>plain</td>' in page
    path = f"study/{curves.name('copy', 'scoring')}"
    assert files[path][:4] == b"\x89PNG" and f'<img src="{path}"' in page
