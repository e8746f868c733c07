"""The codegen plan: what a generated file contains, between the IR and the text.

Frozen dataclasses built in one pass by ``planner.plan`` from a checked model; ``emit``
renders them through the templates in ``templates/codegen/``. Code fragments in a plan are
built from validated identifiers and numbers only (never spec text)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .expr import Expr


@dataclass(frozen=True)
class ConfigField:
    name: str
    type: str  # "int" | "float"
    value: str  # the default, as Python source
    comment: str = ""


@dataclass(frozen=True)
class ConfigProperty:
    """A derived size (``let d_k = d_model / heads``): a property over the fields."""

    name: str
    type: str
    expr: Expr  # rendered over ``self.FIELD``


@dataclass(frozen=True)
class ConfigPlan:
    fields: tuple[ConfigField, ...]
    properties: tuple[ConfigProperty, ...]
    tiny: tuple[tuple[str, str], ...]  # field -> its toy size in Config.tiny()
    # field -> the factor its grid axis is down-sampled by: __post_init__ checks the multiple
    multiples: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class OutputField:
    """A field of the generated ``Output`` dataclass."""

    name: str
    type: str
    default: str | None  # None: a required field
    comment: str


@dataclass(frozen=True)
class Stmt:
    """One line of a forward(): ``code  # comment`` at a nesting ``depth`` (inside a for or
    an if). ``code`` empty: a comment line. ``binds`` and ``part``: (node id, role) of what was being
    planned when it was built (``Frame.part``), so that a later rule picks a node's
    statements from this record, not by reading their code."""

    code: str
    comment: str = ""
    depth: int = 0
    part: tuple[str, str] | None = None
    binds: tuple[str, ...] = ()  # the locals it assigns, recorded where it is built

    def deeper(self, by: int = 1) -> "Stmt":
        """The same statement, nested ``by`` levels deeper (its part kept)."""
        return replace(self, depth=self.depth + by)


@dataclass(frozen=True)
class Submodule:
    """``self.attr = ctor  # comment`` in a module's __init__."""

    attr: str
    ctor: str
    comment: str = ""


@dataclass(frozen=True)
class ModuleClass:
    """A generated ``nn.Module``: the Model, or a ``Block`` per ``repeat`` body (eq. 41-42)."""

    name: str
    doc: tuple[str, ...]
    submodules: tuple[Submodule, ...]
    params: tuple[str, ...]  # forward()'s parameters after ``self``
    returns: str  # the return annotation
    body: tuple[Stmt, ...]
    keeps_cfg: bool = False  # forward() reads self.cfg
    init_params: tuple[str, ...] = ()  # __init__'s parameters after ``cfg`` (a block's depth)


@dataclass(frozen=True)
class AttentionClass:
    """An attention module class, one per mechanism combination (rendered from
    ``attention.py.j2`` with its view)."""

    name: str
    view: object  # templates' typed view: see attention.AttentionView
    template: str = "attention.py.j2"  # graph attention: graph_attention.py.j2


@dataclass(frozen=True)
class LossPlan:
    """``Model.loss(out, target)``: the cross-entropy of a classify output (``loss.py.j2``)."""

    name: str  # the output node
    read: str  # how its logits are read from Output: ``.output`` or ``.output['name']``
    shape: str  # the logits' shape, for the docstring
    target: str | None  # the autoregressive input it predicts (shifted by one), or None
    penalty: bool  # Output.penalty is added
    crf: str = ""  # a crf output: its LinearChainCRF module (crf_loss.py.j2: NLL and decode)
    kind: str = "classes"  # classes | positions (a pointer: one score per position) | binary
    others: tuple = ()  # the other logits outputs (LossPlan), summed: `target` is a dict
    sampled: bool = False  # hard / reinforced alignment: REINFORCE on Output.log_probs
    positions: str = ""  # a crf output: the shape of its tag sequences, ``(B, L)``


@dataclass(frozen=True)
class FilePlan:
    source: str  # the spec's path, percent-encoded
    title: str
    doc: tuple[str, ...]
    config: ConfigPlan
    outputs: tuple[OutputField, ...]
    helpers: tuple[str, ...]  # templates/codegen/helpers/<name>.py.j2, in order
    attention_classes: tuple[AttentionClass, ...]
    blocks: tuple[ModuleClass, ...]  # innermost first
    model: ModuleClass
    capsule_loss: bool
    examples: tuple[str, ...]  # the body of example_inputs()
    masked: bool  # some input takes a padding mask
    flex: bool  # imports FlexAttention
    generate: "GeneratePlan | None" = None  # models with an autoregressive input
    loss: LossPlan | None = None  # models with a classify output
    output_names: tuple[str, ...] = ()  # Output.outputs' keys, in order
    # the module-level names its planned code wrote (imports.py: math, F, warnings); the
    # templates' add theirs as they render
    modules: frozenset[str] = frozenset()


@dataclass(frozen=True)
class GeneratePlan:
    """generate() of a model with an autoregressive input (``generate.py.j2``)."""

    target: str  # the autoregressive input
    sources: tuple[str, ...]  # the other inputs, in order
    masks: tuple[str, ...]  # their padding masks' parameters
    vocab: str  # the target vocabulary's size, as code
    output: str  # how the logits are read from Output: ``.output`` or ``.output['name']``
    incremental: bool  # forward() takes a cache: each step runs the new token only
    why: str = ""  # not incremental: why, as a string literal (generate(incremental=True))
