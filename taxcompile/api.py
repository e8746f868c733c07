"""The Python API: a spec (a path or its text) to a model, its Table III row, its diagram.

    import taxcompile
    m = taxcompile.build("specs/vaswani2017.attn", d_model=64, heads=4, layers=2)
    m.cfg                                   # the Config it was built with
    taxcompile.classify("specs/vaswani2017.attn")  # the row, with its reasons
    taxcompile.diagram("specs/vaswani2017.attn")   # a graphviz.Digraph

``import taxcompile`` stays light: these functions are imported on first use (the
package's ``__getattr__``), and only ``build``/``module`` import torch (through the
generated source). Spec errors raise ``SpecError``, whose text is the located diagnostics
the command line prints. Models pickle (``torch.save``, ``copy.deepcopy``): see ``built``."""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from types import ModuleType

from . import built, pipeline


def _is_text(spec) -> bool:
    """Spec text rather than a path: a str with a newline or a brace (no path has those
    in practice, every spec has a brace)."""
    return isinstance(spec, str) and ("\n" in spec or "{" in spec)


def load(spec) -> tuple:
    """(CheckedSpec, the source name generated files cite) of a path or spec text."""
    from . import codegen

    if _is_text(spec):
        return pipeline.load_text(spec, "<string>"), "<string>"
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"spec: expected a path or spec text, got {type(spec).__name__}")
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(f"no such spec file: {path}" + (
            " (spec text needs its braces: `paper … { … }` and `model … { … }`)"
            if not path.suffix else ""))
    return pipeline.load(path), codegen.source_name(path)


def _choose(cs, model: str | None):
    names = [cm.model.name for cm in cs.models]
    if model is None:
        if len(names) == 1:
            return cs.models[0]
        raise ValueError(f"the spec has {len(names)} models ({', '.join(names)}): "
                         "choose one with model=NAME")
    for cm in cs.models:
        if cm.model.name == model:
            return cm
    raise ValueError(f"no model `{model}` in the spec; its models: {', '.join(names)}"
                     + _did_you_mean(model, names))


def _did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def module(spec, model: str | None = None) -> ModuleType:
    """The generated Python module of one model variant (``Config``, ``Model``,
    ``example_inputs``), imported from memory under a stable name (``built.load``);
    ``inspect.getsource`` shows its code. ``model``: the variant's name (needed when the
    spec has several)."""
    from . import codegen

    cs, source = load(spec)
    cm = _choose(cs, model)
    return built.load(codegen.generate(cs, cm, source), codegen.output_name(cs, cm)[:-3])


def config(mod: ModuleType, tiny: bool = False, **fields):
    """``mod.Config`` with ``fields`` overriding its defaults (``Config.tiny()``'s with
    ``tiny``); an unknown field is a TypeError that names the valid ones."""
    valid = [f.name for f in dataclasses.fields(mod.Config)]
    unknown = [k for k in fields if k not in valid]
    if unknown:
        k = unknown[0]
        raise TypeError(f"unknown Config field `{k}`{_did_you_mean(k, valid)}; the fields "
                        f"of this model's Config: {', '.join(valid)}")
    base = mod.Config.tiny() if tiny else mod.Config()
    return dataclasses.replace(base, **fields)


def build(spec, /, model: str | None = None, *, tiny: bool = False, **config_fields):
    """The model of ``spec`` (a ``.attn`` path, or spec text), as an ``nn.Module``.

    ``model``: which variant (needed when the spec has several). Keyword arguments
    override the generated ``Config``'s fields (``d_model=64``); ``tiny=True`` starts from
    ``Config.tiny()``, the same architecture at toy sizes. The Config used is ``m.cfg``,
    the generated module (``example_inputs``, ``Config``) ``module(spec, model)``.

    Built models pickle: ``torch.save(m, f)`` and ``torch.load(f, weights_only=False)``,
    in this process or a fresh one; ``copy.deepcopy(m)``. Loading such a file runs the
    generated source stored in it (``built``): load only files you trust."""
    mod = module(spec, model)
    return mod.Model(config(mod, tiny, **config_fields))


def _is_module(obj) -> bool:
    """An ``nn.Module``, told without importing torch (the front end must not)."""
    return any(c.__module__ == "torch.nn.modules.module" and c.__name__ == "Module"
               for c in type(obj).__mro__)


def classify(spec, model=None, reading: str = "table"):
    """The Table III row of ``spec``, every value with its reasons: a ``PaperRow`` (the
    paper's variants merged: ``.row()``, ``.variants``), or with ``model`` that variant's
    ``Classification`` (``.row()``, ``.cells[dim].values``: value -> reasons). Both
    display as a Markdown table in Jupyter. ``reading``: "table" or "text" (see the
    README's --reading). Given an ``nn.Module`` and its example inputs instead,
    ``classify(module, example_inputs)`` reads its attentions from the captured graph
    (docs/classify-code.md) and returns a ``CodeClassification``."""
    from . import classification

    if type(spec).__module__.startswith("torch") or _is_module(spec):
        from .torchread.report import classify_module

        # ``model`` is then the example inputs: classify(module, example_inputs)
        return classify_module(spec, model)
    if reading not in classification.READINGS:
        raise ValueError(f"reading must be one of {', '.join(classification.READINGS)}, "
                         f"got {reading!r}")
    cs, _ = load(spec)
    if model is None:
        return pipeline.classify_spec(cs, reading)
    return classification.classify_model(_choose(cs, model), reading)


def diagram(spec, model: str | None = None):
    """The spec's diagram as a ``graphviz.Digraph`` (every variant, or ``model`` only):
    ``.source`` is its DOT text, ``.render()``/``.pipe()`` draw it with graphviz's ``dot``,
    and Jupyter shows it as SVG (``_repr_svg_``)."""
    from . import diagrams

    cs, _ = load(spec)
    if model is not None:
        _choose(cs, model)
    return diagrams.build(cs, None if model is None else [model])

