"""What the server says about a mechanism or an operator, read from the registries
(``taxcompile/mechanisms``, ``taxcompile/ops``) through the docs table's renderers, so the
editor and docs/mechanisms.md say the same."""

from __future__ import annotations

from .. import docs_table, mechanisms
from ..mechanism_names import names
from ..ops import CALLS

# The attention fields whose value names a mechanism of the kind (`score = additive`).
FIELD_KINDS = {k: k for k in ("score", "align", "position", "bias", "mask", "heads_out",
                              "qk_norm", "penalty")}


def spellings() -> dict[str, list]:
    """Each name a spec may write for a mechanism -> its records (one name may be of
    several kinds: `mask = causal` and a trait)."""
    out: dict[str, list] = {}
    for m in mechanisms.REGISTRY.values():
        for name in (m.name, *m.aliases):
            out.setdefault(name, []).append(m)
    return out


def mechanism_hover(m) -> str:
    """A mechanism's record as Markdown: kind, spellings, Table III reading, equations,
    parameters with defaults (and by depth), and the reason and docstring texts that are not patterns."""
    lines = [f"**{m.name}** — {m.kind} mechanism"]
    if m.aliases:
        lines.append("also written " + ", ".join(f"`{a}`" for a in m.aliases))
    lines.append(f"Table III reading: {docs_table.reading(m)}")
    lines.append(f"Survey equations: {docs_table.equations(m)}")
    if m.params:
        lines.append("Parameters: " + ", ".join(docs_table.param(p, m) for p in m.params))
    else:
        lines.append("Parameters: none")
    for what in ("reason", "doc", "note"):
        text = getattr(m, what)
        if isinstance(text, str) and text and "{" not in text:
            lines.append(f"{what.capitalize()}: {text}")
    return "\n\n".join(lines)


def operator_hover(name: str) -> str:
    params = CALLS[name]
    sig = ", ".join(docs_table.param(p) for p in params) or "none"
    return f"**{name}** — operator (feature model)\n\nParameters: {sig}"


def mechanism_names(kind: str) -> tuple[str, ...]:
    return names(kind)


def param_hover(fn: str, name: str) -> str | None:
    """Parameter ``name`` of mechanism or operator ``fn`` as the docs table spells it, with
    what its record schedules by depth; None for no such parameter."""
    owners = [(None, p) for p in CALLS.get(fn, ())]
    owners += [(m, p) for m in spellings().get(fn, ()) for p in m.params]
    found = next(((m, p) for m, p in owners if p.name == name), None)
    if found is None:
        return None
    return f"parameter of `{fn}`: {docs_table.param(found[1], found[0])}"


def params_of(fn: str) -> list:
    """The parameters of mechanism or operator ``fn`` (every record spelled so)."""
    out = list(CALLS.get(fn, ()))
    for m in spellings().get(fn, ()):
        out.extend(p for p in m.params if p.name not in {q.name for q in out})
    return out
