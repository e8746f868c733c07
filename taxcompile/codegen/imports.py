"""The module-level names generated code reads that its file imports only when it reads
them: ``math``, ``F`` (torch.nn.functional) and ``warnings``.

Code writes each through its value here (``f"{F}.relu({x})"`` in Python, ``{{ F }}.relu(x)``
in a template), which records the name as the text is made: the file imports what its
plan and its templates recorded (``recording``), never what a read of the finished text
finds. ``torch`` and ``nn`` are always imported; FlexAttention's names come with the
helpers that call them (``plan.FilePlan.flex``)."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

_USED: ContextVar[set[str] | None] = ContextVar("taxcompile_imports", default=None)


@contextmanager
def recording(into: set[str]) -> Iterator[set[str]]:
    """Record into ``into`` the names of the module-level values written inside."""
    token = _USED.set(into)
    try:
        yield into
    finally:
        _USED.reset(token)


class Module:
    """A module-level name of the generated file; writing it records that the file reads it.
    Not a ``str``: text joined to it with ``+`` is refused, so no write goes unrecorded."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        used = _USED.get()
        if used is not None:
            used.add(self.name)
        return self.name

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"Module({self.name!r})"


class Code:
    """Text with module names in it, written (and its names recorded) only where it is
    put into a line: a template's alternative that may go unused (a score's scale)."""

    __slots__ = ("parts",)

    def __init__(self, *parts: "str | Module"):
        self.parts = parts

    def __str__(self) -> str:
        return "".join(str(p) for p in self.parts)


MATH, F, WARNINGS = Module("math"), Module("F"), Module("warnings")
# the templates' names for them (``emit.env``'s globals)
TEMPLATE_GLOBALS = {"math": MATH, "F": F, "warnings": WARNINGS, "code": Code}
