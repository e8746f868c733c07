"""The Python API (taxcompile.build / module / classify / diagram): a spec as a path or as
text to a model that pickles (torch.save / torch.load in a fresh process, deepcopy), config
overrides with a clear error, the row with its reasons, rich display, no torch for the
front end's calls."""

import copy
import io
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")

import taxcompile  # noqa: E402
from taxcompile import built  # noqa: E402
from taxcompile.diagnostics import SpecError  # noqa: E402

TEXT = textwrap.dedent("""\
    paper api_demo { cite = "Demo et al." }
    let d = 12
    model base {
        input src: tokens[S] (vocab = 30)
        feature h = embed(src, d)
        query u = learned(d)
        attention att { query = u  features = h  score = multiplicative  align = global }
        output label = classify(att, 3)
    }
    model other : base {
        attention att { query = u  features = h  score = scaled_multiplicative  align = global }
    }
""")
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(code: str, cwd=ROOT, timeout=240) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=ENV, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_done_when_the_issue_s_command_saves_and_a_fresh_process_loads(tmp_path):
    """The issue's command, then torch.load in another process that never built the model:
    the loaded model computes what the saved one did, on the same input."""
    saved = tmp_path / "m.pt"
    run("import taxcompile; m = taxcompile.build('specs/vaswani2017.attn', d_model=64, "
        "heads=4, layers=2, d_ff=64, vocab=100); import torch, io; torch.save(m, io.BytesIO())"
        f"\nm.eval(); torch.save(m, {str(saved)!r})"
        "\nx = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(1))"
        "\ny = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(2))"
        f"\ntorch.save(m(src=x, tgt=y).output, {str(saved) + '.out'!r})")
    out = run("import sys, torch\n"
              f"m = torch.load({str(saved)!r}, weights_only=False)\n"
              "assert not any(k.startswith('taxcompile.codegen') for k in sys.modules)\n"
              "x = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(1))\n"
              "y = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(2))\n"
              f"want = torch.load({str(saved) + '.out'!r})\n"
              "got = m(src=x, tgt=y).output\n"
              "print(type(m).__module__, m.cfg.d_model, m.training, float((got - want).abs().max()))",
              cwd=tmp_path)
    name, d_model, training, diff = out.split()
    assert name.startswith("taxcompile.built.vaswani2017_transformer_")
    assert (d_model, training, float(diff)) == ("64", "False", 0.0)


def test_build_from_text_with_overrides_pickles_and_deepcopies():
    m = taxcompile.build(TEXT, "base", d=5)
    assert m.cfg.d == 5 and m.u_q.shape[-1] == 5 and m.h_embed.weight.shape == (30, 5)
    torch.manual_seed(0)
    x = torch.randint(0, 30, (3, 6))
    m.eval()
    want = m(src=x).output
    # the same source is the same module: one set of classes, so pickling resolves them
    assert type(taxcompile.build(TEXT, "base")) is type(m)
    for clone in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):
        assert type(clone) is type(m) and clone.cfg == m.cfg
        torch.testing.assert_close(clone(src=x).output, want, rtol=0, atol=0)
        p_clone, p_m = next(clone.parameters()), next(m.parameters())
        assert p_clone.data_ptr() != p_m.data_ptr()  # a copy, not the same weights
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf, weights_only=False)(src=x).output, want,
                               rtol=0, atol=0)


def test_config_overrides_reach_the_model_and_tiny_starts_from_config_tiny():
    m = taxcompile.build(ROOT / "specs" / "vaswani2017.attn", tiny=True, vocab=77)
    tiny = type(m.cfg).tiny()
    assert m.cfg.vocab == 77 and m.cfg.d_model == tiny.d_model
    emb = [p for n, p in m.named_parameters() if p.dim() == 2 and p.shape[0] == 77]
    assert emb and all(p.shape[1] == tiny.d_model for p in emb)


def test_an_unknown_config_field_names_the_valid_ones():
    with pytest.raises(TypeError) as e:
        taxcompile.build("specs/vaswani2017.attn", d_modle=64)
    msg = str(e.value)
    assert "unknown Config field `d_modle`" in msg and "did you mean `d_model`?" in msg
    assert "d_model, heads, layers, d_ff, vocab, p_drop" in msg


def test_choosing_a_model_variant():
    with pytest.raises(ValueError, match=r"2 models \(base, other\): choose one with model="):
        taxcompile.build(TEXT)
    with pytest.raises(ValueError, match=r"no model `bsae`.*did you mean `base`"):
        taxcompile.build(TEXT, model="bsae")
    assert taxcompile.classify(TEXT, "other").row()["scoring"] == "Scaled Multiplicative"


def test_spec_errors_and_missing_files_are_clear():
    with pytest.raises(SpecError) as e:
        taxcompile.build(TEXT.replace("embed(src", "embedd(src"))
    assert "<string>:5:17: error: unknown feature model" in str(e.value)
    with pytest.raises(FileNotFoundError, match="no such spec file: specs/nope.attn"):
        taxcompile.build("specs/nope.attn")


def test_classify_returns_the_row_with_its_reasons_as_markdown():
    row = taxcompile.classify("specs/bahdanau2015.attn")
    assert row.row()["scoring"] == "Additive"
    md = row._repr_markdown_()
    assert md.startswith("**Bahdanau et al. [3]**")
    assert "| Scoring | Additive | Additive: attention `att` uses the additive score |" in md
    one = taxcompile.classify(TEXT, model="base")
    assert one.row()["scoring"] == "Multiplicative"
    assert "| Query type | Self-Attentive |" in one._repr_markdown_()
    # the stage module is still the module (callable as the API function)
    from taxcompile.pipeline import load_text

    assert taxcompile.classify.classify_model(load_text(TEXT).models[0]).row() == one.row()


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is not installed")
def test_diagram_is_a_digraph_that_jupyter_shows_as_svg():
    import graphviz

    d = taxcompile.diagram(TEXT, model="other")
    assert isinstance(d, graphviz.Digraph)
    assert "model other" in d.source and "model base" not in d.source
    svg = d._repr_svg_()
    assert "<svg" in svg and "att" in svg


def test_restore_refuses_a_source_that_does_not_match_its_name():
    with pytest.raises(ValueError, match="not a taxcompile-generated module"):
        built._restore("taxcompile.built.x_0123456789abcdef", "Model", "import os\n")
    with pytest.raises(ValueError, match="not a taxcompile-generated module"):
        built._restore("os", "Model", "")


def test_the_front_end_s_calls_import_no_torch():
    out = run("import sys, taxcompile\n"
              "r = taxcompile.classify('specs/bahdanau2015.attn')\n"
              "d = taxcompile.diagram('specs/bahdanau2015.attn')\n"
              "print(r.row()['scoring'], type(d).__name__, 'torch' in sys.modules)")
    assert out.split() == ["Additive", "Diagram", "False"]
