"""Helpers shared by the tests of generated PyTorch code (imported only by tests that
have already skipped when torch is missing)."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import sys
import textwrap

import pytest
import torch

from taxcompile import codegen, pipeline
from taxcompile.run import load_module

_ids = itertools.count()


@contextlib.contextmanager
def fast_cpu():
    """Subnormal floats make some training steps of the deeper models 100x slower on CPU:
    flush them to zero, on one thread (the flag is per thread; these test sizes are too
    small to gain from more, and on a busy machine a second thread makes each op wait)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    supported = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if supported:
            torch.set_flush_denormal(False)
        torch.set_num_threads(threads)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A test module's tests under ``fast_cpu`` (import it into the module to use it)."""
    with fast_cpu():
        yield


def inline_fixture(tag: str, header: str):
    """A module-scoped fixture ``gen``: ``inline_builder`` over a fresh folder, the spec
    ``header`` in front of every body."""

    @pytest.fixture(scope="module")
    def gen(tmp_path_factory):
        return inline_builder(tmp_path_factory.mktemp(tag), header, f"_taxcompile_{tag}")

    return gen


def build_model(text: str, name: str, model: int = 0, path: str = "t.attn"):
    """The imported generated module of model ``model`` of spec ``text``."""
    cs = pipeline.load_text(text, path)
    return load_module(codegen.generate(cs, cs.models[model], path), name)


def inline_builder(root, header: str, prefix: str):
    """build(body, model=None) -> the imported generated module of one model of the spec
    `header + body`, compiled once per body into `root`."""
    cache: dict = {}

    def build(body: str, model: str | None = None):
        key = (body, model)
        if key not in cache:
            cs = pipeline.load_text(header + textwrap.dedent(body), "t.attn")
            cm = cs.models[0] if model is None else next(m for m in cs.models if m.model.name == model)
            src = codegen.generate(cs, cm, "t.attn")
            name = f"{prefix}_{next(_ids)}"
            path = root / f"{name}.py"
            path.write_text(src, encoding="utf-8")
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod  # the file defines dataclasses
            spec.loader.exec_module(mod)
            cache[key] = mod
        return cache[key]

    return build


# a two-layer causal decoder LM, its attention's position term or other fields as {mods}
LM = """
model lm {{
    input tokens: tokens[T] (vocab = 30, autoregressive)
    feature x = embed(tokens, 16)
    repeat decoder 2 {{
        attention self {{ query = project(x)  keys = project(x)  values = project(x)
                         score = scaled_multiplicative  heads = 2  mask = causal  {mods} }}
        update x = norm(x + self)
    }}
    output logits = classify(x, 30)
}}
"""


def peaked(mod, seed: int = 1, scale: float = 0.5):
    """A float64 ``mod.Model`` in eval mode whose parameters are drawn large (N(0, scale²)
    from ``seed``): its next-token distributions are peaked and differ from step to step,
    so a decoding check compares distinct tokens."""
    torch.manual_seed(0)
    m = mod.Model(mod.Config())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return m.to(torch.float64).eval()


def moved(m, scale: float = 0.2):
    """``m`` with every parameter moved by N(0, scale²) from its start value, in place: norms'
    gains and biases away from 1 and 0, where a wrong formula would not show."""
    with torch.no_grad():
        for p in m.parameters():
            p.add_(scale * torch.randn_like(p))
    return m


def compiled_recording(module):
    """``torch.compile(module, fullgraph=True)`` with a backend that keeps each traced
    graph's text (dynamo reset first): (the compiled module, the list of graphs)."""
    import torch
    graphs: list[str] = []

    def record(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(module, backend=record, fullgraph=True), graphs


def assert_generate_is_greedy(m, steps: int = 6, batch: int = 2, bos: int = 1):
    """``m.generate()`` (a KV cache, one step per token) writes the tokens of a greedy loop
    over full runs of the growing prefix; the end token is one the loop never writes, so
    the comparison covers every step. Returns the prefix (B, 1 + steps)."""
    import torch

    prefix = torch.full((batch, 1), bos, dtype=torch.long)
    for _ in range(steps):
        with torch.no_grad():
            nxt = m(tokens=prefix).output[:, -1].argmax(-1, keepdim=True)
        prefix = torch.cat([prefix, nxt], 1)
    eos = next(t for t in range(m.cfg.vocab) if t not in prefix)
    got = m.generate(batch_size=batch, max_len=steps, bos=bos, eos=eos)
    assert torch.equal(got, prefix[:, 1:])
    return prefix
