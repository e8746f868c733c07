"""A function being planned (``Model.forward`` or a block's ``forward``) and the module
class that owns its submodules."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from .. import checks, ir
from .expr import ATOM, reading
from .names import MODULE_ATTRS, Dim, Names, ident, is_name
from .plan import Stmt, Submodule


# The input kinds that carry a padding mask (``<input>_mask`` arguments of forward()).
MASKABLE = ("tokens", "sequence", "set", "pointers")


@dataclass
class Var:
    """A tensor in forward(): its Python expression, shape and padding-mask source."""

    name: str
    shape: checks.Shape
    mask: str | None = None  # input id whose mask covers this tensor's positions
    dim: Dim = field(default_factory=Dim)
    mask_code: tuple[str, str] | None = None  # (mask argument, transform) when not plain
    # a grid op's channels-last result ``X.movedim(1, -1)``: X, channels first (the next grid
    # op reads X instead of moving the channels back)
    first: str | None = None
    # how tightly ``name`` binds (names.SUM, PRODUCT, ...; ATOM: a name, call, subscript):
    # said by whoever writes an operator, so ``names.atom`` never reads the text again
    prec: int = ATOM


def constructor(ctor: "str | Callable[[], str]") -> str:
    """A submodule's constructor call, for __init__: a function is rendered here, outside
    any forward()'s reads (``Frame.reads``: ``cfg`` is __init__'s parameter there)."""
    if isinstance(ctor, str):
        return ctor
    with reading(None):
        return ctor()


class Owner:
    """The submodules of one generated nn.Module class, in registration order."""

    def __init__(self, name: str):
        self.name = name
        self.subs: list[Submodule] = []
        self.attrs = Names(MODULE_ATTRS)
        self.by_key: dict[tuple, str] = {}  # sharing key -> ``self.attr``

    def add(self, want: str, ctor: "str | Callable[[], str]", comment: str = "") -> str:
        attr = self.attrs.new(want)
        self.subs.append(Submodule(attr, constructor(ctor), comment))
        return f"self.{attr}"


class Frame:
    """The statements, locals and free variables of one forward()."""

    def __init__(self, owner: Owner, reserved: set[str], parent: "Frame | None" = None,
                 depth: int = 0, at: str | None = None):
        self.owner = owner
        self.parent = parent
        self.depth = depth  # repeat nesting of the block this frame is the body of
        self.at = at  # the attention-key prefix parameter, in a block
        self.locals = Names(reserved)
        self.body: list[Stmt] = []
        self.indent = 0
        self.vars: dict[str, Var] = {}
        self.free: dict[str, str] = {}  # a name of the caller -> this frame's parameter
        self.records: set[str] = set()  # record containers the body writes to
        self.used: set[str] = set()  # names every function has (``use``) that the body reads
        self.flags: set[str] = set()  # keyword parameters the body reads (``flag``)
        # what the body's code reads that forward() binds first (`B`, `cfg`), recorded as the
        # code is rendered inside ``reading()`` (expr.reading)
        self.reads: set[str] = set()
        self.takes_depth = False  # a block whose constructor takes its hop's number, `depth`
        self.current: tuple[str, str] | None = None  # (node, role) being planned: ``part``

    def emit(self, code: str, comment: str = "", binds: tuple[str, ...] = ()) -> None:
        self.body.append(Stmt(code, comment, self.indent, self.current, binds))

    def reading(self):
        """Code rendered inside is this frame's: the names it reads go to ``reads``."""
        return reading(self.reads)

    def note(self, comment: str) -> None:
        self.body.append(Stmt("", comment, self.indent, self.current))

    def flag(self, name: str) -> str:
        """A keyword parameter of forward() (``return_attention``), read here: a block's
        forward() takes it, and its caller passes it on, only when it is read."""
        self.flags.add(name)
        return name

    @contextmanager
    def part(self, node_id: str, role: str):
        """Statements emitted inside are tagged (node_id, role) (``Stmt.part``)."""
        outer, self.current = self.current, (node_id, role)
        try:
            yield
        finally:
            self.current = outer

    def lookup(self, node_id: str) -> Var | None:
        """A node's value here; one of the caller's becomes a parameter of this frame."""
        if node_id in self.vars:
            return self.vars[node_id]
        if self.parent is None:
            return None
        outer = self.parent.lookup(node_id)
        if outer is None:
            return None
        v = Var(self.param(outer.name, node_id), outer.shape, outer.mask, outer.dim,
                outer.mask_code)
        self.vars[node_id] = v
        return v

    def param(self, code: str, node_id: str) -> str:
        """The caller's value ``code`` (valid in the caller) as a parameter of this frame."""
        if code not in self.free:
            want = code if is_name(code) else ident(node_id.split(".")[-1])
            self.free[code] = want if want not in self.locals.taken and \
                is_name(code) else self.locals.new(want)
            self.locals.taken.add(self.free[code])
        return self.free[code]

    def use(self, name: str) -> str:
        """A name every function has under the same name (a padding mask), read here."""
        self.used.add(name)
        if self.parent is None:
            return name
        if name not in self.free:
            self.parent.use(name)
            self.free[name] = name
            self.locals.taken.add(name)
        return name


@dataclass
class Step:
    """A decoder loop being planned (``decoder.decoder_loop``): ``Planner.step``, None
    outside one. What a statement planned inside the loop reads and records."""

    axis: str  # the target axis the loop runs over (t)
    region: set[str]  # the nodes computed at every step
    op: ir.Op  # the recurrence fed back (`feed =`)
    seq: str  # the local holding the decoder's inputs, all steps
    kind: str  # its operator (lstm, gru)
    hidden: Dim
    layers: Dim
    x: Var  # the decoder's inputs
    fed: str  # the node fed back
    now: bool  # the fed node is computed before the decoder within a step
    dims: dict[str, Dim]  # a node carried to the next step -> its width
    pos: int  # the target axis's place in the inputs (after B)
    state: str = ""  # the local holding the decoder's state
    loop_at: int = 0  # where statements that run once, before the loop, go
    names: dict[str, str] = field(default_factory=dict)  # node -> its local within a step
    prev: dict[str, str] = field(default_factory=dict)  # carried node -> its last step's local
    cov: dict[str, str] = field(default_factory=dict)  # attention -> its coverage's local
    # recorded at every step: (key, weights, view shape or None, statement); (key, extras,
    # statement) of an alignment's log-probabilities; (statement, weights, key mask) of a
    # penalty over all steps' weights
    weights: list[tuple] = field(default_factory=list)
    logp: list[tuple] = field(default_factory=list)
    penalty: list[tuple] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)  # generate(): the state resumed
    # `state = ATT` (recurrence.py): ATT, the RNN, the locals of its states and cells, c~_t,
    # the positions before each step and each step's own, and the input's padding mask
    own: str = ""
    rnn: str = ""
    past: str = ""
    cells: str = ""
    tilde: str = ""
    before: str = ""
    at: str = ""
    past_mask: tuple[str, str] | None = None
    # the state attention's W2 h_i + b (additive score), projected once per state, and its
    # module: (local, module) or None
    past_wk: tuple[str, str] | None = None
