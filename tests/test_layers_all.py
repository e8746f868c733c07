"""Every attention statement of specs/ and examples/ that a drop-in layer accepts
(`taxcompile compile SPEC --layer NAME`): the layer constructs its attention class with the
arguments the full model gives the same statement's module, and runs forward and backward
(test_layer_oracle.py: it computes what the statement computes inside its model).
One constructor list (mechanisms.constructor) builds both calls; before it, Shaw et al.'s
relative term lost its `clip` in the layer (TypeError) and the attention dropout its value.

Budget: about 20 s of CPU on a busy 2-core machine, torch's import included (the full
models are built on the meta device, the layers at their spec's sizes)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from taxcompile import checks, codegen, pipeline  # noqa: E402
from taxcompile.codegen import layer  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

SOURCES = sorted([*(ROOT / "specs").glob("*.attn"), *(ROOT / "examples").glob("*.attn")])


@functools.lru_cache(maxsize=None)
def load(f: Path):
    return pipeline.load(f)


def statements():
    """(spec file, model name, statement name) of every attention statement, hops once."""
    out = []
    for f in SOURCES:
        for cm in load(f).models:
            seen = set()
            for a in cm.model.attentions:
                name = a.hop.template if a.hop else a.id
                if name not in seen:
                    seen.add(name)
                    out.append((f, cm.model.name, name))
    return out


STATEMENTS = [pytest.param(f, model, name, id=f"{f.stem}:{model}:{name}")
              for f, model, name in statements()]
# What a drop-in layer refuses (codegen/layer.py): co-attention, a mask or graph input,
# another module's weights, keys or a query built by other operators than project(), a
# node the alignment reads (reinforced's `policy = s`).
REFUSED = ("reads an affinity matrix", "reads its mask input", "reads its graph input",
           "uses the weights of", "a drop-in layer takes a feature or project(feature)",
           "in its alignment")


def layer_text(f: Path, model: str, name: str) -> str | None:
    """The layer file of a statement, None where the layer refuses it (for a known reason)."""
    cs = load(f)
    cm = next(m for m in cs.models if m.model.name == model)
    try:
        return layer.generate(cs, cm, name, str(f.relative_to(ROOT)))
    except layer.LayerError as e:
        assert any(r in str(e) for r in REFUSED), str(e)
        return None


class Recorder:
    """Records the keyword arguments each instance of the classes named ``names`` of a
    generated module was constructed with."""

    def __init__(self, module, names):
        self.calls: dict[int, dict] = {}
        for name in names:
            cls = getattr(module, name)
            init = cls.__init__

            def wrapped(obj, *args, _init=init, **kwargs):
                assert not args, "the generated code passes constructor arguments by name"
                self.calls[id(obj)] = kwargs
                _init(obj, **kwargs)

            cls.__init__ = wrapped


def attention_classes(module) -> list[str]:
    return [n for n, c in vars(module).items() if isinstance(c, type)
            and issubclass(c, torch.nn.Module) and n.endswith("Attention")]


_MODELS: dict = {}


def full_model(f: Path, model: str):
    """The full model's module, its instance on the meta device and the recorded
    constructor arguments of its attention modules (built once per model)."""
    key = (f, model)
    if key not in _MODELS:
        cs = load(f)
        cm = next(m for m in cs.models if m.model.name == model)
        mod = load_module(codegen.generate(cs, cm, str(f)), f"full_{f.stem}_{model}")
        rec = Recorder(mod, attention_classes(mod))
        with torch.device("meta"):
            net = mod.Model(mod.Config())
        _MODELS[key] = (mod, net, rec)
    return _MODELS[key]


def module_of(net, n, cls_name: str):
    """The full model's module of statement ``n``: named after it (``self`` is
    ``self_attn``), the first hop of a repeat."""
    want = n.name
    found = []
    for path, m in net.named_modules():
        last = path.rsplit(".", 1)[-1]
        if type(m).__name__ == cls_name and (last == want or last.startswith(want + "_")):
            if n.hop is None or re.split(r"[.\[]", n.hop.block)[0] in path.split("."):
                found.append(m)
    assert found, f"no module of class {cls_name} for `{n.id}` in the full model"
    return found[0]


def inputs(lay, n, roles, B: int = 2):
    cfg = lay.cfg
    Lk = getattr(cfg, "n_keys", 5)
    Lq = getattr(cfg, "capsules", Lk) if n.capsules else Lk
    g = torch.Generator().manual_seed(0)
    q = None if roles[0].kind == "none" or roles[0].own else \
        torch.randn(B, Lq, cfg.d_q, generator=g)
    k = torch.randn(B, Lk, cfg.d_k, generator=g)
    v = None if roles[2].kind == "keys" else torch.randn(B, Lk, cfg.d_v, generator=g)
    mask = torch.ones(B, Lk, dtype=torch.bool)
    mask[-1, -1] = False
    return q, k, v, mask


def test_the_layer_takes_most_statements():
    """The statements it refuses read an affinity matrix, a mask or graph input, another
    module's weights, or keys and queries built by other operators (test_layers.py)."""
    names = {p.id for p in STATEMENTS if layer_text(*p.values) is not None}
    assert len(names) >= 50, len(names)
    for must in ("shaw2018_relative:encoder:encoder.self", "xu2015:soft:att", "xu2015:hard:att",
                 "rotary:rotary:decoder.self", "alibi:alibi:decoder.self",
                 "see2017_coverage:coverage:att", "yang2018_localness:encoder:lower.self"):
        assert must in names, (must, sorted(names))


@pytest.mark.parametrize("f, model, name", STATEMENTS)
def test_every_layer_is_the_models_module(f, model, name):
    """The same class, built with the same constructor arguments, and it trains (forward and
    backward with dropout on); that it computes what the statement computes inside its
    model is test_layer_oracle.py's."""
    text = layer_text(f, model, name)
    if text is None:  # refused, for one of the reasons it states
        return
    cs = load(f)
    cm = next(m for m in cs.models if m.model.name == model)
    n = layer.find(cm, name)
    mod = load_module(text, f"layer_all_{f.stem}_{model}_{name.replace('.', '_')}")
    lrec = Recorder(mod, attention_classes(mod))
    torch.manual_seed(0)
    lay = mod.Layer(mod.Config())
    full, net, frec = full_model(f, model)
    cls_name = type(lay.attn).__name__
    theirs = module_of(net, n, cls_name)
    # the same constructor arguments as the model's module (clip, dropout, window, mask, …)
    assert lrec.calls[id(lay.attn)] == frec.calls[id(theirs)]
    assert getattr(lay.attn, "dropout", None) == getattr(theirs, "dropout", None)

    # forward and backward in training (dropout on)
    roles = [layer.role(cm, n, r, e) for r, e in (("q", n.query), ("k", n.keys),
                                                  ("v", n.values))]
    q, k, v, mask = inputs(lay, n, roles)
    lay.train()
    given = [x.requires_grad_() for x in (q, k, v) if x is not None]
    c = lay(q, k, v, mask=mask)
    assert torch.isfinite(c).all()
    c.square().sum().backward()
    grads = [p.grad for p in (*lay.parameters(), *given) if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


# a layer-able statement with attention dropout 0.1
DROPOUT_SPEC = """paper t { cite = "T" }
model m {
    input x: sequence[L, 16]
    attention att { query = project(x)  keys = project(x)  values = project(x)
                    score = scaled_multiplicative  heads = 2  dropout = 0.1 }
    output y = classify(mean(att), 3)
}
"""


def test_layer_keeps_the_attention_dropout(tmp_path):
    """Issue 24: `--layer` dropped the statement's attention dropout (the layer's attention
    had dropout 0 and its Config no field for it)."""
    text = DROPOUT_SPEC
    cs = pipeline.load_text(text, "t.attn")
    cm = cs.models[0]
    mod = load_module(layer.generate(cs, cm, "att", "t.attn"), "layer_dropout")
    lay = mod.Layer(mod.Config())
    assert mod.Config().dropout == 0.1
    assert lay.attn.dropout == 0.1
    full = load_module(codegen.generate(cs, cm, "t.attn"), "full_dropout")
    assert full.Model(full.Config()).att.dropout == 0.1


def test_a_decoder_query_prev_is_taken_as_given():
    """Issue 24: `--layer` refused every decoder attention whose query is `prev(s)`; the
    layer takes the query tensor as given (s_(t-1) for each target position)."""
    cs = pipeline.load(ROOT / "specs" / "xu2015.attn")
    cm = cs.models[0]
    n = layer.find(cm, "att")
    assert isinstance(n.query, checks.ir.Op) and n.query.fn == "prev"
    mod = load_module(layer.generate(cs, cm, "att", "specs/xu2015.attn"), "layer_prev")
    cfg = mod.Config()
    lay = mod.Layer(cfg).eval()
    s = torch.randn(2, 3, cfg.d_q)
    feats = torch.randn(2, 7, cfg.d_k)
    c = lay(s, feats, None)  # the values are the keys
    assert isinstance(c, torch.Tensor) and c.shape[:2] == (2, 3)
