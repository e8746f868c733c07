"""An operator's record (``OpInfo``), written in the parameter vocabulary of ``params.py``
(``P``, the activations, ``SHARE``, …, re-exported here for the operator families beside
this module). Imports nothing of the stages that read the records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..params import (  # noqa: F401  (the vocabulary the operator families write in)
    ACTIVATIONS, ACTS, GATED_ACTS, SAME_WIDTH_ACTS, SHARE, TIE, WIDTH_ACTS, Act, P, Scalar,
    act, enum, node, pint)


@dataclass
class OpInfo:
    name: str
    params: tuple[P, ...]
    label: str  # how a diagram names it
    infix: bool = False  # written as an operator (``a + b``), not a call
    shape: Callable | None = None  # (checker, op, arg shapes, node id) -> Shape | None
    plan: Callable | None = None  # (planner, op, arg vars, node) -> codegen Var


def op(name: str, *params: P, label: str | None = None, infix: bool = False,
       shape: Callable | None = None, plan: Callable | None = None) -> OpInfo:
    """One operator's record; an operator family (``taxcompile/operators/``) gives its own
    records their shape and plan rules here."""
    return OpInfo(name, params, label or name, infix, shape, plan)
