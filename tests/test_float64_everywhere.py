"""A float64 model computes in float64: every model of specs/ and examples/, at
``Config.tiny()``, converted with ``model.double()`` and given float64 inputs, runs its
forward pass without a single floating tensor of another dtype. A tensor made without the
module's dtype (``torch.arange``/``zeros``/``full`` without ``dtype=``, ``.float()``, a
constant table in float32) shows up here, where a comparison of outputs would let its
1e-7 error through.

The oracle is a ``TorchDispatchMode`` that sees the output of every ATen op of the forward
pass (in eval and in training mode), the model's parameters, buffers and inputs included;
PyTorch's default dtype stays float32, so whatever the generated code creates without a
dtype is float32 and is caught."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from taxcompile import codegen, pipeline  # noqa: E402
from torch_support import one_thread  # noqa: E402, F401

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")


def _variants():
    out = []
    for d in ("specs", "examples"):
        for path in sorted((ROOT / d).glob("*.attn")):
            cs = pipeline.load(path)
            for i, cm in enumerate(cs.models):
                out.append(pytest.param(path, i, id=codegen.output_name(cs, cm)[:-3]))
    return out


class FloatDtypes(TorchDispatchMode):
    """Records each op whose floating outputs are not ``want``, with the generated line
    that called it."""

    def __init__(self, want: torch.dtype, source: str):
        super().__init__()
        self.want, self.source, self.seen = want, source, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        bad = [t.dtype for t in outs if isinstance(t, torch.Tensor) and t.is_floating_point()
               and t.dtype != self.want]
        if bad:
            where = [f"line {f.lineno}: {f.line}" for f in traceback.extract_stack()
                     if f.filename == self.source]
            self.seen.append((str(func), bad, where[-1] if where else "?"))
        return out


@pytest.mark.parametrize("path, index", _variants())
def test_a_float64_model_makes_no_float32_tensor(path, index, tmp_path):
    cs = pipeline.load(path)
    cm = cs.models[index]
    name = codegen.output_name(cs, cm)[:-3]
    src = tmp_path / f"{name}.py"  # a file, so that the stack names the generated line
    src.write_text(codegen.generate(cs, cm, str(path)), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"_taxcompile_f64_{name}", src)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # the file defines dataclasses
    spec.loader.exec_module(mod)
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).double().eval()
    inputs = {k: x.double() if x.is_floating_point() else x
              for k, x in mod.example_inputs(cfg=cfg).items()}
    assert torch.get_default_dtype() == torch.float32  # what a dtype-less tensor gets
    mode = FloatDtypes(torch.float64, str(src))
    with torch.no_grad(), mode:
        out = model(**inputs, return_attention=True)
    with mode:  # training: dropout, sampled (hard) alignments, the paths kept for backward
        model.train()(**inputs)
    lines = dict.fromkeys(f"{w} ({f} -> {d[0]})" for f, d, w in mode.seen)
    assert not lines, "floating tensors not in float64:\n" + "\n".join(list(lines)[:12])
    assert all(w.dtype == torch.float64 for w in out.attention.values())


def test_beam_search_scores_in_the_dtype_of_the_log_probabilities(tmp_path):
    """The beam's scores and lengths take the dtype of what the decoder's step returns
    (float64 here), not the default float32."""
    path = ROOT / "specs" / "vaswani2017.attn"
    cs = pipeline.load(path)
    src = tmp_path / "beam.py"
    src.write_text(codegen.generate(cs, cs.models[0], str(path)), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("_taxcompile_f64_beam", src)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    table = torch.randn(7, 7, dtype=torch.float64).log_softmax(-1)  # next token | last token

    def step(tokens):
        return table[tokens[:, -1]]

    mode = FloatDtypes(torch.float64, str(src))
    with mode:
        out = mod.beam_search(step, lambda rows: None, torch.zeros(2, 1, dtype=torch.long),
                              3, 4, 6, 6, 1.0)
    assert out.shape[0] == 2
    lines = dict.fromkeys(w for _, _, w in mode.seen)
    assert not lines, "floating tensors not in float64:\n" + "\n".join(lines)


def _decoder_variants():
    return [v for v in _variants() if "generate" in (ROOT / v.values[0]).read_text()
            or "autoregressive" in (ROOT / v.values[0]).read_text()]


@pytest.mark.parametrize("path, index", _decoder_variants())
def test_generate_of_a_float64_model_decodes_in_float64(path, index, tmp_path):
    """generate()'s log-probabilities follow the model's dtype (at least float32): a
    float64 model's decoding steps make no float32 tensor."""
    cs = pipeline.load(path)
    cm = cs.models[index]
    name = codegen.output_name(cs, cm)[:-3]
    src = tmp_path / f"{name}.py"
    src.write_text(codegen.generate(cs, cm, str(path)), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"_taxcompile_f64g_{name}", src)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    if not hasattr(mod.Model, "generate"):
        pytest.skip("no generate(): not a decoder")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).double().eval()
    inputs = {k: x.double() if x.is_floating_point() else x
              for k, x in mod.example_inputs(cfg=cfg).items()}
    import inspect
    params = inspect.signature(model.generate).parameters
    kwargs = {k: x for k, x in inputs.items() if k in params}
    kwargs.update({k: v for k, v in (("bos", 0), ("eos", 1)) if k in params})
    mode = FloatDtypes(torch.float64, str(src))
    with torch.no_grad(), mode:
        model.generate(**kwargs, max_len=3)
    lines = dict.fromkeys(f"{w} ({f} -> {d[0]})" for f, d, w in mode.seen)
    assert not lines, "floating tensors not in float64:\n" + "\n".join(list(lines)[:12])
