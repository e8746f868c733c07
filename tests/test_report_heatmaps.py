"""The report's heatmaps: titles that fit their image, and models briefly trained on a
synthetic task (taxcompile/train.py) whose attention learns to find what the task hides."""

import time

import pytest

from conftest import ROOT, SPECS

pytest.importorskip("torch")
matplotlib = pytest.importorskip("matplotlib")

from taxcompile import codegen, heatmap, pipeline, train  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

EXAMPLES = ROOT / "examples"


def _model(path, index=0):
    cs = pipeline.load(path)
    cm = cs.models[index]
    src = codegen.generate(cs, cm, codegen.source_name(str(path)))
    return load_module(src, codegen.output_name(cs, cm)[:-3]), cm, src


def _maps(keys, lq=7, lk=9):
    import numpy as np

    rng = np.random.default_rng(0)
    return {k: rng.random((lq, lk)) for k in keys}


@pytest.mark.parametrize("keys", [
    ["att"],
    ["model_enc[1].block[1].self", "c2q", "q2c", "c2q2c_with_a_rather_long_module_name"],
    [f"hop[1].module_{i}" for i in range(6)],
])
def test_every_title_lies_inside_the_image(keys):
    """Every text of the figure (figure title, panel titles, axis and tick labels) lies
    inside the figure's box, however long the title: the fix for titles cut at both sides."""
    title = ("Somebody et al.: model a_model_with_a_long_name (Config.tiny(), trained on a "
             "synthetic task that its attention has to solve)")
    fig = heatmap.figure(_maps(keys), title)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    assert "Somebody" in fig._suptitle.get_text()
    boxes = {"figure title": fig._suptitle.get_window_extent(renderer)}
    for i, ax in enumerate(fig.axes):  # panels and colour bars: titles, labels, ticks
        boxes[f"axes {i} ({ax.get_title()!r})"] = ax.get_tightbbox(renderer)
        if ax.get_title():
            boxes[f"title {ax.get_title()!r}"] = ax.title.get_window_extent(renderer)
    assert len(boxes) >= 1 + 2 * len(keys)
    for what, ext in boxes.items():
        assert ext.x0 >= box.x0 - 0.5 and ext.x1 <= box.x1 + 0.5, (what, ext, box)
        assert ext.y0 >= box.y0 - 0.5 and ext.y1 <= box.y1 + 0.5, (what, ext, box)
    matplotlib.pyplot.close(fig)


def test_the_png_has_no_ink_on_its_left_and_right_edges():
    """A title cut by the image's border leaves dark pixels in its first or last columns."""
    import io

    from PIL import Image

    data = heatmap.png(_maps(["att", "cross"]), "Luong et al.: model global_dot, "
                       "200 training steps on the task reverse the source sequence")
    img = Image.open(io.BytesIO(data)).convert("L")
    w, h = img.size
    for x in (0, 1, w - 2, w - 1):
        darkest = min(img.getpixel((x, y)) for y in range(h))
        assert darkest > 200, f"column {x} has ink ({darkest})"


def test_each_model_gets_a_task_that_fits_its_inputs_and_outputs():
    expected = {("bahdanau2015", 0): "reverse", ("luong2015", 1): "copy",  # local-m: monotonic
                ("xu2015", 0): "describe", ("yu2018", 0): "point",
                ("oktay2018", 0): "segment", ("lin2017", 0): "keyword"}
    for (stem, index), task in expected.items():
        mod, cm, src = _model(SPECS / f"{stem}.attn", index)
        got = train.train(mod, cm, src, steps=0, cache=None)
        assert got.task == task, stem
        assert got.steps == 0


def test_a_model_without_outputs_is_shown_untrained(tmp_path):
    spec = tmp_path / "tiny.attn"
    spec.write_text('paper tiny { cite = "Tiny" }\nmodel m {\n    input src: tokens[S] (vocab = 50)\n'
                    '    feature x = embed(src, 16)\n'
                    '    attention a { query = project(x)  keys = x  score = multiplicative }\n}\n')
    mod, cm, src = _model(spec)
    got = train.train(mod, cm, src, steps=50, cache=tmp_path)
    assert got.task == "none" and got.steps == 0 and not list(tmp_path.glob("*.pt"))
    maps, _ = heatmap.weights(src, "tiny_m", cm, steps=50, cache=None)
    assert list(maps) == ["a"] and maps["a"].shape == (9, 9)


def _keyword_mass(trained) -> float:
    """The mean attention weight on the planted keyword (token ids 2..5; the distractors
    are >= 6), read from the inputs, not from the task's own bookkeeping."""
    import torch

    x = trained.inputs["sent"]
    with torch.no_grad():
        out = trained.model(**trained.inputs, return_attention=True)
    a = out.attention["M"]  # (B, r, 1, N): r attention hops (heads), one query each
    planted = (x >= 2) & (x < 2 + train.KEYWORDS)
    assert bool((planted.sum(1) == 1).all())
    return float((a * planted.view(x.shape[0], 1, 1, -1)).sum(-1).mean())


def test_training_teaches_the_attention_to_find_the_keyword(tmp_path):
    """Lin et al.'s self-attentive encoder: untrained, its r attention hops spread their
    weight (about 1/N on the keyword); after brief training they put most of it on the
    keyword. The second run is read from the cache: the same weights and loss, at once."""
    mod, cm, src = _model(SPECS / "lin2017.attn")
    before = _keyword_mass(train.train(mod, cm, src, steps=0, cache=None))
    t0 = time.perf_counter()
    first = train.train(mod, cm, src, steps=100, cache=tmp_path)
    cold = time.perf_counter() - t0
    after = _keyword_mass(first)
    assert before < 0.3 and after > 0.6, (before, after)
    assert not first.cached and 0 < first.steps <= 150 and first.loss < 0.5
    assert len(list(tmp_path.glob("*.pt"))) == 1
    t0 = time.perf_counter()
    again = train.train(mod, cm, src, steps=100, cache=tmp_path)
    warm = time.perf_counter() - t0
    assert again.cached and again.loss == first.loss and again.steps == first.steps
    a, b = first.model.state_dict(), again.model.state_dict()
    assert all(bool((a[k] == b[k]).all()) for k in a)
    assert warm < cold
    # deterministic: the same training without the cache ends at the same loss
    assert train.train(mod, cm, src, steps=100, cache=None).loss == first.loss


def test_the_cache_key_follows_the_source_and_the_settings():
    k = train.cache_key("x = 1\n", 200)
    assert k == train.cache_key("x = 1\n", 200)
    assert k != train.cache_key("x = 2\n", 200) and k != train.cache_key("x = 1\n", 100)


def test_the_front_end_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, taxcompile.train, taxcompile.report, taxcompile.diagrams; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


# ---- learned or not: the held-out loss against chance ------------------------------------


def test_an_untrained_model_did_not_learn_and_a_trained_one_did(tmp_path):
    """Lin et al.'s encoder on the keyword task (4 equally likely keywords: chance ln 4):
    untrained, its held-out loss is about chance; after 100 steps far below half of it."""
    import math

    mod, cm, src = _model(SPECS / "lin2017.attn")
    before = train.train(mod, cm, src, steps=0, cache=None)
    h = before.heldout
    assert h.classes == 4 and h.uniform and abs(h.chance - math.log(4)) < 0.01
    assert h.chance_text == "ln 4 = 1.39"
    assert h.loss > 0.9 * h.chance and not before.learned
    after = train.train(mod, cm, src, steps=100, cache=tmp_path)
    assert after.heldout.chance == h.chance and after.heldout.loss < 0.2 * h.chance
    assert after.learned
    again = train.train(mod, cm, src, steps=100, cache=tmp_path)  # from the cache: the same
    assert again.cached and again.heldout == after.heldout


def test_the_held_out_batch_is_none_of_the_training_batches():
    """The held-out examples are drawn with their own seed: none of them is an example of
    the first training batches (token sequences compared whole)."""
    import torch

    mod, cm, src = _model(SPECS / "lin2017.attn")
    cfg = mod.Config.tiny()
    model = mod.Model(cfg)
    names = [n.name for n in cm.model.nodes if n.kind_ == "output"]
    shapes = {names[0]: tuple(model(**mod.example_inputs(cfg=cfg)).output.shape)}
    task = train.Task(mod, cm, src, cfg, shapes)
    g = torch.Generator().manual_seed(train.SEED)
    seen = {tuple(row.tolist()) for _ in range(20)
            for row in task.batch(g, train.BATCH)[0]["sent"]}
    held, _ = task.batch(torch.Generator().manual_seed(train.HELDOUT_SEED), train.HELDOUT)
    assert not seen & {tuple(row.tolist()) for row in held["sent"]}


def test_a_segmentation_task_s_chance_is_the_entropy_of_its_pixels():
    """Segment: about 1 pixel in 16 is the square's, so predicting "background" everywhere
    already beats ln 2; chance is the entropy of the two classes' frequencies."""
    mod, cm, src = _model(SPECS / "oktay2018.attn")
    h = train.train(mod, cm, src, steps=0, cache=None).heldout
    assert h.classes == 2 and not h.uniform and 0.1 < h.chance < 0.6
    assert h.chance_text == f"{h.chance:.2f} (the entropy of its 2 classes)"


def _report(tmp_path, steps):
    from taxcompile import report

    spec = SPECS / "lin2017.attn"
    out = tmp_path / f"site{steps}"
    report.build([(spec, pipeline.load(spec))], out, train_steps=steps, cache=tmp_path / "c")
    return (out / "papers" / "lin2017.html").read_text(encoding="utf-8")


def test_the_report_labels_a_model_that_did_not_learn(tmp_path):
    """0 training steps: the caption says the model did not learn, with its held-out loss
    against chance, and the figure is marked (greyed by the style sheet); trained, the
    same model's heatmap is shown as learned."""
    import re

    text = _report(tmp_path, 0)
    fig = re.search(r'<figure class="heatmap not-learned">.*?</figure>', text, re.S)
    assert fig, text
    m = re.search(r"did not learn the task: held-out loss (\d+\.\d\d) against chance "
                  r"ln 4 = 1\.39", fig.group(0))
    assert m and float(m.group(1)) > 1.2, fig.group(0)
    assert "learned the task:" not in text.replace("did not learn the task:", "")
    assert "at most 50% of chance" in text  # the margin, stated
    text = _report(tmp_path, 100)
    assert "heatmap not-learned" not in text and "did not learn the task:" not in text
    fig = re.search(r'<figure class="heatmap">.*?</figure>', text, re.S).group(0)
    m = re.search(r"learned the task: held-out loss (\d+\.\d\d) against chance ln 4 = 1\.39",
                  fig)
    assert m and float(m.group(1)) < 0.3, fig


def test_targets_of_one_class_teach_nothing():
    """Wang et al.'s capsules output one sigmoid per class, (B, 3, 1): a cross-entropy over a
    last axis of one class is 0 whatever the model does, so the model did not learn."""
    mod, cm, src = _model(SPECS / "wang2018.attn")
    t = train.train(mod, cm, src, steps=0, cache=None)
    assert t.heldout.classes == 1 and t.heldout.chance == 0 and t.heldout.loss == 0
    assert not t.learned and "nothing to learn" in t.heldout.chance_text
