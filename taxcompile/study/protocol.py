"""The study's protocol, frozen and versioned: every result carries ``PROTOCOL_VERSION``.

Bump the version whenever anything that changes a metric changes (a task generator, a
size, the optimiser, a measure's definition)."""

from __future__ import annotations

PROTOCOL_VERSION = "1"
