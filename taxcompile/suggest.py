"""Names the language accepts under two spellings, and the "did you mean" of an unknown name.

An affinity's ``form`` and a score share functions: ``dot`` / ``multiplicative`` (q^T k)
and ``scaled_dot`` / ``scaled_multiplicative`` (q^T k / sqrt(d), eq. 8). Each is accepted
in both places; the IR keeps one spelling per place. A score's other spellings are its
record's ``aliases`` (taxcompile/mechanisms); an affinity's form has no records."""

from __future__ import annotations

import difflib

# an affinity's `form` spelling -> the spelling the IR keeps
FORM_ALIASES = {"multiplicative": "dot", "scaled_multiplicative": "scaled_dot"}


def alias(where: str, name: str) -> str:
    """The spelling ``name`` stands for in ``where`` (``name`` itself if none)."""
    if where == "score":
        from .mechanisms import SCORES, spellings

        m = spellings(SCORES).get(name)
        return name if m is None else m.name
    return FORM_ALIASES.get(name, name) if where == "form" else name


def suggest(word: str, options) -> str:
    """A hint for an unknown ``word``: "did you mean `x`?" when an option is close (by
    spelling, or the same words in another order: `general_biased`), else the options."""
    options = list(options)
    parts = sorted(word.lower().split("_"))
    same_words = [o for o in options if sorted(o.split("_")) == parts and o != word]
    close = same_words or difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"did you mean `{close[0]}`?"
    return "one of: " + ", ".join(f"`{o}`" for o in options)
