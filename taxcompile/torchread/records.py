"""The mechanism registry as the reader finds it: each record names the graph patterns that
give it (``Mechanism.recognised_by``, as it names the template that emits it), and the
reader goes from a pattern it matched to the records that name it, never by a mechanism's
name. ``catalogue`` holds the patterns by name and refuses a record that names one it does
not have."""
from __future__ import annotations

from .. import mechanisms


def finding(kind: str, pattern: str) -> list:
    """The records of ``kind`` that name ``pattern``, in the registry's order."""
    return [m for (k, _), m in mechanisms.REGISTRY.items()
            if k == kind and pattern in m.recognised_by]


def one(kind: str, pattern: str):
    """The one record of ``kind`` that ``pattern`` gives, or None where no record names it.
    Two records of one kind that name one such pattern are a fault of the registry."""
    got = finding(kind, pattern)
    if len(got) > 1:
        raise ValueError(f"graph pattern {pattern!r} is named by the {kind} records "
                         f"{', '.join(m.name for m in got)}: the reader cannot tell them apart")
    return got[0] if got else None


def gives(kind: str, name: str, pattern: str) -> bool:
    """Whether the record ``(kind, name)`` names ``pattern``: a pattern that tells several
    records apart (a matmul's forms) gives only those that name it."""
    rec = mechanisms.REGISTRY.get((kind, name))
    return rec is not None and pattern in rec.recognised_by


def named() -> set[str]:
    """Every pattern some record names."""
    return {p for m in mechanisms.REGISTRY.values() for p in m.recognised_by}


def title(rec) -> str:
    """A record's name in the reader's reasons."""
    return rec.title or rec.name
