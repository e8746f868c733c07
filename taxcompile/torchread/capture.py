"""Capture a model's graph: torch.export at ATen level (decomposed), else torch.fx's
symbolic trace. The answer says which was used."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch

from . import tables


def _tensors(x) -> list:
    """The tensors of a model's output, in order (dataclasses, dicts, tuples): export needs
    outputs it knows how to flatten."""
    if isinstance(x, torch.Tensor):
        return [x]
    if dataclasses.is_dataclass(x):
        x = [getattr(x, f.name) for f in dataclasses.fields(x)]
    elif isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


class _Flat(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return tuple(_tensors(self.inner(*args, **kwargs)))


@dataclass
class Captured:
    graph: torch.fx.Graph
    method: str  # "torch.export" or "torch.fx"
    params: dict  # placeholder or get_attr target -> parameter/buffer name
    note: str = ""


def _split(example_inputs) -> tuple[tuple, dict]:
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    return tuple(example_inputs), {}


@contextlib.contextmanager
def _no_distribution_checks():
    """torch.distributions checks its arguments' values (probabilities sum to one) with a
    Python `if` on a tensor, which no tracer follows; a check computes nothing the model
    returns, so it is switched off while capturing (`Categorical(p).sample()`)."""
    Dist = torch.distributions.Distribution
    before = Dist._validate_args
    Dist.set_default_validate_args(False)
    try:
        yield
    finally:
        Dist.set_default_validate_args(before)


def capture(module: torch.nn.Module, example_inputs) -> Captured:
    with _no_distribution_checks():
        return _capture(module, example_inputs)


def _capture(module: torch.nn.Module, example_inputs) -> Captured:
    args, kwargs = _split(example_inputs)
    flat = _Flat(module).eval()
    try:
        ep = torch.export.export(flat, args, kwargs, strict=False).run_decompositions()
    except Exception as e:  # export refuses data-dependent control flow and more: try fx
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        got = _make_fx(flat, args, kwargs)
        if got is not None:
            gm, n_params = got
            # the traced function's first inputs are the parameters and buffers
            ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
            _mark(ph[:n_params], n_params, flat)
            tables.mark_inputs(ph[n_params:], (args, kwargs))
            ph = [n.name for n in ph[:n_params]]
            return Captured(gm.graph, "make_fx", dict.fromkeys(ph, ""), note=f"torch.export failed ({why}); "
                            "traced with real inputs, so data-dependent sizes are fixed")
        try:
            gm = torch.fx.symbolic_trace(module)
        except Exception as e2:
            raise CaptureError(f"neither torch.export ({why}) nor torch.fx "
                               f"({type(e2).__name__}) could capture the model") from None
        held = {**dict(module.named_buffers()), **{
            k: v for k, v in vars(module).items() if isinstance(v, torch.Tensor)}}
        for n in gm.graph.nodes:
            if n.op == "get_attr" and n.target in held:
                tables.mark(n, held[n.target])
        return Captured(gm.graph, "torch.fx", {}, note=f"torch.export failed ({why})")
    sig = ep.graph_signature
    # lifted tensor constants (a module's torch.tensor(...) attributes) are no user input
    params = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
              **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
    # buffers' and constants' values (no parameter's: learned), read where a table matters
    held = {**sig.inputs_to_buffers, **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
    values = {**ep.state_dict, **ep.constants}
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name in held:
            tables.mark(n, values.get(held[n.name]))
    users = set(sig.user_inputs)
    tables.mark_inputs([n for n in ep.graph.nodes if n.name in users], (args, kwargs))
    return Captured(ep.graph, "torch.export", params)


def _mark(placeholders, n_params, flat) -> None:
    """Mark make_fx's leading placeholders (the parameters, then the buffers, in the order
    ``_make_fx`` passed them) that are buffers with their values."""
    bufs = list(flat.named_buffers())
    n_learned = n_params - len(bufs)
    for node, (_, value) in zip(placeholders[n_learned:], bufs):
        tables.mark(node, value)


def _make_fx(flat, args, kwargs):
    """An ATen graph traced by running the model on its example inputs (parameters become
    get_attr nodes): it follows Python control flow for these inputs only."""
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        params = dict(flat.named_parameters())
        params.update(flat.named_buffers())

        def run(p, a, k):
            return torch.func.functional_call(flat, p, a, k)

        gm = make_fx(run, tracing_mode="real", pre_dispatch=False)(params, args, kwargs)
    except Exception:
        return None
    return gm, len(params)


class CaptureError(Exception):
    pass
