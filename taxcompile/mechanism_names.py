"""Lists of mechanism names as the registry (``taxcompile/mechanisms``) gives them, for the
code that names mechanisms without computing them: the highlighter (``lexer.py``), the
combinations (``combinations.py``), the docs' table (``docs_table.py``) and the property
test's generator. A record added to the registry shows up in each of them.

Reads the registry's one table, ``REGISTRY`` (kind, name) -> record, and no record flags
beyond a parameter's name, type, default and choices."""

from __future__ import annotations

from . import mechanisms

# A value a call may pass for a required parameter of each type (``example``).
_SAMPLE = {"int": "2", "float": "1.0", "prob": "0.1", "bool": "true", "act": "tanh",
           "scale": "1.0"}


def records(kind: str) -> list:
    """The records of one kind (``mechanisms.KINDS``), in the registry's order."""
    return [m for (k, _), m in mechanisms.REGISTRY.items() if k == kind]


def names(kind: str, aliases: bool = True) -> tuple[str, ...]:
    """The names a spec may write for the mechanisms of ``kind``, each record's aliases after
    it (``aliases=False``: the records' own names only)."""
    out: list[str] = []
    for m in records(kind):
        out.append(m.name)
        if aliases:
            out.extend(m.aliases)
    return tuple(out)


def param_choices() -> tuple[str, ...]:
    """The words an enum parameter of some mechanism takes (``kind = cosine``)."""
    out: dict[str, None] = {}
    for m in mechanisms.REGISTRY.values():
        for p in m.params:
            out.update(dict.fromkeys(p.choices or ()))
    return tuple(out)


def example(m) -> str | None:
    """The shortest spelling of record ``m`` in a spec: its name, with a sample value for each
    required parameter (``topk(k = 2)``); None where a required parameter names a node (a
    spelling needs the model around it)."""
    args = []
    for p in m.params:
        if not p.required:
            continue
        if p.type == "enum" and p.choices:
            args.append(f"{p.name} = {p.choices[0]}")
        elif p.type in _SAMPLE:
            args.append(f"{p.name} = {_SAMPLE[p.type]}")
        else:
            return None
    return f"{m.name}({', '.join(args)})" if args else m.name


def spelled(kind: str, variants: dict[str, list[str]], skip=()) -> list[str]:
    """How a generator writes the mechanisms of ``kind``: each record's ``variants`` where it
    has some, else its ``example`` and its aliases; records named in ``skip`` (drawn
    elsewhere) and records without an example are left out."""
    out: list[str] = []
    for m in records(kind):
        if m.name in skip:
            continue
        if m.name in variants:
            out += variants[m.name]
        elif (text := example(m)) is not None:
            out += [text, *(text.replace(m.name, a, 1) for a in m.aliases)]
    return out
