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
    if not options:  # "one of: " and nothing after it is no hint
        return "nothing of that kind is defined here"
    return "one of: " + ", ".join(f"`{o}`" for o in options)


def spelled(e, limit: int = 40) -> str:
    """An expression of the spec as written (shortened to ``limit`` characters), to name
    a value in an error."""
    from . import ast

    if isinstance(e, ast.Number):
        text = f"{e.value:g}" if isinstance(e.value, float) else str(e.value)
    elif isinstance(e, ast.String):
        text = '"' + e.value + '"'
    elif isinstance(e, ast.Ref):
        text = e.name
    elif isinstance(e, ast.Call):
        inner = [spelled(a, limit) for a in e.args]
        inner += [f"{k.name} = {spelled(k.value, limit)}" for k in e.kwargs]
        text = f"{e.fn}({', '.join(inner)})"
    elif isinstance(e, ast.BinOp):
        text = f"{spelled(e.left, limit)} {e.op} {spelled(e.right, limit)}"
    else:
        text = "-" + spelled(e.operand, limit)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def not_one_of(what: str, e, choices) -> tuple[str, str]:
    """(message, hint) for a field that takes one of the names ``choices`` but was given
    the expression ``e``: the value as written, then did-you-mean or the names allowed."""
    from . import ast

    choices = list(choices)
    listed = ", ".join(f"`{c}`" for c in choices)
    if isinstance(e, ast.Ref):
        return f"{what} cannot be `{e.name}`", suggest(e.name, choices)
    word = {ast.Call: getattr(e, "fn", ""), ast.String: getattr(e, "value", "")}.get(type(e))
    msg = f"{what} cannot be `{spelled(e)}`: it takes one of {listed}"
    if word in choices:
        how = "with no arguments" if isinstance(e, ast.Call) else "without quotes"
        return msg, f"write `{word}` {how}"
    if word:
        close = suggest(word, choices)
        if close.startswith("did you mean"):
            return msg, close
    if any("(" in c for c in choices):  # some are calls: say what to write, not what not to
        return msg, "write one of these as shown"
    return msg, "write one of these names, not " + {
        ast.Call: "a call", ast.String: "a string", ast.Number: "a number"}.get(type(e),
                                                                             "an expression")
