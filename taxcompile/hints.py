"""A hint for every kind of spec error: where an error site gives none, its message's kind
gives one (``Diagnostic`` asks ``hint_for``). One table instead of a hint argument at
each of the checks' many error sites; tests/test_hints.py fails on an error of the test
corpus whose hint is missing or only ``FALLBACK``."""

from __future__ import annotations

import re

# (the message's kind, its hint); first match wins
HINTS: tuple[tuple[str, str], ...] = (
    # ---- numbers and constants ---------------------------------------------------------
    (r"must be a whole number, got",
     "sizes, counts and hop numbers are integers: write `64`, not `64.0`; a `let` of a "
     "division (`d / 2`) is whole only when it divides exactly"),
    (r"must be a positive integer of at most",
     "use a smaller size, or a `let` constant that you can change in one place"),
    (r"must be a positive integer, got",
     "sizes, counts and hop numbers are 1 or more, e.g. `embed(src, 64)`"),
    (r"must be between \S+ and \S+, got",
     "use a value inside that range (a `let` constant is checked the same way)"),
    (r"must be a positive number, got",
     "write a number above zero, e.g. `0.1`"),
    (r"must be a number, got",
     "write a number, e.g. `-10` or `0.5` (a `let` constant is checked the same way)"),
    (r"must be `true` or `false`", "write `true` or `false`, without quotes"),
    (r"^division by zero$", "divide by a constant that is not 0"),
    (r"^number out of range$",
     "numbers in a spec are sizes and rates: write one of reasonable size, e.g. `512` or "
     "`1e-4`"),
    (r"^cannot negate a non-number$",
     "a `let` or a size is made of numbers and `let` constants only"),
    (r"needs numbers on both sides$",
     "arithmetic in a `let` or a size combines numbers and `let` constants only"),
    (r"needs a number or a feature on the left$",
     "write the number or the feature first, e.g. `0.5 * x` or `x + y`"),
    (r"^expected a constant \(", "a `let` holds a number or a string: `let d = 512`"),
    (r"^expected a feature, found a string$",
     "strings are only for the paper's `cite` and `title`; name a feature or an input here"),
    # ---- names given twice ---------------------------------------------------------------
    (r"^constant `[^`]+` is defined twice$",
     "define each `let` once; a variant may redefine its base's constants"),
    (r"^model `[^`]+` is defined twice$",
     "give each model its own name; a variant is `model NAME : BASE { … }`"),
    (r"^paper field `[^`]+` is given twice$", "give each paper field once"),
    (r"^(field )?`[^`]+` is given twice$",
     "give each field or option once; a variant replaces the whole statement"),
    (r"is already defined in this model$",
     "use `update NAME = …` to refine a feature, or pick another name"),
    (r"^axis `[^`]+` clashes with a node of the same name$",
     "rename the axis (axes are usually one capital letter, e.g. `S`, `T`)"),
    (r"^input `[^`]+` repeats an axis name$",
     "give each axis of an input its own name, e.g. `grid[H, W, C]`"),
    (r"^axis `[^`]+` already has a size",
     "give an axis its size once, on the first input that has it"),
    # ---- inputs ------------------------------------------------------------------------
    (r"^inputs are declared at the top of a model",
     "move the `input` statement out of the `repeat` block, to the model's top level"),
    (r"(mask input has the query's axis|grid has two spatial axes|pointers have one axis|"
     r"alignment has two axes|needs an axis and a feature size|tokens need at least one "
     r"axis)", "the input kinds and their axes are listed in docs/language.md (Inputs)"),
    (r"^missing feature size$",
     "a sequence or a set gives its feature size after its axes: `sequence[L, 300]`"),
    (r"^only token inputs have a vocabulary$",
     "drop `vocab = …`, or declare the input as `tokens[S] (vocab = …)`"),
    (r"input takes no options",
     "drop the options: a mask's axes take their lengths from the inputs it masks"),
    # ---- references ----------------------------------------------------------------------
    (r"is a constant, not (a|an) ", "name a node (an input or a feature) here, not a `let`"),
    (r"is a `repeat` block; name a node inside it",
     "`BLOCK.NAME` is the last hop's node, `BLOCK[i].NAME` hop i's"),
    (r"is not a `repeat` block, so",
     "only `repeat` blocks have hops (`BLOCK[i].NAME`) and names inside them (`BLOCK.NAME`)"),
    (r"has hops 1 to \d+; there is no hop|^hops are numbered from 1$",
     "hops are numbered from 1 to the block's count: `BLOCK[1].NAME` is the first"),
    (r"only features, queries and outputs can be updated$",
     "declare a new feature from it instead: `feature x2 = f(x)`"),
    (r"is an affinity matrix; use it in an attention module's `affinity` field$",
     "write `affinity = NAME` in the attention module that reads it"),
    (r"^`affinity\(…\)` is not a feature",
     "`affinity(…)` makes a matrix for co-attention (eq. 12-16): only an `affinity NAME = …` "
     "statement calls it"),
    (r"^`share` names another attention module",
     "write `share = NAME` with the name of an attention module of this model"),
    (r"^`affinity` names an affinity matrix|is not an affinity matrix$",
     "declare it first: `affinity NAME = affinity(A, B, form = bilinear)`"),
    (r"^affinity matrix `[^`]+` must be declared before it is used$",
     "move the `affinity NAME = …` statement above the attention module that reads it"),
    (r"is referenced but not defined$",
     "define the node before the statement that reads it, or fix the name's spelling"),
    (r"takes \d+ argument\(s\)$", "drop the extra arguments, or pass them by name"),
    (r"needs at least one feature$", "pass the features to combine, e.g. `concat(x, y)`"),
    # ---- shapes (checks) -----------------------------------------------------------------
    (r"is a single vector", "apply it to features that have positions (an axis), or attend "
     "over the vector's source instead"),
    (r"^`stack` needs at least two representations$",
     "stack two or more features: `stack(x, y)`"),
    (r"^`flatten` merges two axes", "flatten a feature with two position axes, e.g. a grid's "
     "`H, W`"),
    (r"^cannot resize ", "resize between features whose positions can be matched: see "
     "`resize` in docs/language.md"),
    (r"^an affinity matrix relates two sets of feature vectors",
     "pass two features with positions, e.g. `affinity(img, words)`"),
    (r"^affinity operands must share their group axes",
     "give both operands the same outer axes (the ones the matrix is computed per)"),
    (r"^values .* and keys .* must have the same positions$",
     "take the values from the same positions as the keys (or drop `values`: the keys are "
     "used)"),
    (r"are token ids; embed them first$", "use `embed(NAME, d)` to turn token ids into "
     "features"),
    (r"^`classify` takes `share` .* or `tie` .*, not both$", "keep one of `share` and `tie`"),
    (r"^local alignment centres a window on a position the query",
     "give the module a `query`, or use `align = global`"),
    # ---- the paper block and the parser --------------------------------------------------
    (r"must be a string in double quotes$", 'write it in double quotes: `cite = "Smith et al."`'),
    (r"must be a non-empty one-line string", "write it on one line, at most 300 characters"),
    (r"^unknown paper field ", "the paper fields are `cite`, `ref`, `row`, `title` and `year`"),
    (r"^syntax error$", "compare the statement with the forms in docs/language.md"),
    (r"^expression nested too deeply$",
     "split it into `let` constants or `feature` statements"),
    (r"^cannot read file", "check the path and its permissions"),
)
_COMPILED = tuple((re.compile(p), h) for p, h in HINTS)

# the last resort, for a kind no rule knows: tests/test_hints.py fails when one occurs
FALLBACK = "docs/language.md describes each statement and its options"


def hint_for(message: str) -> str | None:
    """The hint of the first rule whose pattern is found in ``message``, or None."""
    for pattern, hint in _COMPILED:
        if pattern.search(message):
            return hint
    return None
