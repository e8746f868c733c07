"""The answer for a model: each attention's values and reasons, the model's row (every
attention's values merged, in Table III's order), or "no attention found"."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..classification import DIMENSIONS, ORDER

# Dimensions read per attention; the feature dimensions are read over all of them
# (``feature_dims``), and a dimension not read is left so rather than guessed.
READ = ("scoring", "alignment", "dimensionality", "query_type", "query_multiplicity")
FEATURES = ("feature_multiplicity", "feature_levels", "feature_representations")
NOT_READ = "not read from code yet"


@dataclass
class CodeClassification:
    method: str  # "torch.export" or "torch.fx"
    attentions: list
    note: str = ""
    features: dict = field(default_factory=dict)  # feature dimension -> (label, reason)

    @property
    def recognised(self) -> list:
        return [a for a in self.attentions if a.recognised]

    def row(self) -> dict[str, str]:
        """Each read dimension's values over every recognised attention, joined by " + "
        in Table III's order; unread dimensions say so. Empty when none was recognised."""
        if not self.recognised:
            return {}
        out = {}
        for d in DIMENSIONS:
            if d in self.features:
                out[d] = self.features[d][0]
                continue
            if d not in READ:
                out[d] = NOT_READ
                continue
            seen = {v for a in self.recognised for v in a.values[d][0].split(" + ")}
            out[d] = " + ".join(v for v in ORDER[d] if v in seen)
        return out

    def text(self) -> str:
        lines = [f"captured with {self.method}" + (f" ({self.note})" if self.note else "")]
        if not self.attentions:
            lines.append("no attention found: no softmax, log-softmax or sigmoid over scores "
                         "weighs values in this graph")
            return "\n".join(lines)
        for i, a in enumerate(self.attentions, 1):
            head = f"attention {i}: `{a.norm}` weighing values at `{a.applied_by}`"
            if not a.recognised:
                lines.append(f"{head}: attention not recognised: {a.why_not} "
                             f"(nodes {', '.join(a.nodes)})")
                continue
            lines.append(head)
            for d, (label, why) in a.values.items():
                lines.append(f"  {d}: {label or '(none)'}: {why}")
            for s in a.source:
                lines.append(f"  source: {s}")
        for d, (label, why) in self.features.items():
            lines.append(f"model {d}: {label}: {why}")
        row = self.row()
        if row:
            lines.append("row: " + " | ".join(f"{d}: {v}" for d, v in row.items()))
        return "\n".join(lines)


def classify_module(module, example_inputs) -> CodeClassification:
    from .capture import capture
    from .recognise import read_model

    c = capture(module, example_inputs)
    atts, features = read_model(c.graph, c.params)
    return CodeClassification(c.method, atts, c.note, features)
