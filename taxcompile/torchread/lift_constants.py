"""Values `lift` reads from a captured graph's constants: the subgraph behind a node that
reads no input (parameters, buffers, `arange`s and the ops between them) evaluated on the
module's own tensors. From them, the rotary base behind a rotation's angles (its
frequencies exactly base^(-2f/d) for one base) and whether ALiBi slopes are the standard
2^(-8h/H). Anything else (an input, an op that fails, a tensor the module does not hold)
is no value: the caller writes the registry's default and says so."""
from __future__ import annotations

import math

import torch
from torch.fx.node import map_arg

MAX_NODES = 300  # nodes evaluated behind one constant
RTOL = 2e-5  # float32 frequencies against base^(-f/n): a few ulps, far below a wrong base


class _Unknown(Exception):
    """A node whose value cannot be had from the module's own tensors (an input, an op that
    fails): the caller falls back to the registry's default."""


class Constants:
    """The module's tensors by graph node name (``params``: placeholder or get_attr target ->
    the parameter's or buffer's name, ``capture.Captured.params``)."""

    def __init__(self, module, params: dict):
        held = dict(module.named_parameters())
        held.update(module.named_buffers())
        self._held = held
        self._names = params

    def tensor(self, node):
        name = self._names.get(node.name) or self._names.get(node.target) or \
            (node.target if node.op == "get_attr" else None)
        t = None
        if isinstance(name, str):  # the capture may wrap the module: `inner.NAME`
            parts = name.split(".")
            t = next((self._held[x] for i in range(len(parts))
                      if (x := ".".join(parts[i:])) in self._held), None)
        if t is None:
            raise _Unknown(node.name)
        return t.detach()

    def value(self, node):
        """``node``'s value, or None where it is not a constant of the module."""
        memo: dict = {}
        try:
            with torch.no_grad():
                return self._eval(node, memo)
        except _Unknown:
            return None

    def _eval(self, node, memo):
        if node in memo:
            return memo[node]
        if len(memo) > MAX_NODES:
            raise _Unknown("too deep")
        memo[node] = None
        if node.op in ("placeholder", "get_attr"):
            v = self.tensor(node)
        elif node.op == "call_function":
            args = map_arg(node.args, lambda n: self._eval(n, memo))
            kwargs = map_arg(node.kwargs, lambda n: self._eval(n, memo))
            try:
                v = node.target(*args, **kwargs)
            except Exception as e:  # an op these values do not fit: no constant
                raise _Unknown(node.name) from e
        else:
            raise _Unknown(node.name)
        memo[node] = v
        return v


def rotary_base(angles) -> float | None:
    """The base of a rotation's angle table (positions on the second-to-last axis, t x
    theta_f at position t): its frequencies (position 1 minus position 0), each repeated
    as often (half-split or interleaved pairs), are base^(-2f/d) = base^(-f/n) for n
    frequencies, all of them, for one base; None otherwise."""
    if not isinstance(angles, torch.Tensor) or angles.dim() < 2 or angles.shape[-2] < 2:
        return None
    a = angles.to(torch.float64).reshape(-1, angles.shape[-2], angles.shape[-1])[0]
    step = a[1] - a[0]
    freqs, counts = torch.unique(step, sorted=True, return_counts=True)
    freqs = freqs.flip(0)
    n = len(freqs)
    if n < 2 or len(set(counts.tolist())) != 1 or freqs[-1] <= 0:
        return None
    f = torch.arange(n, dtype=torch.float64)
    fit = math.exp(-n * float((f * freqs.log()).sum() / (f * f).sum()))  # least squares
    for digits in (4, 6, 9):
        base = float(f"{fit:.{digits}g}")
        if torch.allclose(freqs, base ** (-f / n), rtol=RTOL, atol=0):
            return base
    return None


def standard_slopes(slopes, heads: int) -> bool:
    """Whether ``slopes`` (one per head, either sign) are ALiBi's 2^(-8h/H), h = 1 … H."""
    if not isinstance(slopes, torch.Tensor) or slopes.numel() != heads:
        return False
    want = torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)],
                        dtype=torch.float64)
    return torch.allclose(slopes.detach().to(torch.float64).abs().flatten(), want,
                          rtol=RTOL, atol=0)
