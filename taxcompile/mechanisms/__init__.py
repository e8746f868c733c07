"""The registry of attention mechanisms: one frozen ``Mechanism`` record per score function,
alignment, position term, bias, mask kind, way of joining heads, penalty and trait of an
attention module, with its parameters, its Table III reading and the reason text, its part
of the generated class's name and its docstring line, the constructor arguments it adds,
its template and the helpers it needs. ``tests/test_mechanisms.py`` checks that every
mechanism the IR admits has a record and that every record's template and helpers exist.

The front end reads it (``classify``, ``diagram``, the checker, the IR's summaries), and so do the
codegen's attention classes and the drop-in layer (``constructor`` below: one list of
constructor arguments for both). Importing it costs nothing the front end does not load
anyway (the operator registry's parameter type, no pydantic model of its own)."""

from __future__ import annotations

from . import heads
from .aligns import ALIGNS, GRAPH_REASON, POLICY_REASON
from .heads import HEAD_MECHANISMS
from .modifiers import BIASES, MODIFIERS, POSITIONS
from .others import HEADS_OUT, MASK_ARG, MASKS, PENALTIES, QK_NORMS, TRAITS
from .record import KINDS, CtorArg, Mechanism
from .scores import SCORES, WITHOUT_QUERY, affinity_reading

__all__ = ["ALIGNS", "BIASES", "GRAPH_REASON", "HEAD_MECHANISMS", "HEADS_OUT", "KINDS", "heads",
           "MASKS", "MASK_ARG", "MODIFIERS", "PENALTIES", "POLICY_REASON", "POSITIONS", "QK_NORMS",
           "REGISTRY",
           "SCORES",
           "TRAITS", "WITHOUT_QUERY", "CtorArg", "Mechanism", "affinity_reading",
           "TEMPLATE_PATHS", "class_penalty", "heads_extra", "constructor", "literal",
           "modifiers", "ordered", "penalties", "score", "align",
           "align_reads", "signature", "spellings"]

# Every record, by (kind, name).
REGISTRY: dict[tuple[str, str], Mechanism] = {
    (m.kind, m.name): m for table in (SCORES, ALIGNS, POSITIONS, BIASES, MASKS, HEADS_OUT,
                                      PENALTIES, TRAITS, QK_NORMS, HEAD_MECHANISMS)
    for m in table.values()}


def spellings(table: dict[str, Mechanism]) -> dict[str, Mechanism]:
    """The names a spec may write for the mechanisms of ``table``, aliases included."""
    out: dict[str, Mechanism] = {}
    for name, m in table.items():  # each alias after its record (the order errors list)
        out[name] = m
        out.update((a, m) for a in m.aliases)
    return out


def score(fn: str) -> Mechanism:
    return SCORES[fn]


def align(fn: str) -> Mechanism:
    return ALIGNS[fn]


def align_reads(al) -> list[tuple[str, str]]:
    """(parameter, node id) of each node an alignment reads besides q, k and v: its
    record's node parameters that the statement sets (reinforced's `policy = s`)."""
    return [(p.name, v) for p in ALIGNS[al.fn].params
            if p.type == "node" and (v := getattr(al, p.name, None)) is not None]


def modifiers(n) -> list[tuple[Mechanism, object]]:
    """(record, ir.Mech) of a statement's position term and bias, in that order."""
    return [(MODIFIERS[m.fn], m) for m in (n.position, n.bias) if m is not None]


def turns_keys(n) -> bool:
    """Whether a statement's module turns each key by itself (RoPE, qk-norm: the records'
    ``turns_keys``): generate()'s KV cache then lives in the module, after the turn."""
    qk = getattr(n, "qk_norm", None)
    return any(rec.turns_keys for rec, _ in modifiers(n)) or (
        qk is not None and qk.record.turns_keys)


def cached_inside(n) -> bool:
    """Whether generate()'s KV cache lives in a statement's module, per head: where it turns
    each key by itself (``turns_keys``), or where a position term places the keys
    (``counts_past``: its scores' explicit path then reads the cached keys per head without
    copying them into that layout at every step)."""
    return turns_keys(n) or any(rec.counts_past for rec, _ in modifiers(n))


def penalties(n) -> list[tuple[Mechanism, object]]:
    """(record, ir.Mech) of a statement's penalty (``ir.Attention.loss_term``), [] without
    one: its record and template define it whole."""
    return [] if n.loss_term is None else [(n.loss_term.record, n.loss_term)]


def heads_extra(n) -> str:
    """What ``n``'s class returns as extras["heads"] for a penalty over the heads' own
    tensors (its record's ``heads_extra``: "values", "output"), '' for none."""
    return next((t for rec, v in penalties(n) if (t := rec.text("heads_extra", v))), "")


def class_penalty(n) -> bool:
    """Whether a penalty of ``n`` is computed by its attention class from the weights and
    returned as ``extras["penalty"]`` (its record's ``extras``): the class then takes its
    explicit path, and the model adds the term to its penalties."""
    return any("penalty" in rec.extras for rec, _ in penalties(n))


# Folders of the templates of mechanisms registered from outside taxcompile (a record's
# ``template`` is looked up in templates/codegen/, then in these, in order).
TEMPLATE_PATHS: list[str] = []


# The arguments every attention class takes: the widths of q, k and v and the heads.
D_Q = CtorArg("d_q", "int")
BASE = (CtorArg("d_k", "int"), CtorArg("d_v", "int"), CtorArg("heads", "int", field="heads"))


def constructor(n, dropout: bool = False, share: str | None = None,
                query: bool = True) -> list[CtorArg]:
    """The constructor arguments of ``n``'s attention class, in the order a call passes
    them: the one list that the class's signature (``signature``), the model's call and
    the drop-in layer's call and Config are all built from. ``dropout``: the class takes
    an attention dropout (a module of its family has one); ``share``: "keys" (eq. 9) or
    "swap" (eq. 14-15); ``query``: the class reads a query (given, learned or a capsule's)."""
    out = [D_Q] if query else []
    out += BASE
    # an alignment's argument for an optional node it reads (`policy = s`) only where it has
    # one; an optional argument (with its default) always: the class reads it
    out += [*SCORES[n.score.fn].ctor] + [a for a in ALIGNS[n.align.fn].ctor
                                        if a.owner != "align" or not a.required
                                        or a.value(n) is not None]
    if n.capsules:
        out += TRAITS["capsules"].ctor
    if n.heads > 1:  # routing's output capsules and iterations (the others have none)
        out += HEADS_OUT[n.heads_out].ctor
    out.append(MASK_ARG)
    if dropout:
        out += TRAITS["dropout"].ctor
    for m, _ in modifiers(n):
        out += m.ctor
    out += [a for m in heads.present(n) for a in m.ctor]
    if getattr(n, "kv_heads", 0):
        out += TRAITS["kv_heads"].ctor
    if getattr(n, "qk_norm", None) is not None:
        out += n.qk_norm.record.ctor
    if share == "keys":
        out += TRAITS["shared_keys"].ctor
    elif share == "swap":
        out += TRAITS["swapped_keys"].ctor
    return out


def literal(value) -> str:
    """A spec value as Python code (validated numbers and enum names only)."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def ordered(args: list[CtorArg]) -> list[CtorArg]:
    """The ``__init__`` arguments in the signature's order: the required ones first, each
    group in call order."""
    return [*(a for a in args if a.required), *(a for a in args if not a.required)]


def signature(args: list[CtorArg]) -> tuple[str, ...]:
    """The ``__init__`` arguments as the signature writes them (``ordered``)."""
    return tuple(a.signature() for a in ordered(args))
