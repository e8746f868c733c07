"""What an operator family's plan rule (``taxcompile/operators/``) writes code with, handed
to it as ``p.kit`` by the planner: the operator modules sit below both the checker and
codegen, so they import neither and receive what they build with."""

from __future__ import annotations

from .acts import act_call, act_module, applied, widened
from .expr import BATCH
from .features import local, op_module, resized, same
from .frame import Var
from .imports import F, MATH
from .names import PRODUCT, SUM, Dim, atom
from .plan import LossPlan

__all__ = ["BATCH", "Dim", "F", "LossPlan", "MATH", "PRODUCT", "SUM", "Var", "act_call",
           "act_module", "applied", "atom", "local", "op_module", "resized", "same", "widened"]
