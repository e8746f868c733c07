"""Every graph pattern the reader finds, by name, and the function that finds it: the score
and alignment patterns that ``patterns`` tries in order, and those found on the way to them
(the fused call, a softmax over each node's edges, sparsemax's threshold, a pick of one key,
a kernel spread over positions, a Gaussian of the key positions, a difference of two maps,
a CRF's marginals by forward-backward).
The registry's records name these (``Mechanism.recognised_by``); ``check`` refuses a record
that names a pattern not here, and tests/test_recognisers_records.py runs it."""
from __future__ import annotations

from .. import mechanisms
from . import alignments, crf, graphs, heads, patterns

PATTERNS = {
    **patterns.SCORE_PATTERNS, **patterns.ALIGN_PATTERNS,
    patterns.FUSED: patterns.read_sdpa,
    graphs.EDGES: graphs.read,
    alignments.CLAMPED: alignments.sparse_norm,
    alignments.SQUARED: alignments.sparse_norm,
    patterns.PICK: alignments.is_pick,
    patterns.KERNEL: alignments.banded,
    patterns.GAUSSIAN: alignments.gaussian,
    alignments.WINDOWS: alignments.windows,
    patterns.DIFFERENCE: heads.maps_per_head,
    crf.PATTERN: crf.marginals,
}


def check(registry=None) -> None:
    """Raise ValueError naming each record that names a pattern the reader does not have,
    or a pattern that two records of one kind name without the pattern telling them apart
    (only a score pattern returns the name of the form it matched)."""
    registry = mechanisms.REGISTRY if registry is None else registry
    bad = [f"{m.kind} `{m.name}` names {p!r}" for m in registry.values()
           for p in m.recognised_by if p not in PATTERNS]
    shared: dict[tuple[str, str], list[str]] = {}
    for m in registry.values():
        for p in m.recognised_by:
            shared.setdefault((m.kind, p), []).append(m.name)
    bad += [f"{kind} records {', '.join(names)} all name {p!r}"
            for (kind, p), names in shared.items()
            if len(names) > 1 and p not in patterns.SCORE_PATTERNS]
    if bad:
        raise ValueError("graph patterns the reader does not have or cannot tell apart: "
                         + "; ".join(bad))
