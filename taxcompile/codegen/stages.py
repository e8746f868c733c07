"""The order of an attention class's code, as data. ``attention.py.j2`` renders the
``STAGES`` in order; each stage is a template under ``templates/codegen/attention/`` (its
own lines, as macros) and a tuple of steps. A step is either one of the stage's own macros
or a slot: the macro of that name in each of the statement's mechanism templates that
defines it, called in the order the step lists their groups (``score``, ``align``, ``mods``:
the position term and the bias, ``extra``: traits, penalties and head mechanisms, and
``heads_out``). A new mechanism adds lines to a class by defining slots in its template;
where they go is read here, not in the templates. ``PARTS`` are stages that steps render
inside others (the weights of the explicit path, the mask, the default of an override).

No torch here: the codegen's plan reads it, the templates render it."""

from __future__ import annotations

from typing import NamedTuple

SCORE, ALIGN, MODS, EXTRA, HEADS_OUT = "score", "align", "mods", "extra", "heads_out"
GROUPS = (SCORE, ALIGN, MODS, EXTRA, HEADS_OUT)


class Step(NamedTuple):
    """One step of a stage: a slot the groups ``of`` answer (their templates' macro
    ``slot``), or with ``of`` empty the stage template's own macro ``slot``."""

    slot: str
    of: tuple[str, ...] = ()
    args: tuple[str, ...] = ()  # the class's values the slot's macro takes (``vals``)
    # an override: the part (or own macro) rendered when no template answers the slot
    default: str = ""
    when: str = ""  # a flag of the class's view that must hold ("!flag": must not)


class Stage(NamedTuple):
    name: str  # its template: templates/codegen/attention/<name>.py.j2
    steps: tuple[Step, ...]


def own(name: str, when: str = "") -> Step:
    return Step(name, when=when)


STAGES: tuple[Stage, ...] = (
    Stage("doc", (own("doc"),)),
    Stage("init", (
        own("open"),
        Step("check", (EXTRA,), default="check_split"),  # a trait's check replaces eq. 38's
        own("fields"),
        Step("init_first", (EXTRA,)),
        Step("init", (SCORE, ALIGN, MODS, EXTRA, HEADS_OUT)),
        own("capsules", when="capsules"),
        Step("init_last", (EXTRA,)),
        own("methods"),
        Step("methods", (SCORE,), when="keys_once"),  # project_keys: W2 k + b, once
    )),
    Stage("forward", (own("signature"), own("locals"))),
    Stage("projections", (
        Step("pre", (ALIGN,)),
        Step("gate_in", (EXTRA,)),
        own("split_q", when="split"),  # heads: q^(j), K^(j), V^(j) (eq. 38)
        Step("split_kv", (EXTRA,), default="split_kv", when="split"),
        own("unsplit", when="!split"),
        Step("turn", (EXTRA,)),
        Step("terms", (MODS,)),
        Step("turn", (MODS,)),
        own("hold", when="held"),  # generate(): the turned keys after the earlier steps'
    )),
    Stage("scores", (
        # the memory joins the keys before grouped key/value heads are repeated
        Step("memory", (EXTRA,)),
        Step("expand", (EXTRA,), when="early"),
        Step("forward", (SCORE,)),
        Step("captures", (MODS,), args=("dot",), when="score_terms"),
        own("score_mod", when="score_terms"),
        Step("score_mod", (MODS,), when="score_terms"),
        own("score_mod_end", when="score_terms"),
    )),
    Stage("paths", (own("paths"),)),  # the explicit path, or a fast one beside it
    Stage("out", (
        Step("heads", (EXTRA,)),
        Step("extras", (EXTRA,)),
        Step("join", (HEADS_OUT,), args=("lc",)),
        own("capsules", when="capsules"),
        own("done"),
    )),
)

PARTS: tuple[Stage, ...] = (
    Stage("keep", (  # which keys each query sees: (N | 1, 1, Lq, Lk) or None
        own("keep"),
        Step("keep", (EXTRA,)),
        own("keep_multi", when="multi"),
    )),
    Stage("weights", (  # the explicit path: the weights, then the context
        Step("expand", (EXTRA,), when="late"),
        Step("loop", (EXTRA,), args=("align",), default="scored"),  # coverage's loop
        own("dropout", when="dropout"),
        own("context"),
        Step("values", (MODS,), args=("w",)),
    )),
    Stage("scored", (  # scores, then the alignment
        Step("scores", (SCORE,)),
        own("score_terms", when="score_terms"),
        Step("mix", (EXTRA,)),
        Step("forward", (ALIGN,)),
        Step("mixed", (EXTRA,)),
    )),
)


# Slots the fast paths call (attention/fast.py.j2): a keyword of the fused kernel's call
# (a fragment, not lines) and the alignment's own kernel.
FAST_SLOTS: tuple[Step, ...] = (Step("sdpa", (EXTRA,)), Step("context", (ALIGN,)))


def holds(view, when: str) -> bool:
    """Whether a step's condition holds for the class ``view``."""
    if not when:
        return True
    if when.startswith("!"):
        return not getattr(view, when[1:])
    return bool(getattr(view, when))


def steps(view) -> dict[str, tuple[Step, ...]]:
    """Each stage's and part's steps whose condition holds for ``view``, by name."""
    return {s.name: tuple(st for st in s.steps if holds(view, st.when))
            for s in STAGES + PARTS}


def slots() -> set[str]:
    """Every slot a mechanism template may define."""
    return {st.slot for s in STAGES + PARTS for st in s.steps if st.of} | \
        {st.slot for st in FAST_SLOTS}
