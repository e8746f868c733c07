"""Drop-in layers (`taxcompile compile SPEC --layer NAME`): one attention statement as a
standalone nn.Module. Checked against equations written here, against the same module
inside the full model (weights copied), for its mask convention, and the README's
"Using one attention layer in your own model" snippet is run as written."""

from __future__ import annotations

import math
import re
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, SPECS  # noqa: E402
from taxcompile import cli, codegen, files, pipeline  # noqa: E402
from taxcompile.codegen import layer  # noqa: E402
from taxcompile.run import load_module  # noqa: E402
from test_codegen_specs import assert_clean_module  # noqa: E402

GOLDEN = {  # committed layer files: (spec, model, statement)
    "vaswani2017_transformer_encoder_self.py": ("vaswani2017", "transformer", "encoder.self"),
    "yang2016_han_word.py": ("yang2016", "han", "word"),
    "lin2017_self_attentive_M.py": ("lin2017", "self_attentive", "M"),
}
F = torch.nn.functional


def make(stem: str, model: str, name: str, tag: str = ""):
    cs = pipeline.load(SPECS / f"{stem}.attn")
    cm = next(m for m in cs.models if m.model.name == model)
    text = layer.generate(cs, cm, name, f"specs/{stem}.attn")
    return load_module(text, f"layer_{stem}_{model}_{name.replace('.', '_')}{tag}"), text


@pytest.mark.parametrize("file", sorted(GOLDEN))
def test_committed_layers_are_up_to_date(file, monkeypatch):
    stem, model, name = GOLDEN[file]
    monkeypatch.chdir(ROOT)
    path = ROOT / "generated" / "layers" / file
    assert path.read_text(encoding="utf-8") == make(stem, model, name)[1], \
        f"regenerate: taxcompile compile specs/{stem}.attn --layer {name} -o {path}"
    assert cli.main(["compile", f"specs/{stem}.attn", "--layer", name, "--model", model,
                     "-o", str(path), "--check"]) == 0
    assert_clean_module(path.read_text(encoding="utf-8"), str(path))  # torch only, no I/O
    assert max(map(len, path.read_text(encoding="utf-8").splitlines())) <= 100


def reference_mha(x, wq, wk, wv, wo, bo, heads, keep):
    """Scaled dot-product multi-head attention (eq. 35, 38-40), written out."""
    B, L, d = x.shape
    q, k, v = (t.view(B, L, heads, -1).transpose(1, 2) for t in (x @ wq.T, x @ wk.T, x @ wv.T))
    e = q @ k.transpose(-1, -2) / math.sqrt(d // heads)  # (B, H, L, L)
    e = e.masked_fill(~keep[:, None, None, :], float("-inf"))
    a = e.softmax(-1)
    c = (a @ v).transpose(1, 2).reshape(B, L, d)
    return c @ wo.T + bo, a


def test_multi_head_layer_against_the_equations():
    mod, _ = make("vaswani2017", "transformer", "encoder.self")
    cfg = mod.Config(d_q=16, d_q_proj=16, d_k=16, d_k_proj=16, d_v=16, d_v_proj=16, heads=4)
    torch.manual_seed(0)
    lay = mod.Layer(cfg)
    x = torch.randn(3, 6, 16)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])  # Hugging Face style
    want_c, want_a = reference_mha(x, lay.q_proj.weight, lay.k_proj.weight, lay.v_proj.weight,
                                   lay.attn.out.weight, lay.attn.out.bias, 4, mask.bool())
    c, a = lay(x, x, x, mask=mask, need_weights=True)
    torch.testing.assert_close(c, want_c, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a, want_a, rtol=1e-5, atol=1e-6)
    # the fast path (no weights asked for) and a bool mask give the same context
    torch.testing.assert_close(lay(x, x, x, mask=mask.bool()), want_c, rtol=1e-5, atol=1e-5)


def test_the_layer_is_the_module_inside_the_model():
    """The encoder's first self-attention of the full Transformer, weights copied: the same
    output from the same input."""
    full = load_module(codegen.generate(*(lambda cs: (cs, cs.models[0]))(
        pipeline.load(SPECS / "vaswani2017.attn")), "specs/vaswani2017.attn"), "layer_full_vas")
    mod, _ = make("vaswani2017", "transformer", "encoder.self", "_2")
    torch.manual_seed(1)
    fcfg = full.Config.tiny()
    model = full.Model(fcfg).eval()
    d = fcfg.d_model
    lay = mod.Layer(mod.Config(d_q=d, d_q_proj=d, d_k=d, d_k_proj=d, d_v=d, d_v_proj=d,
                               heads=fcfg.heads)).eval()
    enc = model.encoder[0]
    wq, wk, wv = enc.self_qkv_proj.weight.chunk(3, 0)
    with torch.no_grad():
        for proj, w in ((lay.q_proj, wq), (lay.k_proj, wk), (lay.v_proj, wv)):
            proj.weight.copy_(w)
    lay.attn.load_state_dict(enc.self_attn.state_dict())
    seen = {}
    enc.register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))  # returns None
    enc.self_attn.register_forward_hook(lambda m, args, out: seen.update(c=out[0]))
    inputs = full.example_inputs(cfg=fcfg)
    with torch.no_grad():
        model(**inputs)
        c = lay(seen["x"], seen["x"], seen["x"], mask=inputs["src_mask"])
    torch.testing.assert_close(c, seen["c"], rtol=1e-5, atol=1e-6)


def test_learned_query_additive_layer_against_the_equations_and_the_model():
    """HAN's word attention: u = tanh(W h + b), a = softmax(u^T u_w), s = sum a h."""
    mod, _ = make("yang2016", "han", "word")
    cfg = mod.Config(d_q=8, d_k=6, heads=1, d_w=8)
    torch.manual_seed(2)
    lay = mod.Layer(cfg)
    h = torch.randn(2, 5, 6)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    at = lay.attn
    u = torch.tanh(lay.query @ at.W1[0] + h @ at.W2[0] + at.b[0])  # (B, L, d_w)
    e = (u @ at.w[0]).masked_fill(~mask, float("-inf"))
    a = e.softmax(-1)
    c, got_a = lay(None, h, mask=mask, need_weights=True)
    torch.testing.assert_close(c[:, 0], (a.unsqueeze(-1) * h).sum(1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_a[:, 0, 0], a, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=re.escape("`q`: this layer's query is its own learned "
                                                   "parameter `query` (the spec's learned(…), "
                                                   "eq. 34): pass q=None")):
        lay(h, h)


def test_layer_masks_follow_the_convention():
    mod, _ = make("vaswani2017", "transformer", "encoder.self", "_3")
    lay = mod.Layer(mod.Config(16, 16, 16, 16, 16, 16, 4))
    x = torch.randn(2, 4, 16)
    with pytest.raises(ValueError, match=re.escape("True/1 = attend, False/0 = masked: the "
                                                   "inverse of nn.MultiheadAttention's "
                                                   "key_padding_mask and attn_mask")):
        lay(x, x, x, mask=torch.ones(2, 4))
    with pytest.warns(UserWarning, match="`mask` keeps no key of example 1: is it inverted"):
        lay(x, x, x, mask=torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0]]))
    with pytest.raises(ValueError, match=r"`k`: expected a tensor of shape \(B, Lk, d_k\) with "
                                         r"16 features, got \(2, 4, 8\)"):
        lay(x, x[..., :8], x)


def test_statements_that_cannot_be_layers(capsys):
    assert cli.main(["compile", str(SPECS / "lu2016.attn"), "--layer", "q_w", "-o",
                     "/nonexistent/x.py"]) == 2
    assert "reads an affinity matrix (co-attention" in capsys.readouterr().err
    assert cli.main(["compile", str(SPECS / "vaswani2017.attn"), "--layer", "self", "-o",
                     "/nonexistent/x.py"]) == 2
    err = capsys.readouterr().err
    assert "`self` names 2 attention statements of model `transformer`: say which, one of " \
           "decoder.self, encoder.self" in err
    assert cli.main(["compile", str(SPECS / "vaswani2017.attn"), "--layer", "nope", "-o",
                     "/nonexistent/x.py"]) == 2
    assert "has no attention statement `nope`" in capsys.readouterr().err


def test_the_readme_snippet_runs(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Using one attention layer in your own model", 1)[1]
    shell = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    args = shell.split()
    assert args[:2] == ["taxcompile", "compile"]
    monkeypatch.chdir(ROOT)
    out = tmp_path / args[args.index("-o") + 1]
    args[args.index("-o") + 1] = str(out)
    assert cli.main(args[1:]) == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(out.stem, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(code, "README.md", "exec"), {})


def test_compile_check_covers_the_committed_layers(tmp_path, monkeypatch, capsys):
    """`compile specs/ --check` compares generated/layers/ with the specs too (each file's
    first line names its spec, its docstring the statement and model); a plain compile
    repairs a stale layer; a layer whose statement is gone is named."""
    import shutil

    monkeypatch.chdir(ROOT)
    out = tmp_path / "generated"
    shutil.copytree(ROOT / "generated", out)
    layer_file = out / "layers" / "yang2016_han_word.py"
    good = layer_file.read_text(encoding="utf-8")
    assert cli.main(["compile", "specs/", "-o", str(out), "--check"]) == 0
    # what an older spec made taxcompile write: sealed (its header hashes the rest)
    head, rest = good.split("\n", 1)
    unsealed = head.rsplit(files.SEAL, 1)[0] + "\n" + rest.replace("d_w: int = 100",
                                                                   "d_w: int = 99")
    layer_file.write_text(files.seal(unsealed), encoding="utf-8")
    assert good != layer_file.read_text(encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["compile", "specs/", "-o", str(out), "--check"]) == 1
    assert capsys.readouterr().err == (f"{layer_file}: differs from its spec (run `taxcompile "
                                       f"compile specs/ -o {out}`)\n")
    assert cli.main(["compile", "specs/", "-o", str(out)]) == 0
    assert f"wrote {layer_file} (a drop-in layer of these specs)" in capsys.readouterr().out
    assert layer_file.read_text(encoding="utf-8") == good
    layer_file.write_text(good.replace("`word` of model `han`", "`gone` of model `han`"),
                          encoding="utf-8")
    assert cli.main(["compile", "specs/", "-o", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"{layer_file}: specs/yang2016.attn gives no such layer any more: model `han` has " \
        "no attention statement `gone`" in err, err
