"""Stage 4: cross-entry checks on the IR of each model (``taxcompile.checks`` re-exports it).

What is checked where:

- ``parser``: the grammar (a statement that does not parse).
- ``lower`` (stage 2): what one entry says on its own, given the names declared so far:
  identifiers and reserved names, each name bound once, references resolved in their
  scope, fields and operator parameters of the right type and range, mechanism and
  operator names known (with "did you mean"), variants merged and ``repeat`` unrolled. An
  error that needs no other entry's shape belongs there.
- ``module_checks.refusal``: combinations of one attention statement's fields that no
  equation defines and the generated code has no computation for (issue 23); decided from
  the statement alone, reported by ``attention`` once its inputs' shapes are known, so a
  statement that reads a broken node reports that node's error only.
- this package: what needs the model's graph or another node's shape, split by concern:
  ``scopes`` (references, ``feed``/``prev`` targets, cycles, the inputs' axes; it runs the
  other parts in order), ``features`` and ``values`` (each operator's shape rule),
  ``attention`` (a module's query, keys and values and its score, co-attention, heads),
  ``fits`` (masks, graph attention, score modifiers, local alignment), ``penalties`` (the
  loss terms and coverage), ``decoders`` (step-by-step models), ``recurrence`` (an
  attention inside a recurrence: ``state =``) and ``sharing`` (``share``,
  ``tie``). A mechanism's requirements are read off its record in
  ``taxcompile/mechanisms/``, never tested by its name.

Each part is a mixin of ``Checker``: they share the spec's ``Collector`` (``err``), the
model being checked (``cm``) and the shapes of each operation's arguments
(``op_inputs``); an attention statement's own state is an explicit ``attention.Fit``.
"""

from __future__ import annotations

from .. import ir
from ..diagnostics import Collector, Location, SpecError
from .attention import AttentionChecks, Fit
from .core import (AttentionInfo, CheckedModel, CheckedSpec, Shape, _base_ref, _hop_place,
                   _name, _short, _show, _vocab, context_dim, decoder_ops, deps, expr_links,
                   feeds, learned_capsules, links, operations, penalised, rescaled,
                   weights_read)
from .decoders import DecoderChecks
from .features import FeatureShapes
from .fits import MechanismFits
from .penalties import PenaltyChecks
from .recurrence import StateChecks
from .scopes import ScopeChecks
from .sharing import SharingChecks, share_kind, share_root, version_with
from .values import ValueShapes


class Checker(ScopeChecks, FeatureShapes, ValueShapes, AttentionChecks, MechanismFits,
              PenaltyChecks, DecoderChecks, StateChecks, SharingChecks):
    def __init__(self, spec: ir.Spec, source: str | None):
        self.spec = spec
        self.c = Collector(spec.file, source)

    def run(self) -> CheckedSpec:
        out = CheckedSpec(self.spec)
        for m in self.spec.models:
            cm = self.model(m)
            if cm is not None:
                out.models.append(cm)
        self.c.raise_if_any()
        return out

    def err(self, loc: Location, msg: str, hint: str = "") -> None:
        self.c.error(loc, msg, hint)


def check(spec: ir.Spec, source: str | None = None) -> CheckedSpec:
    return Checker(spec, source).run()


__all__ = ["Shape", "AttentionInfo", "CheckedModel", "CheckedSpec", "Checker", "Fit", "check",
           "context_dim", "decoder_ops", "deps", "expr_links", "feeds", "links", "operations",
           "penalised", "rescaled", "weights_read", "SpecError", "learned_capsules",
           "share_kind", "share_root", "version_with", "_base_ref", "_hop_place", "_name",
           "_short", "_show", "_vocab"]
