"""The state of one lowering and what every part of it shares: the error reporter, the
identifier rule (specs are untrusted: only names that pass it reach generated code) and
the small state objects that replace attributes set and reset per model or statement.
Errors of this kind: a name that is no identifier, a reserved name (``reserved.py``)."""

from __future__ import annotations

import keyword

from .. import ast, ir, reserved
from ..diagnostics import Collector, Location

MAX_INT = 1 << 24
FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32 (torch.finfo(torch.float32).max)


def bad_identifier(name: str, python_keywords: bool = False) -> str | None:
    """Why ``name`` cannot be used as an identifier (specs are untrusted). Python keywords
    are allowed where the name never becomes a Python name (``python_keywords``)."""
    if not name.isidentifier() or not name.isascii():
        return "is not a valid identifier"
    if not python_keywords and (keyword.iskeyword(name) or keyword.issoftkeyword(name)):
        return "is a Python keyword"
    if name.startswith("__"):
        return "starts with `__` (dunder names are reserved)"
    if name in ("true", "false"):
        return "is reserved for booleans"
    if len(name) > 64:
        return "is longer than 64 characters"
    return None


class TooBig(Exception):
    """Unrolling reached MAX_NODES: stop lowering this model (the error is recorded)."""


class NotConstant(Exception):
    """``sym`` met an expression that is no constant (its error is reported elsewhere)."""


class Budget:
    """The spec's node budget (``lower.MAX_SPEC_NODES``), over all its models. (The state
    classes of lowering are plain classes with slots, not dataclasses: the front end
    imports them, and a dataclass costs some fifty times as much to define.)"""

    __slots__ = ("nodes", "exceeded")

    def __init__(self) -> None:
        self.nodes = 0  # nodes of every model lowered so far
        self.exceeded = False  # past the budget: the rest of the spec is not lowered


class ModelState:
    """What lowering one model builds: its nodes so far and what they are."""

    __slots__ = ("scope", "pos", "nodes", "ids", "versions", "roles", "consts", "syms")

    def __init__(self, scope, pos: ast.Pos) -> None:
        self.scope = scope  # the model body's Scope (names.Scope), for ``sym``
        self.pos = pos  # the model's position (the budget's error points at it)
        self.nodes: list[ir.AnyNode] = []
        self.ids: set[str] = set()
        self.versions: dict[str, int] = {}  # `update`s of a node, by its first id
        self.roles: dict[str, str] = {}  # node id -> feature/query/output/affinity/input/…
        self.consts: list[tuple[str, ir.Scalar, str | None]] = []  # its `let`s, for Config
        self.syms: dict[str, tuple] = {}  # a derived `let` -> (text, precedence, root names)


class Defining:
    """The statement being lowered: not suggested for itself; a feature's name is the one
    its `affinity(…)` error proposes."""

    __slots__ = ("name", "feature")

    def __init__(self, name: str = "", feature: bool = False) -> None:
        self.name, self.feature = name, feature


def show(v: ir.Scalar) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'the string "{v}"'
    return str(v)


class LowerBase:
    """The reporter and the state every part of the lowerer reads."""

    def __init__(self, module: ast.Module, file: str, source: str | None):
        self.module = module
        self.file = file
        self.c = Collector(file, source)
        self.consts: dict[str, ir.Scalar] = {}  # the spec's top-level `let`s
        self.const_syms: dict[str, str | None] = {}  # `let` name -> its expression (Config)
        self.poisoned: set[str] = set()  # top-level `let`s refused (names.Scope.poisoned)
        self.let_syms: dict[str, tuple] = {}  # a derived top-level `let` -> ``sym`` parts
        self.sum_tails: dict[str, tuple] = {}  # a folded sum's text -> (names' part, prec, offset)
        self.defining = Defining()
        self.budget = Budget()
        self.m: ModelState | None = None  # the model being lowered

    def loc(self, pos: ast.Pos) -> Location:
        return self.c.loc(pos.line, pos.col)

    def err(self, pos: ast.Pos, msg: str, hint: str = "") -> None:
        self.c.error(self.loc(pos), msg, hint)

    def check_ident(self, name: str, pos: ast.Pos, what: str,
                    python_keywords: bool = False) -> bool:
        why = bad_identifier(name, python_keywords)
        if why:
            self.err(pos, f"{what} name `{name}` {why}", "use letters, digits and `_`, e.g. `enc_self`")
            return False
        clash = reserved.refusal(name, what) if what in reserved.ROLES else None
        if clash:  # the generated file's own names (taxcompile/reserved.py)
            self.err(pos, *clash)
            return False
        return True
