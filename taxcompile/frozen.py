"""Frozen records: the base of the IR's classes (ir.py) and of ``diagnostics.Location``.

A record is declared like a dataclass (annotated fields, with or without a default, in any
order), built by keyword and never changed; it keeps the part of pydantic's model API the
compiler uses (``model_copy(update=…)``, ``model_dump(exclude=…)``, ``model_fields``, and
pydantic's ``repr``, ``str``, equality and hash). The IR was pydantic models: importing
pydantic and building their validators was 0.17 s of a 0.43 s cold ``taxcompile table``,
to check values that only ``lower.py`` writes, from values it has checked already.
tests/test_ir_records.py checks every record built from ``specs/`` and ``examples/``
against its class's annotations instead. Defining a record costs no code generation
(a frozen dataclass ``exec``s five methods per class)."""

from __future__ import annotations

from operator import attrgetter
from typing import Any, ClassVar

_MISSING = object()


class Frozen:
    """A frozen record: ``Act(fn="tanh")``; ``a.model_copy(update={"fn": "relu"})``."""

    # field name -> its default (``REQUIRED`` for none), in declaration order (base first)
    model_fields: ClassVar[dict[str, Any]] = {}
    REQUIRED: ClassVar[object] = _MISSING
    _required: ClassVar[frozenset[str]] = frozenset()
    _values: ClassVar[attrgetter]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls.model_fields)
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if not str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                fields[name] = cls.__dict__.get(name, _MISSING)
        cls.model_fields = fields
        cls._required = frozenset(k for k, v in fields.items() if v is _MISSING)
        # the field values as a tuple (attrgetter gives a bare value for one name)
        cls._values = attrgetter(*fields) if len(fields) > 1 else _one(*fields)

    def __init__(self, **data: Any) -> None:
        fields = self.model_fields
        if not self._required <= data.keys() or not data.keys() <= fields.keys():
            self._refuse(data)
        values = {**fields, **data}  # declaration order, as pydantic keeps it
        object.__setattr__(self, "__dict__", values)

    def _refuse(self, data: dict) -> None:
        name = type(self).__name__
        missing = sorted(self._required - data.keys())
        if missing:
            raise TypeError(f"{name}() missing field(s): {', '.join(missing)}")
        raise TypeError(f"{name}() got unknown field(s): "
                        f"{', '.join(sorted(data.keys() - self.model_fields.keys()))}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frozen):
            return NotImplemented
        return type(self) is type(other) and self._values(self) == other._values(other)

    def __hash__(self) -> int:
        return hash(self._values(self))

    def __iter__(self):
        """(field, value) pairs, as iterating a pydantic model gives."""
        return iter(zip(self.model_fields, self._values(self)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._fields_text(', ')})"

    def __str__(self) -> str:
        return self._fields_text(" ")

    def _fields_text(self, sep: str) -> str:
        return sep.join(f"{k}={v!r}" for k, v in zip(self.model_fields, self._values(self)))

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Frozen:
        """A copy with some fields changed (not checked, as in pydantic)."""
        new = object.__new__(type(self))
        values = dict(zip(self.model_fields, self._values(self)))
        if update:
            values.update(update)
        object.__setattr__(new, "__dict__", values)
        return new

    def model_dump(self, *, exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        """The fields as plain data, records within as dicts (pydantic's ``model_dump``)."""
        return {k: _dump(v) for k, v in zip(self.model_fields, self._values(self))
                if k not in exclude}


def _one(*names: str):
    """The values getter of a record of one field or none: a tuple still."""
    get = attrgetter(*names) if names else None
    return staticmethod(lambda obj: (get(obj),) if get else ())


class Positional(Frozen):
    """A frozen record that is also built by position, as a frozen dataclass is:
    ``Pos(3, 7)`` (the syntax tree, ast.py: some 10,000 nodes in a table of specs/)."""

    def __init__(self, *args: Any, **data: Any) -> None:
        fields = self.model_fields
        if not data and len(args) == len(fields):  # the parser's way: every field, in order
            object.__setattr__(self, "__dict__", dict(zip(fields, args)))
            return
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} fields, "
                            f"{len(args)} given")
        given = dict(zip(fields, args))
        if given.keys() & data.keys():
            raise TypeError(f"{type(self).__name__}() got several values for "
                            f"{', '.join(sorted(given.keys() & data.keys()))}")
        Frozen.__init__(self, **given, **data)

    def __str__(self) -> str:  # a dataclass's str is its repr
        return repr(self)


def _dump(value: Any) -> Any:
    if isinstance(value, Frozen):
        return value.model_dump()
    if isinstance(value, (tuple, list)):
        return type(value)(_dump(v) for v in value)
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value
