"""Frozen records: the base of the IR's classes (ir.py), of the syntax tree (ast.py) and
of ``diagnostics.Location``.

A record is declared like a dataclass (annotated fields, with or without a default, in any
order), built by keyword and never changed. Its API is its own, in plain names:
``replace(**changes)``, ``as_dict(exclude=…)`` and the class's ``fields`` (name -> default,
in declaration order); equality and hash are by type and field values. A class declared
with ``checked=True`` (the IR's) validates every field against its annotation when a
record is built (``True`` is no int, ``1`` no float, a list no tuple), and then calls its
``check()`` for what an annotation cannot say (a mechanism's name against the registry).
The syntax tree is not checked: the parser builds some 10,000 nodes for a table of specs/.
Defining a record costs no code generation (a frozen dataclass ``exec``s five methods per
class); a class's validators are built when its first record is."""

from __future__ import annotations

import sys
import types
import typing
from operator import attrgetter
from typing import Any, Callable, ClassVar, Iterable

_MISSING = object()


class FieldError(AttributeError):
    """A field a record does not have (an ``AttributeError``, so ``getattr(r, name, None)``
    and templates still ask politely; its message names the record's fields)."""


class Frozen:
    """A frozen record: ``Act(fn="tanh")``; ``a.replace(fn="relu")``."""

    # field name -> its default (``REQUIRED`` for none), in declaration order (base first).
    # (``fields`` is the public name; the code here reads ``_defaults``, because a record of
    # the syntax tree has a field called ``fields``.)
    fields: ClassVar[dict[str, Any]] = {}
    _defaults: ClassVar[dict[str, Any]] = {}
    REQUIRED: ClassVar[object] = _MISSING
    _required: ClassVar[frozenset[str]] = frozenset()
    _values: ClassVar[attrgetter]
    _checked: ClassVar[bool] = False
    _validators: ClassVar[dict[str, Callable[[Any], bool]] | None] = None

    def __init_subclass__(cls, checked: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls._defaults)
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if not _class_var(annotation):
                fields[name] = cls.__dict__.get(name, _MISSING)
        cls._defaults = cls.fields = fields
        cls._required = frozenset(k for k, v in fields.items() if v is _MISSING)
        # the field values as a tuple (attrgetter gives a bare value for one name)
        cls._values = attrgetter(*fields) if len(fields) > 1 else _one(*fields)
        if checked is not None:
            cls._checked = checked
        cls._validators = None  # built from the annotations when the first record is

    def __init__(self, **data: Any) -> None:
        fields = self._defaults
        values = {**fields, **data}  # declaration order
        if len(values) != len(fields) or not self._required <= data.keys():
            self._refuse(data)
        object.__setattr__(self, "__dict__", values)
        if self._checked:
            self._validate(data)

    def _refuse(self, data: dict) -> None:
        name = type(self).__name__
        missing = sorted(self._required - data.keys())
        if missing:
            raise TypeError(f"{name}() missing field(s): {', '.join(missing)}")
        raise TypeError(f"{name}() got unknown field(s): "
                        f"{', '.join(sorted(data.keys() - self._defaults.keys()))}")

    def _validate(self, given: dict[str, Any]) -> None:
        """Check the fields ``given`` (a default is of its field's type: the class says so)
        against their annotations, then the record as a whole (``check``, where the class
        has one of its own)."""
        cls = type(self)
        tests = cls._validators
        if tests is None:
            tests = cls._validators = _validators(cls)
        for k, v in given.items():  # (every field has a test)
            if not tests[k](v):
                wrong = [f"{k} = {v!r}" for k, v in given.items() if not tests[k](v)]
                raise TypeError(f"{cls.__name__}(): {', '.join(wrong)} is not of its "
                                "field's type")
        if cls.check is not Frozen.check:
            self.check()

    def check(self) -> None:
        """What a record of a checked class must be beyond its fields' types (raises
        ``ValueError``)."""

    def __getattr__(self, name: str) -> Any:  # only for a name that is no field
        if name.startswith("__"):
            raise AttributeError(name)
        raise FieldError(f"{type(self).__name__} has no field {name!r} (its fields: "
                         f"{', '.join(self._defaults)})")

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
        """(field, value) pairs."""
        return iter(zip(self._defaults, self._values(self)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._fields_text(', ')})"

    def __str__(self) -> str:
        return self._fields_text(" ")

    def _fields_text(self, sep: str) -> str:
        return sep.join(f"{k}={v!r}" for k, v in zip(self._defaults, self._values(self)))

    def replace(self, **changes: Any) -> Frozen:
        """A copy with some fields changed, checked as a new record is."""
        unknown = changes.keys() - self._defaults.keys()
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unknown field(s): "
                            f"{', '.join(sorted(unknown))}")
        new = object.__new__(type(self))
        values = dict(zip(self._defaults, self._values(self)))
        values.update(changes)
        object.__setattr__(new, "__dict__", values)
        if self._checked:
            new._validate(changes)
        return new

    def _rebuilt(self, values: tuple) -> Frozen:
        """A record of this class with ``values`` (every field, in order), not checked: for
        a copy whose values are each of the type of this record's (a `repeat` hop's ids
        re-labelled, ``lowering/relabel.py``), already checked when this one was built."""
        new = object.__new__(type(self))
        object.__setattr__(new, "__dict__", dict(zip(self._defaults, values)))
        return new

    def as_dict(self, *, exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        """The fields as plain data, records within as dicts."""
        return {k: _dump(v) for k, v in zip(self._defaults, self._values(self))
                if k not in exclude}


def _class_var(annotation) -> bool:
    return str(annotation).startswith(("ClassVar", "typing.ClassVar"))


def _one(*names: str):
    """The values getter of a record of one field or none: a tuple still."""
    get = attrgetter(*names) if names else None
    return staticmethod(lambda obj: (get(obj),) if get else ())


class Positional(Frozen):
    """A frozen record that is also built by position, as a frozen dataclass is:
    ``Pos(3, 7)`` (the syntax tree, ast.py: some 10,000 nodes in a table of specs/)."""

    def __init__(self, *args: Any, **data: Any) -> None:
        fields = self._defaults
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
        return value.as_dict()
    if isinstance(value, (tuple, list)):
        return type(value)(_dump(v) for v in value)
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


# ---- validation from the annotations ----------------------------------------------


def _validators(cls: type) -> dict[str, Callable[[Any], bool]]:
    """A test per field, from ``cls``'s annotations (``hints``)."""
    tests: dict[str, Callable[[Any], bool]] = {}
    for klass in reversed(cls.__mro__):
        tests.update((k, fits(tp)) for k, tp in hints(klass, cls._defaults).items())
    return {k: tests.get(k, _anything) for k in cls._defaults}


def _anything(value: Any) -> bool:
    return True


def hints(klass: type, fields: Iterable[str]) -> dict[str, Any]:
    """The types of those of ``fields`` that ``klass`` itself annotates, resolved as
    ``typing.get_type_hints(klass)`` resolves them (strings evaluated with the names of
    the class's module first, then the class's own; a string within a type too), but
    evaluated once each: get_type_hints makes a ``ForwardRef`` of each string, compiles
    it and walks every annotation of the class (the base's ``ClassVar``s, some 120 of the
    230 annotations of the IR's classes, once for every class)."""
    own = klass.__dict__.get("__annotations__", {})
    names = (dict(vars(klass)), vars(sys.modules[klass.__module__]))  # (globals, locals)
    return {k: _resolved(tp, names) for k, tp in own.items()
            if k in fields and not _class_var(tp)}


def _resolved(tp, names: tuple[dict, dict]):
    while isinstance(tp, (str, typing.ForwardRef)):  # `x: "Expr"` under future annotations
        tp = eval(tp if isinstance(tp, str) else tp.__forward_arg__, *names)
    if tp is None:
        return type(None)
    origin = typing.get_origin(tp)
    if origin is None or origin is typing.Literal:
        return tp
    args = tuple(a if a is Ellipsis else _resolved(a, names) for a in typing.get_args(tp))
    if origin is tuple:
        return tuple[args]
    if origin is typing.Union or origin is types.UnionType:
        return typing.Union[args]
    return tp


def fits(tp) -> Callable[[Any], bool]:
    """A test of whether a value has type ``tp``, strictly: ``True`` is no int, ``1`` no
    float (Literal values, tuples, unions, nested records)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return lambda v: v is None
    if tp is Any:
        return lambda v: True
    if origin is typing.Union or (origin is not None and origin.__name__ == "UnionType"):
        exact = {a for a in args if a in (bool, int, float, str, type(None))}
        # records: one isinstance over all of them (an expression is a Ref or an Op)
        classes = tuple(a for a in args if isinstance(a, type) and a not in exact)
        tests = [fits(a) for a in args if a not in exact and a not in classes]
        if not tests:  # e.g. int | None, Ref | Op: one or two type tests
            return lambda v: type(v) in exact or isinstance(v, classes)
        return lambda v: type(v) in exact or isinstance(v, classes) or any(t(v) for t in tests)
    if origin is typing.Literal:
        allowed = {(type(a), a) for a in args}
        return lambda v: (type(v), v) in allowed
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            # a short tuple (most: an operation's one or two parameters) item by item, a
            # long one (a model's nodes, a stack's parts) in bulk
            item, bulk = fits(args[0]), _each(args[0])
            return lambda v: type(v) is tuple and (
                all(map(item, v)) if len(v) < _BULK else bulk(v))
        if len(args) == 2:  # (name, value) pairs: the commonest, tested without a loop
            return _pair(*args)
        tests = [fits(a) for a in args]
        return lambda v: type(v) is tuple and len(v) == len(tests) and \
            all(t(x) for t, x in zip(tests, v))
    if tp in (bool, int, float, str):
        return lambda v: type(v) is tp
    if origin is not None:
        tp = origin
    return lambda v: isinstance(v, tp)


_EXACT = (bool, int, float, str, type(None))
_BULK = 8  # the length from which a tuple's items are tested in bulk (``_each``)


def _each(tp) -> Callable[[tuple], bool]:
    """``fits`` of every item of a long tuple, ``tuple[tp, ...]``. The items' types are
    gathered in one pass in C (``set(map(type, items))``) and each distinct type is tested
    once; rows of a fixed length (a record's (name, value) pairs) are tested column by
    column (``zip(*items)``). A test of its own per item is left for the rest (Literal)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return lambda items: True
    if origin is tuple and args and args[-1] is not Ellipsis:
        columns, width = [_each(a) for a in args], len(args)

        def rows(items: tuple) -> bool:
            if set(map(type, items)) != {tuple} or set(map(len, items)) != {width}:
                return False
            return all(test(column) for test, column in zip(columns, zip(*items)))
        return rows
    union = origin is typing.Union or (origin is not None and origin.__name__ == "UnionType")
    members = args if union else (tp,)
    exact = frozenset(a for a in members if a in _EXACT)
    classes = tuple(a for a in members if isinstance(a, type) and a not in exact)
    if len(exact) + len(classes) == len(members):
        return lambda items: all(t in exact or issubclass(t, classes)
                                 for t in set(map(type, items)))
    test = fits(tp)
    return lambda items: all(map(test, items))


def _pair(first, second) -> Callable[[Any], bool]:
    """``fits(tuple[first, second])``: an operation's parameters are such pairs, and a
    loop over the two would cost more than the tests (a table of specs/ builds thousands)."""
    if first is str and second is str:
        return lambda v: type(v) is tuple and len(v) == 2 and type(v[0]) is str \
            and type(v[1]) is str
    if first is str:
        test = fits(second)
        return lambda v: type(v) is tuple and len(v) == 2 and type(v[0]) is str and test(v[1])
    t0, t1 = fits(first), fits(second)
    return lambda v: type(v) is tuple and len(v) == 2 and t0(v[0]) and t1(v[1])
